"""LayerNorm backward on the CPU: one pass over x and dy.

Rows are processed in fixed blocks of ROWS rows, the blocks in parallel.  Per
row: rstd once, the two 16-lane row sums (lane loop vectorised; the chunk loop
partitioned so only the last chunk carries the d < D guard), dx, and the row's
contribution to per-block dgamma/dbeta partials (rfactor of the column sums
over the row blocks), all while the row is in L1.  A last column-parallel pass
adds the block partials in block order.  Every summation order is fixed by
ROWS and the definition, never by the thread count.
"""
from .. import ScheduleRule

ROWS = 32  # rows per dgamma/dbeta partial block (fixed: part of the summation order)
LANES = 16
COLUMNS = 256


class LayerNormBackward(ScheduleRule):
    op = "layer_norm_backward"

    def schedule(self, sch, target) -> None:
        block = sch.get_sblock
        # column sums -> per-row-block partials rf[ro, d] (rows in order inside a block)
        rfs = []
        for name in ("dgamma_acc", "dbeta_acc"):
            d, r = sch.get_loops(block(name))
            ro, ri = sch.split(r, [None, ROWS])
            rf = sch.rfactor(ro, 0)
            rfs.append(rf)
        m, _ = sch.get_loops(block("dx"))
        mo, mi = sch.split(m, [None, ROWS])
        outer, inner = [mo], [mi]
        for rf in rfs:
            d, ro, ri = sch.get_loops(rf)
            sch.reorder(ro, ri, d)
            outer.append(ro)
            inner.append(ri)
        mo = sch.merge(*outer)
        mi = sch.merge(*inner)
        for name in ("sum_dyg", "sum_dyg_xhat"):
            sch.compute_at(block(name), mi)
            lanes = block(f"{name}_lanes")
            sch.compute_at(lanes, mi)
            lane, chunk = sch.get_loops(lanes)[-2:]
            sch.reorder(chunk, lane)
        sch.compute_at(block("rstd"), mi)
        sch.parallel(mo)
        # final: sum the block partials in block order, columns in parallel
        for name in ("dgamma", "dbeta"):
            d, ro = sch.get_loops(block(f"{name}_acc"))
            do, di = sch.split(d, [None, COLUMNS])
            sch.reorder(do, ro, di)
            sch.reverse_compute_at(block(name), do)
            sch.parallel(do)
        for name in ("sum_dyg_lanes", "sum_dyg_xhat_lanes"):
            b = block(name)
            chunk, lane = sch.get_loops(b)[-2:]
            sch.decompose_reduction(b, chunk)
        for name in ("dgamma_acc", "dbeta_acc"):
            sch.decompose_reduction(block(name), sch.get_loops(block(name))[1])
