"""One step of the LSTM backward through time, pointwise part.

Inputs (public layout)
    dh     [N, H]  recurrent gradient w.r.t. h_t (from step t+1's dgates·W_hh)
    dy     [N, H]  gradient w.r.t. h_t from the output (or the layer above)
    dc     [N, H]  gradient w.r.t. c_t
    cx     [N, H]  c_{t-1}
    i, f, g, o [N, H]  saved activations of step t
    tanhc  [N, H]  saved tanh(c_t)
Outputs
    dgates   [N, 4H] pre-activation gate gradients, order i, f, g, o
    dcx      [N, H]  gradient w.r.t. c_{t-1}
    dgates_t [4H, N] dgates transposed, written into a caller's view with any
             row stride: the full LSTM's step t fills columns t·B.. of the
             [4H, T·B] operand of its weight-gradient GEMMs, so no separate
             transpose pass is needed

The same cell gradient as ``lstm_cell_backward`` in the layout the full LSTM
saves (separate activations and tanh(c_t), as torch_npu's ``_lstm_npu_backward``
takes them), with the step's two h gradients added in the kernel:
    dh_t = dh + dy;  dc_t = dc + dh_t·o·(1 - tanhc²)
    di = dc_t·g·i(1-i), df = dc_t·cx·f(1-f), dg = dc_t·i·(1-g²), do = dh_t·tanhc·o(1-o)
    dcx = dc_t·f
float32 only.  The kernel sees dgates as an [N, 4, H] view and dgates_t as [4, H, N].
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from . import OpDef, TensorSpec, register

DTYPE = "float32"
INPUTS = ("dh", "dy", "dc", "cx", "i", "f", "g", "o", "tanhc")


def compute(dtype: str):
    N, H = te.var("N"), te.var("H")
    dh, dy, dc, cx, i, f, g, o, tanhc = (te.placeholder((N, H), dtype, name=n) for n in INPUTS)
    one = tirx.const(1.0, DTYPE)
    dh_t = te.compute((N, H), lambda n, j: dh[n, j] + dy[n, j], name="dh_t")
    dc_t = te.compute(
        (N, H), lambda n, j: dc[n, j] + dh_t[n, j] * o[n, j] * (one - tanhc[n, j] * tanhc[n, j]), name="dc_t"
    )

    def gate(n, k, j):
        c = dc_t[n, j]
        d_i = c * g[n, j] * i[n, j] * (one - i[n, j])
        d_f = c * cx[n, j] * f[n, j] * (one - f[n, j])
        d_g = c * i[n, j] * (one - g[n, j] * g[n, j])
        d_o = dh_t[n, j] * tanhc[n, j] * o[n, j] * (one - o[n, j])
        return tirx.if_then_else(k == 0, d_i, tirx.if_then_else(k == 1, d_f, tirx.if_then_else(k == 2, d_g, d_o)))

    dgates = te.compute((N, 4, H), gate, name="dgates")
    dcx = te.compute((N, H), lambda n, j: dc_t[n, j] * f[n, j], name="dcx")
    dgates_t = te.compute((4, H, N), lambda k, j, n: dgates[n, k, j], name="dgates_t")
    return [dh, dy, dc, cx, i, f, g, o, tanhc, dgates, dcx, dgates_t]


def reference(dh, dy, dc, cx, i, f, g, o, tanhc, **_):
    dh_t = dh + dy
    dc_t = dc + dh_t * o * (1 - tanhc * tanhc)
    dgates = np.concatenate(
        [dc_t * g * i * (1 - i), dc_t * cx * f * (1 - f), dc_t * i * (1 - g * g), dh_t * tanhc * o * (1 - o)], axis=1
    )
    return {"dgates": dgates, "dcx": dc_t * f, "dgates_t": dgates.T.copy()}


def sample(dims, rng):
    """Activations from a real cell forward, unit-scale gradients."""
    from .lstm_cell_forward import reference as forward

    N, H = dims["N"], dims["H"]
    cx = rng.standard_normal((N, H))
    fw = forward(rng.standard_normal((N, 4 * H)), cx)
    return {"dh": rng.standard_normal((N, H)), "dy": rng.standard_normal((N, H)), "dc": rng.standard_normal((N, H)),
            "cx": cx, **{k: fw[k] for k in ("i", "f", "g", "o", "tanhc")}}


def nbytes(dims, itemsize):
    """Read nine [N, H] inputs, write dgates [N, 4H] twice (both layouts) and dcx."""
    return itemsize * dims["N"] * dims["H"] * (9 + 8 + 1)


OP = register(
    OpDef(
        name="lstm_step_backward",
        short="lsb",
        inputs=tuple(TensorSpec(n, ("N", "H")) for n in INPUTS),
        outputs=(
            TensorSpec("dgates", ("N", "4*H"), kernel_shape=("N", "4", "H")),
            TensorSpec("dcx", ("N", "H")),
            TensorSpec("dgates_t", ("4*H", "N"), kernel_shape=("4", "H", "N"), strided=True),
        ),
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
