"""B [K, N] -> column panels [N / 32, K, 32], the ``matmul_packed`` operand layout.

Inputs   b  [K, N]   N a multiple of 32
Outputs  bp [Nb, K, 32]   bp[p, k, j] = b[k, 32·p + j]

float32 only.  Pure data movement (see ``pack_bt`` for B given transposed).
"""
from __future__ import annotations

from tvm import te

from . import OpDef, TensorSpec, register
from .matmul_packed import DTYPE, PANEL, pack


def compute(dtype: str):
    Nb, K = te.var("Nb"), te.var("K")
    b = te.placeholder((K, Nb * PANEL), dtype, name="b")
    bp = te.compute((Nb, K, PANEL), lambda p, k, j: b[k, p * PANEL + j], name="bp")
    return [b, bp]


def reference(b, **_):
    return {"bp": pack(b)}


def sample(dims, rng):
    return {"b": rng.standard_normal((dims["K"], dims["Nb"] * PANEL))}


def nbytes(dims, itemsize):
    return 2 * itemsize * dims["K"] * dims["Nb"] * PANEL


OP = register(
    OpDef(
        name="pack_b",
        inputs=(TensorSpec("b", ("K", f"{PANEL}*Nb")),),
        outputs=(TensorSpec("bp", ("Nb", "K", str(PANEL))),),
        scalars=(),
        variants=({},),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "K=1 N=32": {"K": 1, "Nb": 1},
            "odd, not a vector multiple": {"K": 37, "Nb": 3},
            "x T·B=1600 I=256": {"K": 1600, "Nb": 8},
        },
        doc=__doc__,
        dtypes=(DTYPE,),
    )
)
