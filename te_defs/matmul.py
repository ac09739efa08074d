"""Matrix product with a float32 sum: C = A·B.

Inputs (public layout)
    a  [M, K]  float16 or bfloat16
    b  [K, N]  the same dtype
Outputs
    c  [M, N]  the same dtype, rounded once from the float32 sum (as torch.mm)

The GEMM a GPU's tensor cores run: 16-bit inputs, whose products are exact
in float32, summed in float32.  The sum over K is never split across threads
or blocks: one fixed order per target, the same bits on every run.  The CPU's
GEMM is ``matmul_packed`` (B in column panels), so this op is built for the
CUDA target only.  float32 inputs would need TF32 tensor-core intrinsics,
which TVM does not have (docs/TVM_FINDINGS.md).
"""
from __future__ import annotations

import numpy as np
from tvm import te

from . import OpDef, TensorSpec, register

ACC = "float32"


def compute(dtype: str):
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    a = te.placeholder((M, K), dtype, name="a")
    b = te.placeholder((K, N), dtype, name="b")
    k = te.reduce_axis((0, K), name="k")
    acc = te.compute((M, N), lambda m, n: te.sum(a[m, k].astype(ACC) * b[k, n].astype(ACC), axis=k), name="acc")
    c = te.compute((M, N), lambda m, n: acc[m, n].astype(dtype), name="c")
    return [a, b, c]


def reference(a, b, **_):
    return {"c": a @ b}


def sample(dims, rng):
    M, N, K = dims["M"], dims["N"], dims["K"]
    return {"a": rng.standard_normal((M, K)), "b": rng.standard_normal((K, N)) / np.sqrt(max(K, 1))}


def nbytes(dims, itemsize):
    """Read a and b once, write c once."""
    M, N, K = dims["M"], dims["N"], dims["K"]
    return itemsize * (M * K + K * N + M * N)


def flops(dims) -> int:
    return 2 * dims["M"] * dims["N"] * dims["K"]


OP = register(
    OpDef(
        name="matmul",
        inputs=(TensorSpec("a", ("M", "K")), TensorSpec("b", ("K", "N"))),
        outputs=(TensorSpec("c", ("M", "N")),),
        scalars=(),
        variants=({},),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "M=1 N=1 K=1": {"M": 1, "N": 1, "K": 1},
            "odd, not a vector multiple": {"M": 13, "N": 37, "K": 19},
            "tile tails": {"M": 130, "N": 70, "K": 45},
            "M=N=K=4096": {"M": 4096, "N": 4096, "K": 4096},
        },
        doc=__doc__,
        dtypes=("float16", "bfloat16"),
    )
)
