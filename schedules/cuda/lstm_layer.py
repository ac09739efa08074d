"""The LSTM layer recurrence on CUDA: one persistent kernel per layer and direction.

``lstm_layer_forward`` and ``lstm_layer_backward`` are TIR definitions (a plain loop nest over all
time steps); these rules build each variant's GPU loop nest around the definitions' own expressions
(``te_defs._lstm_layer``: the cell, its gradient, the order of every sum, the state a step starts
from), as the CPU rule (``schedules/llvm/lstm_layer.py``) does for its thread team.  A kernel's
tensors are in the call's storage dtype (float32, float16, bfloat16), its arithmetic float32 (the loads
widened, each store rounded once), as the definitions say.

- One launch runs every step.  The hidden units are cut into chunks of UNITS; block ``bx`` owns
  chunk ``bx`` (the grid is ceil(H / UNITS) blocks) for the whole launch: its units' W_hh rows (all
  four gates, all H columns; in the backward the matching columns, for dh = dgates·W_hh) are copied
  once into shared memory, and its units' state (c in ``cy``; dh, dc in ``dh0``, ``dc0``) stays with it.
  The slice is the launch's dynamic shared memory (``shared.dyn``), 4·UNITS·H values in the storage
  dtype, which TVM's host code computes from H; where it is more than the opt-in shared memory a block
  has on every architecture built (``targets.cuda.optin_shared_bytes``: 163 KB with sm_80 and sm_90, so
  float32 to H = 2608 at UNITS 4), the launch asks for one value and the same sums read W_hh from
  global memory instead.  Every block must be resident at once with that shared memory
  (``lowering.cuda.check_persistent_launch``, which the full LSTM calls before a launch).  The
  entry point of the schedule flag ``w_hh_global`` (``OpDef.target_flags``: CUDA only) keeps no slice
  (no shared memory: its launch asks for none) and its sums read W_hh from global memory at every H,
  for the grids whose slices on chip the GPU cannot hold at once; the full LSTM picks it per launch.
- The entry point of the flag ``tensor_cores`` runs each step's recurrent sums on the tensor cores
  (``lstm_mma``: m16n8 tiles of mma.sync over the batch's rows padded to 16, one warp a tile's whole
  sum), the accumulators through a small static shared tile, then the cell (forward) or the gate
  blocks' sum (backward) as below from it; its slice holds W_hh rounded as the tensor cores take it.
  The full LSTM launches it where its GEMMs run on the tensor cores, B >= 16 and the grid is resident.
- A block's threads are ROW_SLOTS x UNITS: thread (br, u) owns unit u of the chunk for the rows
  br, br + ROW_SLOTS, ... of the batch, so a warp's shared-memory reads of W_hh are consecutive units
  (no bank conflicts) and the threads of one unit read the same h (a broadcast).
- Forward, per step: each owned (row, unit)'s four gate sums (increasing r, one thread each:
  the definition's order; the thread issues the global loads of CHUNK consecutive terms before it
  adds them, so they wait out L2's latency together), the cell on them, the stores, then a grid-wide barrier, so the next step
  reads every unit's h.  h_{t-1} is read from h of the previous time index (or h0 where the row did
  not run there), never from the running ``hy`` that other blocks write in the same step.
- Backward, per step: phase A, the cell gradient of the owned units (dgates, dgates_t, dc); a
  grid-wide barrier (phase B reads every unit's dgates); phase B, the owned columns of
  dh = dgates·W_hh (per gate block over increasing j, the blocks added i, f, g, o).  A thread's phase
  A reads only the dh its own phase B wrote, so one barrier per step suffices.

The grid barrier is ``fg_grid_sync(blocks)``, a device function the CUDA build puts in front of the
generated source (``lowering.cuda.GRID_SYNC``): a counter that returns to zero at every barrier
and a generation that only grows, so it is correct across repeated launches without a reset.  Every
block must be resident at once: ``lowering.cuda.persistent_grid`` checks the grid against the
device's SMs and the kernel's occupancy (its launch's dynamic shared memory included) before a launch
and refuses one that is not.

In host emulation (a CPU target: the tests; CI has no GPU) the block and thread bindings are loops
and the grid barrier is the end of a phase: every phase of a step runs for every block and thread
before the next phase starts, with the same expressions in the same order, and each block's shared
W_hh slice is its own row of a buffer.  A unit's arithmetic does not depend on which block or thread
runs it, so the results are the same bits for any UNITS and ROW_SLOTS (any grid size).
"""
from __future__ import annotations

import contextlib
import math

from tvm import DataType, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ... import te_defs
from ...te_defs import _lstm_layer as L
from ...te_defs import _tir
from ...te_defs._tir import loop, store
from .. import ScheduleRule, tir_api
from . import lstm_mma
from ._util import cuda_attr, on_gpu, warp_size
from ...targets.cuda import optin_shared_bytes

G = len(L.GATES)
C, TANHC = L.SCRATCH.index("c"), L.SCRATCH.index("tanhc")
GRID_SYNC = "fg_grid_sync"  # the grid barrier's device function (lowering.cuda.GRID_SYNC defines it)


def _max_threads(target) -> int:
    return cuda_attr(target, "max_num_threads")


class _Grid:
    """Where the block and thread indices come from: launch bindings on the GPU, loops on the host.

    ``phase(body)`` runs ``body(bx, tx)`` for every block and thread of the step's phase: on the GPU
    once per thread (the indices are bound for the whole launch), on the host as loops over the
    blocks and threads.  ``grid_sync()`` is the barrier between phases: a call on the GPU, nothing
    on the host (the phase's loops have finished)."""

    def __init__(self, target, blocks, threads, min_blocks=None):
        self.gpu = on_gpu(target)
        self.blocks, self.threads, self.min_blocks = blocks, threads, min_blocks
        self.bx = self.tx = None

    @contextlib.contextmanager
    def launch(self):
        if not self.gpu:
            yield
            return
        with T.launch_thread("blockIdx.x", self.blocks) as bx:
            with T.launch_thread("threadIdx.x", self.threads) as tx:
                self.bx, self.tx = bx, tx
                if self.min_blocks is None:
                    yield
                    return
                # __launch_bounds__(threads, min_blocks): how ptxas weighs registers against occupancy
                with T.attr(0, "tirx.launch_bounds_min_blocks_per_sm", self.min_blocks):
                    yield

    def phase(self, body) -> None:
        if self.gpu:
            body(self.bx, self.tx)
            return
        with loop("bx", self.blocks) as bx:
            with loop("tx", self.threads) as tx:
                body(bx, tx)

    def block_sync(self) -> None:
        if self.gpu:
            T.evaluate(T.tvm_storage_sync("shared"))

    def grid_sync(self) -> None:
        if self.gpu:
            T.evaluate(T.call_extern("int32", GRID_SYNC, self.blocks))

    def scratch(self, name, shape, dtype=L.ACC):
        """A thread's small scratch: registers on the GPU, a stack buffer on the host."""
        return _tir.local(name, shape, dtype, scope="local" if self.gpu else "global")


# terms of a step's sums whose global loads a thread issues together before it adds them (in the same
# order as one at a time, so the same bits): each step's sums read h (forward) or dgates (backward)
# that other blocks wrote the step before, from L2.  The hand choice (tuned as the knob CHUNK), from
# an H200 (docs/gpu-check-h200-2026-12-04.md, T=50, B=32, H=256, 8 units a block): forward 0.66 ms
# one at a time, 0.75 at 8, 0.59 at 16, 0.53 at 32; backward 1.04, 1.11, 1.02, 0.86
CHUNK = 32
# the same in the w_hh_global entry (no slice: a term's W_hh loads are global too).  Chosen for the
# registers ptxas gives its kernels, which bound how many blocks an SM holds (so the largest H a grid
# can be resident at): at 32, 168-254 a thread forward on sm_80 (2-3 blocks a SM); at 16, 72-128; at 8,
# 64 (sm_80) and 56 (sm_90) in every entry, forward and backward, no spills; at 4, spills on sm_80.
# Its speed against 32 is not measured (no GPU in that session)
GLOBAL_CHUNK = 8


def _chunked_sums(grid, extent, chunk: int, load, add) -> None:
    """``add(r, load(r))`` for r = 0 .. extent-1 in increasing r, the loads ``chunk`` at a time:
    ``load(r)`` gives a list of values (global loads), kept in registers until their ``add``."""
    if chunk < 1:
        raise ValueError(f"CHUNK: expected a positive int, got {chunk}")
    if chunk == 1:
        with loop("r", extent) as r:
            add(r, load(r))
        return
    width = len(load(0))
    held = grid.scratch("held", (chunk * width,))
    with loop("r_outer", extent // chunk) as ro:
        for i in range(chunk):
            for w, value in enumerate(load(ro * chunk + i)):
                store(held, (i * width + w,), value)
        for i in range(chunk):
            add(ro * chunk + i, [held[i * width + w] for w in range(width)])
    with loop("r_tail", extent - (extent // chunk) * chunk) as rt:
        r = (extent // chunk) * chunk + rt
        add(r, load(r))


def _variant(func) -> dict:
    return {k: bool(v) for k, v in func.attrs["fusedgrad.variant"].items()}


class _Layer(ScheduleRule):
    """UNITS: hidden units a block owns; WARPS: warps a block runs (ROW_SLOTS = threads / UNITS rows
    of the batch at a time).  Both derived from the target: UNITS = warp / 8 (a row slot's 4 gates x
    UNITS units are half a warp's lanes, 16 bytes of W_hh's shared rows per gate in float32), so that the grid
    (ceil(H / UNITS) blocks) spreads a layer over more SMs; a block of four warps. On an H200 4 units
    a block against the warp / 4 = 8 before (with CHUNK 32): forward 0.44 against 0.53 ms, backward
    0.79 against 0.86 at T=50, B=32, H=256, the same at B=1 (docs/gpu-check-h200-2026-12-04.md)."""

    KNOBS = {"UNITS": (4, 8, 16, 32), "WARPS": (1, 2, 4, 8), "CHUNK": (1, 4, 8, 16, 32),
             "GLOBAL_CHUNK": (1, 4, 8, 16, 32)}

    def derive(self, name, target):
        if name == "UNITS":
            return warp_size(target) // (2 * G)
        if name == "WARPS":
            return min(4, _max_threads(target) // warp_size(target))
        return None

    def shape(self, target) -> tuple[int, int, int]:
        """(units a block, threads a block, row slots a block), checked against the target."""
        units, threads = self.knob("UNITS", target), self.knob("WARPS", target) * warp_size(target)
        if threads > _max_threads(target) or threads % units:
            raise ValueError(f"{type(self).__name__}: expected a block of at most {_max_threads(target)} threads "
                             f"that UNITS={units} divides, got {threads}")
        return units, threads, threads // units

    def shared_capacity(self, target, dtype: str = L.DTYPE, tensor_cores: bool = False) -> int:
        """Values of W_hh's slice (in ``dtype``, the storage dtype it is kept in) a block may keep in
        shared memory: the opt-in shared memory a block has on every architecture built
        (``targets.cuda.optin_shared_bytes``), all of it the launch's dynamic shared memory (the kernels
        declare no static shared memory: ptxas counts none, which the nvcc test checks), but for the
        ``tensor_cores`` entry's static tile of accumulators (``lstm_mma.tile_shape``)."""
        reserved = 4 * math.prod(lstm_mma.tile_shape(self, target)[2]) if tensor_cores else 0
        return (optin_shared_bytes() - reserved) // (DataType(dtype).bits // 8)

    def dynamic_shared(self, target, dtype: str, w_hh_global: bool = False, tensor_cores: bool = False) -> dict:
        """What a launch's dynamic shared memory is at hidden size H (``lowering.cuda.dynamic_shared_bytes``
        evaluates it; TVM's host code computes the same from H): the block's W_hh slice, ``bytes_per_h``
        x H (4 gates x UNITS units x H values of ``dtype``), up to ``up_to`` bytes (``shared_capacity``),
        else one value, ``else`` bytes (the sums then read W_hh from global memory); none at any H in the
        ``w_hh_global`` entry point."""
        if w_hh_global:
            return {"bytes_per_h": 0, "up_to": 0, "else": 0}
        size = DataType(dtype).bits // 8
        return {"bytes_per_h": G * self.shape(target)[0] * size,
                "up_to": self.shared_capacity(target, dtype, tensor_cores) * size, "else": size}

    def apply(self, func, target):
        if tir_api.op_name(func) != self.op:
            return None
        (dtype,) = {str(p.dtype) for p in func.params if getattr(p, "name", None) == "w_hh"}
        variant = func.attrs["fusedgrad.variant"]
        w_hh_global = L.W_HH_GLOBAL in tir_api.schedule_flags(func)
        tensor_cores = L.TENSOR_CORES in tir_api.schedule_flags(func)
        built = self.build(_variant(func), target, dtype, w_hh_global, tensor_cores).with_attr(
            "fusedgrad.variant", variant)
        built = built.with_attr(tir_api.WHOLE_ATTR, True)  # every buffer allocated at the size it is used
        # the loader's co-residency check finds the grid (ceil(H / units) blocks) and a launch's dynamic
        # shared memory from these, in the manifest
        built = built.with_attr("fusedgrad.grid_units", self.shape(target)[0]).with_attr(
            "fusedgrad.dynamic_shared", self.dynamic_shared(target, dtype, w_hh_global, tensor_cores))
        for key in (tir_api.OP_ATTR, "global_symbol", tir_api.FLAGS_ATTR):
            if func.attrs.get(key) is not None:
                built = built.with_attr(key, func.attrs[key])
        return tir_api.schedule(built)

    def _slice(self, grid, target, H, nch, U, weight, dtype, w_hh_global, tensor_cores=False):
        """The block's W_hh slice in shared memory, in the storage ``dtype`` (one row per block on the
        host): (buffer, fits, index(bx, k, u, x)), None in the ``w_hh_global`` entry (no slice);
        ``weight(k, j, x)`` is the global element the slice holds for gate k of the block's unit j at
        position x (W_hh's column x in the forward, row x in the backward).  On the GPU the buffer is
        ``shared.dyn`` of the slice's size where it fits ``shared_capacity``, else of one value: TVM's
        host code computes that size from H and passes it as the launch's dynamic shared memory (its
        CUDA runtime raises the kernel's limit past 48 KiB)."""
        if w_hh_global:
            return None
        values = G * U * H
        fits = values <= self.shared_capacity(target, dtype, tensor_cores)
        size = tirx.if_then_else(fits, values, 1)
        if grid.gpu:
            wsh = _tir.local("w_shared", (size,), dtype, scope="shared.dyn")
        else:
            wsh = _tir.local("w_shared", (nch * size,), dtype)

        def index(bx, k, u, x):
            flat = (x * G + k) * U + u
            return flat if grid.gpu else bx * size + flat

        def copy(bx, tx):
            # the block's units past H (the last block's) hold zeros, their W_hh index clamped
            threads = grid.threads
            with _tir.when(fits):
                with loop("e", (values + threads - 1) // threads) as e:
                    flat = e * threads + tx
                    u, k, x = flat % U, flat // U % G, flat // (U * G)
                    j = bx * U + u
                    with _tir.when(flat < values):  # the tensor cores' entry keeps W_hh as they take it
                        value = tirx.if_then_else(j < H, weight(k, tirx.min(j, H - 1), x), tirx.const(0, dtype))
                        if tensor_cores:
                            value = lstm_mma.operand(dtype, value, grid.gpu)
                        store(wsh, (index(bx, k, u, x),), value)

        grid.phase(copy)
        grid.block_sync()
        return wsh, _tir.let("fits", fits), index

    def _chunk(self, target, w_hh_global: bool) -> int:
        """Terms a thread loads together: CHUNK, GLOBAL_CHUNK in the ``w_hh_global`` entry."""
        return self.knob("GLOBAL_CHUNK" if w_hh_global else "CHUNK", target)

    @staticmethod
    def w_hh_sums(w_slice, on_chip, from_global) -> None:
        """A step's sums: ``on_chip(buffer, index)`` reading the slice where it holds W_hh, else
        ``from_global()`` (the same sums in the same order); only the latter without a slice."""
        if w_slice is None:
            from_global()
            return
        wsh, fits, index = w_slice
        with T.If(fits):
            with T.Then():
                on_chip(wsh, index)
            with T.Else():
                from_global()

    @staticmethod
    def rows(count, br, slots, start=0):
        """The rows start + br, start + br + slots, ... below start + count a thread takes."""
        return loop("q", tirx.max(count - br + slots - 1, 0) // slots)


class LstmLayerForward(_Layer):
    op = "lstm_layer_forward"

    def build(self, variant, target, dtype=L.DTYPE, w_hh_global=False, tensor_cores=False):
        train, reverse = variant["train"], variant["reverse"]
        U, threads, slots = self.shape(target)
        op = te_defs.get(self.op)
        with IRBuilder() as ib:
            with T.prim_func():
                T.func_name(self.op)
                T.func_attr({"tirx.noalias": True})
                sz = _tir.dims("T", "B", "H")
                a = _tir.params(op, variant, dtype, sz)
                Tn, B, H = sz["T"], sz["B"], sz["H"]
                nch = (H + U - 1) // U
                grid = _Grid(target, nch, threads, lstm_mma.MIN_BLOCKS if tensor_cores else None)
                with grid.launch():
                    w_slice = self._slice(grid, target, H, nch, U, lambda k, j, r: a["w_hh"][k, j, r], dtype,
                                          w_hh_global, tensor_cores)
                    tile = lstm_mma.block_tile(grid, self, target, "pre") if tensor_cores else None

                    def initial(bx, tx):
                        j = bx * U + tx % U
                        with _tir.when(j < H):
                            with self.rows(B, tx // U, slots) as q:
                                b = tx // U + q * slots
                                store(a["hy"], (b, j), a["h0"][b, j])
                                store(a["cy"], (b, j), a["c0"][b, j])

                    grid.phase(initial)
                    with loop("t", Tn) as t:
                        tt = _tir.let("tt", L.step_index(t, Tn, reverse))
                        n = _tir.let("n", a["batch_sizes"][tt])
                        # rows 0 .. m-1 continue from h of the previous time index, m .. n-1 start from h0
                        p = _tir.let("p", tirx.max(tirx.min(L.previous_index(tt, reverse), Tn - 1), 0))
                        m = _tir.let("m", tirx.if_then_else(0 < t, tirx.min(n, a["batch_sizes"][p]), 0))
                        ctx = dict(a=a, w_slice=w_slice, U=U, H=H, B=B, tt=tt, n=n, p=p, m=m, dtype=dtype,
                                   slots=slots, train=train, grid=grid, chunk=self._chunk(target, w_hh_global))
                        if tensor_cores:
                            lstm_mma.forward_passes(self, ctx, target, tile)
                        else:
                            grid.phase(lambda bx, tx: self._step(ctx, bx, tx))
                        grid.phase(lambda bx, tx: self._idle(ctx, bx, tx))
                        grid.grid_sync()
        return ib.get()

    def _step(self, ctx, bx, tx):
        a, U, H, n, slots, grid = (ctx[k] for k in ("a", "U", "H", "n", "slots", "grid"))
        u, br = tx % U, tx // U
        j = bx * U + u
        with _tir.when(j < H):
            with self.rows(n, br, slots) as q:
                b = br + q * slots
                acc = grid.scratch("acc", (G,))
                for k in range(G):
                    store(acc, (k,), T.float32(0))

                def sums(weight):
                    def add(r, h_prev):
                        for k in range(G):
                            store(acc, (k,), acc[k] + h_prev[0] * weight(k, r))
                    _chunked_sums(grid, H, ctx["chunk"], lambda r: [L.wide(self.h_prev(ctx, b, r))], add)

                self.w_hh_sums(ctx["w_slice"], lambda wsh, index: sums(lambda k, r: L.wide(wsh[index(bx, k, u, r)])),
                               lambda: sums(lambda k, r: L.wide(a["w_hh"][k, j, r])))
                self.cell(ctx, b, j, lambda k: acc[k])

    @staticmethod
    def h_prev(ctx, b, r):
        """h_{t-1}[b, r] as stored: h of the previous time index where the row ran there, else h0."""
        a = ctx["a"]
        return tirx.if_then_else(b < ctx["m"], a["h"][ctx["p"], b, r], a["h0"][b, r])

    @staticmethod
    def cell(ctx, b, j, gate_sum):
        """The cell of unit (b, j) from its gates' recurrent sums ``gate_sum(k)``, and its stores."""
        a, tt, grid = ctx["a"], ctx["tt"], ctx["grid"]
        v = grid.scratch("v", (len(L.SCRATCH),))
        for k in range(G):
            store(v, (k,), L.activation(k, gate_sum(k) + L.wide(a["xw"][tt, b, k, j])))
        store(v, (C,), L.cell_state(v[0], v[1], v[2], L.wide(a["cy"][b, j])))
        store(v, (TANHC,), tirx.tanh(v[C]))
        store(a["cy"], (b, j), v[C])
        store(a["hy"], (b, j), v[3] * v[TANHC])
        store(a["h"], (tt, b, j), v[3] * v[TANHC])
        if ctx["train"]:
            for name in ("c",) + L.GATES + ("tanhc",):
                store(a[name], (tt, b, j), v[L.SCRATCH.index(name)])

    def _idle(self, ctx, bx, tx):
        """The rows not running at the step: state kept, outputs zero."""
        a, U, H, B, n, slots = (ctx[k] for k in ("a", "U", "H", "B", "n", "slots"))
        j = bx * U + tx % U
        with _tir.when(j < H):
            with self.rows(B - n, tx // U, slots) as q:
                b = n + tx // U + q * slots
                for name in ("h",) + (("c",) + L.GATES + ("tanhc",) if ctx["train"] else ()):
                    store(a[name], (ctx["tt"], b, j), T.float32(0))


class LstmLayerBackward(_Layer):
    op = "lstm_layer_backward"

    def build(self, variant, target, dtype=L.DTYPE, w_hh_global=False, tensor_cores=False):
        from ...te_defs.lstm_layer_backward import cell_gradient

        reverse = variant["reverse"]
        U, threads, slots = self.shape(target)
        chunk = self._chunk(target, w_hh_global)
        op = te_defs.get(self.op)
        with IRBuilder() as ib:
            with T.prim_func():
                T.func_name(self.op)
                T.func_attr({"tirx.noalias": True})
                sz = _tir.dims("T", "B", "H")
                a = _tir.params(op, variant, dtype, sz)
                Tn, B, H = sz["T"], sz["B"], sz["H"]
                nch = (H + U - 1) // U
                grid = _Grid(target, nch, threads, lstm_mma.MIN_BLOCKS if tensor_cores else None)
                with grid.launch():
                    # the block's columns of W_hh: the slice holds W_hh[k, x, r] for its units r, rows x
                    w_slice = self._slice(grid, target, H, nch, U, lambda k, r, x: a["w_hh"][k, x, r], dtype,
                                          w_hh_global, tensor_cores)
                    tile = lstm_mma.block_tile(grid, self, target, "part") if tensor_cores else None

                    def initial(bx, tx):
                        j = bx * U + tx % U
                        with _tir.when(j < H):
                            with self.rows(B, tx // U, slots) as q:
                                b = tx // U + q * slots
                                store(a["dh0"], (b, j), a["grad_hy"][b, j])
                                store(a["dc0"], (b, j), a["grad_cy"][b, j])

                    grid.phase(initial)
                    with loop("s", Tn) as s:
                        tt = _tir.let("tt", L.step_index(s, Tn, not reverse))
                        n = _tir.let("n", a["batch_sizes"][tt])

                        def cell(bx, tx):
                            j = bx * U + tx % U
                            with _tir.when(j < H):
                                with self.rows(n, tx // U, slots) as q:
                                    b = tx // U + q * slots
                                    d, dcx = cell_gradient(a, tt, b, j, Tn, reverse, a["dh0"][b, j], a["dc0"][b, j])
                                    for k in range(G):
                                        store(a["dgates"], (tt, b, k, j), d[k])
                                        store(a["dgates_t"], (k, j, tt, b), d[k])
                                    store(a["dc0"], (b, j), dcx)
                                with self.rows(B - n, tx // U, slots) as q:  # rows not running: zero gradients
                                    b = n + tx // U + q * slots
                                    for k in range(G):
                                        store(a["dgates"], (tt, b, k, j), T.float32(0))
                                        store(a["dgates_t"], (k, j, tt, b), T.float32(0))

                        def dh(bx, tx):
                            u = tx % U
                            r = bx * U + u
                            with _tir.when(r < H):
                                with self.rows(n, tx // U, slots) as q:
                                    b = tx // U + q * slots
                                    part = grid.scratch("dh_part", (G,))
                                    for k in range(G):
                                        store(part, (k,), T.float32(0))

                                    def sums(weight):
                                        def add(j, dg):
                                            for k in range(G):
                                                store(part, (k,), part[k] + dg[k] * weight(k, j))
                                        _chunked_sums(grid, H, chunk, lambda j: [
                                            L.wide(a["dgates"][tt, b, k, j]) for k in range(G)], add)

                                    self.w_hh_sums(
                                        w_slice, lambda wsh, index: sums(lambda k, j: L.wide(wsh[index(bx, k, u, j)])),
                                        lambda: sums(lambda k, j: L.wide(a["w_hh"][k, j, r])))
                                    store(a["dh0"], (b, r), ((part[0] + part[1]) + part[2]) + part[3])

                        grid.phase(cell)
                        grid.grid_sync()  # phase B reads every unit's dgates of this step
                        if tensor_cores:
                            lstm_mma.backward_passes(self, dict(a=a, U=U, H=H, B=B, n=n, tt=tt, grid=grid, dtype=dtype,
                                                       slots=slots, w_slice=w_slice), target, tile)
                        else:
                            grid.phase(dh)
        return ib.get()


RULES = (LstmLayerForward(), LstmLayerBackward())
