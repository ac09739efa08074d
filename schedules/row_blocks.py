"""The row blocks of a column sum over rows, as the CPU and DSP schedules share them.

A definition that sums columns over rows (dgamma, dbeta, grad_bias) fixes the summation order by
its ``OpDef.partial_rows``: each block of that many rows adds its rows in order into the block's
partial (rfactor), and a last pass adds the partials in block order over column chunks.  The
schedules run the partials in the same row loop as the elementwise stages (the row is in cache,
or in local memory, once), so the row loop is split into the same blocks.  The thread or core
count only chooses which blocks run where, never the order of a sum.
"""
from __future__ import annotations

from .. import te_defs


def partial_rows(op: str) -> int:
    """Rows per partial sum of ``op``'s column sums: its definition's (te_defs ``OpDef.partial_rows``)."""
    rows = te_defs.get(op).partial_rows
    if not rows:
        raise ValueError(f"{op}: the definition fixes no row block for its column sums (OpDef.partial_rows)")
    return rows


def partials(sch, names, rows: int) -> list:
    """Each reduction block of ``names`` (loops: columns..., rows) rfactored into per-row-block
    partials, loops (block, row, columns...); returns the partials' blocks."""
    out = []
    for name in names:
        *_, r = sch.get_loops(sch.get_sblock(name))
        ro, _ = sch.split(r, [None, rows])
        rf = sch.rfactor(ro, 0)
        *columns, ro, ri = sch.get_loops(rf)
        sch.reorder(ro, ri, *columns)
        out.append(rf)
    return out


def last_pass(sch, name: str, columns: int):
    """The reduction block ``name`` (after :func:`partials`: loops columns..., block) as column chunks
    of ``columns``, each adding the partials in block order; returns the chunk loop."""
    *column_loops, ro = sch.get_loops(sch.get_sblock(name))
    column = sch.fuse(*column_loops) if len(column_loops) > 1 else column_loops[0]
    co, ci = sch.split(column, [None, columns])
    sch.reorder(co, ro, ci)
    return co


def row_blocks(sch, loop, rfs, rows: int) -> tuple:
    """The row loop ``loop`` split into blocks of ``rows`` rows, with the partials ``rfs`` merged
    into it (their block loops into its block loop, their row loops into its row loop); returns
    (block loop, row loop)."""
    outer, inner = sch.split(loop, [None, rows])
    outers, inners = [outer], [inner]
    for rf in rfs:
        ro, ri, *_ = sch.get_loops(rf)
        outers.append(ro)
        inners.append(ri)
    return sch.merge(*outers), sch.merge(*inners)
