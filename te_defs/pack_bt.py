"""Bᵀ given as W [N, K] -> column panels of B = Wᵀ: [N / 32, K, 32].

Inputs   w  [N, K]   N a multiple of 32 (e.g. an LSTM weight [4H, in], used as Wᵀ)
Outputs  bp [Nb, K, 32]   bp[p, k, j] = w[32·p + j, k]

float32 only.  Pure data movement: the transpose and the packing in one pass.
"""
from __future__ import annotations

from tvm import te

from . import OpDef, TensorSpec, register
from .matmul_packed import DTYPE, PANEL, pack


def compute(dtype: str):
    Nb, K = te.var("Nb"), te.var("K")
    w = te.placeholder((Nb * PANEL, K), dtype, name="w")
    bp = te.compute((Nb, K, PANEL), lambda p, k, j: w[p * PANEL + j, k], name="bp")
    return [w, bp]


def reference(w, **_):
    return {"bp": pack(w.T)}


def sample(dims, rng):
    return {"w": rng.standard_normal((dims["Nb"] * PANEL, dims["K"]))}


def nbytes(dims, itemsize):
    return 2 * itemsize * dims["K"] * dims["Nb"] * PANEL


OP = register(
    OpDef(
        name="pack_bt",
        inputs=(TensorSpec("w", (f"{PANEL}*Nb", "K")),),
        outputs=(TensorSpec("bp", ("Nb", "K", str(PANEL))),),
        scalars=(),
        variants=({},),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "N=32 K=1": {"K": 1, "Nb": 1},
            "odd, not a vector multiple": {"K": 37, "Nb": 3},
            "w_ih H=256 I=256": {"K": 256, "Nb": 32},
        },
        doc=__doc__,
        dtypes=(DTYPE,),
    )
)
