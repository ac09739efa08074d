"""LayerNorm backward on a DSP: row blocks over the cores, each block's rows staged in local memory.

The library runs the kernel on every core of a group (spmd); the parallel loops
are split over the cores.  Main pass: blocks of rows in parallel, each as many
partial blocks (the definition's row block, schedules.row_blocks; at least one)
as fit the chip's local memory double-buffered (x and dy rows, mean and var,
gamma once: the windows the printer copies in by DMA) at rows of ROW_WIDTH
elements; wider rows run too, reading shared memory in place.  Per row: rstd,
the definition's 16-lane row sums, dx and the row's dgamma/dbeta contribution
to its partial block.  Last pass: column chunks of one vector register's
float32 lanes in parallel, each adding the partials in block order; then the
casts to dgamma/dbeta, in parallel too.  Inner loops are left whole for the C
compiler to vectorise; summation orders are the definition's, never the core
count's.
"""
from .. import ScheduleRule
from ..row_blocks import last_pass, partial_rows, partials, row_blocks
from .machine import accumulator_lanes, io_dtype, partial_blocks

# the row width (D) a parallel block's DMA windows are sized for: the widest rows the library is
# benchmarked at (benchmarks/dsp_bench.py); a larger block would stage only narrower rows
ROW_WIDTH = 4096


class LayerNormBackward(ScheduleRule):
    op = "layer_norm_backward"

    def schedule(self, sch, target) -> None:
        dtype = io_dtype(sch)
        rows = partial_rows(self.op)
        blocks = partial_blocks(dtype, rows, row_elements=2 * ROW_WIDTH + 2, fixed_elements=ROW_WIDTH, buffers=4)
        lanes = accumulator_lanes(dtype)
        block = sch.get_sblock
        # column sums -> per-row-block partials rf[ro, d] (rows in order inside a block)
        rfs = partials(sch, ("dgamma_acc", "dbeta_acc"), rows)
        # last pass: partials added in block order, column chunks in parallel (merged first:
        # merge puts the merged loop where the last merged loop was)
        final = sch.merge(*(last_pass(sch, f"{name}_acc", lanes) for name in ("dgamma", "dbeta")))
        # both casts in one loop, split over the cores too.  (Storing each chunk right after its sums,
        # reverse_compute_at, would save that loop's barrier, but TVM's CompactBufferAllocation then
        # sizes the chunk's sum buffer 2**31 - 1 elements: it cannot bound min(32, D - 32 * chunk).)
        casts = sch.merge(*(sch.get_loops(block(name))[0] for name in ("dgamma", "dbeta")))
        # main pass: partial blocks, `blocks` of them per parallel block
        m, _ = sch.get_loops(block("dx"))
        mb, mi = row_blocks(sch, m, rfs, rows)
        parallel = sch.split(mb, [None, blocks])[0] if blocks > 1 else mb
        # per row, in this order: rstd, both lane sums in one chunk loop, the two lane-order
        # sums, then dx and both partial updates in one column loop
        for name in ("sum_dyg_xhat", "sum_dyg", "sum_dyg_xhat_lanes", "sum_dyg_lanes", "rstd"):
            sch.compute_at(block(name), mi, index=-2)
        chunks = []
        for name in ("sum_dyg_lanes", "sum_dyg_xhat_lanes"):
            lane, chunk = sch.get_loops(block(name))[-2:]
            sch.reorder(chunk, lane)
            chunks.append(chunk)
        chunk = sch.merge(*chunks)
        sch.merge(*(sch.get_loops(block(name))[-1] for name in ("sum_dyg_lanes", "sum_dyg_xhat_lanes")))
        sch.merge(*(sch.get_loops(b)[-1] for b in [block("dx")] + rfs))
        sch.parallel(parallel)
        sch.parallel(final)
        sch.parallel(casts)
        for name in ("sum_dyg_lanes", "sum_dyg_xhat_lanes"):
            sch.decompose_reduction(block(name), chunk)
        for name in ("dgamma_acc", "dbeta_acc"):
            sch.decompose_reduction(block(name), sch.get_loops(block(name))[1])
