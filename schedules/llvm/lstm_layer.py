"""The LSTM layer recurrence on the CPU: one thread team for the whole sequence.

``lstm_layer_forward`` and ``lstm_layer_backward`` are TIR definitions (a plain loop nest); these
rules build each variant's CPU loop nest around the definitions' own expressions
(``te_defs._lstm_layer``: the cell, its gradient, the order of every sum, the state a step starts
from):

- One parallel region per call (``pragma_parallel_launch_point``).  The hidden units are cut into
  chunks of UNITS (a multiple of the CPU's float32 lanes); the team deals the chunks out in the
  same round-robin order at every step (``pragma_parallel_stride_pattern``), so a thread owns the
  same units, their four gate columns of W_hh (packed once per call into its own contiguous panel
  of [H, 4, UNITS]) and their state from the first step to the last.
- Forward, per step: each chunk's gates for ROWS rows at a time as a register tile
  (ROWS x 4 x UNITS accumulators), the cell as its epilogue (the gates never go to memory), then
  one barrier, so the next step reads every unit's h.  h_{t-1} is read from the output h (or h0),
  whose argument LLVM knows aliases nothing: read from a workspace buffer, LLVM kept storing the
  accumulators back every iteration (21.6 against 30 ms at T=50, B=32, H=256 on one core); c stays
  with its owner in cy.
- Backward, per step: the cell gradient of each chunk's units (writing dgates and its transpose),
  one barrier, then each chunk's columns of dh = dgates·W_hh from the chunk's panel of W_hh
  columns.  A thread then reads only the dh it wrote itself, so one barrier per step suffices.

Every sum runs in the definition's order whatever the knobs and the thread count (a chunk's
arithmetic does not depend on which thread runs it), so results are the same bits for any
``TVM_NUM_THREADS``.
"""
from __future__ import annotations

import contextlib

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ... import te_defs
from ...te_defs import _lstm_layer as L
from ...te_defs import _tir
from ...te_defs._tir import loop, store
from ...lowering import tvm_api
from .. import ScheduleRule
from . import machine

UNITS_VECTORS = 1  # hidden units per chunk, in float32 vectors of the CPU (lanes from machine.lanes)
G = len(L.GATES)  # gate blocks of W_hh and of the gates

TEAM = "pragma_parallel_launch_point"
BARRIER = "pragma_parallel_barrier_when_finish"
STRIDE = "pragma_parallel_stride_pattern"


def _variant(func) -> dict:
    return {k: bool(v) for k, v in func.attrs["fusedgrad.variant"].items()}


class _Layer(ScheduleRule):
    KNOBS = {"UNITS_VECTORS": (1, 2, 4), "ROWS": (1, 2, 4, 8)}

    def derive(self, name, target):
        if name == "ROWS":  # ROWS x G gates x UNITS accumulators, a row of W, one broadcast
            return machine.register_tile_rows(target, G * self.units(target))
        return None

    def units(self, target) -> int:
        return self.knob("UNITS_VECTORS", target) * machine.lanes(target)

    def apply(self, func, target):
        if tvm_api.op_name(func) != self.op:
            return None
        built = self.build(_variant(func), target).with_attr("fusedgrad.variant", func.attrs["fusedgrad.variant"])
        for key in (tvm_api.OP_ATTR, "global_symbol"):
            built = built.with_attr(key, func.attrs[key])
        return tvm_api.schedule(built)


@contextlib.contextmanager
def _phase(nch, barrier: bool = True):
    """One phase of the team: the chunks dealt out round-robin (the same chunks to the same thread
    in every phase), then a barrier unless ``barrier`` is False."""
    with contextlib.ExitStack() as stack:
        if barrier:
            stack.enter_context(T.attr(0, BARRIER, 1))
        stack.enter_context(T.attr(0, STRIDE, 1))
        yield stack.enter_context(loop("ch", nch, "parallel"))


class LstmLayerForward(_Layer):
    op = "lstm_layer_forward"

    def build(self, variant, target):
        train, reverse = variant["train"], variant["reverse"]
        S, R = self.units(target), self.knob("ROWS", target)
        op = te_defs.get(self.op)
        with IRBuilder() as ib:
            with T.prim_func():
                T.func_name(self.op)
                T.func_attr({"tirx.noalias": True})
                sz = _tir.dims("T", "B", "H")
                a = _tir.params(op, variant, L.DTYPE, sz)
                Tn, B, H = sz["T"], sz["B"], sz["H"]
                nch = (H + S - 1) // S
                wp = _tir.local("w_panel", (nch, H, G, S))
                with T.attr(0, TEAM, 1):
                    with _phase(nch) as ch:  # pack this chunk's W_hh columns, take its initial state
                        with loop("r", H) as r:
                            with loop("k", G) as k:
                                with loop("s", S) as s:
                                    j = ch * S + s
                                    store(wp, (ch, r, k, s),
                                          tirx.if_then_else(j < H, a["w_hh"][k, tirx.min(j, H - 1), r],
                                                            T.float32(0)))
                        with loop("b", B) as b:
                            with loop("s", S) as s:
                                with _tir.when(ch * S + s < H):
                                    store(a["hy"], (b, ch * S + s), a["h0"][b, ch * S + s])
                                    store(a["cy"], (b, ch * S + s), a["c0"][b, ch * S + s])
                    with loop("t", Tn) as t:
                        tt = _tir.let("tt", L.step_index(t, Tn, reverse))
                        n = _tir.let("n", a["batch_sizes"][tt])
                        # rows 0 .. m-1 continue from h of the previous time index, m .. n-1 start from h0
                        p = _tir.let("p", tirx.max(tirx.min(L.previous_index(tt, reverse), Tn - 1), 0))
                        m = _tir.let("m", tirx.if_then_else(tirx.all(0 < t), tirx.min(n, a["batch_sizes"][p]), 0))
                        # a row's final state: its last running step (every row's last is t = 0 in reverse)
                        nxt = tirx.max(tirx.min(L.previous_index(tt, not reverse), Tn - 1), 0)
                        last = _tir.let("last", n if reverse else tirx.if_then_else(
                            tt == Tn - 1, 0, a["batch_sizes"][nxt]))
                        with _phase(nch) as ch:
                            acc = _tir.local("acc", (R, G, S), scope="local")
                            v = _tir.local("v", (len(L.SCRATCH), S), scope="local")
                            ctx = dict(a=a, wp=wp, acc=acc, v=v, ch=ch, S=S, H=H, tt=tt, train=train,
                                       last=(lambda b: (t == Tn - 1) if reverse else (last <= b)))
                            for lo, hi, src in ((0, m, lambda b, r: a["h"][p, b, r]),
                                                (m, n, lambda b, r: a["h0"][b, r])):
                                with loop("bo", (hi - lo) // R) as bo:
                                    self._tile(ctx, src, lo + bo * R, R)
                                with loop("b", (hi - lo) % R, start=hi - (hi - lo) % R) as b:
                                    self._tile(ctx, src, b, 1)
                            with loop("b", B - n, start=n) as b:  # rows not running: state kept, outputs zero
                                with loop("s", S) as s:
                                    j = ch * S + s
                                    with _tir.when(j < H):
                                        for name in ("h",) + (("c",) + L.GATES + ("tanhc",) if train else ()):
                                            store(a[name], (tt, b, j), T.float32(0))
        return ib.get()

    def _tile(self, ctx, src, b0, rows):
        """Gates of rows b0 .. b0+rows of the chunk in registers (the definition's sum over r, h_prev
        read through ``src(b, r)``), then the cell on them."""
        acc, wp, ch, S, H = ctx["acc"], ctx["wp"], ctx["ch"], ctx["S"], ctx["H"]
        with loop("rr", rows, "unroll") as rr:
            with loop("k", G, "unroll") as k:
                with loop("s", S, "vectorized") as s:
                    store(acc, (rr, k, s), T.float32(0))
        with loop("r", H) as r:
            with loop("rr", rows, "unroll") as rr:
                with loop("k", G, "unroll") as k:
                    with loop("s", S, "vectorized") as s:
                        store(acc, (rr, k, s), acc[rr, k, s] + src(b0 + rr, r) * wp[ch, r, k, s])
        with loop("rr", rows, "unroll") as rr:  # unrolled: the accumulators stay in registers
            with T.If(ch * S + S <= H):
                with T.Then():
                    self._cell(ctx, rr, b0 + rr, "vectorized")
                with T.Else():  # the last chunk, where H is not a whole number of chunks
                    self._cell(ctx, rr, b0 + rr, "serial", H)

    @staticmethod
    def _cell(ctx, rr, b, kind, H=None):
        """The definition's cell on the gates of row ``b`` of the chunk, stage by stage over the
        chunk's units through the scratch rows ``v`` (``H``: only the units below it exist)."""
        a, acc, v, ch, S, tt, train = (ctx[k] for k in ("a", "acc", "v", "ch", "S", "tt", "train"))

        def units(body):
            with loop("s", S, kind) as s:
                if H is None:
                    body(s, ch * S + s)
                else:
                    with _tir.when(ch * S + s < H):
                        body(s, ch * S + s)

        def acts(s, j):
            for k in range(G):
                store(v, (k, s), L.activation(k, acc[rr, k, s] + a["xw"][tt, b, k, j]))

        def state(s, j):
            store(v, (4, s), L.cell_state(v[0, s], v[1, s], v[2, s], a["cy"][b, j]))
            store(v, (5, s), tirx.tanh(v[4, s]))

        def out(s, j):
            store(a["cy"], (b, j), v[4, s])
            store(a["h"], (tt, b, j), v[3, s] * v[5, s])
            if train:
                for name in ("c",) + L.GATES + ("tanhc",):
                    store(a[name], (tt, b, j), v[L.SCRATCH.index(name), s])

        def final(s, j):
            store(a["hy"], (b, j), v[3, s] * v[5, s])

        for stage in (acts, state, out):
            units(stage)
        with _tir.when(ctx["last"](b)):
            units(final)


class LstmLayerBackward(_Layer):
    op = "lstm_layer_backward"

    def build(self, variant, target):
        from ...te_defs.lstm_layer_backward import cell_gradient

        reverse = variant["reverse"]
        S, R = self.units(target), self.knob("ROWS", target)
        op = te_defs.get(self.op)
        with IRBuilder() as ib:
            with T.prim_func():
                T.func_name(self.op)
                T.func_attr({"tirx.noalias": True})
                sz = _tir.dims("T", "B", "H")
                a = _tir.params(op, variant, L.DTYPE, sz)
                Tn, B, H = sz["T"], sz["B"], sz["H"]
                nch = (H + S - 1) // S
                wq = _tir.local("w_panel", (nch, G, H, S))
                with T.attr(0, TEAM, 1):
                    # this chunk's columns of W_hh (for dh) and its units' initial gradient state
                    with _phase(nch, barrier=False) as ch:
                        with loop("k", G) as k:
                            with loop("j", H) as j:
                                with loop("s", S) as s:
                                    r = ch * S + s
                                    store(wq, (ch, k, j, s), tirx.if_then_else(
                                        r < H, a["w_hh"][k, j, tirx.min(r, H - 1)], T.float32(0)))
                        with loop("b", B) as b:
                            with loop("s", S) as s:
                                with _tir.when(ch * S + s < H):
                                    store(a["dh0"], (b, ch * S + s), a["grad_hy"][b, ch * S + s])
                                    store(a["dc0"], (b, ch * S + s), a["grad_cy"][b, ch * S + s])
                    with loop("step", Tn) as step:
                        tt = _tir.let("tt", L.step_index(step, Tn, not reverse))
                        n = _tir.let("n", a["batch_sizes"][tt])
                        with _phase(nch) as ch:  # the cell gradient of the chunk's units

                            def grad(b, s):
                                j = ch * S + s
                                d, dcx = cell_gradient(a, tt, b, j, Tn, reverse, a["dh0"][b, j], a["dc0"][b, j])
                                for k in range(G):
                                    store(a["dgates"], (tt, b, k, j), d[k])
                                store(a["dc0"], (b, j), dcx)

                            with loop("b", n) as b:
                                with T.If(ch * S + S <= H):
                                    with T.Then():
                                        with loop("s", S, "vectorized") as s:
                                            grad(b, s)
                                    with T.Else():  # the last chunk, where H is not a whole number of chunks
                                        with loop("s", S) as s:
                                            with _tir.when(ch * S + s < H):
                                                grad(b, s)
                            with loop("b", B - n, start=n) as b:
                                with loop("k", G) as k:
                                    with loop("s", S) as s:
                                        with _tir.when(ch * S + s < H):
                                            store(a["dgates"], (tt, b, k, ch * S + s), T.float32(0))
                            with loop("k", G) as k:  # the transposed copy, runs along b
                                with loop("s", S) as s:
                                    with _tir.when(ch * S + s < H):
                                        with loop("b", B) as b:
                                            store(a["dgates_t"], (k, ch * S + s, tt, b),
                                                  a["dgates"][tt, b, k, ch * S + s])
                        with _phase(nch, barrier=False) as ch:  # dh of the chunk's columns
                            acc = _tir.local("acc", (R, G, S), scope="local")
                            with loop("bo", n // R) as bo:
                                self._tile(a, wq, acc, ch, bo * R, R, S, H, tt)
                            with loop("b", n % R, start=n - n % R) as b:
                                self._tile(a, wq, acc, ch, b, 1, S, H, tt)
        return ib.get()

    @staticmethod
    def _tile(a, wq, acc, ch, b0, rows, S, H, tt):
        """dh of rows b0 .. b0+rows over the chunk's columns: one partial sum per gate block in
        registers (increasing j), then added over the blocks in order, as the definition sums."""
        with loop("rr", rows, "unroll") as rr:
            with loop("k", G, "unroll") as k:
                with loop("s", S, "vectorized") as s:
                    store(acc, (rr, k, s), T.float32(0))
        def blocks_in_order(rr, s):  # the gate blocks' partial sums added i, f, g, o
            total = acc[rr, 0, s]
            for k in range(1, G):
                total = total + acc[rr, k, s]
            return total

        with loop("j", H) as j:
            with loop("rr", rows, "unroll") as rr:
                with loop("k", G, "unroll") as k:
                    with loop("s", S, "vectorized") as s:
                        store(acc, (rr, k, s), acc[rr, k, s] + a["dgates"][tt, b0 + rr, k, j] * wq[ch, k, j, s])
        with loop("rr", rows, "unroll") as rr:
            with T.If(ch * S + S <= H):
                with T.Then():
                    with loop("s", S, "vectorized") as s:
                        store(a["dh0"], (b0 + rr, ch * S + s), blocks_in_order(rr, s))
                with T.Else():
                    with loop("s", S) as s:
                        with _tir.when(ch * S + s < H):
                            store(a["dh0"], (b0 + rr, ch * S + s), blocks_in_order(rr, s))


RULES = (LstmLayerForward(), LstmLayerBackward())
