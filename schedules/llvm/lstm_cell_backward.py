"""LSTM-cell backward on the CPU: one pass over memory, rows in parallel.

Per row n (parallel): tanh(cy) and grad_c into row-sized scratch, then the
four gate gradients (gate loop unrolled) and grad_cx, all reading the row's
inputs while they are in L1.  Inner loops are left whole so LLVM vectorises
them with its own tail handling (no guards from non-divisible splits).
grad_bias is a second, column-parallel pass: each column chunk sums its rows
in row order, so the result does not depend on the thread count.
"""
from .. import ScheduleRule, block_names

BIAS_COLUMNS = 64


class LstmCellBackward(ScheduleRule):
    op = "lstm_cell_backward"

    def schedule(self, sch, target) -> None:
        block = sch.get_sblock
        # variants without grad_hy have no tanh_cy stage: anchor at the first stage
        stages = [b for b in block_names(sch) if not b.startswith("grad_bias")]
        n, _ = sch.get_loops(block(stages[0]))[:2]
        # fuse the other elementwise stages into the anchor's row loop, producers first
        for name in stages[1:]:
            sch.reverse_compute_at(block(name), n)
        sch.unroll(sch.get_loops(block("grad_gates"))[1])
        sch.parallel(n)
        if "grad_bias" not in block_names(sch):
            return
        bias = block("grad_bias_acc")
        g, j, r = sch.get_loops(bias)
        jo, ji = sch.split(j, [None, BIAS_COLUMNS])
        sch.reorder(g, jo, r, ji)
        outer = sch.fuse(g, jo)
        sch.reverse_compute_at(block("grad_bias"), outer)
        sch.parallel(outer)
        sch.decompose_reduction(bias, r)
