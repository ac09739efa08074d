"""Matrix product C = A·B (+ bias) (+ addend): the GEMMs of the full LSTM.

Inputs (public layout)
    a       [M, K]
    b       [K, N]   row-major (a weight used as Wᵀ is passed transposed once)
    bias    [N]      added to every row (variant has_bias)
    addend  [M, N]   added elementwise (variant has_addend)
Outputs
    c       [M, N]

float32 only: the LSTM computes in float32 whatever its public dtype.  The sum
over K runs in increasing k within each output element; the schedule may
block K, but the blocks are added in increasing order and never split across
threads, so the result does not depend on the thread count.
"""
from __future__ import annotations

import itertools

import numpy as np
from tvm import te

from . import OpDef, TensorSpec, register

DTYPE = "float32"


def product(a_at, M, N, K, dtype: str, b, name: str = "prod"):
    """The [M, N] float32 product stage; ``a_at(m, k)`` reads A in either layout."""
    k = te.reduce_axis((0, K), name="k")
    return te.compute((M, N), lambda m, n: te.sum(a_at(m, k) * b[k, n], axis=k), name=name)


def epilogue(prod, M, N, dtype: str, bias=None, addend=None):
    """c = prod (+ bias[n]) (+ addend[m, n]) as the op's output stage."""

    def value(m, n):
        v = prod[m, n]
        if bias is not None:
            v = v + bias[n]
        if addend is not None:
            v = v + addend[m, n]
        return v

    return te.compute((M, N), value, name="c")


def compute(dtype: str, has_bias: bool = False, has_addend: bool = False):
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    a = te.placeholder((M, K), dtype, name="a")
    b = te.placeholder((K, N), dtype, name="b")
    bias = te.placeholder((N,), dtype, name="bias") if has_bias else None
    addend = te.placeholder((M, N), dtype, name="addend") if has_addend else None
    prod = product(lambda m, k: a[m, k], M, N, K, dtype, b)
    c = epilogue(prod, M, N, dtype, bias, addend)
    return [t for t in (a, b, bias, addend) if t is not None] + [c]


def reference(a, b, bias=None, addend=None, **_):
    c = a @ b
    if bias is not None:
        c = c + bias
    if addend is not None:
        c = c + addend
    return {"c": c}


def sample(dims, rng):
    M, N, K = dims["M"], dims["N"], dims["K"]
    return {"a": rng.standard_normal((M, K)), "b": rng.standard_normal((K, N)) / np.sqrt(max(K, 1)),
            "bias": rng.standard_normal(N), "addend": rng.standard_normal((M, N))}


def nbytes(dims, itemsize):
    """Read A and B once, write C (bias and addend not counted)."""
    M, N, K = dims["M"], dims["N"], dims["K"]
    return itemsize * (M * K + K * N + M * N)


def flops(dims) -> int:
    return 2 * dims["M"] * dims["N"] * dims["K"]


# the shapes the full LSTM runs (T, B, I, H of its benchmark configurations)
SHAPES = {
    "M=1 N=1 K=1": {"M": 1, "N": 1, "K": 1},
    "odd, not a vector multiple": {"M": 13, "N": 37, "K": 19},
    "step fwd B=32 H=256": {"M": 32, "N": 1024, "K": 256},
    "step bwd B=32 H=256": {"M": 32, "N": 256, "K": 1024},
    "x·W_ihᵀ T·B=1600 I=256 H=256": {"M": 1600, "N": 1024, "K": 256},
    "dx T·B=1600 I=256 H=256": {"M": 1600, "N": 256, "K": 1024},
    "step fwd B=64 H=512": {"M": 64, "N": 2048, "K": 512},
}

OP = register(
    OpDef(
        name="matmul",
        inputs=(
            TensorSpec("a", ("M", "K")),
            TensorSpec("b", ("K", "N")),
            TensorSpec("bias", ("N",), when="has_bias"),
            TensorSpec("addend", ("M", "N"), when="has_addend"),
        ),
        outputs=(TensorSpec("c", ("M", "N")),),
        scalars=(),
        variants=tuple({"has_bias": x, "has_addend": y} for x, y in itertools.product((False, True), repeat=2)),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes=SHAPES,
        doc=__doc__,
        dtypes=(DTYPE,),
    )
)
