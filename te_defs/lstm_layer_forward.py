"""One LSTM layer and direction, forward through all its time steps (the recurrence).

Inputs (public layout)
    xw          [T, B, 4H]  x_t·W_ihᵀ + b_ih + b_hh for every step (one GEMM before the recurrence)
    w_hh        [4H, H]     the recurrent weight, gate blocks i, f, g, o
    h0, c0      [B, H]      the initial state
    batch_sizes [T] int32   rows running at each time index, non-increasing (sequences sorted by
                            length, longest first); B everywhere for equal lengths
Outputs
    h           [T, B, H]   h_t of every step (zero in rows past the step's batch size)
    c, i, f, g, o, tanhc  [T, B, H]  c_t and the activations (variant ``train``: what the backward
                            reads; zero past the batch size)
    hy, cy      [B, H]      each row's final state (its last running step's)

Per step t (in time order; ``reverse``: from T-1 down to 0), for the rows b < batch_sizes[t]:
    gates[b, k, j] = (Σ_r h_prev[b, r]·W_hh[k·H + j, r]) + xw[t, b, k·H + j]
        the sum in increasing r from 0 (one fixed order, whatever the schedule or thread count)
    i, f, o = sigmoid(gates_i, _f, _o), g = tanh(gates_g)   (sigmoid as (1 + tanh(v/2)) / 2)
    c_t = f·c_prev + i·g,  h_t = o·tanh(c_t)
where h_prev, c_prev are the row's state: h0, c0 before its first running step.  In reverse
order a row starts at its own last time index, so sequences of every length start from h0.
The kernel sees xw as [T, B, 4, H] and w_hh as [4, H, H].

float32, float16 and bfloat16 storage (every array in the op's dtype; batch_sizes int32); the
arithmetic is float32 in all: loads are widened, the gate sums, the cell and the state math run in
float32, and each stored value is rounded once to the op's dtype (h_t, c_t, the activations, hy,
cy; to nearest even, a NaN kept: bfloat16 on its bits, ``_tir``).  The running state between steps
is the stored one: a step reads h_prev, c_prev back from hy, cy, so in 16 bits the recurrence runs
on the rounded state -- what a half LSTM with half outputs computes (the DSP schedule reads h_prev
from h of the previous time index, the same half value).

Written as TIR (TVM's IR builder), not TE: TE cannot express a recurrence that TVM 0.27 lowers
(``create_prim_func`` refuses ``te.scan``).  This definition is the plain loop nest; a target's
schedule rule builds its own loop nest around the same expressions (``_lstm_layer``).

Schedule flag ``tensor_cores`` (CUDA): the gate sums Σ_r h_prev[b, r]·W_hh[k·H + j, r] as the tensor
cores compute them (``_lstm_layer.TENSOR_CORE_SUMS``: h_prev and W_hh the operands), the rest as above.
"""
from __future__ import annotations

import numpy as np
from tvm.script.ir_builder import IRBuilder

from . import OpDef, TensorSpec, register
from . import _lstm_layer as L
from . import _tir
from ._tir import T, loop, store

DTYPE = L.DTYPE
SAVED = ("c", "i", "f", "g", "o", "tanhc")
VARIANTS = tuple({"train": tr, "reverse": rv} for tr in (True, False) for rv in (False, True))


def compute(dtype: str, train: bool, reverse: bool):
    """The plain loop nest of one variant as a PrimFunc."""
    with IRBuilder() as ib:
        with T.prim_func():
            T.func_name("lstm_layer_forward")
            T.func_attr({"tirx.noalias": True, "fusedgrad.variant": {"train": train, "reverse": reverse}})
            sz = _tir.dims("T", "B", "H")
            a = _tir.params(OP, {"train": train, "reverse": reverse}, dtype, sz)
            Tn, B, H = sz["T"], sz["B"], sz["H"]
            gates = _tir.local("gates", (B, 4, H), L.ACC)
            with loop("b", B) as b:
                with loop("j", H) as j:
                    store(a["hy"], (b, j), a["h0"][b, j])
                    store(a["cy"], (b, j), a["c0"][b, j])
            with loop("t", Tn) as t:
                tt = _tir.let("tt", L.step_index(t, Tn, reverse))
                n = _tir.let("n", a["batch_sizes"][tt])
                with loop("b", n) as b:
                    with loop("k", 4) as k:
                        with loop("j", H) as j:
                            store(gates, (b, k, j), T.float32(0))
                            with loop("r", H) as r:
                                store(gates, (b, k, j),
                                      gates[b, k, j] + L.wide(a["hy"][b, r]) * L.wide(a["w_hh"][k, j, r]))
                            store(gates, (b, k, j), gates[b, k, j] + L.wide(a["xw"][tt, b, k, j]))
                with loop("b", B) as b:
                    with loop("j", H) as j:
                        _cell_or_zero(a, gates, tt, b, j, b < n, train)
    return ib.get()


def _cell_or_zero(a, gates, tt, b, j, running, train: bool) -> None:
    """The cell of unit (b, j) at time index ``tt`` from ``gates`` (the pre-activations of row b,
    indexed [b, k, j]) where ``running``; zero outputs where not (the state is kept).  The cell runs
    in float32 on the widened c_prev; every store rounds to the op's dtype."""
    with T.If(running):
        with T.Then():
            v = _tir.local("v", (len(L.SCRATCH),), DTYPE)
            for k in range(4):
                store(v, (k,), L.activation(k, gates[b, k, j]))
            store(v, (4,), L.cell_state(v[0], v[1], v[2], L.wide(a["cy"][b, j])))
            store(v, (5,), T.tanh(v[4]))
            store(a["cy"], (b, j), v[4])
            store(a["hy"], (b, j), v[3] * v[5])
            store(a["h"], (tt, b, j), v[3] * v[5])
            if train:
                for name in SAVED:
                    store(a[name], (tt, b, j), v[L.SCRATCH.index(name)])
        with T.Else():
            for name in ("h",) + (SAVED if train else ()):
                store(a[name], (tt, b, j), T.float32(0))


def reference(xw, w_hh, h0, c0, batch_sizes, train=True, reverse=False, tensor_cores=False, **_):
    out = L.forward_reference(xw, w_hh, h0, c0, batch_sizes, reverse, L.operand_for(tensor_cores))
    if not train:
        out = {k: out[k] for k in ("h", "hy", "cy")}
    return out


def sample(dims, rng):
    """A real layer's inputs: weights at PyTorch's init scale, xw from an input GEMM, varied lengths."""
    T, B, H = dims["T"], dims["B"], dims["H"]
    k = 1.0 / np.sqrt(H)
    w_ih = rng.uniform(-k, k, (4 * H, H))
    x = rng.standard_normal((T, B, H))
    return {"xw": x @ w_ih.T + rng.uniform(-2 * k, 2 * k, 4 * H), "w_hh": rng.uniform(-k, k, (4 * H, H)),
            "h0": rng.standard_normal((B, H)) * 0.5, "c0": rng.standard_normal((B, H)) * 0.5,
            "batch_sizes": L.batch_sizes_for(T, B, rng)}


def nbytes(dims, itemsize):
    """Read xw and W_hh once, write h (and six more [T, B, H] in training)."""
    T, B, H = dims["T"], dims["B"], dims["H"]
    return itemsize * (T * B * 4 * H + 4 * H * H + T * B * H * 7 + 4 * B * H)


_TBH = ("T", "B", "H")
OP = register(
    OpDef(
        name="lstm_layer_forward",
        short="lstm",
        inputs=(
            TensorSpec("xw", ("T", "B", "4*H"), kernel_shape=("T", "B", "4", "H")),
            TensorSpec("w_hh", ("4*H", "H"), kernel_shape=("4", "H", "H")),
            TensorSpec("h0", ("B", "H")),
            TensorSpec("c0", ("B", "H")),
            TensorSpec("batch_sizes", ("T",), dtype="int32", bounded_by="B", non_increasing=True),
        ),
        outputs=(TensorSpec("h", _TBH),) + tuple(TensorSpec(n, _TBH, when="train") for n in SAVED)
        + (TensorSpec("hy", ("B", "H")), TensorSpec("cy", ("B", "H"))),
        scalars=(),
        variants=VARIANTS,
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes=L.SHAPES,
        doc=__doc__ + "\n" + L.TENSOR_CORE_SUMS,
        dtypes=L.DTYPES,
        target_flags=L.TARGET_FLAGS,
    )
)
