"""LayerNorm backward on CUDA: a row kernel for dx, column partials for dgamma/dbeta.

Row kernel (dx): a block holds ROWS rows, LANES threads per row.  Thread l of
a row accumulates the definition's lane partial l (elements d = c*LANES + l,
so each warp load is a contiguous run) of both row sums in one walk over the
row, in registers; the row's LANES partials are then added by a warp-shuffle
tree (a fixed order, so the same bits every run -- though not the host's
lane-order bits).  Then the row's dx is written with the same interleave.
rstd is recomputed where used (one sqrt per row per thread).

dgamma/dbeta (the approach of Apex's and PyTorch's GammaBetaBackward): a
thread owns a column and sums COLUMN_ROWS rows of dy*xhat and dy into one
partial per row block (rfactor), in registers; the final kernel sums each
column's partials with FINAL_THREADS threads and a fixed tree.  No atomics:
same bits on every run.  COLUMN_ROWS is part of the summation order.
"""
from .. import ScheduleRule
from ._util import bind
from ...te_defs.layer_norm_backward import LANES

ROWS = 8  # rows per block in the dx kernel (blockDim = LANES x ROWS)
COLUMN_ROWS = 64  # rows per dgamma/dbeta partial
COLUMNS = 128  # columns per block in the partial kernel
FINAL_COLUMNS = 32
FINAL_THREADS = 16


class LayerNormBackward(ScheduleRule):
    op = "layer_norm_backward"

    def schedule(self, sch, target) -> None:
        block = sch.get_sblock
        sch.compute_inline(block("rstd"))
        # ---- dx: rows x lanes; each lane walks its interleaved elements
        m, d = sch.get_loops(block("dx"))
        mo, mi = sch.split(m, [None, ROWS])
        dc, dl = sch.split(d, [None, LANES])
        sch.reorder(mo, mi, dl, dc)
        bind(sch, mo, "blockIdx.x", target)
        bind(sch, mi, "threadIdx.y", target)
        for total in ("sum_dyg", "sum_dyg_xhat"):
            sch.compute_at(block(total), mi)
            sch.set_scope(block(total), 0, "local")
        lane_loops = []
        for lanes in ("sum_dyg_lanes", "sum_dyg_xhat_lanes"):
            sch.compute_at(block(lanes), mi, index=0)  # before the sums that read them
            sch.set_scope(block(lanes), 0, "local")
            lane_loops.append(sch.get_loops(block(lanes))[-2])
        # both row sums in one pass over the row; thread l holds lane partial l
        bind(sch, sch.merge(*lane_loops), "threadIdx.x", target)
        bind(sch, dl, "threadIdx.x", target)
        # the LANES partials of a row meet in a shuffle tree over the row's threads
        for total in ("sum_dyg", "sum_dyg_xhat"):
            bind(sch, sch.get_loops(block(total))[-1], "threadIdx.x", target)
        # ---- dgamma, dbeta: column partials over COLUMN_ROWS-row blocks
        for acc in ("dgamma_acc", "dbeta_acc"):
            col, r = sch.get_loops(block(acc))
            ro, ri = sch.split(r, [None, COLUMN_ROWS])
            rf = sch.rfactor(ro, 0)
            rd, rro, rri = sch.get_loops(rf)
            rdo, rdi = sch.split(rd, [None, COLUMNS])
            sch.reorder(rro, rdo, rdi, rri)
        rfs = [block("dgamma_acc_rf"), block("dbeta_acc_rf")]
        ro, do, di, ri = (sch.merge(a, b) for a, b in zip(*(sch.get_loops(rf) for rf in rfs)))
        for rf in rfs:
            sch.reverse_compute_at(sch.cache_write(rf, 0, "local"), di)
        # two grid axes, not one fused: a fused symbolic index is not affine and
        # the reduction could not be decomposed (gridDim.y allows 65535 row blocks)
        bind(sch, ro, "blockIdx.y", target)
        bind(sch, do, "blockIdx.x", target)
        bind(sch, di, "threadIdx.x", target)
        # ---- final: FINAL_THREADS partial sums per column, then a fixed tree
        for acc, out in (("dgamma_acc", "dgamma"), ("dbeta_acc", "dbeta")):
            col, ro = sch.get_loops(block(acc))
            co, ci = sch.split(col, [None, FINAL_COLUMNS])
            roo, roi = sch.split(ro, [None, FINAL_THREADS])
            sch.reorder(co, ci, roi, roo)
            sch.reverse_compute_at(block(out), ci)
            sch.set_scope(block(acc), 0, "local")
        co = sch.merge(sch.get_loops(block("dgamma_acc"))[0], sch.get_loops(block("dbeta_acc"))[0])
        bind(sch, co, "blockIdx.x", target)
        for acc in ("dgamma_acc", "dbeta_acc"):
            _, ci, roi, _ = sch.get_loops(block(acc))
            bind(sch, ci, "threadIdx.x", target)
            bind(sch, roi, "threadIdx.y", target)
        # reduction inits outside the loops they reduce over (after binding: binding needs whole blocks)
        for lanes in ("sum_dyg_lanes", "sum_dyg_xhat_lanes"):
            sch.decompose_reduction(block(lanes), sch.get_loops(block(lanes))[-1])
        # one walk over the row for both partial sums (dy is read once)
        sch.merge(*(sch.get_loops(block(f"{lanes}_update"))[-1] for lanes in ("sum_dyg_lanes", "sum_dyg_xhat_lanes")))
        # (the partials' inits stay in the row loop as `if row == 0`: decompose_reduction
        # refuses these merged blocks, and the registers make the test free)
