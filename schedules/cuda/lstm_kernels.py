"""The full LSTM's float32 kernels on CUDA: the packed GEMM, B packing, the step kernels, column sums.

matmul_packed (C = A·B (+ bias) (+ addend), B in column panels bp[N/32, K, 32]):
a tiled SIMT GEMM.  A block computes a BM x BN tile of C with TY x TX threads,
each accumulating MI x NI outputs in registers: rows ty·MI .. ty·MI + MI - 1 of
the tile (contiguous) and columns tx + TX·ni (strided, so a warp's loads of the
B tile and its stores of C are consecutive floats).  The sum over K runs in
chunks of KC: per chunk the block stages A[BM, KC] and the BN/32 panels'
[KC, 32] rows of bp in shared memory (every thread loads a few elements,
consecutive threads consecutive addresses: coalesced), then every thread adds
the chunk's KC products into its accumulators in increasing k.  So each output
element is summed in increasing k by one thread (no split-K, no atomics:
deterministic), and the bias and addend are added once, after the whole sum,
as the tile is written.  M and K are symbolic: loads beyond M or K are
predicated off (a chunk past K adds nothing), stores beyond M are skipped, so
a NaN in row r of A reaches row r of C only.  N is a multiple of 32; a BN of 64
has a half tile at odd N/32, also predicated.  The ``few_rows`` entry (the
M % 32 rows an LSTM step leaves over) uses FEW_TY x FEW_MI = 16-row tiles with
half the threads.  Layout details: A and B are first copied by ``reindex``
(a compact copy whatever the inputs' row strides), the shared buffers are
indexed modulo the tile (constant sizes: a symbolic M or K tail would leave
the compacted region symbolic) and A's rows are padded by one float; the
accumulators are a [MI, NI] local buffer.  Not yet measured on a GPU: the
m/n/k guards stay inside the k loop (TVM's loop partitioning of the chunk
loop gave wrong results in host emulation at K = 1, so it is not used).
On the host (emulation) a thread's shared tile holds only its own part.

lstm_cell_forward, lstm_step_backward: elementwise.  Every stage's (row,
column) loops are merged into one nest, so one thread computes every output of
its element in one kernel; lstm_cell_forward's threads of a block take THREADS
consecutive columns of one row (coalesced loads and stores), blocks walk rows x
column blocks; a stage that reads another output (cy reads i, f, g) reads what
the same thread just stored.  lstm_step_backward also writes dgates_t [4, H, N],
the transpose, into a caller's view with any row stride: a thread per element
would write it down columns (each 4-byte store a 32-byte sector of its own), so
its blocks are STEP_ROWS x STEP_COLS tiles whose dgates go through shared memory
and out along j (dgates) and along n (dgates_t).  Intermediates (dh_t, dc_t)
live in registers.

pack_b: one thread per output element; a block is 32 panel columns x PACK_ROWS
k rows of one panel, reads of b and writes of bp are both 32 consecutive floats.
pack_bt: w [N, K] -> panels of wᵀ through a 32 x 32 shared-memory tile: the
tile is read with consecutive threads on consecutive k (coalesced reads of w)
and written with consecutive threads on consecutive panel columns (coalesced
writes of bp); the shared rows are padded by one float (no bank conflicts).
Pure copies: no arithmetic, no order to speak of.

column_sum (s[n] = Σ_k a[k, n]): first kernel, a thread owns a column and a
block of the definition's partial_rows rows and sums them in increasing k into
a partial (rfactor; blocks of columns x row blocks in the grid); second kernel,
a thread per column adds the partials in row-block order: the CPU's order, so
the same bits as the CPU's column_sum.  No atomics.
"""
from .. import ScheduleRule, block_names
from ..row_blocks import partial_rows
from ._util import bind

# ---- matmul_packed
TX, TY = 16, 16  # threads per block: TX along columns, TY along rows
NI, MI = 4, 4  # outputs per thread: NI columns (TX apart) x MI consecutive rows
KC = 32  # k per shared-memory chunk
FEW_TY, FEW_MI = 8, 2  # few_rows: 8 x 2 = 16 rows per tile
# ---- elementwise
THREADS = 128  # consecutive columns per block
STEP_ROWS, STEP_COLS = 8, 32  # lstm_step_backward's tile: 8 rows = one 32-byte sector of dgates_t's rows
# ---- pack_b / pack_bt
PACK_ROWS = 8  # pack_b: k rows per block (32 x 8 threads)
TILE = 32  # pack_bt: k x panel-column tile through shared memory
TILE_ROWS = 8  # pack_bt: threads along the tile's second axis (32 x 8 threads, 4 elements each)
# ---- column_sum
COLUMNS = 128  # columns per block, both kernels


class MatmulPacked(ScheduleRule):
    """Tiled SIMT GEMM: BM x BN tiles, an MI x NI register tile per thread, KC-deep shared chunks."""

    op = "matmul_packed"

    def schedule(self, sch, target) -> None:
        from ...te_defs.matmul_packed import PANEL

        few = self.flag(sch, "few_rows")
        ty_n, mi_n = (FEW_TY, FEW_MI) if few else (TY, MI)
        BM, BN = ty_n * mi_n, TX * NI
        assert BN % PANEL == 0
        prod = sch.get_sblock("prod")
        # the shared tiles: copies of A and B indexed by the product's iterators (reindex: compact
        # whatever the inputs' row strides), a_tile[m, k] and b_tile[n, k]
        tiles = [sch.reindex(prod, ("read", i)) for i in (0, 1)]
        # the accumulators: a thread's MI x NI outputs in a local [MI, NI] buffer (registers); the
        # layout drops the block and thread coordinates, which every thread has its own copy of
        sch.cache_write(prod, 0, "local")
        sch.transform_layout(prod, ("write", 0), lambda m, n: (m % mi_n, n % BN // TX),
                             assume_injective_transform=True)
        sch.compute_inline(sch.get_sblock("prod_local"))  # the epilogue reads the accumulators
        # the product and the epilogue cut the same way, their block and thread loops merged: a
        # thread accumulates its MI x NI outputs over all of K, then writes them (+ bias, + addend)
        c = sch.get_sblock("c")
        nests = []
        for blk in (prod, c):
            m, n = sch.get_loops(blk)[:2]
            bm, ty, mi = sch.split(m, [None, ty_n, mi_n])
            bn, ni, tx = sch.split(n, [None, NI, TX])
            nests.append((bm, bn, ty, tx, mi, ni))
        (_, _, _, _, pm, pn), (_, _, _, _, cm, cn) = nests
        pk = sch.get_loops(prod)[-1]
        ko, ki = sch.split(pk, [None, KC])
        sch.reorder(*nests[0][:4], ko, ki, pm, pn)
        sch.reorder(*nests[1])
        bm, bn, ty, tx = (sch.merge(p_, c_) for p_, c_ in zip(nests[0][:4], nests[1][:4]))
        bind(sch, bm, "blockIdx.y", target)
        bind(sch, bn, "blockIdx.x", target)
        bind(sch, ty, "threadIdx.y", target)
        bind(sch, tx, "threadIdx.x", target)
        for loop in (pm, pn, cm, cn):
            sch.unroll(loop)
        # per chunk, the block's A and B tiles in shared memory, loaded by every thread of the block
        # (on the GPU the region spans the block's threads; on the host, serial, this thread's part)
        for tile, layout in zip(tiles, (lambda m_, k_: (m_ % BM, k_ % KC), lambda n_, k_: (k_ % KC, n_ % BN))):
            sch.set_scope(tile, 0, "shared")
            sch.compute_at(tile, ko)
            # constant-size buffers: indices modulo the tile (a symbolic M or K tail would otherwise
            # leave the compacted region symbolic); A's rows padded by one float (no bank conflicts)
            sch.transform_layout(tile, ("write", 0), layout, assume_injective_transform=True)
        for tile, coalesce in zip(tiles, ("k", "n")):
            rows, cols = sch.get_loops(tile)[-2:]  # (m, k) / (n, k)
            if coalesce == "n":  # consecutive threads on consecutive columns of a panel
                sch.reorder(cols, rows)
                rows, cols = cols, rows
            _, fy, fx = sch.split(sch.fuse(rows, cols), [None, ty_n, TX])
            bind(sch, fy, "threadIdx.y", target)
            bind(sch, fx, "threadIdx.x", target)
        sch.storage_align(tiles[0], 0, axis=0, factor=32, offset=1)
        sch.decompose_reduction(prod, ko)


class PackB(ScheduleRule):
    """b [K, N] -> bp [N/32, K, 32]: one thread per element, 32 panel columns x PACK_ROWS rows a block."""

    op = "pack_b"

    def schedule(self, sch, target) -> None:
        p, k, j = sch.get_loops(sch.get_sblock("bp"))
        ko, ki = sch.split(k, [None, PACK_ROWS])
        sch.reorder(p, ko, ki, j)
        bind(sch, sch.fuse(p, ko), "blockIdx.x", target)
        bind(sch, ki, "threadIdx.y", target)
        bind(sch, j, "threadIdx.x", target)


class PackBT(ScheduleRule):
    """w [N, K] -> bp [N/32, K, 32] through a TILE x TILE shared tile (coalesced on both sides)."""

    op = "pack_bt"

    def schedule(self, sch, target) -> None:
        from ...te_defs.matmul_packed import PANEL

        assert PANEL == TILE
        bp = sch.get_sblock("bp")
        p, k, j = sch.get_loops(bp)
        ko, ki = sch.split(k, [None, TILE])
        kio, kii = sch.split(ki, [None, TILE_ROWS])
        sch.reorder(p, ko, kii, j, kio)
        # two grid axes, not one fused: the tile's region must stay affine for a constant-size buffer
        bind(sch, p, "blockIdx.y", target)
        bind(sch, ko, "blockIdx.x", target)
        bind(sch, kii, "threadIdx.y", target)
        bind(sch, j, "threadIdx.x", target)
        # the tile: a copy of w indexed like bp (reindex: compact, whatever w's row stride), in shared
        tile = sch.reindex(bp, ("read", 0))
        sch.set_scope(tile, 0, "shared")
        sch.compute_at(tile, ko)
        tk, tj = sch.get_loops(tile)[-2:]  # (k, panel column): read along k, consecutive in w
        tjo, tji = sch.split(tj, [None, TILE_ROWS])
        sch.reorder(tjo, tji, tk)
        bind(sch, tji, "threadIdx.y", target)
        bind(sch, tk, "threadIdx.x", target)
        # a constant TILE x TILE buffer: k taken modulo the tile (a symbolic K's tail would otherwise
        # leave the compacted region symbolic); rows padded by one float (no bank conflicts)
        sch.transform_layout(tile, ("write", 0), lambda p_, k_, j_: (k_ % TILE, j_), assume_injective_transform=True)
        sch.storage_align(tile, 0, axis=0, factor=32, offset=1)


def _merged_rows_and_columns(sch, names):
    """The (row, column) loops of the stages ``names`` merged into one nest: (row loop, column loop)."""
    merged = []
    for depth in range(2):
        loop = sch.get_loops(sch.get_sblock(names[0]))[depth]
        for name in names[1:]:  # pairwise merges (a many-loop merge trips its depth check)
            loop = sch.merge(loop, sch.get_loops(sch.get_sblock(name))[depth])
        merged.append(loop)
    return merged


class _Elementwise(ScheduleRule):
    """Every stage's row and column loops merged: one thread per (row, column), THREADS columns a block."""

    def schedule(self, sch, target) -> None:
        n, j = _merged_rows_and_columns(sch, block_names(sch))
        jo, ji = sch.split(j, [None, THREADS])
        bind(sch, sch.fuse(n, jo), "blockIdx.x", target)
        bind(sch, ji, "threadIdx.x", target)


class LstmCellForward(_Elementwise):
    """gates [N, 4, H], cx -> hy, cy, i, f, g, o, tanhc: one thread per (row, column), all seven outputs."""

    op = "lstm_cell_forward"


class LstmStepBackward(ScheduleRule):
    """A block per STEP_ROWS x STEP_COLS tile of (row n, column j), a thread per element: dh_t, dc_t in
    registers, dcx written directly, the four dgates into a shared [n, gate, j] tile.  Then, after one
    barrier, the tile goes out twice: dgates along j and dgates_t (the transposed [gate, j, n] view)
    along n, so both are written by consecutive threads at consecutive addresses (STEP_ROWS floats:
    whole 32-byte sectors of dgates_t's rows, where a thread per element wrote 4 bytes of each).  The
    tile's rows are padded by one float: both passes read it without bank conflicts."""

    op = "lstm_step_backward"
    pointwise = ("dh_t", "dc_t", "dgates", "dcx")

    def schedule(self, sch, target) -> None:
        block = sch.get_sblock
        n, k, j = sch.get_loops(block("dgates"))
        sch.reorder(n, j, k)
        tile = sch.cache_write(block("dgates"), 0, "shared", consumer_blocks=[block("dgates_t")])
        n, j = _merged_rows_and_columns(sch, self.pointwise)
        no, ni = sch.split(n, [None, STEP_ROWS])
        jo, ji = sch.split(j, [None, STEP_COLS])
        sch.reorder(no, jo, ni, ji)
        # two grid axes, not one fused: the tile's region must stay affine (rows on x: 2^31 - 1 blocks)
        bind(sch, no, "blockIdx.x", target)
        bind(sch, jo, "blockIdx.y", target)
        bind(sch, ni, "threadIdx.y", target)
        bind(sch, ji, "threadIdx.x", target)
        for name in ("dh_t", "dc_t"):
            sch.set_scope(block(name), 0, "local")
        sch.unroll(sch.get_loops(block("dgates"))[-1])
        # dgates from the tile: row by row, consecutive threads along j
        sch.reverse_compute_at(tile, jo)
        rn, _, rj = sch.get_loops(tile)[-3:]
        bind(sch, rn, "threadIdx.y", target)
        bind(sch, rj, "threadIdx.x", target)
        # dgates_t from the tile: consecutive threads along n
        sch.reverse_compute_at(block("dgates_t"), jo)
        _, tj, tn = sch.get_loops(block("dgates_t"))[-3:]
        ty, tx = sch.split(sch.fuse(tj, tn), [STEP_ROWS, None])
        bind(sch, ty, "threadIdx.y", target)
        bind(sch, tx, "threadIdx.x", target)
        # a constant [STEP_ROWS, 4, STEP_COLS] tile (after the consumers are placed: their regions are
        # read from the untransformed layout), rows padded by one float
        sch.transform_layout(block("dgates"), ("write", 0), lambda n_, k_, j_: (n_ % STEP_ROWS, k_, j_ % STEP_COLS),
                             assume_injective_transform=True)
        sch.storage_align(block("dgates"), 0, axis=1, factor=STEP_COLS, offset=1)


class ColumnSum(ScheduleRule):
    """Column partials over the definition's row blocks (increasing k), then the partials in block order."""

    op = "column_sum"

    def schedule(self, sch, target) -> None:
        s = sch.get_sblock("s")
        n, k = sch.get_loops(s)
        ko, ki = sch.split(k, [None, partial_rows(self.op)])
        rf = sch.rfactor(ko, 0)
        rn, rko, rki = sch.get_loops(rf)
        rno, rni = sch.split(rn, [None, COLUMNS])
        sch.reorder(rko, rno, rni, rki)
        bind(sch, rko, "blockIdx.y", target)
        bind(sch, rno, "blockIdx.x", target)
        bind(sch, rni, "threadIdx.x", target)
        sch.reverse_compute_at(sch.cache_write(rf, 0, "local"), rni)
        sch.decompose_reduction(rf, rki)
        n, ko = sch.get_loops(s)
        no, ni = sch.split(n, [None, COLUMNS])
        bind(sch, no, "blockIdx.x", target)
        bind(sch, ni, "threadIdx.x", target)
        sch.reverse_compute_at(sch.cache_write(s, 0, "local"), ni)
        sch.decompose_reduction(s, ko)
