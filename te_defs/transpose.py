"""Matrix transpose b[n, m] = a[m, n]: the LSTM's weights as the row-major GEMM operand Wᵀ.

Inputs   a [M, N]
Outputs  b [N, M]

float32 only (the full LSTM's internal dtype).  Pure data movement.
"""
from __future__ import annotations

from tvm import te

from . import OpDef, TensorSpec, register

DTYPE = "float32"


def compute(dtype: str):
    M, N = te.var("M"), te.var("N")
    a = te.placeholder((M, N), dtype, name="a")
    b = te.compute((N, M), lambda n, m: a[m, n], name="b")
    return [a, b]


def reference(a, **_):
    return {"b": a.T.copy()}


def sample(dims, rng):
    return {"a": rng.standard_normal((dims["M"], dims["N"]))}


def nbytes(dims, itemsize):
    return 2 * itemsize * dims["M"] * dims["N"]


OP = register(
    OpDef(
        name="transpose",
        inputs=(TensorSpec("a", ("M", "N")),),
        outputs=(TensorSpec("b", ("N", "M")),),
        scalars=(),
        variants=({},),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "M=1 N=1": {"M": 1, "N": 1},
            "odd, not a vector multiple": {"M": 37, "N": 13},
            "w_ih H=512 in=512": {"M": 2048, "N": 512},
        },
        doc=__doc__,
        dtypes=(DTYPE,),
    )
)
