"""LSTM-cell backward on the CPU: one pass over memory, row blocks in parallel.

Rows are processed in fixed blocks of ROWS rows, the blocks in parallel.  Per
row: tanh(cy) and grad_c into row-sized scratch, then the four gate gradients
(gate loop unrolled) and grad_cx, each its own column loop (one merged column
loop measured slower: LLVM vectorises the separate loops better), and the row's grad_gates added into the
block's grad_bias partial (rfactor of the column sum over row blocks), all
while the row is in L1.  Inner loops are left whole so LLVM vectorises them
with its own tail handling (no guards from non-divisible splits).  A last
column-parallel pass adds the block partials in block order, so every
summation order is fixed by ROWS (the definition's row block; schedules.row_blocks),
never by the thread count.

The float32 accumulator stays a whole [4, H] buffer with a separate cast
loop: a cast reverse_compute_at'ed under a predicated column chunk gets its
accumulator compacted to a 2**31-element allocation.
"""
from .. import ScheduleRule, block_names
from ..row_blocks import last_pass, partial_rows, partials, row_blocks

COLUMNS = 256
# the rows per grad_bias partial block are the definition's (te_defs OpDef.partial_rows: part of the
# summation order, so not a knob)


class LstmCellBackward(ScheduleRule):
    op = "lstm_cell_backward"
    KNOBS = {"COLUMNS": (64, 128, 256, 512, 1024)}

    def schedule(self, sch, target) -> None:
        ROWS, COLUMNS = partial_rows(self.op), self.knob("COLUMNS")
        block = sch.get_sblock
        has_bias = "grad_bias" in block_names(sch)
        stages = [b for b in block_names(sch) if not b.startswith("grad_bias")]
        # one row loop for all elementwise stages: merge (not reverse_compute_at,
        # which leaves a stage that does not read the anchor, e.g. grad_cx without
        # grad_hy, computing all N rows inside every row); pairwise merges, as a
        # many-loop merge trips its depth check
        n = sch.get_loops(block(stages[0]))[0]
        for name in stages[1:]:
            n = sch.merge(n, sch.get_loops(block(name))[0])
        if has_bias:
            rfs = partials(sch, ["grad_bias_acc"], ROWS)
            # final pass first (merge puts the merged loop where the last one was)
            co = last_pass(sch, "grad_bias_acc", COLUMNS)
            sch.fuse(*sch.get_loops(block("grad_bias")))
            # main pass: row blocks of ROWS rows
            no, ni = row_blocks(sch, n, rfs, ROWS)
        else:
            no = n
        sch.unroll(sch.get_loops(block("grad_gates"))[-2])
        sch.parallel(no)
        if has_bias:
            bias = block("grad_bias_acc")
            # rows past N only in the last block: partition so the others carry no row guard
            sch.annotate(ni, "pragma_loop_partition_hint", 1)
            sch.parallel(co)
            sch.decompose_reduction(bias, sch.get_loops(bias)[1])
