"""Transpose on the CPU: TILE x TILE tiles (both in L1), tiles in parallel.

Within a tile the output row is written contiguously from a column of the
input; LLVM vectorises the contiguous side.  The non-divisible edges are
partitioned off so full tiles carry no guards.
"""
from .. import ScheduleRule

TILE = 16


class Transpose(ScheduleRule):
    op = "transpose"

    def schedule(self, sch, target) -> None:
        b = sch.get_sblock("b")
        n, m = sch.get_loops(b)
        no, ni = sch.split(n, [None, TILE])
        mo, mi = sch.split(m, [None, TILE])
        sch.reorder(no, mo, ni, mi)
        sch.parallel(sch.fuse(no, mo))
        sch.annotate(ni, "pragma_loop_partition_hint", 1)
        sch.annotate(mi, "pragma_loop_partition_hint", 1)
