"""Tensor-core matrix product into float32: C = A·B (+ bias) (+ addend).

Inputs (public layout)
    a       [M, K]  float16, bfloat16, or float32 (computed as TF32, below)
    b       [K, N]  the same dtype
    bias    [N]     float32, added to every row (variant has_bias)
    addend  [M, N]  float32, added elementwise (variant has_addend)
Outputs
    c       [M, N]  float32

The GEMM a GPU's tensor cores run: inputs rounded to TF32 (8-bit exponent,
10-bit mantissa; round to nearest, ties away from zero, as PTX's
``cvt.rna.tf32.f32``; NaN stays NaN, overflow goes to infinity), whose
products are exact in float32, summed in float32 and kept in float32.  For
float16 and bfloat16 inputs the rounding changes nothing (every such value is a
TF32 value): their products are the exact 16-bit ones (what the full LSTM's
reduced-precision GEMMs need: their gates add the two GEMMs' float32 sums).
float32 inputs are rounded, which is what ``torch.backends.cuda.matmul.allow_tf32``
and cuDNN's TF32 mode do: about 3 decimal digits per product instead of 7.
The sum over K is never split across threads or blocks: one fixed order per
target, the same bits on every run.  The CPU's GEMM is ``matmul_packed`` (B in
column panels), so this op is built for the CUDA target only.
"""
from __future__ import annotations

import itertools

import numpy as np
from tvm import te, tirx

from . import OpDef, TensorSpec, register
from .matmul_packed import epilogue, reference_epilogue

ACC = "float32"
# TF32 in float32's bits: the low 13 mantissa bits dropped after rounding half a unit of the 14th up
TF32_DROPPED, TF32_HALF, QUIET = 0x1FFF, 0x1000, 0x400000
EXPONENT, MANTISSA = 0x7F800000, 0x7FFFFF


def tf32_expr(x):
    """float32 ``x`` rounded to TF32 (cvt.rna.tf32.f32): NaN stays (quiet) NaN, infinity stays."""
    bits = tirx.reinterpret("uint32", x)
    keep = tirx.const(0xFFFFFFFF ^ TF32_DROPPED, "uint32")
    finite = (bits & tirx.const(EXPONENT, "uint32")) != tirx.const(EXPONENT, "uint32")
    nan = (bits & tirx.const(MANTISSA, "uint32")) != tirx.const(0, "uint32")
    rounded = tirx.Select(finite, (bits + tirx.const(TF32_HALF, "uint32")) & keep,
                          tirx.Select(nan, (bits | tirx.const(QUIET, "uint32")) & keep, bits))
    return tirx.reinterpret(ACC, rounded)


def compute(dtype: str, has_bias: bool = False, has_addend: bool = False):
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    a = te.placeholder((M, K), dtype, name="a")
    b = te.placeholder((K, N), dtype, name="b")
    bias = te.placeholder((N,), ACC, name="bias") if has_bias else None
    addend = te.placeholder((M, N), ACC, name="addend") if has_addend else None
    a_in, b_in = a, b
    if dtype == ACC:  # 16-bit inputs are TF32 values already
        a_in = te.compute((M, K), lambda m, k: tf32_expr(a[m, k]), name="a_tf32")
        b_in = te.compute((K, N), lambda k, n: tf32_expr(b[k, n]), name="b_tf32")
    k = te.reduce_axis((0, K), name="k")
    acc = te.compute((M, N), lambda m, n: te.sum(a_in[m, k].astype(ACC) * b_in[k, n].astype(ACC), axis=k),
                     name="acc")
    c = epilogue(acc, M, N, ACC, bias, addend)
    return [t for t in (a, b, bias, addend) if t is not None] + [c]


def tf32(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to TF32 as float32 (the identity on float16 and bfloat16 values)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    keep = np.uint32(0xFFFFFFFF ^ TF32_DROPPED)
    finite = (bits & np.uint32(EXPONENT)) != np.uint32(EXPONENT)
    nan = ~finite & ((bits & np.uint32(MANTISSA)) != 0)
    with np.errstate(over="ignore"):
        out = np.where(finite, (bits + np.uint32(TF32_HALF)) & keep, np.where(nan, (bits | np.uint32(QUIET)) & keep, bits))
    return out.astype(np.uint32).view(np.float32)


def reference(a, b, bias=None, addend=None, **_):
    """float64 product of the TF32-rounded inputs (exact for float16/bfloat16 inputs)."""
    return {"c": reference_epilogue(tf32(a).astype(np.float64) @ tf32(b).astype(np.float64), bias, addend)}


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
        dtypes=("float16", "bfloat16", "float32"),
    )
)
