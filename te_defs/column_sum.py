"""Column sums s[n] = Σ_k a[k, n]: the LSTM's bias gradient Σ_rows dgates.

Inputs   a [K, N]
Outputs  s [N]

float32 only.  Rows are added in fixed blocks of PARTIAL_ROWS whose partial
sums are added in block order: the summation order depends on the block size
only, never on the thread count or the target.
"""
from __future__ import annotations

from tvm import te

from . import OpDef, TensorSpec, register

DTYPE = "float32"
# rows per partial sum: part of the summation order (OpDef.partial_rows: every schedule of the sum reads it)
PARTIAL_ROWS = 32


def compute(dtype: str):
    K, N = te.var("K"), te.var("N")
    a = te.placeholder((K, N), dtype, name="a")
    k = te.reduce_axis((0, K), name="k")
    s = te.compute((N,), lambda n: te.sum(a[k, n], axis=k), name="s")
    return [a, s]


def reference(a, **_):
    return {"s": a.sum(axis=0)}


def sample(dims, rng):
    return {"a": rng.standard_normal((dims["K"], dims["N"]))}


def nbytes(dims, itemsize):
    return itemsize * (dims["K"] * dims["N"] + dims["N"])


OP = register(
    OpDef(
        name="column_sum",
        inputs=(TensorSpec("a", ("K", "N")),),
        outputs=(TensorSpec("s", ("N",)),),
        scalars=(),
        variants=({},),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "K=1 N=1": {"K": 1, "N": 1},
            "odd, not a vector multiple": {"K": 37, "N": 13},
            "db T·B=1600 H=256": {"K": 1600, "N": 1024},
        },
        doc=__doc__,
        dtypes=(DTYPE,),
        partial_rows=PARTIAL_ROWS,
    )
)
