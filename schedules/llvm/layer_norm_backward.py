"""LayerNorm backward on the CPU.

dx: rows in parallel; per row the two lane-partial row sums and then dx, all
reading the row while it is in cache; rstd is inlined (LLVM hoists it out of
the row loops).  dgamma/dbeta: one column-parallel pass over column chunks,
each summing its rows in row order -- the result does not depend on the thread
count.  Reductions are decomposed last (annotations need the init inside).
"""
from .. import ScheduleRule

COLUMNS = 64


class LayerNormBackward(ScheduleRule):
    op = "layer_norm_backward"

    def schedule(self, sch, target) -> None:
        block = sch.get_sblock
        sch.compute_inline(block("rstd"))
        m, _ = sch.get_loops(block("dx"))
        for name in ("sum_dyg", "sum_dyg_xhat"):
            sch.compute_at(block(name), m)
            lanes = block(f"{name}_lanes")
            sch.compute_at(lanes, m)
            lane, chunk = sch.get_loops(lanes)[-2:]
            sch.reorder(chunk, lane)
        sch.parallel(m)
        outer = []
        for name in ("dgamma_acc", "dbeta_acc"):
            d, r = sch.get_loops(block(name))
            do, di = sch.split(d, [None, COLUMNS])
            sch.reorder(do, r, di)
            outer.append(do)
        column = sch.merge(*outer)
        for name in ("dgamma", "dbeta"):
            sch.reverse_compute_at(block(name), column)
        sch.parallel(column)
        for name in ("sum_dyg_lanes", "sum_dyg_xhat_lanes"):
            sch.decompose_reduction(block(name), sch.get_loops(block(name))[-2])
        for name in ("dgamma_acc", "dbeta_acc"):
            sch.decompose_reduction(block(name), sch.get_loops(block(name))[1])
