"""The full LSTM's per-step pointwise kernels on the CPU: one row loop, row blocks in parallel.

``lstm_cell_forward`` (gates -> activations, states) and ``lstm_step_backward``
(gradients -> dgates, dcx) are elementwise over [N, H] rows.  Every stage's
row loop is merged into one, so each row's intermediates (e.g. dh_t, dc_t)
shrink to row-sized scratch that stays in L1; the merged loop is cut into
blocks of ROWS rows run in parallel.  Column loops are left whole for LLVM to
vectorise with its own tail handling.  No reductions: results do not depend
on the thread count.
"""
from .. import ScheduleRule, block_names

COLUMNS = 64  # gate columns per parallel task of the transposed copy
ROWS = 16  # rows per parallel task: a 32-row step is two tasks (14.6-17.5 us against 19-22 with 4-row tasks at H=256)


class _RowWise(ScheduleRule):
    # stages not over rows first (scheduled by the subclass)
    own: tuple[str, ...] = ()
    KNOBS = {"ROWS": (4, 8, 16, 32, 64)}

    def schedule(self, sch, target) -> None:
        ROWS = self.knob("ROWS")
        names = [b for b in block_names(sch) if b not in self.own]
        # pairwise merges (a many-loop merge trips its depth check)
        n = sch.get_loops(sch.get_sblock(names[0]))[0]
        for name in names[1:]:
            n = sch.merge(n, sch.get_loops(sch.get_sblock(name))[0])
        no, ni = sch.split(n, [None, ROWS])
        sch.parallel(no)
        sch.annotate(ni, "pragma_loop_partition_hint", 1)


class LstmCellForward(_RowWise):
    op = "lstm_cell_forward"


class LstmStepBackward(_RowWise):
    op = "lstm_step_backward"
    own = ("dgates_t",)
    KNOBS = {"ROWS": (4, 8, 16, 32, 64), "COLUMNS": (16, 32, 64, 128, 256)}

    def schedule(self, sch, target) -> None:
        COLUMNS = self.knob("COLUMNS")
        super().schedule(sch, target)
        sch.unroll(sch.get_loops(sch.get_sblock("dgates"))[-2])  # the gate axis: four column loops
        # dgatesᵀ after the row pass (dgates is in L1/L2 by then): blocks of
        # COLUMNS gate columns in parallel, each in tiles of ROWS rows x its
        # COLUMNS, so a tile reads ROWS lines of dgates and writes ROWS-element
        # runs of each dgatesᵀ row.  (Walking all N rows per column reads one
        # line per element 16 KiB apart at H = 1024: every read missed to L3
        # once N reached the hundreds, 74 ms at N = 1024 on a Zen 5.)
        k, j, n = sch.get_loops(sch.get_sblock("dgates_t"))
        kj = sch.fuse(k, j)
        outer, inner = sch.split(kj, [None, COLUMNS])
        no, ni = sch.split(n, [None, self.knob("ROWS")])
        sch.reorder(outer, no, inner, ni)
        sch.parallel(outer)
        sch.annotate(no, "pragma_loop_partition_hint", 1)
