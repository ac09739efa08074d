"""The tensor-core GEMM on CUDA: PTX ``mma.sync`` fed by ``ldmatrix`` from multi-stage ``cp.async`` tiles.

C = A·B (+ bias) (+ addend), float32, with M, N, K symbolic.  The iteration domain is padded to whole block
tiles (``pad_einsum``: loads past M or K read zero, stores past M or N are skipped), so every tile is whole
fragments (16 x 16 x 16; 16 x 16 x 8 for TF32):

- a block computes a BM x BN tile of C with WARPS warps (WY x WX, WY = 2); each warp holds its
  (BM / WY) x (BN / WX) accumulators (float32) in registers, as PTX's mma fragments;
- the K loop runs in KC-deep chunks through a STAGES-deep ring of A [BM, KC] and B [KC, BN] tiles in
  dynamic shared memory (``shared.dyn``), TVM's software pipelining issuing the copies of chunk
  k + STAGES - 1 while chunk k is computed: each thread copies 16 bytes at a time with ``cp.async``
  (one commit group a chunk; before computing chunk k a thread waits until at most STAGES - 1 groups,
  chunks k + 1 .., are in flight), consecutive threads consecutive addresses;
- each warp loads its fragments from the tiles with ``ldmatrix`` (``.trans`` for B, row-major [K, N])
  and issues ``mma.sync.m16n8k16`` (float16, bfloat16) per fragment pair; the 16-bit tiles are XOR
  swizzled (TVM's ``permuted_layout``: the 16-byte chunk c of row r is stored at chunk c ^ (r mod 8),
  or c ^ ((r mod 8) / 2) for 64-byte rows), so the 8 row addresses of one ldmatrix phase and the 8
  stores of a cp.async phase fall in distinct 16-byte bank groups;
- after the last chunk each warp stores its accumulators to shared memory (the same dynamic shared
  memory, its float32 [BM, BN] tile neither swizzled nor padded) and its threads write them to C,
  adding the bias and addend there.

float16 and bfloat16 run ``schedules/cuda/mma_16bit.py``'s intrinsics (TVM's float16 ones, written for
both dtypes); float32 is TF32 through ``schedules/cuda/mma_tf32.py``: the definition's rounding to TF32
is inlined into the product and done where the fragments load from the tiles (its tiles are copies,
through cp.async as the 16-bit ones), whose rows are padded by 16 bytes instead of swizzled (no
``ldmatrix``, whose 16-bit rows B's [K, N] float32 tile cannot be read through, and TVM's permuted
layout counts 8-element chunks, 32 bytes of float32).

Where K or N is not a multiple of 16 bytes of elements, or A or B not 16-byte aligned, a second schedule
of the same tiles copies element by element (plain loads; chosen at every call on the host).

The sum over K runs chunk after chunk in increasing k, each fragment product in the tensor core's own
fixed order: no split-K, no atomics, the same bits on every run.  On the host (``emulate_on_host``) the
fragments are local buffers and nothing is tensorized or pipelined: the same tiles, padding and loop
nest run as scalar code.
"""
from __future__ import annotations

import collections
import itertools
import re

from .. import ScheduleRule, block_names, tir_api
from ...targets.cuda import (BANK_BYTES, REGISTERS_PER_BLOCK, REGISTERS_PER_THREAD, SHARED_BANKS, compute_capability,
                             optin_shared_bytes)
from . import mma_16bit, mma_tf32
from ._util import bind, on_gpu, vector_conditions, vector_lanes, warp_size

SM80_ONLY = ("bfloat16", "float32")  # bfloat16 mma and TF32 mma came with sm_80
FRAGMENT = 16  # fragment rows and columns (m16 x n16: two n8 instructions)
ACC_BYTES = 4  # the float32 accumulators and the staged C tile
WY = 2  # warps along M; WARPS / WY along N
SWIZZLED_ROW_BYTES = 64  # the shortest tile row TVM's permuted layout swizzles (32 16-bit elements)
# the hand choices of the tile (STAGES and WARPS are derived from the machine, ``derive``)
BM = BN = 128
KC = 32


class Matmul(ScheduleRule):
    """BM x BN block tiles of WARPS warps, KC-deep chunks through STAGES shared-memory stages."""

    op = "matmul"
    KNOBS = {"BM": (64, 128, 256), "BN": (64, 128, 256), "KC": (16, 32, 64), "STAGES": (2, 3, 4, 5),
             "WARPS": (2, 4, 8)}

    def derive(self, name, target):
        if name == "WARPS":  # the fewest warps whose accumulators take at most half a thread's registers,
            # as many as a block's registers allow at the most a thread may have
            most = REGISTERS_PER_BLOCK // (REGISTERS_PER_THREAD * warp_size(target))
            fits = [w for w in self.KNOBS["WARPS"] if w <= most and self.knob("BM", target) * self.knob("BN", target)
                    <= w * warp_size(target) * REGISTERS_PER_THREAD // 2]
            return min(fits, default=max(w for w in self.KNOBS["WARPS"] if w <= most))
        if name == "STAGES":  # as many stages as the opt-in shared memory holds (float32's padded tiles)
            tiles = [self.knob(k, target) for k in ("BM", "BN", "KC")]
            fits = [s for s in self.KNOBS["STAGES"] if _shared_bytes(*tiles, s, "float32", target) <= self.budget(target)]
            return max(fits, default=min(self.KNOBS["STAGES"]))
        return None

    def space(self, target=None) -> dict:
        """KNOBS narrowed until every combination is a valid schedule on the machine (``shape`` for
        float32 and float16): of the values other than the hand choices, the one in the most
        invalid combinations dropped first."""
        space, hand = {k: list(v) for k, v in self.KNOBS.items()}, self.defaults(target)
        while True:
            bad = []
            for values in itertools.product(*space.values()):
                try:
                    for dtype in ("float32", "float16"):  # the largest tiles, the 16-bit rows' length
                        self.tuned(dict(zip(space, values))).shape(target, dtype)
                except ValueError:
                    bad.append(dict(zip(space, values)))
            if not bad:
                return {k: tuple(v) for k, v in space.items()}
            counts = collections.Counter((k, v) for point in bad for k, v in point.items() if v != hand[k])
            if not counts:
                raise ValueError(f"Matmul: the hand choices {hand} are no valid schedule on this machine")
            (knob, value), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0][1]))
            space[knob].remove(value)

    def budget(self, target) -> int:
        """Shared bytes a block's tiles may take: the opt-in maximum (static + dynamic) of every arch built."""
        return optin_shared_bytes()

    def apply(self, func, target):
        """16-byte cp.async copies where A's and B's rows and addresses allow them, else element copies
        (``tir_api.choose``, at every call).  In the first schedule the padding's tests against K and N
        read ``K // lanes * lanes`` (equal there), so TVM sees them the same for a whole vector."""
        if tir_api.op_name(func) != self.op:
            return None
        lanes = vector_lanes(target, tir_api.buffer_layouts(func)["a"][0])
        scheduled = []
        for width in (None, 1):
            sch = tir_api.schedule(func)
            self.schedule(sch, target, width)
            scheduled.append(sch.mod["main"])
        fast = tir_api.with_whole_bounds(scheduled[0], ("K", "N"), lanes)
        return tir_api.schedule(tir_api.choose([(fast, vector_conditions(func, lanes, ("K", "N"), ("a", "b"))),
                                                (scheduled[1], None)]))

    def shape(self, target, dtype: str):
        """(BM, BN, KC, STAGES, WY, WX) checked: whole fragments a warp, the stages within the budget."""
        bm, bn, kc, stages, warps = (self.knob(k, target) for k in ("BM", "BN", "KC", "STAGES", "WARPS"))
        wx = warps // WY
        # KC: whole fragments; 16-bit rows of 64 bytes or more, whose chunks TVM's permuted layout swizzles
        fk = mma_tf32.K if dtype == "float32" else max(FRAGMENT, SWIZZLED_ROW_BYTES * 8 // _bits(dtype))
        if warps % WY or bm % (WY * FRAGMENT) or bn % (wx * FRAGMENT) or kc % fk:
            raise ValueError(f"Matmul: expected BM a multiple of {WY * FRAGMENT}, BN of {wx * FRAGMENT} "
                             f"({warps} warps) and KC of {fk}, got BM={bm}, BN={bn}, KC={kc}")
        if bm * bn // (warps * warp_size(target)) >= REGISTERS_PER_THREAD:
            raise ValueError(f"Matmul: a {bm}x{bn} tile's float32 accumulators take {bm * bn // (warps * warp_size(target))} "
                             f"registers a thread with {warps} warps, >= {REGISTERS_PER_THREAD}")
        need = _shared_bytes(bm, bn, kc, stages, dtype, target)
        if need > self.budget(target):
            raise ValueError(f"Matmul: {stages} stages of {bm}x{kc} + {kc}x{bn} {dtype} tiles take {need} bytes "
                             f"of shared memory > {self.budget(target)} (the opt-in maximum)")
        return bm, bn, kc, stages, WY, wx

    def schedule(self, sch, target, lanes: int | None = None) -> None:
        """``lanes``: elements a thread copies into the tiles at a time (None: 16 bytes of them, with
        ``cp.async``; 1: element by element, plain loads)."""
        gpu = on_gpu(target)
        dtype = str(sch.get(sch.get_sblock("acc")).reads[0].source.dtype)  # a's (a_tf32's: float32)
        tf32 = dtype == "float32"
        whole = vector_lanes(target, _bits(dtype))
        lanes = whole if lanes is None else lanes
        arch = str(target.attrs.get("arch", "")) if gpu else ""
        if dtype in SM80_ONLY and arch and compute_capability(arch) < 80:
            raise ValueError(f"--arch / FUSEDGRAD_CUDA_ARCH: the {dtype} tensor-core GEMM needs sm_80 or newer "
                             f"({'TF32' if tf32 else dtype} mma), got {arch}")
        BM_, BN_, KC_, stages, wy, wx = self.shape(target, dtype)
        FK = mma_tf32.K if tf32 else FRAGMENT
        warp = warp_size(target)
        rounded = ("a_tf32", "b_tf32") if tf32 else ()  # the definition's TF32 rounding stages
        acc = sch.get_sblock("acc")
        for name in rounded:  # TF32: rounded in the product (its fragments' loads round), A and B padded
            sch.compute_inline(sch.get_sblock(name))
        # whole tiles: padded reads of A and B (zero past M, K, N), the unpadded write of C
        sch.pad_einsum(acc, [BM_, BN_, KC_])
        present = set(block_names(sch))  # no padding blocks where a static shape is whole tiles (tuning)
        inlined = [f"{x}_pad" for x in ("a", "b") if f"{x}_pad" in present]
        m, n, k = sch.get_loops(acc)
        m, mi = sch.split(m, [None, FRAGMENT])
        n, ni = sch.split(n, [None, FRAGMENT])
        k, ki = sch.split(k, [None, FK])
        sch.reorder(m, n, k, mi, ni, ki)
        fragment = sch.blockize(mi)  # one fragment product: what the mma intrinsic does
        mo, mw, mf = sch.split(m, [None, wy, BM_ // (wy * FRAGMENT)])
        no, nw, nf = sch.split(n, [None, wx, BN_ // (wx * FRAGMENT)])
        ko, kf = sch.split(k, [None, KC_ // FK])
        sch.reorder(mo, no, mw, nw, ko, kf, mf, nf)
        bind(sch, mo, "blockIdx.y", target)
        bind(sch, no, "blockIdx.x", target)
        warps = sch.fuse(mw, nw)
        bind(sch, warps, "threadIdx.y", target)
        # per K chunk: A and B tiles in shared memory, copied by all the block's threads, `lanes` at a time
        tiles = []
        for idx in (0, 1):
            tile = sch.cache_read(fragment, idx, "shared.dyn" if gpu else "shared")
            sch.compute_at(tile, ko)
            _, ty, tx, vec = sch.split(sch.fuse(*sch.get_loops(tile)[-2:]), [None, wy * wx, warp, lanes])
            bind(sch, ty, "threadIdx.y", target)
            bind(sch, tx, "threadIdx.x", target)
            if gpu:
                sch.vectorize(vec)
            if tf32:  # rows a 16-byte chunk apart in the banks (no swizzle for float32: the module's doc)
                sch.storage_align(tile, 0, axis=-2, factor=SHARED_BANKS * BANK_BYTES // ACC_BYTES,
                                  offset=_pad(target, dtype))
            tiles.append(tile)
        for name in inlined:  # the padding, where the tiles load
            sch.compute_inline(sch.get_sblock(name))
        # each warp's fragments: loaded from the shared tiles, accumulated in registers
        frag_a = sch.cache_read(fragment, 0, "warp" if gpu else "local")
        frag_b = sch.cache_read(fragment, 1, "warp" if gpu else "local")
        sch.compute_at(frag_a, kf)
        sch.compute_at(frag_b, kf)
        out_tile = sch.cache_write(fragment, 0, "shared.dyn" if gpu else "shared")
        frag_c = sch.cache_write(fragment, 0, "warp" if gpu else "local")
        sch.reverse_compute_at(frag_c, warps)
        sch.reverse_compute_at(out_tile, warps)
        # C: the warp's threads write its tile (+ bias, + addend), skipping rows/columns past M, N
        for name in ("acc_pad", "c"):
            if name in present:
                sch.reverse_compute_inline(sch.get_sblock(name))
        _, lane = sch.split(sch.fuse(*sch.get_loops(out_tile)[-2:]), [None, warp])
        bind(sch, lane, "threadIdx.x", target)
        init = sch.decompose_reduction(fragment, ko)
        if not gpu:
            return
        names = _intrinsics(dtype)
        loads = []
        for blk, name, (fr, fc), side in ((frag_a, "load_a", (FRAGMENT, FK), "write"),
                                          (frag_b, "load_b", (FK, FRAGMENT), "write"),
                                          (frag_c, "store", (FRAGMENT, FRAGMENT), "read")):
            sch.transform_layout(blk, (side, 0), _fragment_layout(fr, fc, names["index"][name]))
            rows, cols = sch.get_loops(blk)[-2:]
            ro, ri = sch.split(rows, [None, fr])
            co, ci = sch.split(cols, [None, fc])
            sch.reorder(ro, co, ri, ci)
            sch.tensorize(ri, names[name])
            loads += sch.get_child_blocks(co) if name != "store" else []
        sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], names["fill"])
        sch.tensorize(sch.get_loops(sch.get_sblock("acc"))[-3], names["compute"])
        if not tf32:  # the XOR swizzle of 16-byte chunks, on the tiles' stores and ldmatrix's rows
            for blk in tiles + loads:
                sch.annotate(blk, "permuted_layout", 1)
        # the pipeline over K chunks: [copy A, copy B] in stage 0, [load fragments, mma] STAGES - 1 later
        sch.annotate(ko, "software_pipeline_stage", [0, 0, stages - 1])
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2])
        if lanes == whole:  # the copies: cp.async
            sch.annotate(ko, "software_pipeline_async_stages", [0])


def _intrinsics(dtype: str) -> dict:
    """The fragment intrinsics' names for ``dtype``, and under "index" each fragment's (row, column) ->
    (lane, register) map: load_a, load_b, compute, fill, store."""
    if dtype == "float32":
        names = mma_tf32.intrinsics()
        return {**names, "index": {"load_a": mma_tf32.a_index, "load_b": mma_tf32.b_index,
                                   "store": mma_tf32.c_index}}
    return mma_16bit.intrinsics(dtype)


def _bits(dtype: str) -> int:
    return int(re.sub(r"^\D+", "", dtype))  # float16 -> 16


def _pad(target, dtype: str) -> int:
    """Elements a tile row is padded by: one 16-byte chunk for float32 (TF32), none for the swizzled 16-bit."""
    return vector_lanes(target, ACC_BYTES * 8) if dtype == "float32" else 0


def _shared_bytes(bm, bn, kc, stages, dtype, target) -> int:
    """Shared bytes a block may take: the STAGES A tiles (padded rows), then the STAGES B tiles or the C
    tile staged after them, the larger.  TVM merges the dynamic buffers whose lifetimes do not overlap,
    but not always all of them: TF32 at the shipped 128 x 128 x 32, 4 stages, gets 141312 bytes (A's ring
    and B's, C inside them), at BN = 256, 3 stages, 186368 (A's ring, then C over B's ring: the sum of the
    rings, 155136, would not do); float16's 65536 at the shipped tiles is below this bound (A and B and C
    all in one place).  A bound that admits no point TVM then allocates past the opt-in (the build's check,
    ``lowering.cuda.device_kernels``, would refuse it)."""
    item, pad = _bits(dtype) // 8, _pad(target, dtype)
    return stages * bm * (kc + pad) * item + max(stages * kc * (bn + pad) * item, bm * bn * ACC_BYTES)


def _fragment_layout(rows: int, cols: int, where):
    """(i, j) of a fragment buffer -> (tile row, tile column, lane, register) by ``where`` within a tile."""
    return lambda i, j: (i // rows, j // cols, *where(i % rows, j % cols))
