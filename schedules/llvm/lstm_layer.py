"""The LSTM layer recurrence on the CPU: one thread team for the whole sequence.

``lstm_layer_forward`` and ``lstm_layer_backward`` are TIR definitions (a plain loop nest); these
rules build each variant's CPU loop nest around the definitions' own expressions
(``te_defs._lstm_layer``: the cell, its gradient, the order of every sum, the state a step starts
from):

- One parallel region per call (``pragma_parallel_launch_point``).  The hidden units are cut into
  chunks of UNITS (a multiple of the CPU's float32 lanes); the team deals the chunks out in the
  same round-robin order at every step (``pragma_parallel_stride_pattern``), so a thread owns the
  same units, their four gate columns of W_hh (packed once per call into its own contiguous panel)
  and their state from the first step to the last.  Every other step sweeps the chunks in the
  opposite order (in blocks sized from the target's core count, ``sweep_block``, so a thread keeps
  its own for any thread count up to it): the panels a step starts with are those the step before
  ended with, still in the core's cache (at B = 1, where W_hh is read from L3 at every step, 5-8 %
  a step on Zen 3).
- Forward, per step: each chunk's gates for ROWS rows at a time as a register tile
  (ROWS x 4 x UNITS accumulators), the cell as its epilogue (the gates never go to memory), then
  one barrier, so the next step reads every unit's h.  h_{t-1} is read from the output h (or h0),
  whose argument LLVM knows aliases nothing: read from a workspace buffer, LLVM kept storing the
  accumulators back every iteration (21.6 against 30 ms at T=50, B=32, H=256 on one core); c stays
  with its owner in cy.
- Backward, per step: phase A, the cell gradient of each chunk's units (dgates, then dgates_t in
  vectors along b read back from the dgates just written), one barrier, then phase B, each chunk's columns of
  dh = dgates·W_hh from the chunk's panel of W_hh columns, one gate block at a time (ROWS x UNITS
  accumulators: its sums are independent of the other blocks' until they are added in order, so
  the tile needs no G-fold registers).  A thread then reads only the dh it wrote itself, so one
  barrier per step suffices.
- Tiles and scratch are constant-size stack buffers (``_Registers``, each below TVM's stack limit
  at any vector width), not a workspace allocation per chunk and step.

Every sum runs in the definition's order whatever the knobs and the thread count (a chunk's
arithmetic does not depend on which thread runs it), so results are the same bits for any team size
(``fusedgrad.team``: torch's OpenMP team, sized by ``torch.set_num_threads``).
"""
from __future__ import annotations

import contextlib
import itertools
import math

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ... import te_defs
from ...te_defs import _lstm_layer as L
from ...te_defs import _tir
from ...te_defs._tir import loop, store
from .. import tir_api
from .. import ScheduleRule
from . import machine

G = len(L.GATES)  # gate blocks of W_hh and of the gates

TEAM = "pragma_parallel_launch_point"
BARRIER = "pragma_parallel_barrier_when_finish"
STRIDE = "pragma_parallel_stride_pattern"


# TVM keeps a CPU buffer of constant size on the stack only below this many bytes (its runtime's
# kMaxStackAlloca); a larger one becomes a TVMBackendAllocWorkspace call where it is allocated
STACK_ALLOCA_BYTES = 1024


class _Registers:
    """A register tile or scratch of constant shape ``lead + (width,)`` float32: one stack buffer of
    ``width`` values per index of ``lead`` (scope ``global`` makes each a stack slot LLVM keeps in
    registers; scope ``local`` would be a TVMBackendAllocWorkspace call per chunk and step).  Split
    so that no buffer reaches TVM's stack limit at any vector width and row count (a [ROWS, 4, S]
    tile is 1024 bytes at 4 rows of 16 lanes): ``tile[i, j, s]`` reads, ``tile.put((i, j, s), v)``
    writes, the leading indices Python ints (the loops over them unrolled as they are built)."""

    def __init__(self, name: str, lead: tuple, width: int):
        if 4 * width >= STACK_ALLOCA_BYTES:
            raise ValueError(f"{name}: a row of {width} float32 is not below TVM's stack limit of "
                             f"{STACK_ALLOCA_BYTES} bytes")
        self.rows = {idx: _tir.local(f"{name}_{'_'.join(map(str, idx))}" if idx else name, (width,))
                     for idx in itertools.product(*(range(n) for n in lead))}

    def __getitem__(self, idx):
        return self.rows[tuple(idx[:-1])][idx[-1]]

    def put(self, idx, value) -> None:
        store(self.rows[tuple(idx[:-1])], (idx[-1],), value)


def _variant(func) -> dict:
    return {k: bool(v) for k, v in func.attrs["fusedgrad.variant"].items()}


class _Layer(ScheduleRule):
    """UNITS_VECTORS: hidden units per chunk, in float32 vectors of the CPU (``machine.lanes``);
    ROWS: batch rows of the register tile.  Both derived from the CPU's vector registers."""

    KNOBS = {"UNITS_VECTORS": (1, 2, 4), "ROWS": (1, 2, 4, 8)}
    TILE_BLOCKS = G  # gate blocks the register tile spans: its columns are this many x the chunk's units

    def derive(self, name, target):
        if name == "ROWS":  # ROWS x tile_columns accumulators, a row of W, one broadcast
            return machine.register_tile_rows(target, self.tile_columns(target))
        if name == "UNITS_VECTORS":
            return self.balanced_units_vectors(target)
        return None

    def balanced_units_vectors(self, target) -> int:
        """The smallest chunk (more chunks share out better over the team) whose register tile is not
        bound by loads: a step of its inner loop loads the tile's row of W (``vectors``) and
        broadcasts one value per row (``rows``) for rows x vectors FMAs, and a core issues loads and
        FMAs at about the same rate.  Where no chunk balances, the one with the most FMAs a load."""
        def fmas_per_load(units_vectors: int) -> float:
            vectors = self.TILE_BLOCKS * units_vectors
            rows = machine.register_tile_rows(target, vectors * machine.lanes(target))
            return rows * vectors / (rows + vectors)

        choices = self.KNOBS["UNITS_VECTORS"]
        balanced = [uv for uv in choices if fmas_per_load(uv) >= 1]
        return balanced[0] if balanced else max(choices, key=fmas_per_load)

    def tile_columns(self, target) -> int:
        """Columns of the register tile: the chunk's units in each of its TILE_BLOCKS gate blocks."""
        return self.TILE_BLOCKS * self.units(target)

    def units(self, target) -> int:
        return self.knob("UNITS_VECTORS", target) * machine.lanes(target)

    def sweep(self, target) -> int | None:
        """Chunks reversed as a block in the backwards sweeps: ``sweep_block`` of the target's cores."""
        return sweep_block(machine.cores(target))

    def apply(self, func, target):
        if tir_api.op_name(func) != self.op:
            return None
        built = (self.build(_variant(func), target).with_attr("fusedgrad.variant", func.attrs["fusedgrad.variant"])
                 .with_attr(tir_api.WHOLE_ATTR, True))
        for key in (tir_api.OP_ATTR, "global_symbol"):
            built = built.with_attr(key, func.attrs[key])
        return tir_api.schedule(built)


def _pack(ch, S, H, put) -> None:
    """``put(s, unit)`` for the chunk's S units: in vectors where the chunk is whole; in the last,
    partial chunk the lanes past H take unit H - 1 (finite values in lanes that no store reads)."""
    with T.If(ch * S + S <= H):
        with T.Then():
            with loop("s", S, "vectorized") as s:
                put(s, ch * S + s)
        with T.Else():
            with loop("s", S) as s:
                put(s, tirx.min(ch * S + s, H - 1))


@contextlib.contextmanager
def _phase(nch, barrier: bool = True, backwards=None, block: int | None = None):
    """One phase of the team: the chunks dealt out round-robin (the same chunks to the same thread
    in every phase), then a barrier unless ``barrier`` is False.  Where ``backwards`` holds, each
    thread takes its chunks in the opposite order, in blocks of ``block`` (see ``_sweep``; None:
    never reversed)."""
    with contextlib.ExitStack() as stack:
        if barrier:
            stack.enter_context(T.attr(0, BARRIER, 1))
        stack.enter_context(T.attr(0, STRIDE, 1))
        ch = stack.enter_context(loop("ch", nch, "parallel"))
        yield ch if backwards is None or block is None else _tir.let("chunk", _sweep(ch, nch, backwards, block))


INT32_MAX = 2**31 - 1  # chunk counts are int32 (H is)


def sweep_block(cores: int | None) -> int | None:
    """Chunks a backwards sweep reverses as a block on a CPU of ``cores`` cores (None: not known).

    The team deals chunk ch to thread ch mod n (n threads, ``pragma_parallel_stride_pattern``).  A
    backwards sweep over W whole blocks of SW chunks moves chunk q·SW + r to (W-1-q)·SW + r, that is
    by SW·(W-1-2q); for W = 2, q = 0 that is SW, so the thread is kept for every q and W exactly where
    n divides SW.  The team (fusedgrad.team) has any size from 1 to the cores as a rule, so the
    smallest block that keeps every thread's chunks is lcm(1, ..., cores): 1 (one core: the whole
    sweep reversed), 2, 6, 12, 60, 60, 420, 840 ...  None (the sweeps keep the forward order, which
    keeps every thread's chunks for any team) where the cores are not known, so the team size is
    not bounded, or where no int32 chunk count holds two blocks (the reversal would never act).
    A team whose size does not divide the block (more threads than cores) moves chunks between
    threads at the reversed steps: their panels come from another core's cache, and the results
    are the same (the backward's unsynced read of dh is between two phases of the same sweep)."""
    if cores is None:
        return None
    if isinstance(cores, bool) or not isinstance(cores, int):
        raise TypeError(f"num-cores: expected an int, got {type(cores).__name__} {cores!r}")
    if cores < 1:
        raise ValueError(f"num-cores: expected at least 1, got {cores}")
    block = 1
    for n in range(2, cores + 1):
        block = block * n // math.gcd(block, n)
        if 2 * block > INT32_MAX:
            return None
    return block


def _sweep(ch, nch, backwards, block: int):
    """The chunk iteration ``ch`` of a phase takes: ``ch`` itself, or where ``backwards`` holds, the
    whole blocks of ``block`` chunks in the opposite order (each block's chunks in place, so that
    ch mod n is kept for every team size n dividing ``block``; the chunks past the last whole block
    stay).  A step that sweeps the chunks (and their W_hh panels) in the order opposite to the
    step before finds the panels it starts with still in the core's cache."""
    whole = nch - nch % block
    flipped = whole - block - block * (ch // block) + ch % block
    return tirx.if_then_else(tirx.all(backwards, ch < whole), flipped, ch)


class LstmLayerForward(_Layer):
    op = "lstm_layer_forward"

    def build(self, variant, target):
        train, reverse = variant["train"], variant["reverse"]
        S, R, sw = self.units(target), self.knob("ROWS", target), self.sweep(target)
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
                                _pack(ch, S, H, lambda s, j: store(wp, (ch, r, k, s), a["w_hh"][k, j, r]))
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
                        with _phase(nch, backwards=t % 2 == 1, block=sw) as ch:
                            acc = _Registers("acc", (R, G), S)
                            v = _Registers("v", (len(L.SCRATCH),), S)
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
        tile = list(itertools.product(range(rows), range(G)))  # unrolled: the accumulators stay in registers
        for rr, k in tile:
            with loop("s", S, "vectorized") as s:
                acc.put((rr, k, s), T.float32(0))
        with loop("r", H) as r:
            for rr, k in tile:
                with loop("s", S, "vectorized") as s:
                    acc.put((rr, k, s), acc[rr, k, s] + src(b0 + rr, r) * wp[ch, r, k, s])
        for rr in range(rows):
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
                # the pre-activation through the scratch: the target's tanh names its argument
                # several times, and TVM's LowerIntrin takes seconds over copies of a sum of loads
                v.put((k, s), acc[rr, k, s] + a["xw"][tt, b, k, j])
                v.put((k, s), L.activation(k, v[k, s]))

        state, out, final = L.cell_stages(a, v, v.put, tt, b, train)

        for stage in (acts, state, out):
            units(stage)
        with _tir.when(ctx["last"](b)):
            units(final)


class LstmLayerBackward(_Layer):
    op = "lstm_layer_backward"
    # the dh tile spans one gate block: R x UNITS accumulators take R broadcasts and UNITS_VECTORS
    # W_hh loads a j, so one vector a chunk (R + 1 loads for R FMAs) is load-bound and the derived
    # chunk is two vectors wherever the registers hold R >= 2 rows of two
    TILE_BLOCKS = 1

    def build(self, variant, target):
        reverse = variant["reverse"]
        S, R, sw = self.units(target), self.knob("ROWS", target), self.sweep(target)
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
                V = machine.lanes(target)  # rows of dgates_t's vectors along b
                with T.attr(0, TEAM, 1):
                    # this chunk's columns of W_hh (for dh) and its units' initial gradient state
                    with _phase(nch, barrier=False) as ch:
                        with loop("k", G) as k:
                            with loop("j", H) as j:
                                _pack(ch, S, H, lambda s, r: store(wq, (ch, k, j, s), a["w_hh"][k, j, r]))
                        with loop("b", B) as b:
                            with loop("s", S) as s:
                                with _tir.when(ch * S + s < H):
                                    store(a["dh0"], (b, ch * S + s), a["grad_hy"][b, ch * S + s])
                                    store(a["dc0"], (b, ch * S + s), a["grad_cy"][b, ch * S + s])
                    with loop("step", Tn) as step:
                        tt = _tir.let("tt", L.step_index(step, Tn, not reverse))
                        n = _tir.let("n", a["batch_sizes"][tt])
                        # phase B sweeps the chunks backwards at odd steps; phase A takes each chunk on
                        # the thread that computed its dh in the step before (it reads that dh unsynced)
                        with _phase(nch, backwards=tirx.all(step % 2 == 0, step > 0), block=sw) as ch:
                            self._cell_gradients(a, V, ch, n, B, S, H, tt, Tn, reverse)
                        # dh of the chunk's columns
                        with _phase(nch, barrier=False, backwards=step % 2 == 1, block=sw) as ch:
                            self._dh(a, wq, ch, n, R, S, H, tt)
        return ib.get()

    def _cell_gradients(self, a, V, ch, n, B, S, H, tt, Tn, reverse):
        """Phase A of a step: the cell gradient of the chunk's units for the n running rows (dgates,
        the row's new dc), zero gradients for the rest; dgates_t takes the same values.  Rows in
        blocks of V (the CPU's lanes) store theirs to dgates in vectors of units, then the block's
        values go to dgates_t in V-row vectors along b, read back from the dgates just written (in
        L1).  Stored from the cell's vectors of units, dgates_t's values went out one by one (30 %
        of the backward at T=50, B=32, H=256); put into a [G, S, V] stack tile first, the same one
        by one stores went to the tile: phase A took 6.0-6.6 ms of the 16.1-16.8 ms kernel there
        on one Zen 3 core, 4.8-5.0 ms with the read-back (docs/BENCHMARKS.md).  The rows left over
        store theirs one by one."""
        from ...te_defs.lstm_layer_backward import cell_gradient

        def grad(b, s):
            j = ch * S + s
            d, dcx = cell_gradient(a, tt, b, j, Tn, reverse, a["dh0"][b, j], a["dc0"][b, j])
            for k in range(G):
                store(a["dgates"], (tt, b, k, j), d[k])
            store(a["dc0"], (b, j), dcx)

        def transposed(k, b, s):
            store(a["dgates_t"], (k, ch * S + s, tt, b), a["dgates"][tt, b, k, ch * S + s])

        def zero(b, s):
            for k in range(G):
                store(a["dgates"], (tt, b, k, ch * S + s), T.float32(0))
                store(a["dgates_t"], (k, ch * S + s, tt, b), T.float32(0))

        with loop("bo", n // V) as bo:
            with loop("bl", V) as bl:
                self._columns(ch, S, H, lambda s: grad(bo * V + bl, s))
            with loop("k", G) as k:
                with loop("s", S) as s:
                    with _tir.when(ch * S + s < H):
                        with loop("bl", V, "vectorized") as bl:
                            transposed(k, bo * V + bl, s)
        with loop("b", n % V, start=n - n % V) as b:
            self._columns(ch, S, H, lambda s: grad(b, s))
            with loop("k", G) as k:
                self._columns(ch, S, H, lambda s: transposed(k, b, s))
        with loop("b", B - n, start=n) as b:  # rows not running: zero gradients
            self._columns(ch, S, H, lambda s: zero(b, s))

    def _dh(self, a, wq, ch, n, R, S, H, tt):
        """dh = dgates·W_hh for the n running rows over the chunk's columns, summed as the definition
        does: per gate block over increasing j, the blocks added i, f, g, o.  Rows in blocks of R take
        one gate block at a time (R x S accumulators against one W_hh vector row and R broadcasts
        per j) and add its partial sums into dh0 in block order (dh0 holds the running total: phase A
        of this step has read it, and only this chunk's thread reads it before the next step); the
        rows left over take all four blocks at once, one row at a time (4 independent sums)."""
        acc = _Registers("acc", (R,), S)
        with loop("k", G) as k:
            with loop("bo", n // R) as bo:
                b0 = bo * R
                for rr in range(R):
                    with loop("s", S, "vectorized") as s:
                        acc.put((rr, s), T.float32(0))
                with loop("j", H) as j:
                    for rr in range(R):
                        with loop("s", S, "vectorized") as s:
                            acc.put((rr, s), acc[rr, s] + a["dgates"][tt, b0 + rr, k, j] * wq[ch, k, j, s])

                def add(rr, s):
                    dh = a["dh0"][b0 + rr, ch * S + s]
                    store(a["dh0"], (b0 + rr, ch * S + s), tirx.if_then_else(k == 0, acc[rr, s], dh + acc[rr, s]))

                for rr in range(R):
                    self._columns(ch, S, H, lambda s, rr=rr: add(rr, s))
        one = _Registers("acc1", (G,), S)
        with loop("b", n % R, start=n - n % R) as b:
            self._row(a, wq, one, ch, b, S, H, tt)

    @staticmethod
    def _columns(ch, S, H, body):
        """``body(s)`` over the chunk's units: in vectors, or one by one in the last, partial chunk."""
        with T.If(ch * S + S <= H):
            with T.Then():
                with loop("s", S, "vectorized") as s:
                    body(s)
            with T.Else():
                with loop("s", S) as s:
                    with _tir.when(ch * S + s < H):
                        body(s)

    def _row(self, a, wq, acc, ch, b, S, H, tt):
        """dh of row b over the chunk's columns: one partial sum per gate block in registers
        (increasing j), then added over the blocks in order, as the definition sums."""
        for k in range(G):
            with loop("s", S, "vectorized") as s:
                acc.put((k, s), T.float32(0))
        with loop("j", H) as j:
            for k in range(G):
                with loop("s", S, "vectorized") as s:
                    acc.put((k, s), acc[k, s] + a["dgates"][tt, b, k, j] * wq[ch, k, j, s])

        def total(s):  # the gate blocks' partial sums added i, f, g, o
            value = acc[0, s]
            for k in range(1, G):
                value = value + acc[k, s]
            store(a["dh0"], (b, ch * S + s), value)

        self._columns(ch, S, H, total)


RULES = (LstmLayerForward(), LstmLayerBackward())
