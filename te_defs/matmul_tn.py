"""Matrix product C = Aᵀ·B (+ addend): the LSTM's weight gradients Σ_rows dgatesᵀ·x.

Inputs (public layout)
    a       [K, M]   (dgates: K = T·B rows, M = 4H)
    b       [K, N]   (the layer input or the previous hidden states)
    addend  [M, N]   added elementwise (variant has_addend)
Outputs
    c       [M, N]

float32 only.  The sum over K (the long axis) runs in increasing k within each
output element, never split across threads: same bits for any thread count.
"""
from __future__ import annotations

from tvm import te

from . import OpDef, TensorSpec, register
from .matmul import DTYPE, epilogue, nbytes, product


def compute(dtype: str, has_addend: bool = False):
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    a = te.placeholder((K, M), dtype, name="a")
    b = te.placeholder((K, N), dtype, name="b")
    addend = te.placeholder((M, N), dtype, name="addend") if has_addend else None
    prod = product(lambda m, k: a[k, m], M, N, K, dtype, b)
    c = epilogue(prod, M, N, dtype, None, addend)
    return [t for t in (a, b, addend) if t is not None] + [c]


def reference(a, b, addend=None, **_):
    c = a.T @ b
    return {"c": c + addend if addend is not None else c}


def sample(dims, rng):
    M, N, K = dims["M"], dims["N"], dims["K"]
    return {"a": rng.standard_normal((K, M)), "b": rng.standard_normal((K, N)),
            "addend": rng.standard_normal((M, N))}


OP = register(
    OpDef(
        name="matmul_tn",
        inputs=(
            TensorSpec("a", ("K", "M")),
            TensorSpec("b", ("K", "N")),
            TensorSpec("addend", ("M", "N"), when="has_addend"),
        ),
        outputs=(TensorSpec("c", ("M", "N")),),
        scalars=(),
        variants=({"has_addend": False}, {"has_addend": True}),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "M=1 N=1 K=1": {"M": 1, "N": 1, "K": 1},
            "odd, not a vector multiple": {"M": 13, "N": 37, "K": 19},
            "dW_ih T·B=1600 I=256 H=256": {"M": 1024, "N": 256, "K": 1600},
            "dW_hh T·B=6400 H=512": {"M": 2048, "N": 512, "K": 6400},
        },
        doc=__doc__,
        dtypes=(DTYPE,),
    )
)
