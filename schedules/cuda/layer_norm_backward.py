"""LayerNorm backward on CUDA: two schedules of the definition, chosen per call by the shape.

Row blocks (M a multiple of ROW_BLOCK, D small enough for the column partials to fit in shared
memory; the common case): one kernel reads each row once from memory and writes its dx, and the
dgamma/dbeta column partials are summed in the same walk (the approach of Apex's and QuACK's
fused LayerNorm backward).  Each block takes ROW_BLOCK consecutive rows in order; per row:
rstd, both row sums (below), then one walk that writes dx and adds dy*xhat and dy into the
block's two partial rows, kept in dynamic shared memory (each thread touches only its own
columns).  Then a second kernel sums each column's M/ROW_BLOCK partials with a fixed tree.
Memory traffic is x, dy and dx once (3 M D elements) plus 2 (M/ROW_BLOCK) D float32 partials
written and read back: at ROW_BLOCK 16, 1/12 more than the minimum in float32, 1/6 in float16
(the per-row schedule moves 5 M D elements).

Per row (otherwise): rstd in its own small kernel; a row kernel for dx, one block per row; and a
column kernel that reads x and dy again for the dgamma/dbeta partials over the definition's row
blocks (OpDef.partial_rows, the CPU's; the approach of PyTorch's GammaBetaBackward), then the same
final sum.

Both row walks use one block of LANES x SPLIT threads per row.  The definition's lane partial l
(elements d = c*LANES + l) is split over SPLIT threads (rfactor: thread (l, k) takes c = k,
k + SPLIT, ...), so a warp reads 32 consecutive elements; both row sums are accumulated in one
walk, in registers.  Each lane's SPLIT partials meet in a shared-memory tree, the LANES lane sums
in a warp-shuffle tree: fixed orders, so the same bits every run (not the host's bits: the host
adds in lane order).  No atomics anywhere.  SPLIT, ROW_BLOCK and the definition's partial rows are part
of the summation order, and so is the choice of schedule (a fixed function of M and D).

Where D and x's and dy's row strides are multiples of 4 and x, dy, gamma and dx start on 4-element
boundaries, the row-block schedule's second walk (dx and the partials) moves 4 consecutive elements
per thread and access (16 bytes of float32, 8 of float16; ``_util.compute_lanes``): thread (k, l)
takes d = ((c*SPLIT + k)*LANES + l)*4 + v.  The row sums' walk is the same in both, and each
column's partial still adds its block's rows in order, so the choice changes no sums.

The tests are made on the host at each call (``tir_api.choose``); the row-block schedule splits the
rows without a bounds test (the branch guarantees whole blocks), which is what lets its row sums
synchronise threads: TVM cannot place a barrier under a per-row bounds test.  The shared-memory
bound is the opt-in maximum a block (``targets.cuda.optin_shared_bytes``: the least over the architectures
built, 163 KB for sm_80 and sm_90, so D up to 20608 in one pass) less the reductions' static buffers;
the partial rows are dynamic shared memory sized from D at each launch, and TVM's CUDA runtime opts
the kernel in (cuFuncSetAttribute) where a launch asks for more than 48 KiB.

SPLIT was picked on an H200 (benchmarks/gpu_check.py's side-by-side table): SPLIT 8 with
32-row column partials was fastest at M=4096 D=1024 and within 13% of the best at M=8192
D=4096.  ROW_BLOCK has not been timed on a GPU yet (benchmarks/gpu_check.py's sweep times it
against the per-row schedule, ROW_BLOCK 0).
"""
from .. import ScheduleRule
from ..row_blocks import partial_rows
from ._util import bind, compute_lanes, on_gpu, vector_conditions
from ...targets.cuda import optin_shared_bytes
from ...te_defs.layer_norm_backward import LANES

SPLIT = 8  # threads per lane: one block of LANES x SPLIT threads per row
ROW_BLOCK = 16  # rows per block (and per dgamma/dbeta partial) in the row-block schedule; 0: never used
COLUMNS = 128  # columns per block in the per-row schedule's partial kernel
FINAL_COLUMNS = 32
FINAL_THREADS = 16
ACC_BYTES = 4  # a float32 partial
SHARED_ALIGN = 64  # TVM aligns each buffer it places in dynamic shared memory to 64 bytes
ROW_SUMS = ("sum_dyg", "sum_dyg_xhat")
LANES_BLOCKS = ("sum_dyg_lanes", "sum_dyg_xhat_lanes")
PARTIALS = ("dgamma_acc", "dbeta_acc")
VECTOR_BUFFERS = ("x", "dy", "gamma", "dx")  # what the row-block walk moves in vectors where it can


def max_row_block_d(target) -> int:
    """The largest D the row-block schedule takes: both float32 partial rows, padded to whole
    LANES x SPLIT walks and each aligned to SHARED_ALIGN bytes, beside the row sums' reduction
    buffers, within one block's opt-in shared memory."""
    walk = LANES * SPLIT
    free = optin_shared_bytes() - len(ROW_SUMS) * walk * ACC_BYTES - len(PARTIALS) * SHARED_ALIGN
    return free // (len(PARTIALS) * ACC_BYTES) // walk * walk


class LayerNormBackward(ScheduleRule):
    op = "layer_norm_backward"

    def alternatives(self, func, target):
        per_row = (_per_row, None)
        if not ROW_BLOCK:
            return [per_row]
        whole_blocks = {"multiple_of": {"M": ROW_BLOCK}, "at_most": {"D": max_row_block_d(target)}}
        lanes = compute_lanes(target)
        vectors = vector_conditions(func, lanes, ("D",), VECTOR_BUFFERS)
        vectors["multiple_of"] = {**whole_blocks["multiple_of"], **vectors["multiple_of"]}

        def vector_walk(sch, target):
            _row_blocks(sch, target, lanes)

        return [(vector_walk, {**whole_blocks, **vectors}), (_row_blocks, whole_blocks), per_row]


def _thread_split(sch, d, lanes: int = 1):
    """d = (c*SPLIT + k)*LANES + l -> loops (k, l, c): thread (k, l) walks c, a warp 32 consecutive d.
    With ``lanes`` > 1 (the branch guarantees D a multiple): d = ((c*SPLIT + k)*LANES + l)*lanes + v
    -> loops (k, l, c, v), each thread's v one vector access, a warp 32 consecutive vectors."""
    v = []
    if lanes > 1:
        d, lane = sch.split(d, [None, lanes], disable_predication=True)
        v = [lane]
    dc, dl = sch.split(d, [None, LANES])
    dco, dci = sch.split(dc, [None, SPLIT])
    sch.reorder(dci, dl, dco, *v)
    return (dci, dl, dco, *v)


def _lane_partials(sch):
    """Lane l's partial of each row sum split over SPLIT threads (rfactor), loops (m, k, l, c).  The
    split adds no bounds test: a step past the row adds the definition's own zero (it tests d < D),
    and every thread's walk starts at c = 0, where the partial is zeroed (the row-block schedule
    cannot move that zeroing out of the walk; under a bounds test a thread with nothing to add
    would keep whatever its register held)."""
    rfs = []
    for lanes in LANES_BLOCKS:
        _, _, c = sch.get_loops(sch.get_sblock(lanes))
        rf = sch.rfactor(sch.split(c, [None, SPLIT], disable_predication=True)[1], 2)
        _, l, c0, k = sch.get_loops(rf)
        sch.reorder(k, l, c0)
        rfs.append(rf)
    return rfs


def _bind_row_sums(sch, rfs, target, k_first: bool):
    """Both row sums' walks merged into one, on threads (k, l); the lane trees on the same threads
    (``k_first``: the lane blocks' loops are (k, l), as compute_at leaves them, else (l, k))."""
    rk, rl, _ = (sch.merge(a, b) for a, b in zip(*(sch.get_loops(rf)[-3:] for rf in rfs)))
    bind(sch, rk, "threadIdx.y", target)
    bind(sch, rl, "threadIdx.x", target)
    for lanes in LANES_BLOCKS:  # lane l: a tree over its SPLIT threads; the LANES lanes: a shuffle tree
        lk, ll = sch.get_loops(sch.get_sblock(lanes))[-2:]
        if k_first:
            sch.reorder(ll, lk)  # a cross-thread reduction's loop must be the innermost
        else:
            lk, ll = ll, lk
        bind(sch, ll, "threadIdx.x", target)
        bind(sch, lk, "threadIdx.y", target)
    for total in ROW_SUMS:
        bind(sch, sch.get_loops(sch.get_sblock(total))[-1], "threadIdx.x", target)


def _final_sums(sch, target):
    """dgamma, dbeta: FINAL_THREADS partial sums per column over the row-block partials, then a fixed tree."""
    block = sch.get_sblock
    for acc, out in zip(PARTIALS, ("dgamma", "dbeta")):
        col, ro = sch.get_loops(block(acc))
        co, ci = sch.split(col, [None, FINAL_COLUMNS])
        roo, roi = sch.split(ro, [None, FINAL_THREADS])
        sch.reorder(co, ci, roi, roo)
        sch.reverse_compute_at(block(out), ci)
        sch.set_scope(block(acc), 0, "local")
    co = sch.merge(*(sch.get_loops(block(acc))[0] for acc in PARTIALS))
    bind(sch, co, "blockIdx.x", target)
    for acc in PARTIALS:
        _, ci, roi, _ = sch.get_loops(block(acc))
        bind(sch, ci, "threadIdx.x", target)
        bind(sch, roi, "threadIdx.y", target)


def _row_blocks(sch, target, lanes: int = 1) -> None:
    """One kernel per ROW_BLOCK rows: row sums, dx and the column partials in one pass (M % ROW_BLOCK
    == 0); with ``lanes`` > 1, the walk that writes dx and the partials moves ``lanes`` consecutive
    elements per access (the row sums' walk stays as it is, so the bits do not change)."""
    block = sch.get_sblock
    rfs = _lane_partials(sch)
    partials = []
    for acc in PARTIALS:  # the column partials over ROW_BLOCK-row blocks, loops (block, row, k, l, c)
        _, r = sch.get_loops(block(acc))
        ro, _ = sch.split(r, [None, ROW_BLOCK], disable_predication=True)
        rf = sch.rfactor(ro, 0)
        rd, rro, rri = sch.get_loops(rf)
        sch.reorder(rro, rri, rd)
        _thread_split(sch, rd, lanes)
        partials.append(rf)
    # each block's partial rows in shared memory, written out once after its rows
    copies = [sch.cache_write(rf, 0, "shared.dyn" if on_gpu(target) else "global") for rf in partials]
    rows = ("rstd",) + tuple(f"{b}_rf" for b in LANES_BLOCKS) + LANES_BLOCKS + ROW_SUMS
    for name in rows + ("dx",):  # whole blocks of rows: no bounds test, so barriers may stand in the row loop
        sch.split(sch.get_loops(block(name))[0], [None, ROW_BLOCK], disable_predication=True)
    _thread_split(sch, sch.get_loops(block("dx"))[2], lanes)
    # one loop over row blocks, one over their rows: each row's sums, then its dx and partials
    order = rows + tuple(f"{acc}_rf" for acc in PARTIALS) + ("dx",)
    for depth in range(2):
        sch.merge(*(sch.get_loops(block(name))[depth] for name in order))
    for name in rows:
        sch.set_scope(block(name), 0, "local")
    _bind_row_sums(sch, rfs, target, k_first=False)
    walk = tuple(f"{acc}_rf" for acc in PARTIALS) + ("dx",)
    for depth in range(2, 5 + (lanes > 1)):  # dx and both partials in one walk over the row
        sch.merge(*(sch.get_loops(block(name))[depth] for name in walk))
    mo, mi, k, l = sch.get_loops(block("dx"))[:4]
    bind(sch, mo, "blockIdx.x", target)
    bind(sch, k, "threadIdx.y", target)
    bind(sch, l, "threadIdx.x", target)
    if lanes > 1:  # before the partials' inits are split off: vectorize needs whole reduction blocks
        sch.vectorize(sch.get_loops(block("dx"))[-1])
    for rf in partials:  # partial rows zeroed before the block's first row
        _, ik, il, _, *v = sch.get_loops(sch.decompose_reduction(rf, mi))
        bind(sch, ik, "threadIdx.y", target)
        bind(sch, il, "threadIdx.x", target)
        for lane in v:
            sch.vectorize(lane)
    for copy in copies:
        sch.reverse_compute_at(copy, mo)
        ck, cl, _, *v = _thread_split(sch, sch.get_loops(copy)[-1], lanes)
        bind(sch, ck, "threadIdx.y", target)
        bind(sch, cl, "threadIdx.x", target)
        for lane in v:
            sch.vectorize(lane)
    _final_sums(sch, target)


def _per_row(sch, target) -> None:
    """rstd kernel; dx: one block per row; column partials over the definition's row blocks; final sums."""
    block = sch.get_sblock
    (m,) = sch.get_loops(block("rstd"))
    mo, mi = sch.split(m, [None, 256])
    bind(sch, mo, "blockIdx.x", target)
    bind(sch, mi, "threadIdx.x", target)
    rfs = _lane_partials(sch)
    m, d = sch.get_loops(block("dx"))
    _thread_split(sch, d)
    bind(sch, m, "blockIdx.x", target)
    k, l, _ = sch.get_loops(block("dx"))[1:]
    bind(sch, k, "threadIdx.y", target)
    bind(sch, l, "threadIdx.x", target)
    # consumers first, each producer inserted before them
    for name in ROW_SUMS + LANES_BLOCKS:
        sch.compute_at(block(name), m, index=0)
        sch.set_scope(block(name), 0, "local")
    for rf in rfs:
        sch.compute_at(rf, m, index=0)
        sch.set_scope(rf, 0, "local")
    _bind_row_sums(sch, rfs, target, k_first=True)
    # ---- dgamma, dbeta: column partials over the definition's row blocks (the CPU's order)
    for acc in PARTIALS:
        col, r = sch.get_loops(block(acc))
        ro, ri = sch.split(r, [None, partial_rows("layer_norm_backward")])
        rf = sch.rfactor(ro, 0)
        rd, rro, rri = sch.get_loops(rf)
        rdo, rdi = sch.split(rd, [None, COLUMNS])
        sch.reorder(rro, rdo, rdi, rri)
    rfs = [block(f"{acc}_rf") for acc in PARTIALS]
    ro, do, di, ri = (sch.merge(a, b) for a, b in zip(*(sch.get_loops(rf) for rf in rfs)))
    for rf in rfs:
        sch.reverse_compute_at(sch.cache_write(rf, 0, "local"), di)
    # two grid axes, not one fused: a fused symbolic index is not affine and
    # the reduction could not be decomposed (gridDim.y allows 65535 row blocks)
    bind(sch, ro, "blockIdx.y", target)
    bind(sch, do, "blockIdx.x", target)
    bind(sch, di, "threadIdx.x", target)
    _final_sums(sch, target)
    # reduction inits outside the loops they reduce over (after binding: binding needs whole blocks)
    for lanes in LANES_BLOCKS:
        rf = block(f"{lanes}_rf")
        sch.decompose_reduction(rf, sch.get_loops(rf)[-1])
    # (the column partials' inits stay in their row loop as `if row == 0`:
    # decompose_reduction refuses those merged blocks, and registers make the test free)
