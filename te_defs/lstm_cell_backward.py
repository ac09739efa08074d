"""Fused LSTM-cell backward (THNN / CANN ThnnFusedLstmCellGrad semantics).

Inputs (public layout)
    grad_hy  [N, H]   gradient w.r.t. h_t; optional (absent = structural zero)
    grad_cy  [N, H]   gradient w.r.t. c_t; optional (absent = structural zero)
    cx       [N, H]   c_{t-1}
    cy       [N, H]   c_t
    storage  [N, 4H]  gate activations i, f, g, o (sigmoid, sigmoid, tanh, sigmoid)
Outputs
    grad_gates [N, 4H] pre-activation gate gradients, order i, f, g, o
    grad_cx    [N, H]  gradient w.r.t. c_{t-1}
    grad_bias  [4H]    sum of grad_gates over N (variant has_bias only)

The kernel sees storage and grad_gates as [N, 4, H] views and grad_bias as
[4, H].  Reduced-precision inputs are computed in float32 and rounded once on
store; grad_bias sums the stored grad_gates in float32.
"""
from __future__ import annotations

import itertools

import numpy as np
from tvm import te, tirx

from . import OpDef, TensorSpec, register

ACC = "float32"
# rows per grad_bias partial sum: the sum over N adds blocks of this many rows, then the blocks in
# order (OpDef.partial_rows: every schedule of the sum reads it)
PARTIAL_ROWS = 32


def compute(dtype: str, has_grad_hy: bool = True, has_grad_cy: bool = True, has_bias: bool = True):
    """Build the TE graph; returns the kernel arguments in order."""
    N, H = te.var("N"), te.var("H")
    args = []
    grad_hy = te.placeholder((N, H), dtype, name="grad_hy") if has_grad_hy else None
    grad_cy = te.placeholder((N, H), dtype, name="grad_cy") if has_grad_cy else None
    cx = te.placeholder((N, H), dtype, name="cx")
    cy = te.placeholder((N, H), dtype, name="cy")
    storage = te.placeholder((N, 4, H), dtype, name="storage")
    args += [t for t in (grad_hy, grad_cy) if t is not None] + [cx, cy, storage]

    one = tirx.const(1.0, ACC)
    zero = tirx.const(0.0, ACC)

    def f32(t, *idx):
        return t[idx].astype(ACC)

    # An absent gradient is a structural zero: its terms are not built at all
    # (0 * NaN would otherwise be NaN), so tanh(cy) exists only with grad_hy.
    if grad_hy is not None:
        tanh_cy = te.compute((N, H), lambda n, j: te.tanh(f32(cy, n, j)), name="tanh_cy")

        def grad_c_expr(n, j):
            o, t = f32(storage, n, 3, j), tanh_cy[n, j]
            gc = f32(grad_hy, n, j) * o * (one - t * t)
            return gc + f32(grad_cy, n, j) if grad_cy is not None else gc

        grad_c_stage = te.compute((N, H), grad_c_expr, name="grad_c")

        def grad_c(n, j):
            return grad_c_stage[n, j]

        def grad_o(n, j):
            o = f32(storage, n, 3, j)
            return f32(grad_hy, n, j) * tanh_cy[n, j] * o * (one - o)
    else:
        def grad_c(n, j):
            return f32(grad_cy, n, j) if grad_cy is not None else zero

        def grad_o(n, j):
            return zero

    def gate_grad(n, g, j):
        i, f, gg = (f32(storage, n, k, j) for k in range(3))
        gc = grad_c(n, j)
        d_i = gc * gg * i * (one - i)
        d_f = gc * f32(cx, n, j) * f * (one - f)
        d_g = gc * i * (one - gg * gg)
        d_o = grad_o(n, j)
        return tirx.if_then_else(
            g == 0, d_i, tirx.if_then_else(g == 1, d_f, tirx.if_then_else(g == 2, d_g, d_o))
        )

    grad_gates = te.compute(
        (N, 4, H), lambda n, g, j: gate_grad(n, g, j).astype(dtype), name="grad_gates"
    )
    grad_cx = te.compute(
        (N, H), lambda n, j: (grad_c(n, j) * f32(storage, n, 1, j)).astype(dtype), name="grad_cx"
    )
    args += [grad_gates, grad_cx]
    if has_bias:
        n = te.reduce_axis((0, N), name="n")
        acc = te.compute((4, H), lambda g, j: te.sum(grad_gates[n, g, j].astype(ACC), axis=n), name="grad_bias_acc")
        grad_bias = te.compute((4, H), lambda g, j: acc[g, j].astype(dtype), name="grad_bias")
        args.append(grad_bias)
    return args


def reference(grad_hy, grad_cy, cx, cy, storage, has_bias=True, **_):
    """float64 numpy reference in the public layout.

    A None gradient is a structural zero: the terms it multiplies are dropped,
    so NaN/Inf elsewhere does not reach outputs through them.
    """
    N, H = cx.shape
    i, f, g, o = (storage[:, k * H:(k + 1) * H] for k in range(4))
    zero = np.zeros((N, H), dtype=np.result_type(cx, np.float64))
    if grad_hy is not None:
        t = np.tanh(cy)
        gc = grad_hy * o * (1 - t * t) + (grad_cy if grad_cy is not None else 0.0)
        d_o = grad_hy * t * o * (1 - o)
    else:
        gc = grad_cy if grad_cy is not None else None
        d_o = zero
    if gc is None:
        grad_gates = np.zeros((N, 4 * H), dtype=zero.dtype)
        return {"grad_gates": grad_gates, "grad_cx": zero.copy(),
                **({"grad_bias": grad_gates.sum(axis=0)} if has_bias else {})}
    grad_gates = np.concatenate(
        [gc * g * i * (1 - i), gc * cx * f * (1 - f), gc * i * (1 - g * g), d_o], axis=1
    )
    out = {"grad_gates": grad_gates, "grad_cx": gc * f}
    if has_bias:
        out["grad_bias"] = grad_gates.sum(axis=0)
    return out


def forward_reference(x_gates, cx):
    """LSTM-cell forward (float64) producing what the backward consumes.

    x_gates [N, 4H] are the pre-activation gates (x·W_ihᵀ + h·W_hhᵀ + biases),
    order i, f, g, o; returns (hy, cy, storage) with storage [N, 4H] the
    activations i, f, g, o.
    """
    H = cx.shape[1]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))
    i, f, g, o = (x_gates[:, k * H:(k + 1) * H] for k in range(4))
    i, f, g, o = sig(i), sig(f), np.tanh(g), sig(o)
    cy = f * cx + i * g
    hy = o * np.tanh(cy)
    return hy, cy, np.concatenate([i, f, g, o], axis=1)


def sample(dims, rng):
    """Inputs from a real cell forward: gates ~ N(0, 1), cx ~ N(0, 1), unit-scale gradients."""
    N, H = dims["N"], dims["H"]
    cx = rng.standard_normal((N, H))
    _, cy, storage = forward_reference(rng.standard_normal((N, 4 * H)), cx)
    return {"grad_hy": rng.standard_normal((N, H)), "grad_cy": rng.standard_normal((N, H)),
            "cx": cx, "cy": cy, "storage": storage}


def nbytes(dims, itemsize):
    """Read grad_hy, grad_cy, cx, cy, storage; write grad_gates, grad_cx, grad_bias."""
    N, H = dims["N"], dims["H"]
    return itemsize * (13 * N * H + 4 * H)


OP = register(
    OpDef(
        name="lstm_cell_backward",
        short="lcg",
        partial_rows=PARTIAL_ROWS,
        inputs=(
            TensorSpec("grad_hy", ("N", "H"), when="has_grad_hy"),
            TensorSpec("grad_cy", ("N", "H"), when="has_grad_cy"),
            TensorSpec("cx", ("N", "H")),
            TensorSpec("cy", ("N", "H")),
            TensorSpec("storage", ("N", "4*H"), kernel_shape=("N", "4", "H")),
        ),
        outputs=(
            TensorSpec("grad_gates", ("N", "4*H"), kernel_shape=("N", "4", "H")),
            TensorSpec("grad_cx", ("N", "H")),
            TensorSpec("grad_bias", ("4*H",), kernel_shape=("4", "H"), when="has_bias"),
        ),
        scalars=(),
        variants=tuple(
            {"has_grad_hy": a, "has_grad_cy": b, "has_bias": c}
            for a, b, c in itertools.product((True, False), repeat=3)
        ),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "N=1 H=1": {"N": 1, "H": 1},
            "H=7": {"N": 3, "H": 7},
            "odd, not a vector multiple": {"N": 13, "H": 37},
            "N=64 H=1024": {"N": 64, "H": 1024},
            "N=1024 H=1024": {"N": 1024, "H": 1024},
        },
        doc=__doc__,
    )
)
