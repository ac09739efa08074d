"""LSTM-cell forward, pointwise part: pre-activation gates -> states and saved activations.

Inputs (public layout)
    gates  [N, 4H]  pre-activation gates x·W_ihᵀ + h·W_hhᵀ + biases, order i, f, g, o
    cx     [N, H]   c_{t-1}
Outputs
    hy     [N, H]   o·tanh(cy)
    cy     [N, H]   f·cx + i·g
    i, f, g, o [N, H]  activations: sigmoid, sigmoid, tanh, sigmoid
    tanhc  [N, H]   tanh(cy)

One step of the full LSTM after its gate GEMM; the activations and tanh(cy)
are what the backward (``lstm_step_backward``) consumes.  float32 only: the
full LSTM computes in float32 whatever its public dtype.  The kernel sees
gates as an [N, 4, H] view.  sigmoid is computed as (1 + tanh(v/2)) / 2.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from . import OpDef, TensorSpec, register

DTYPE = "float32"
OUTPUTS = ("hy", "cy", "i", "f", "g", "o", "tanhc")


def _sigmoid(v):
    # sigmoid(v) = (1 + tanh(v/2)) / 2: the target's tanh vectorises where
    # exp is a scalar libm call; tanh(±Inf) = ±1 gives exactly 1 and 0
    half = tirx.const(0.5, DTYPE)
    return half + half * te.tanh(half * v)


def compute(dtype: str):
    N, H = te.var("N"), te.var("H")
    gates = te.placeholder((N, 4, H), dtype, name="gates")
    cx = te.placeholder((N, H), dtype, name="cx")
    i = te.compute((N, H), lambda n, j: _sigmoid(gates[n, 0, j]), name="i")
    f = te.compute((N, H), lambda n, j: _sigmoid(gates[n, 1, j]), name="f")
    g = te.compute((N, H), lambda n, j: te.tanh(gates[n, 2, j]), name="g")
    o = te.compute((N, H), lambda n, j: _sigmoid(gates[n, 3, j]), name="o")
    cy = te.compute((N, H), lambda n, j: f[n, j] * cx[n, j] + i[n, j] * g[n, j], name="cy")
    tanhc = te.compute((N, H), lambda n, j: te.tanh(cy[n, j]), name="tanhc")
    hy = te.compute((N, H), lambda n, j: o[n, j] * tanhc[n, j], name="hy")
    return [gates, cx, hy, cy, i, f, g, o, tanhc]


def reference(gates, cx, **_):
    H = cx.shape[1]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))
    i, f, g, o = (gates[:, k * H:(k + 1) * H] for k in range(4))
    i, f, g, o = sig(i), sig(f), np.tanh(g), sig(o)
    cy = f * cx + i * g
    tanhc = np.tanh(cy)
    return {"hy": o * tanhc, "cy": cy, "i": i, "f": f, "g": g, "o": o, "tanhc": tanhc}


def sample(dims, rng):
    N, H = dims["N"], dims["H"]
    return {"gates": rng.standard_normal((N, 4 * H)), "cx": rng.standard_normal((N, H))}


def nbytes(dims, itemsize):
    """Read gates and cx, write seven [N, H] outputs."""
    return itemsize * dims["N"] * dims["H"] * (4 + 1 + 7)


OP = register(
    OpDef(
        name="lstm_cell_forward",
        short="lcf",
        inputs=(
            TensorSpec("gates", ("N", "4*H"), kernel_shape=("N", "4", "H")),
            TensorSpec("cx", ("N", "H")),
        ),
        outputs=tuple(TensorSpec(name, ("N", "H")) for name in OUTPUTS),
        scalars=(),
        variants=({},),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "N=1 H=1": {"N": 1, "H": 1},
            "odd, not a vector multiple": {"N": 13, "H": 37},
            "B=32 H=256": {"N": 32, "H": 256},
            "N=1024 H=1024": {"N": 1024, "H": 1024},
        },
        doc=__doc__,
        dtypes=(DTYPE,),
    )
)
