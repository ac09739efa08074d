"""What the LSTM layer definitions share: the cell's arithmetic as expressions, the order of the
recurrent sums, the state each step starts from, and the float64 recurrence they are checked
against.  Every target's schedule of ``lstm_layer_forward`` / ``lstm_layer_backward`` builds its
loops around these same expressions, so the definitions are the one statement of the math.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx

from ._tir import BFLOAT16_BITS, store, widen_bfloat16
from .matmul import tf32

DTYPE = "float32"
ACC = "float32"  # every arithmetic of the layer, whatever the storage dtype
DTYPES = ("float32", "float16", "bfloat16")  # the storage dtypes of the layer ops
GATES = ("i", "f", "g", "o")  # the order of the four gate blocks of W and of the gates
# the CUDA entry points reading W_hh from global memory (schedules/cuda/lstm_layer.py), which the full
# LSTM launches where the grid with W_hh's slice on chip cannot be resident (OpDef.target_flags)
W_HH_GLOBAL = "w_hh_global"
# the CUDA entry points whose recurrent sums run on the tensor cores (mma.sync; the full LSTM launches
# them where its GEMMs run there too, B >= 16 and the on-chip grid is resident): their sums are
# TENSOR_CORE_SUMS, not the definitions' (the flags exclude each other: OpDef.target_flags)
TENSOR_CORES = "tensor_cores"
TARGET_FLAGS = {W_HH_GLOBAL: ("cuda",), TENSOR_CORES: ("cuda",)}
TENSOR_CORE_MIN_BATCH = 16  # an mma tile's rows: the least batch the full LSTM takes those entries at
TENSOR_CORE_SUMS = """With the schedule flag ``tensor_cores`` (CUDA only) the recurrent sums are those of the
tensor cores' ``mma.sync`` (m16n8k8 TF32 for float32 storage, m16n8k16 for float16 and bfloat16), not
the order above.  The operands as the tensor cores take them: float32 storage rounds both (the running
state and W_hh) to TF32 (``te_defs.matmul.tf32_expr``: to nearest, ties away from zero; NaN and infinity
kept, so they propagate), 16-bit storage takes them exactly.  The products are exact in float32 and
summed in float32 per k group of 8 (TF32) or 16 (16-bit) consecutive terms, each group's sum added to the
running sum in increasing k (the order within a group is the hardware's; the host emulation adds in
increasing k); the rows are padded to 16 and the terms past H with zeros.  The same bits every run
and for any grid size (one warp runs a whole sum), but not the bits of the entry without the flag.
The full LSTM runs its float32 layer kernels for 16-bit calls too (inputs widened): there the TF32
rounding of W_hh (16-bit values) is exact, that of the float32 state is not."""
# the layer ops' named shapes (tests, benchmarks, generate's check)
SHAPES = {
    "T=1 B=1 H=1": {"T": 1, "B": 1, "H": 1},
    "odd, not a vector multiple": {"T": 7, "B": 5, "H": 37},
    "T=200 B=1 H=256": {"T": 200, "B": 1, "H": 256},
    "T=50 B=32 H=256": {"T": 50, "B": 32, "H": 256},
}


def _c(v: float):
    return tirx.const(v, DTYPE)


def wide(v):
    """``v`` in float32: a load of a float16 or bfloat16 array widened (exact; bfloat16 by its bits,
    ``_tir.widen_bfloat16``, also from a kernel's own buffer of its bits), a float32 value as it is
    (no cast node, so the float32 loop nests are the same IR whatever the storage dtype code path)."""
    if str(v.ty) in ("bfloat16", BFLOAT16_BITS):
        return widen_bfloat16(v)
    return v if str(v.ty) == ACC else v.astype(ACC)


def sigmoid(v):
    """(1 + tanh(v/2)) / 2: the target's tanh vectorises where exp is a scalar libm call; tanh(±Inf)
    = ±1 gives exactly 1 and 0."""
    return _c(0.5) + _c(0.5) * tirx.tanh(_c(0.5) * v)


ACT = ("i", "f", "g", "o")  # activation of each gate block: sigmoid, sigmoid, tanh, sigmoid


def activation(k: int, pre):
    """The activation of gate block ``k`` (i, f, g, o) of pre-activation ``pre``."""
    return tirx.tanh(pre) if k == 2 else sigmoid(pre)


def cell_state(i, f, g, c_prev):
    """c_t = f·c_{t-1} + i·g."""
    return f * c_prev + i * g


# Where a schedule keeps one unit's intermediate values (a scratch row per unit, so that no
# expression holding a tanh is named twice: TVM's simplifier copes badly with such trees when they
# are bound to variables): the four activations, then c_t and tanh(c_t).
SCRATCH = ACT + ("c", "tanhc")


def cell_backward(dh_t, dc, cx, i, f, g, o, tanhc) -> tuple:
    """(dc_t-dependent) gate gradients of one step: given dh_t (recurrent + output gradient), the
    incoming dc and the saved values, returns (dc_t, [di, df, dg, do] as functions of dc_t)."""
    one = _c(1.0)
    dc_t = dc + dh_t * o * (one - tanhc * tanhc)
    return dc_t, (lambda c: c * g * i * (one - i), lambda c: c * cx * f * (one - f),
                  lambda c: c * i * (one - g * g), lambda c: dh_t * tanhc * o * (one - o))


def cell_stages(a, v, put, tt, b, train: bool):
    """The cell's stages after the gates' activations, each ``stage(s, j)`` for the unit j held at s
    of the scratch rows ``v`` [SCRATCH, S] (float32): state (c_t and tanh(c_t) into v, through
    ``put(index, value)``), out (cy, h of ``tt`` and, when ``train``, the saved values), final (the
    row's hy); every store rounds once to its array's dtype."""
    ci, ti = SCRATCH.index("c"), SCRATCH.index("tanhc")

    def state(s, j):
        put((ci, s), cell_state(v[0, s], v[1, s], v[2, s], wide(a["cy"][b, j])))
        put((ti, s), tirx.tanh(v[ci, s]))

    def out(s, j):
        store(a["cy"], (b, j), v[ci, s])
        store(a["h"], (tt, b, j), v[3, s] * v[ti, s])
        if train:
            for name in ("c",) + GATES + ("tanhc",):
                store(a[name], (tt, b, j), v[SCRATCH.index(name), s])

    def final(s, j):
        store(a["hy"], (b, j), v[3, s] * v[ti, s])

    return state, out, final


def _at_run_time(reverse) -> bool:
    """Whether ``reverse`` is a kernel's int32 argument rather than a bool fixed when it is built."""
    return not isinstance(reverse, (int, np.integer, np.bool_))  # bool is an int


def step_index(t, T, reverse):
    """The time index the ``t``-th step of a direction processes (the forward order).  ``reverse``:
    a bool, or an int32 0/1 that a kernel reads at run time (one kernel for both directions)."""
    if _at_run_time(reverse):
        return tirx.if_then_else(reverse != 0, T - 1 - t, t)
    return T - 1 - t if reverse else t


def previous_index(tt, reverse):
    """The time index whose state step ``tt`` starts from, in the direction's forward order (the
    initial state where it is out of range or the row was not running there); ``reverse`` as above."""
    if _at_run_time(reverse):
        return tt - 1 + 2 * reverse
    return tt + 1 if reverse else tt - 1


def opposite(reverse):
    """The other direction of ``reverse`` (a bool, or an int32 0/1 read at run time)."""
    return 1 - reverse if _at_run_time(reverse) else not reverse


# ---- float64 references


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _as_given(v):
    return v


def tensor_core_operand(v):
    """``v`` as the ``tensor_cores`` entries' products take it (``TENSOR_CORE_SUMS``), in float64: its
    float32 value rounded to TF32 (exact for float16 and bfloat16 values)."""
    return tf32(v).astype(np.float64)


def operand_for(tensor_cores: bool):
    """What a reference's recurrent product takes of its operands with the schedule flag or without."""
    return tensor_core_operand if tensor_cores else _as_given


def forward_reference(xw, w_hh, h0, c0, batch_sizes, reverse: bool, operand=_as_given):
    """The layer forward in float64: {h, c, i, f, g, o, tanhc: [T, B, H], hy, cy: [B, H]}; rows past
    a step's batch size are zero there and keep their state.  ``operand``: what the recurrent product
    takes of h_prev and W_hh (e.g. their TF32 rounding, ``TENSOR_CORE_SUMS``)."""
    T, B, H4 = xw.shape
    H = H4 // 4
    out = {k: np.zeros((T, B, H)) for k in ("h", "c") + GATES + ("tanhc",)}
    h, c = np.array(h0, dtype=np.float64), np.array(c0, dtype=np.float64)
    for t in range(T):
        tt = step_index(t, T, reverse)
        n = int(batch_sizes[tt])
        pre = xw[tt, :n] + operand(h[:n]) @ operand(w_hh).T
        i, f, g, o = _sig(pre[:, :H]), _sig(pre[:, H:2 * H]), np.tanh(pre[:, 2 * H:3 * H]), _sig(pre[:, 3 * H:])
        c[:n] = f * c[:n] + i * g
        tc = np.tanh(c[:n])
        h[:n] = o * tc
        for k, v in zip(("h", "c", "i", "f", "g", "o", "tanhc"), (h[:n], c[:n], i, f, g, o, tc)):
            out[k][tt, :n] = v
    out["hy"], out["cy"] = h, c
    return out


def backward_reference(dy, w_hh, c, c0, i, f, g, o, tanhc, grad_hy, grad_cy, batch_sizes, reverse: bool,
                       operand=_as_given):
    """The layer backward through time in float64: {dgates [T, B, 4H], dgates_t [4H, T, B],
    dh0, dc0 [B, H]} (dh0, dc0: the gradients w.r.t. each row's initial state); ``operand`` as
    ``forward_reference``'s, of dgates and W_hh."""
    T, B, H = dy.shape
    dgates = np.zeros((T, B, 4 * H))
    dh, dc = np.array(grad_hy, dtype=np.float64), np.array(grad_cy, dtype=np.float64)
    for s in range(T):
        tt = step_index(s, T, not reverse)  # backward runs against the forward order
        n = int(batch_sizes[tt])
        p = previous_index(tt, reverse)
        cx = np.array(c0[:n], dtype=np.float64)
        if 0 <= p < T:
            m = min(n, int(batch_sizes[p]))
            cx[:m] = c[p, :m]
        dh_t = dh[:n] + dy[tt, :n]
        dc_t = dc[:n] + dh_t * o[tt, :n] * (1 - tanhc[tt, :n] ** 2)
        ii, ff, gg, oo = i[tt, :n], f[tt, :n], g[tt, :n], o[tt, :n]
        d = np.concatenate([dc_t * gg * ii * (1 - ii), dc_t * cx * ff * (1 - ff), dc_t * ii * (1 - gg * gg),
                            dh_t * tanhc[tt, :n] * oo * (1 - oo)], axis=1)
        dgates[tt, :n] = d
        dc[:n] = dc_t * ff
        dh[:n] = operand(d) @ operand(w_hh)
    return {"dgates": dgates, "dgates_t": dgates.transpose(2, 0, 1).copy(), "dh0": dh, "dc0": dc}


def batch_sizes_for(T: int, B: int, rng) -> np.ndarray:
    """Non-increasing batch sizes with the first equal to B (sequences sorted by length, longest
    first: what packed sequences give), some steps shorter where T > 1."""
    if T == 0:
        return np.zeros(0, np.int32)
    lengths = np.sort(rng.integers(1, T + 1, size=B))[::-1].copy()
    lengths[0] = T
    return np.array([(lengths > t).sum() for t in range(T)], np.int32)
