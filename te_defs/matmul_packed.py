"""Matrix product with B in column panels: C = A·B (+ bias) (+ addend).

Inputs (public layout)
    a       [M, K]
    bp      [Nb, K, 32]  B [K, N] (N = 32·Nb) cut into panels of PANEL columns:
                         bp[p, k, j] = B[k, 32·p + j] (made by ``pack_b`` / ``pack_bt``)
    bias    [N]          added to every row (variant has_bias)
    addend  [M, N]       added elementwise (variant has_addend)
Outputs
    c       [M, N]

The layout a CPU GEMM streams B in: one panel is contiguous, so the kernel
never re-packs B.  The full LSTM packs each weight once per call and reuses
it for every time step.  float32 only (the LSTM computes in float32 whatever
its public dtype).  The sum over K runs in increasing k within each output
element, never split across threads.

Schedule flag ``few_rows``: the same product scheduled for fewer rows than
one row block of the main entry (the rows left over when M is not a multiple
of it: an LSTM step with an odd batch, or the shrinking batch of
variable-length sequences), where the main entry's guarded tail tiles run an
order of magnitude slower.
"""
from __future__ import annotations

import itertools

import numpy as np
from tvm import te

from . import OpDef, TensorSpec, register

DTYPE = "float32"
PANEL = 32  # columns per panel: part of the layout (the register tile's width on AVX-512)
ROW_BLOCK = 32  # rows per task of the main entry (its schedule's MB unless tuned); M % ROW_BLOCK go to few_rows


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
    M, Nb, K = te.var("M"), te.var("Nb"), te.var("K")
    N = Nb * PANEL
    a = te.placeholder((M, K), dtype, name="a")
    bp = te.placeholder((Nb, K, PANEL), dtype, name="bp")
    bias = te.placeholder((N,), dtype, name="bias") if has_bias else None
    addend = te.placeholder((M, N), dtype, name="addend") if has_addend else None
    k = te.reduce_axis((0, K), name="k")
    prod = te.compute((M, N), lambda m, n: te.sum(a[m, k] * bp[n // PANEL, k, n % PANEL], axis=k), name="prod")
    c = epilogue(prod, M, N, dtype, bias, addend)
    return [t for t in (a, bp, bias, addend) if t is not None] + [c]


def unpack(bp: np.ndarray) -> np.ndarray:
    """[Nb, K, PANEL] panels -> B [K, Nb·PANEL]."""
    Nb, K, P = bp.shape
    return bp.transpose(1, 0, 2).reshape(K, Nb * P)


def pack(b: np.ndarray) -> np.ndarray:
    """B [K, N] (N a multiple of PANEL) -> [N / PANEL, K, PANEL] panels."""
    K, N = b.shape
    return np.ascontiguousarray(b.reshape(K, N // PANEL, PANEL).transpose(1, 0, 2))


def reference_epilogue(prod: np.ndarray, bias=None, addend=None) -> np.ndarray:
    """The reference's c = prod (+ bias) (+ addend), as :func:`epilogue` computes it."""
    if bias is not None:
        prod = prod + bias
    if addend is not None:
        prod = prod + addend
    return prod


def reference(a, bp, bias=None, addend=None, **_):
    return {"c": reference_epilogue(a @ unpack(bp), bias, addend)}


def sample(dims, rng):
    M, Nb, K = dims["M"], dims["Nb"], dims["K"]
    N = Nb * PANEL
    return {"a": rng.standard_normal((M, K)), "bp": pack(rng.standard_normal((K, N)) / np.sqrt(max(K, 1))),
            "bias": rng.standard_normal(N), "addend": rng.standard_normal((M, N))}


def nbytes(dims, itemsize):
    M, N, K = dims["M"], dims["Nb"] * PANEL, dims["K"]
    return itemsize * (M * K + K * N + M * N)


OP = register(
    OpDef(
        name="matmul_packed",
        inputs=(
            TensorSpec("a", ("M", "K")),
            TensorSpec("bp", ("Nb", "K", str(PANEL))),
            TensorSpec("bias", (f"{PANEL}*Nb",), when="has_bias"),
            TensorSpec("addend", ("M", f"{PANEL}*Nb"), when="has_addend"),
        ),
        outputs=(TensorSpec("c", ("M", f"{PANEL}*Nb")),),
        scalars=(),
        # the main entries first, then the same four with the few-rows schedule
        variants=tuple({"has_bias": x, "has_addend": y, "few_rows": r}
                       for r in (False, True) for x, y in itertools.product((False, True), repeat=2)),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "M=1 N=32 K=1": {"M": 1, "Nb": 1, "K": 1},
            "odd, not a vector multiple": {"M": 13, "Nb": 2, "K": 19},
            "step fwd B=32 H=256": {"M": 32, "Nb": 32, "K": 256},
            "step bwd B=32 H=256": {"M": 32, "Nb": 8, "K": 1024},
            "x·W_ihᵀ T·B=1600 I=256 H=256": {"M": 1600, "Nb": 32, "K": 256},
            "dx T·B=1600 I=256 H=256": {"M": 1600, "Nb": 8, "K": 1024},
            "13 rows H=256": {"M": 13, "Nb": 32, "K": 256},
            "31 rows H=256 bwd": {"M": 31, "Nb": 8, "K": 1024},
        },
        doc=__doc__,
        dtypes=(DTYPE,),
        schedule_flags=("few_rows",),
    )
)
