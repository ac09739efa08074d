"""Matrix product of 16-bit matrices into float32: C = A·B (+ bias) (+ addend).

Inputs (public layout)
    a       [M, K]  float16 or bfloat16
    b       [K, N]  the same dtype
    bias    [N]     float32, added to every row (variant has_bias)
    addend  [M, N]  float32, added elementwise (variant has_addend)
Outputs
    c       [M, N]  float32

The GEMM a GPU's tensor cores run: 16-bit inputs, whose products are exact
in float32, summed in float32 and kept in float32 (what the full LSTM's
reduced-precision GEMMs need: their gates add the two GEMMs' float32 sums).  The sum over K is never split across threads
or blocks: one fixed order per target, the same bits on every run.  The CPU's
GEMM is ``matmul_packed`` (B in column panels), so this op is built for the
CUDA target only.  float32 inputs would need TF32 tensor-core intrinsics,
which TVM does not have (docs/TVM_FINDINGS.md).
"""
from __future__ import annotations

import itertools

import numpy as np
from tvm import te

from . import OpDef, TensorSpec, register
from .matmul_packed import epilogue, reference_epilogue

ACC = "float32"


def compute(dtype: str, has_bias: bool = False, has_addend: bool = False):
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    a = te.placeholder((M, K), dtype, name="a")
    b = te.placeholder((K, N), dtype, name="b")
    bias = te.placeholder((N,), ACC, name="bias") if has_bias else None
    addend = te.placeholder((M, N), ACC, name="addend") if has_addend else None
    k = te.reduce_axis((0, K), name="k")
    acc = te.compute((M, N), lambda m, n: te.sum(a[m, k].astype(ACC) * b[k, n].astype(ACC), axis=k), name="acc")
    c = epilogue(acc, M, N, ACC, bias, addend)
    return [t for t in (a, b, bias, addend) if t is not None] + [c]


def reference(a, b, bias=None, addend=None, **_):
    return {"c": reference_epilogue(a @ b, bias, addend)}


def sample(dims, rng):
    M, N, K = dims["M"], dims["N"], dims["K"]
    return {"a": rng.standard_normal((M, K)), "b": rng.standard_normal((K, N)) / np.sqrt(max(K, 1)),
            "bias": rng.standard_normal(N), "addend": rng.standard_normal((M, N))}


def nbytes(dims, itemsize):
    """Read a and b once, write c (float32) once (bias and addend, when given, not counted)."""
    M, N, K = dims["M"], dims["N"], dims["K"]
    return itemsize * (M * K + K * N) + 4 * M * N


def flops(dims) -> int:
    return 2 * dims["M"] * dims["N"] * dims["K"]


OP = register(
    OpDef(
        name="matmul",
        inputs=(TensorSpec("a", ("M", "K")), TensorSpec("b", ("K", "N")),
                TensorSpec("bias", ("N",), when="has_bias", dtype=ACC),
                TensorSpec("addend", ("M", "N"), when="has_addend", dtype=ACC)),
        outputs=(TensorSpec("c", ("M", "N"), dtype=ACC),),
        scalars=(),
        variants=tuple({"has_bias": x, "has_addend": y} for x, y in itertools.product((False, True), repeat=2)),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "M=1 N=1 K=1": {"M": 1, "N": 1, "K": 1},
            "odd, not a vector multiple": {"M": 13, "N": 37, "K": 19},
            "tile tails": {"M": 130, "N": 70, "K": 45},
            # the largest last: what gpu_check checks against a float64 numpy product (4096^3 would
            # take it a minute; it times that size, TIMED)
            "M=N=K=1024": {"M": 1024, "N": 1024, "K": 1024},
        },
        doc=__doc__,
        dtypes=("float16", "bfloat16"),
    )
)
