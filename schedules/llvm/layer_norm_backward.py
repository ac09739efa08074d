"""LayerNorm backward on the CPU: one pass over x and dy.

Rows are processed in fixed blocks of ROWS rows, the blocks in parallel.  Per
row: rstd once, the two 16-lane row sums, dx, and the row's contribution to
per-block dgamma/dbeta partials (rfactor of the column sums over row blocks),
all while the row is in L1.  A last column-parallel pass adds the block
partials in block order.  Every summation order is fixed by ROWS (the definition's
row block; schedules.row_blocks) and the definition, never by the thread count.

The float32 column accumulators stay whole [D] buffers and the casts are
separate loops: a cast reverse_compute_at'ed under a predicated column chunk
gets its accumulator compacted to a 2**31-element allocation.

Note: ``merge`` puts the merged loop where the *last* merged loop was and does
not check dependences, so the final column pass is merged first (it must end
up after both partial loops).
"""
from .. import ScheduleRule
from ..row_blocks import partial_rows, partials, row_blocks
from .machine import lanes

COLUMNS = 256
# the rows per dgamma/dbeta partial block are the definition's (te_defs OpDef.partial_rows: part of
# the summation order, so not a knob)
# VECTOR, the float32 lanes of the explicitly vectorised dx loop: the CPU's (``derive``)


class LayerNormBackward(ScheduleRule):
    op = "layer_norm_backward"
    # COLUMNS must be a multiple of VECTOR
    KNOBS = {"COLUMNS": (64, 128, 256, 512), "VECTOR": (4, 8, 16, 32)}

    def derive(self, name: str, target) -> int | None:
        return lanes(target) if name == "VECTOR" else None

    def space(self, target=None) -> dict:
        # one or two of the machine's vectors per step
        return {**super().space(target), "VECTOR": (lanes(target), 2 * lanes(target))}

    def schedule(self, sch, target) -> None:
        ROWS, COLUMNS, VECTOR = partial_rows(self.op), self.knob("COLUMNS"), self.knob("VECTOR", target)
        block = sch.get_sblock
        # column sums -> per-row-block partials rf[ro, d] (rows in order inside a block)
        rfs = partials(sch, ("dgamma_acc", "dbeta_acc"), ROWS)
        # final pass: block partials summed in block order, column chunks in parallel
        outs, vec_outer = [], []
        for name in ("dgamma", "dbeta"):
            d, ro = sch.get_loops(block(f"{name}_acc"))
            do, dio, dii = sch.split(d, [None, COLUMNS // VECTOR, VECTOR])
            sch.reorder(do, ro, dio, dii)
            sch.vectorize(dii)
            outs.append(do)
            vec_outer.append(dio)
        final = sch.merge(*outs)
        sch.merge(*(sch.get_loops(block(name))[0] for name in ("dgamma", "dbeta")))  # both casts in one loop
        # main pass: row blocks in parallel
        m, _ = sch.get_loops(block("dx"))
        mo, mi = row_blocks(sch, m, rfs, ROWS)
        # per row, in this order: rstd, both lane sums in one chunk loop, the
        # two lane-order sums, then dx and both partial updates in one column loop
        for name in ("sum_dyg_xhat", "sum_dyg", "sum_dyg_xhat_lanes", "sum_dyg_lanes", "rstd"):
            sch.compute_at(block(name), mi, index=-2)
        chunks = []
        for name in ("sum_dyg_lanes", "sum_dyg_xhat_lanes"):
            lane, chunk = sch.get_loops(block(name))[-2:]
            sch.reorder(chunk, lane)
            chunks.append(chunk)
        chunk = sch.merge(*chunks)
        lane = sch.merge(*(sch.get_loops(block(name))[-1] for name in ("sum_dyg_lanes", "sum_dyg_xhat_lanes")))
        column = sch.merge(*(sch.get_loops(b)[-1] for b in [block("dx")] + rfs))
        # vectorise explicitly: the llvm target forbids LLVM's own loop versioning on
        # runtime alias checks (its versions contract mul/add differently)
        sch.vectorize(lane)
        d_outer, d_lanes = sch.split(column, [None, VECTOR])
        sch.vectorize(d_lanes)
        sch.parallel(mo)
        sch.parallel(final)
        for name in ("sum_dyg_lanes", "sum_dyg_xhat_lanes"):
            sch.decompose_reduction(block(name), chunk)
        # only the last chunk needs the d < D guard
        sch.annotate(chunk, "pragma_loop_partition_hint", 1)
        for loop in [d_outer, final] + vec_outer:
            sch.annotate(loop, "pragma_loop_partition_hint", 1)
        for name in ("dgamma_acc", "dbeta_acc"):
            sch.decompose_reduction(block(name), sch.get_loops(block(name))[1])
