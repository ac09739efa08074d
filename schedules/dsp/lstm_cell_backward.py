"""LSTM-cell backward on a DSP: row blocks over the cores, each block's rows staged in local memory.

The library runs the kernel on every core of a group (spmd); the parallel loops
are split over the cores.  One row loop holds every elementwise stage; it runs
in parallel blocks of as many rows as fit the chip's local memory
double-buffered (grad_hy, grad_cy, cx, cy and the row's four gates: the windows
the printer copies in by DMA) at a hidden size of HIDDEN; larger ones run too,
reading shared memory in place.  With has_bias a block is a whole number of
grad_bias partial blocks (the definition's row block, schedules.row_blocks; at
least one; rfactor of the column sum), and a last pass adds the partials in
block order over column chunks of one vector register's float32 lanes, in
parallel, then stores grad_bias, in parallel too.  Inner loops are left whole
for the C compiler to vectorise; summation orders are the definition's, never
the core count's.
"""
from .. import ScheduleRule, block_names
from ..row_blocks import last_pass, partial_rows, partials, row_blocks
from .machine import accumulator_lanes, io_dtype, partial_blocks, rows_that_fit

# the hidden size (H) a parallel block's DMA windows are sized for: the largest the library is
# benchmarked at (benchmarks/dsp_bench.py); a larger block would stage only smaller ones
HIDDEN = 1024
WINDOWS = {"row_elements": 8 * HIDDEN, "fixed_elements": 0, "buffers": 5}  # 4 [N, H] inputs, storage [N, 4H]


class LstmCellBackward(ScheduleRule):
    op = "lstm_cell_backward"

    def schedule(self, sch, target) -> None:
        dtype = io_dtype(sch)
        block = sch.get_sblock
        has_bias = "grad_bias" in block_names(sch)
        stages = [b for b in block_names(sch) if not b.startswith("grad_bias")]
        # one row loop for all elementwise stages (pairwise merges: a many-loop merge trips
        # its depth check)
        n = sch.get_loops(block(stages[0]))[0]
        for name in stages[1:]:
            n = sch.merge(n, sch.get_loops(block(name))[0])
        if has_bias:
            rows = partial_rows(self.op)
            rfs = partials(sch, ["grad_bias_acc"], rows)
            # last pass first (merge puts the merged loop where the last one was)
            co = last_pass(sch, "grad_bias_acc", accumulator_lanes(dtype))
            cast = sch.fuse(*sch.get_loops(block("grad_bias")))  # split over the cores too, like the sums
            # main pass: partial blocks, as many per parallel block as fit
            nb, _ = row_blocks(sch, n, rfs, rows)
            blocks = partial_blocks(dtype, rows, **WINDOWS)
            parallel = sch.split(nb, [None, blocks])[0] if blocks > 1 else nb
        else:
            rows = rows_that_fit(dtype, **WINDOWS)
            parallel = sch.split(n, [None, rows])[0] if rows > 1 else n
        sch.unroll(sch.get_loops(block("grad_gates"))[-2])
        sch.parallel(parallel)
        if has_bias:
            sch.parallel(co)
            sch.parallel(cast)
            bias = block("grad_bias_acc")
            sch.decompose_reduction(bias, sch.get_loops(bias)[1])
