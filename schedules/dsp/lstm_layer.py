"""The LSTM layer recurrence on a DSP: the whole sequence in one call, the steps split over the cores.

The library runs the kernel on every core of a group (spmd).  Every core walks the time loop; inside a
step each parallel loop is split over the cores the same way at every step (lowering.c_spmd: a
contiguous range of its iterations per core, then a barrier), so a core owns the same hidden units
from the first step to the last.  The hidden units are cut into chunks of one vector register's
float32 lanes (the narrowest chip's); W_hh is packed once per call into a panel per chunk in the
shared workspace, each chunk's columns contiguous, so the per-unit inner loops run along memory
for the C compiler to vectorise.

- Forward, per step: each chunk's gates for one row at a time (the definition's sum over r in
  increasing order, then + xw), the cell on them; then the barrier.  h_{t-1} is read from the
  output h of the previous time index (or h0), never from hy, which holds each row's final state
  and is written at the row's last step only: no core reads what another writes in the same step.
- Backward, per step: the cell gradient of each chunk's units (dgates and its transpose), a
  barrier, then each chunk's columns of dh = dgates·W_hh from the chunk's panel of W_hh columns
  (per gate block in increasing j, the blocks added i, f, g, o: the definition's order), a barrier.

Code size (a DSP's program memory is counted in kilobytes: docs/dsp-code-size.md): the direction is
an argument the kernel reads at run time, so both directions are one kernel, and a chunk's units run
one copy of each stage whose bound is S, or what is left of H at the last chunk.

The arithmetic of a unit does not depend on which core runs it, so every core mask gives the same
bits, and the same bits as the definition's order on the host.

float16 (MT7004's hp_ entry points): every array in half, the arithmetic in float32 as the
definitions state it: the W_hh panels are packed widened to float32 (once per call: the steps' sums
read no half), the other loads are widened where read, each stored value is rounded to half once.
The state a step starts from is read back from the half arrays (h of the previous time index or
h0, cy; dh0, dc0 and the stored dgates in the backward), as in the definitions.
"""
from __future__ import annotations

import contextlib
import functools

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ... import te_defs
from .. import tir_api
from ...te_defs import _lstm_layer as L
from ...te_defs import _tir
from ...te_defs._tir import loop, store
from .. import ScheduleRule
from .machine import accumulator_lanes

G = len(L.GATES)


class _Layer(ScheduleRule):
    def apply(self, func, target):
        if tir_api.op_name(func) != self.op:
            return None
        variant = {k: bool(v) for k, v in func.attrs["fusedgrad.variant"].items()}
        dtype = str(func.params[0].dtype)  # the op's dtype: its first array's (xw, dy)
        built = self.build(variant, dtype, accumulator_lanes(dtype))
        built = built.with_attr("fusedgrad.variant", func.attrs["fusedgrad.variant"])
        for key in (tir_api.OP_ATTR, "global_symbol"):
            built = built.with_attr(key, func.attrs[key])
        return tir_api.schedule(built)

    @contextlib.contextmanager
    def kernel(self, variant, dtype):
        """The op's PrimFunc being built: (the builder, its arrays, T, B, H, the direction: an int32
        argument read at run time, one kernel for both)."""
        with IRBuilder() as ib:
            with T.prim_func():
                T.func_name(self.op)
                T.func_attr({"tirx.noalias": True})
                sz = _tir.dims("T", "B", "H")
                a = _tir.params(te_defs.get(self.op), variant, dtype, sz)
                reverse = T.arg("reverse", T.int32())
                yield ib, a, sz["T"], sz["B"], sz["H"], reverse


def _units(ch, S, H, body):
    """``body(s, j)`` over the chunk's units j = ch·S + s that exist (j < H): one copy of the body,
    its bound S but at the last chunk (where H is not a whole number of chunks) what is left."""
    with loop("s", tirx.min(S, H - ch * S)) as s:
        body(s, ch * S + s)


def _copy_state(a, ch, S, B, H, pairs: dict) -> None:
    """The chunk's units of every row of each state array ``pairs`` names, from its source: the state
    the first step starts from."""
    with loop("b", B) as b:
        def copy(s, j):
            for dst, src in pairs.items():
                store(a[dst], (b, j), a[src][b, j])
        _units(ch, S, H, copy)


class LstmLayerForward(_Layer):
    op = "lstm_layer_forward"

    def build(self, variant, dtype, S):
        train = variant["train"]
        with self.kernel(variant, dtype) as (ib, a, Tn, B, H, reverse):
            nch = (H + S - 1) // S
            wp = _tir.local("w_panel", (nch, H, G, S))
            with loop("ch", nch, "parallel") as ch:  # pack the chunk's W_hh columns, take its state
                with loop("r", H) as r:
                    with loop("k", G) as k:
                        with loop("s", S) as s:
                            j = ch * S + s
                            store(wp, (ch, r, k, s), tirx.if_then_else(
                                j < H, L.wide(a["w_hh"][k, tirx.min(j, H - 1), r]), T.float32(0)))
                _copy_state(a, ch, S, B, H, {"hy": "h0", "cy": "c0"})
            with loop("t", Tn) as t:
                tt = _tir.let("tt", L.step_index(t, Tn, reverse))
                n = _tir.let("n", a["batch_sizes"][tt])
                # rows 0 .. m-1 continue from h of the previous time index, m .. n-1 start from h0
                p = _tir.let("p", tirx.max(tirx.min(L.previous_index(tt, reverse), Tn - 1), 0))
                m = _tir.let("m", tirx.if_then_else(0 < t, tirx.min(n, a["batch_sizes"][p]), 0))
                # a row's final state: its last running step (every row's last is t = T-1 in reverse)
                nxt = tirx.max(tirx.min(L.previous_index(tt, L.opposite(reverse)), Tn - 1), 0)
                last = _tir.let("last", tirx.if_then_else(tt == Tn - 1, 0, a["batch_sizes"][nxt]))
                with loop("ch", nch, "parallel") as ch:
                    acc = _tir.local("acc", (G, S))
                    v = _tir.local("v", (len(L.SCRATCH), S))
                    ctx = dict(a=a, wp=wp, acc=acc, v=v, ch=ch, S=S, H=H, tt=tt, train=train,
                               last=(lambda b: tirx.if_then_else(reverse != 0, t == Tn - 1, last <= b)))
                    with loop("b", m) as b:
                        self._row(ctx, b, lambda b, r: a["h"][p, b, r])
                    with loop("b", n - m, start=m) as b:
                        self._row(ctx, b, lambda b, r: a["h0"][b, r])
                    with loop("b", B - n, start=n) as b:  # rows not running: state kept, outputs zero
                        def zero(s, j):
                            for name in ("h",) + (("c",) + L.GATES + ("tanhc",) if train else ()):
                                store(a[name], (tt, b, j), T.float32(0))
                        _units(ch, S, H, zero)
        return ib.get()

    @staticmethod
    def _row(ctx, b, src):
        """The chunk's gates of row ``b`` (the definition's sum over r, h_prev read through
        ``src(b, r)``), then the cell on them, stage by stage through the scratch rows ``v``."""
        a, wp, acc, v, ch, S, H, tt, train = (ctx[k] for k in ("a", "wp", "acc", "v", "ch", "S", "H", "tt", "train"))
        with loop("k", G) as k:
            with loop("s", S) as s:
                store(acc, (k, s), T.float32(0))
        with loop("r", H) as r:
            with loop("k", G) as k:
                with loop("s", S) as s:
                    store(acc, (k, s), acc[k, s] + L.wide(src(b, r)) * wp[ch, r, k, s])

        def acts(s, j):
            for k in range(G):
                store(v, (k, s), L.activation(k, acc[k, s] + L.wide(a["xw"][tt, b, k, j])))

        state, out, final = L.cell_stages(a, v, functools.partial(store, v), tt, b, train)

        for stage in (acts, state, out):
            _units(ch, S, H, stage)
        with _tir.when(ctx["last"](b)):
            _units(ch, S, H, final)


class LstmLayerBackward(_Layer):
    op = "lstm_layer_backward"

    def build(self, variant, dtype, S):
        from ...te_defs.lstm_layer_backward import cell_gradient

        with self.kernel(variant, dtype) as (ib, a, Tn, B, H, reverse):
            nch = (H + S - 1) // S
            wq = _tir.local("w_panel", (nch, G, H, S))
            with loop("ch", nch, "parallel") as ch:  # the chunk's columns of W_hh, its initial state
                with loop("k", G) as k:
                    with loop("j", H) as j:
                        with loop("s", S) as s:
                            r = ch * S + s
                            store(wq, (ch, k, j, s), tirx.if_then_else(
                                r < H, L.wide(a["w_hh"][k, j, tirx.min(r, H - 1)]), T.float32(0)))
                _copy_state(a, ch, S, B, H, {"dh0": "grad_hy", "dc0": "grad_cy"})
            with loop("step", Tn) as step:
                tt = _tir.let("tt", L.step_index(step, Tn, L.opposite(reverse)))
                n = _tir.let("n", a["batch_sizes"][tt])
                with loop("ch", nch, "parallel") as ch:  # the cell gradient of the chunk's units
                    with loop("b", n) as b:
                        def grad(s, j):
                            d, dcx = cell_gradient(a, tt, b, j, Tn, reverse, a["dh0"][b, j], a["dc0"][b, j])
                            for k in range(G):
                                store(a["dgates"], (tt, b, k, j), d[k])
                            store(a["dc0"], (b, j), dcx)
                        _units(ch, S, H, grad)
                    with loop("b", B - n, start=n) as b:
                        def zero(s, j):
                            for k in range(G):
                                store(a["dgates"], (tt, b, k, j), T.float32(0))
                        _units(ch, S, H, zero)
                    with loop("k", G) as k:  # the transposed copy, runs along b
                        def copy(s, j):
                            with loop("b", B) as b:
                                store(a["dgates_t"], (k, j, tt, b), a["dgates"][tt, b, k, j])
                        _units(ch, S, H, copy)
                with loop("ch", nch, "parallel") as ch:  # dh of the chunk's columns
                    acc = _tir.local("acc", (G, S))
                    with loop("b", n) as b:
                        with loop("k", G) as k:
                            with loop("s", S) as s:
                                store(acc, (k, s), T.float32(0))
                        with loop("k", G) as k:
                            with loop("j", H) as j:
                                with loop("s", S) as s:
                                    store(acc, (k, s),
                                          acc[k, s] + L.wide(a["dgates"][tt, b, k, j]) * wq[ch, k, j, s])

                        def dh(s, j):
                            total = acc[0, s]
                            for k in range(1, G):
                                total = total + acc[k, s]
                            store(a["dh0"], (b, j), total)
                        _units(ch, S, H, dh)
        return ib.get()


RULES = (LstmLayerForward(), LstmLayerBackward())
