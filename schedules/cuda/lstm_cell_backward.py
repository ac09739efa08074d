"""LSTM-cell backward on CUDA: one fused pass, then a fixed-order grad_bias sum.

Main kernel: a thread owns one column j (threads of a block take consecutive
columns, so every load and store is coalesced) and ROWS consecutive rows; per
row it computes tanh(cy) and grad_c in registers, the four gate gradients and
grad_cx, and adds the row's gate gradients into its grad_bias partial for the
row block (rfactor of the sum over N).  The partials [ceil(N/ROWS), 4, H] go
to a workspace.  Second kernel: each column's partials are summed by
FINAL_THREADS threads with strided row blocks, then combined by a fixed
shuffle/shared-memory tree -- no atomics, so the bits never change between
runs.  ROWS is part of the summation order.
"""
from .. import ScheduleRule, block_names
from ._util import bind

ROWS = 8  # rows per thread, and per grad_bias partial (8 won at N=1024, tied at 8192 on an H200)
THREADS = 128  # columns per block in the main kernel
FINAL_COLUMNS = 32  # columns per block in the final sum
FINAL_THREADS = 16  # threads summing one column's partials


class LstmCellBackward(ScheduleRule):
    op = "lstm_cell_backward"

    def schedule(self, sch, target) -> None:
        block = sch.get_sblock
        names = block_names(sch)
        has_bias = "grad_bias" in names
        stages = [b for b in names if not b.startswith("grad_bias")]
        n, g, j = sch.get_loops(block("grad_gates"))
        sch.reorder(n, j, g)
        # one (row, column) loop nest for every elementwise stage
        n = sch.get_loops(block(stages[0]))[0]
        for name in stages[1:]:
            n = sch.merge(n, sch.get_loops(block(name))[0])
        j = sch.get_loops(block(stages[0]))[1]
        for name in stages[1:]:
            j = sch.merge(j, sch.get_loops(block(name))[1])
        no, ni = sch.split(n, [None, ROWS])
        jo, ji = sch.split(j, [None, THREADS])
        sch.reorder(no, jo, ji, ni)
        if has_bias:
            # the partial sums over row blocks, in the same loops as the rows they sum
            acc = block("grad_bias_acc")
            ro, ri = sch.split(sch.get_loops(acc)[2], [None, ROWS])
            rf = sch.rfactor(ro, 0)
            g, rj, ro, ri = sch.get_loops(rf)
            rjo, rji = sch.split(rj, [None, THREADS])
            sch.reorder(ro, rjo, rji, ri, g)
            no, jo, ji, ni = (sch.merge(a, b) for a, b in zip((no, jo, ji, ni), (ro, rjo, rji, ri)))
            # accumulate in registers; one store of the 4 partials per thread
            sch.reverse_compute_at(sch.cache_write(rf, 0, "local"), ji)
        bx = sch.fuse(no, jo)
        bind(sch, bx, "blockIdx.x", target)
        bind(sch, ji, "threadIdx.x", target)
        for name in ("tanh_cy", "grad_c"):
            if name in names:
                sch.set_scope(block(name), 0, "local")
        sch.unroll(sch.get_loops(block("grad_gates"))[-1])
        if not has_bias:
            return
        sch.decompose_reduction(rf, ni)  # after binding: binding needs the block whole
        # final pass: FINAL_COLUMNS columns x FINAL_THREADS partial sums per block
        g, j, ro = sch.get_loops(acc)
        gj = sch.fuse(g, j)
        co, ci = sch.split(gj, [None, FINAL_COLUMNS])
        roo, roi = sch.split(ro, [None, FINAL_THREADS])
        sch.reorder(co, ci, roi, roo)
        bind(sch, co, "blockIdx.x", target)
        bind(sch, ci, "threadIdx.x", target)
        bind(sch, roi, "threadIdx.y", target)
        sch.reverse_compute_at(block("grad_bias"), ci)
        sch.set_scope(acc, 0, "local")
