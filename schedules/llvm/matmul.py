"""float32 GEMMs from packed panels, the packing, and column sums on the CPU.

matmul_packed (C = A·B from B's column panels, then the bias/addend epilogue):
- C is cut into MR x PANEL register tiles, MR sized from the CPU's register
  file (schedules/llvm/machine.py: on AVX-512, 8 x 32 = two 16-lane vectors
  per row, 16 of the 32 zmm registers accumulating; on AVX2 the 32 columns are
  four 8-lane vectors and MR is 2, so the accumulators do not spill out of
  the 16 ymm registers); tasks are blocks of MB rows x NP columns, fused and
  parallel, each walking its tiles row block by row block.
- Per tile, the k loop runs outside the unrolled rows and the columns
  vectorised at the CPU's lanes;
  the accumulator is a local [MR, PANEL] buffer that LLVM keeps in registers.
  It is created by reindex_cache_write with the tiled layout
  (m // MR, n // NR, m % MR, n % NR): a plain cache_write/compute_at of the
  [M, N] stage gets a region clamped to min(M, MR) x min(N, NR), i.e. a
  symbolic-size buffer, which loop partitioning then corrupts (indices near
  2**31).  The write-back copy is inlined into the epilogue, so C (+ bias,
  + addend) is written straight from the tile.
- M/N tails: non-divisible splits give predicates; pragma_loop_partition_hint
  on the task and tile loops peels the last one, so full tiles carry no
  guards.  The few_rows entry (schedule flag) makes a task one MR-row tile.
- Determinism: the whole sum over k for one element runs in increasing k in
  one accumulator inside one task (K is never split), so the bits do not
  depend on the thread count.

column_sum: rows in fixed blocks (the definition's partial_rows), each block's column partials
(rfactor) computed in parallel over blocks, then a column-parallel pass adds
the partials in block order: the summation order depends on that block only.
"""
from ...te_defs.matmul_packed import PANEL, ROW_BLOCK
from .. import ScheduleRule
from ..row_blocks import partial_rows
from .machine import lanes, register_tile_rows


def _register_tile(sch, MR: int, NR: int):
    """The product stage accumulating in an MR x NR local tile (constant size: LLVM keeps it in registers)."""
    prod = sch.get_sblock("prod")
    sch.reindex_cache_write(prod, 0, "local", lambda m, n, k: (m // MR, n // NR, m % MR, n % NR))
    sch.compute_inline(sch.get_sblock("prod_local"))
    return prod


def _vectorise_tile(sch, prod, c_columns, vector: int, rows: int, k_unroll: int = 1):
    """Inside a ``rows``-row tile: k outermost (``k_unroll`` steps of it unrolled, still in increasing
    k), rows unrolled, columns in ``vector`` lanes; the epilogue's columns too.  Returns the k loop
    (for decompose_reduction)."""
    if rows > 1:
        pm, pn, pk = sch.get_loops(prod)[-3:]
        sch.reorder(pk, pm, pn)
        sch.unroll(pm)
    else:  # a one-row tile has no row loop
        pn, pk = sch.get_loops(prod)[-2:]
        sch.reorder(pk, pn)
    pno, pni = sch.split(pn, [None, vector])
    sch.unroll(pno)
    sch.vectorize(pni)
    if k_unroll > 1:
        pk, pki = sch.split(pk, [None, k_unroll])
        sch.unroll(pki)
    cno, cni = sch.split(c_columns, [None, vector])
    sch.vectorize(cni)
    return pk


# matmul_packed: B arrives in panels (te_defs.matmul_packed.PANEL columns), so
# no per-call packing; tasks are (MB rows x NP columns) blocks of C, fused and
# parallel, each walking its MR x PANEL register tiles row block by row block.


class MatmulPacked(ScheduleRule):
    """C = A·B from pre-packed panels.

    A task owns a block of MB rows x NP columns: its row tiles reuse the
    block's B panels from L1/L2, and small-M products (an LSTM step: M = the
    batch) still give N / NP tasks.  Measured here with 2 threads, M = 32:
    about torch's rate at K = 256..1024 (packing B per call instead cost
    about a third of the time at that size).

    The few_rows entry (for M below one row block) makes a task one MR-row
    tile x NP columns: the main entry's tail at M % MB runs at a few GFLOP/s
    (its guards end up inside the k loop); here a tail exists only at M % MR.
    Measured ~30-45 GFLOP/s at M = 8..31, K = 256, N = 1024 with 2 threads.
    """

    op = "matmul_packed"
    MB, NP, KU = ROW_BLOCK, 32, 1
    # rows x columns per task (MR, PANEL multiples); the register tile's rows (MR: the hand choice
    # from the register file, ``derive``); steps of k unrolled (KU)
    KNOBS = {"MB": (8, 16, 32, 64, 128), "NP": (32, 64, 128), "MR": (1, 2, 4, 8), "KU": (1, 2, 4)}

    def derive(self, name: str, target) -> int | None:
        return register_tile_rows(target, PANEL) if name == "MR" else None

    def space(self, target=None) -> dict:
        # register tiles up to twice the rows that fit the register file (beyond that every k step spills)
        fit = register_tile_rows(target, PANEL)
        return {**super().space(target), "MR": tuple(r for r in self.KNOBS["MR"] if r <= 2 * fit)}

    def schedule(self, sch, target) -> None:
        MR, NP = self.knob("MR", target), self.knob("NP")
        MB = MR if self.flag(sch, "few_rows") else max(MR, self.knob("MB"))
        prod = _register_tile(sch, MR, PANEL)
        c = sch.get_sblock("c")
        m, n = sch.get_loops(c)
        mo, mt, mi = sch.split(m, [None, MB // MR, MR])
        no, nt, ni = sch.split(n, [None, NP // PANEL, PANEL])
        sch.reorder(mo, no, mt, nt, mi, ni)
        sch.compute_at(prod, nt)
        pk = _vectorise_tile(sch, prod, ni, lanes(target), MR, self.knob("KU"))
        task = sch.fuse(mo, no)
        sch.parallel(task)
        sch.decompose_reduction(prod, pk)
        for loop in (task, mt, nt):
            sch.annotate(loop, "pragma_loop_partition_hint", 1)


class PackB(ScheduleRule):
    """b [K, N] -> panels: contiguous 32-float rows copied, panels x row blocks in parallel."""

    op = "pack_b"
    ROWS = 64  # rows of b per task
    KNOBS = {"ROWS": (16, 32, 64, 128, 256)}

    def schedule(self, sch, target) -> None:
        bp = sch.get_sblock("bp")
        p, k, j = sch.get_loops(bp)
        ko, ki = sch.split(k, [None, self.knob("ROWS")])
        sch.reorder(ko, p, ki, j)
        sch.parallel(sch.fuse(ko, p))
        sch.vectorize(j)
        sch.annotate(ki, "pragma_loop_partition_hint", 1)


class PackBT(ScheduleRule):
    """w [N, K] -> panels of wᵀ: 32 x 16 tiles transposed in L1, tiles in parallel."""

    op = "pack_bt"
    ROWS = 16  # k rows per tile
    KNOBS = {"ROWS": (8, 16, 32, 64)}

    def schedule(self, sch, target) -> None:
        bp = sch.get_sblock("bp")
        p, k, j = sch.get_loops(bp)
        ko, ki = sch.split(k, [None, self.knob("ROWS")])
        sch.reorder(p, ko, j, ki)
        sch.parallel(sch.fuse(p, ko))
        sch.annotate(ki, "pragma_loop_partition_hint", 1)


COLUMNS = 256  # columns per task of the final column_sum pass


class ColumnSum(ScheduleRule):
    op = "column_sum"
    KNOBS = {"COLUMNS": (64, 128, 256, 512, 1024)}  # the row block is the definition's (not a knob)

    def schedule(self, sch, target) -> None:
        ROWS, COLUMNS, VECTOR = partial_rows(self.op), self.knob("COLUMNS"), lanes(target)
        s = sch.get_sblock("s")
        n, k = sch.get_loops(s)
        ko, ki = sch.split(k, [None, ROWS])
        rf = sch.rfactor(ko, 0)
        n, ko, ki = sch.get_loops(rf)
        sch.reorder(ko, ki, n)
        no, nv = sch.split(n, [None, VECTOR])
        sch.vectorize(nv)
        sch.parallel(ko)
        sch.annotate(no, "pragma_loop_partition_hint", 1)
        sch.decompose_reduction(rf, ki)
        n, ko = sch.get_loops(s)
        nc, nm, nv = sch.split(n, [None, max(1, COLUMNS // VECTOR), VECTOR])
        sch.reorder(nc, ko, nm, nv)
        sch.vectorize(nv)
        sch.parallel(nc)
        sch.annotate(nc, "pragma_loop_partition_hint", 1)
        sch.annotate(nm, "pragma_loop_partition_hint", 1)
        sch.decompose_reduction(s, ko)
