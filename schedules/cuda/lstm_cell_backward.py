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

Two schedules, chosen at every call on the host (``tir_api.choose``): where H and every row stride
are multiples of the lanes (4: the float32 values one 16-byte access holds) and every buffer but
grad_bias starts on a boundary of 4 of its elements, a thread owns 4 consecutive columns and each
of its loads and stores is one vector access (16 bytes of float32, 8 of float16); elsewhere it owns
one column.  Each column's grad_bias is summed over the same rows in the same order by both, so the
choice changes no bits.
"""
from .. import ScheduleRule, block_names
from ._util import bind, compute_lanes, vector_conditions
from .. import tir_api

ROWS = 8  # rows per thread, and per grad_bias partial (8 won at N=1024, tied at 8192 on an H200)
THREADS = 128  # columns per block in the main kernel
FINAL_COLUMNS = 32  # columns per block in the final sum
FINAL_THREADS = 16  # threads summing one column's partials


class LstmCellBackward(ScheduleRule):
    op = "lstm_cell_backward"

    def alternatives(self, func, target):
        lanes = compute_lanes(target)

        def vector(sch, target):
            _schedule(sch, target, lanes)

        # grad_bias is written by the final sum, one element per thread
        vectors = [name for name in tir_api.buffer_layouts(func) if name != "grad_bias"]
        return [(vector, vector_conditions(func, lanes, ("H",), vectors)), (self.schedule, None)]

    def schedule(self, sch, target) -> None:
        _schedule(sch, target, 1)


def _schedule(sch, target, lanes: int) -> None:
    """The cell backward with each thread owning ``lanes`` consecutive columns (1: one column; more:
    the branch guarantees that H is a multiple, so the columns are split without a bounds test, and
    each stage walks a thread's columns in its own innermost loop, one vector access)."""
    block = sch.get_sblock
    names = block_names(sch)
    has_bias = "grad_bias" in names
    stages = [b for b in names if not b.startswith("grad_bias")]
    n, g, j = sch.get_loops(block("grad_gates"))
    sch.reorder(n, j, g)
    lane_loops = []
    if lanes > 1:  # j = jq * lanes + jv in every stage, jv innermost
        for name in stages:
            loops = sch.get_loops(block(name))
            jq, jv = sch.split(loops[1], [None, lanes], disable_predication=True)
            if len(loops) == 3:  # grad_gates: (n, jq, g, jv)
                sch.reorder(loops[2], jv)
            lane_loops.append(jv)
    # one (row, column) loop nest for every elementwise stage
    n = sch.get_loops(block(stages[0]))[0]
    for name in stages[1:]:
        n = sch.merge(n, sch.get_loops(block(name))[0])
    j = sch.get_loops(block(stages[0]))[1]
    for name in stages[1:]:
        j = sch.merge(j, sch.get_loops(block(name))[1])
    no, ni = sch.split(n, [None, ROWS])
    jo, ji = sch.split(j, [None, THREADS])
    loops = [no, jo, ji, ni]
    sch.reorder(*loops)
    if has_bias:
        # the partial sums over row blocks, in the same loops as the rows they sum
        acc = block("grad_bias_acc")
        ro, ri = sch.split(sch.get_loops(acc)[2], [None, ROWS])
        rf = sch.rfactor(ro, 0)
        g, rj, ro, ri = sch.get_loops(rf)
        rjv = []
        if lanes > 1:
            rj, v = sch.split(rj, [None, lanes], disable_predication=True)
            rjv = [v]
        rjo, rji = sch.split(rj, [None, THREADS])
        sch.reorder(ro, rjo, rji, ri, g, *rjv)
        lane_loops += rjv
        loops = [sch.merge(a, b) for a, b in zip(loops, (ro, rjo, rji, ri))]
    no, jo, ji = loops[:3]
    bx = sch.fuse(no, jo)
    bind(sch, bx, "blockIdx.x", target)
    bind(sch, ji, "threadIdx.x", target)
    if has_bias:
        # accumulate in registers; one store of the 4 partials (x lanes) per thread
        write_back = sch.cache_write(rf, 0, "local")
        sch.reverse_compute_at(write_back, ji)
        if lanes > 1:
            lane_loops.append(sch.split(sch.get_loops(write_back)[-1], [None, lanes], disable_predication=True)[1])
    for name in ("tanh_cy", "grad_c"):
        if name in names:
            sch.set_scope(block(name), 0, "local")
            if lanes > 1:  # a thread's lanes as their own axis, so its registers are a constant count
                sch.transform_layout(block(name), ("write", 0), lambda n, j: (n, j // lanes, j % lanes),
                                     assume_injective_transform=True)
    sch.unroll(sch.get_loops(block("grad_gates"))[-1 if lanes == 1 else -2])
    for v in lane_loops:
        sch.vectorize(v)
    if not has_bias:
        return
    sch.decompose_reduction(rf, loops[3])  # after binding: binding needs the block whole
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


def _row_block_loops(sch, no, ni, j, lanes: int) -> list:
    """Row blocks (no, ni) and columns j as loops (no, jo, ji, ni[, jv]): block columns, a thread's
    columns, its rows, then (``lanes`` > 1) its consecutive columns, innermost."""
    jv = []
    if lanes > 1:
        j, v = sch.split(j, [None, lanes], disable_predication=True)
        jv = [v]
    jo, ji = sch.split(j, [None, THREADS])
    loops = [no, jo, ji, ni, *jv]
    sch.reorder(*loops)
    return loops
