"""The "rownorm" kernel pattern (a ``patterns.KernelPattern``): two passes over each row (the LayerNorm
backward's).

The same vector compiler (vector.Lowerer) gives the passes over a row tile from the op's blocks as
schedules/ascend/vector.py schedules them (TIR): pass 1 the lane values of the row's two sums (the
lane blocks' values) and the terms of the group-summed outputs (dgamma's and dbeta's reduction
sources), pass 2 the row output (dx's value), with the per-row scalars (mean, rstd, the sums) as
instruction operands.  The row sums keep the definition's 16 interleaved lanes added in lane order;
dgamma and dbeta are summed per row group in UB, written once per tile, and the groups added in
order by the group-sum kernel.  One kernel per dtype and statistics type.
"""
from __future__ import annotations

from typing import Mapping

from ...schedules.ascend import vector as vector_schedules
from .. import naming
from ..c_dialect import ASCENDC
from . import fixed
from .kernels import COPY_DTYPES, copy_source, group_sum_source
from .vector import Lowerer, print_program, producer, update


def programs(rule, dtype: str):
    """Pass 1 (the row sums' lane values, dgamma's and dbeta's terms) and pass 2 (dx) of a row tile,
    from the blocks of te_defs/layer_norm_backward.py scheduled as TIR: [(name, value)] each."""
    sch, _ = vector_schedules.schedule(rule.op, dtype)
    func = sch.mod["main"]
    lanes = []
    for name in ("sum_dyg", "sum_dyg_xhat"):
        # the row sum adds its lanes; each lane adds if_then_else(d < D, value, 0): the value
        lanes.append(producer(sch, update(sch, name)).args[1])
    p1 = Lowerer(func, scalars=rule.scalars)
    outs1 = [("lanes1", p1.value(lanes[0])), ("lanes2", p1.value(lanes[1])),
             ("dgamma", p1.value(producer(sch, update(sch, "dgamma")))),
             ("dbeta", p1.value(producer(sch, update(sch, "dbeta"))))]
    p2 = Lowerer(func, scalars=rule.scalars)
    outs2 = [("dx", p2.value(update(sch, "dx")))]
    return (p1.p, outs1), (p2.p, outs2)


def kernel_source(rule, dtype: str) -> tuple[str, int]:
    """(C++ of the LayerNorm backward kernels for ``dtype``, UB bytes per tile element).

    A core takes whole 8-row groups.  For each group, pass 1 walks the row in UB tiles, and within
    a tile the group's rows in order: gamma's tile is read once for the group, each row adds its
    tile to its own 16 lanes of the row sums, and dgamma's and dbeta's terms are summed over the
    group's rows in UB and written to the workspace once per tile.  Pass 2 does the same walk for
    dx; when a row fits one tile, its dx follows its pass 1 while the row is still in UB (x and dy
    read once).  Each row's lanes still take the tiles in order and each partial sum the rows in
    order, so the bits do not depend on the tile size or the core count.

    The kernel class is targets/ascend/rownorm_kernel.cpp.in, each entry rownorm_entry.cpp.in; the
    passes' programs are printed from the op's TIR into their fields."""
    elem = ASCENDC.type(dtype)
    cls, tiling = naming.ascend_class(rule.short, dtype), naming.ascend_tiling(rule.short)
    slots = naming.ascend_macro(rule.short, dtype, "slots")
    programs_by_pass, refs, nslots = {}, {}, 0
    for which, (prog, outs) in zip(("PASS1", "PASS2"), programs(rule, dtype)):
        lines: list[str] = []
        used, ref = print_program(lines.append, prog, outs, dtype, lambda k: k[0])
        programs_by_pass[which] = "\n".join(lines)
        refs.update({name: ref(val) for name, val in outs})
        nslots = max(nslots, used)
    instruction = ASCENDC.instruction  # a vector instruction, spelled by the dialect
    if dtype == "float32":
        store = (instruction("Muls", "o", refs["dx"], ASCENDC.float_literal(1.0), "n")
                 + "  // exact copy into the output queue")
    else:
        store = instruction("Cast", "o", refs["dx"], ASCENDC.round_mode("rint"), "n")
    # rstd = 1 / sqrt(var + eps) on the vector unit, in scratch sc
    rstd = [instruction("Dup", "sc", "stat + t_.eps", "16"), instruction("Sqrt", "sc", "sc", "16"),
            instruction("Dup", "sc[16]", ASCENDC.float_literal(1.0), "16"),
            instruction("Div", "sc", "sc[16]", "sc", "16")]
    # dgamma's and dbeta's group sums in part: the group's first row starts them, the others add
    sums = {}
    for k, key in enumerate(("dgamma", "dbeta")):
        part = f"part[{k}u * t_.tile]"
        sums[f"{key.upper()}_START"] = instruction("Adds", part, refs[key], ASCENDC.float_literal(0.0), "n")
        sums[f"{key.upper()}_ADD"] = instruction("Add", part, part, refs[key], "n")
    parts = [fixed.render(
        "rownorm_kernel.cpp.in", SLOTS=slots, NSLOTS=str(nslots), CLASS=cls, TILING=tiling, T=elem,
        MEAN=ASCENDC.convert("float32", "g_mean.GetValue((uint64_t)(g0 + i) * t_.s_mean)"),
        STAT=ASCENDC.convert("float32", "g_stat.GetValue((uint64_t)(g0 + i) * t_.s_stat)"),
        RSTD="\n".join(" " * 20 + line for line in rstd),
        CLEAR_LANES=instruction("Dup", "small", ASCENDC.float_literal(0.0), "(int32_t)(rows * 32u)"),
        GAMMA_ONES=instruction("Dup", "x_gamma", ASCENDC.convert(dtype, ASCENDC.float_literal(1.0)), "(int32_t)len"),
        **programs_by_pass, LANES1=refs["lanes1"], LANES2=refs["lanes2"],
        LANE_ADD1=instruction("Add", "lanes", "lanes", f"{refs['lanes1']}[c * 16u]", "16"),
        LANE_ADD2=instruction("Add", "lanes[16]", "lanes[16]", f"{refs['lanes2']}[c * 16u]", "16"),
        **sums, STORE_DX=store)]
    parts += [fixed.render("rownorm_entry.cpp.in", NAME=naming.ascend_kernel(rule.short, dtype, suffix),
                           TILING=tiling, CLASS=cls, S=stat_type) for suffix, stat_type in rule.stat_types[dtype]]
    parts.append(group_sum_source(naming.ascend_kernel(rule.short, dtype, rule.reduce), dtype, tiling,
                                  rule.group_sum_length, rule.group_sums))
    if dtype in COPY_DTYPES:
        parts.append(copy_source(naming.ascend_kernel(rule.short, dtype, "copy"), dtype))
    elem_bytes = 4 if dtype == "float32" else 2
    # x and dy in, dx out (double-buffered), gamma's tile, fp32 temporaries and the two group sums
    per_elem = 7 * elem_bytes + nslots * 4 + 8
    return "\n".join(parts) + "\n", per_elem


def entries(rule, dtype: str) -> list[str]:
    """The main kernels' symbol parts (after the dtype): one per statistics type."""
    return [suffix for suffix, _ in rule.stat_types[dtype]]


def kernel_file(rule, dtype: str) -> tuple[str, int]:
    """The kernels of ``dtype`` (one per statistics type, the group sum, the copy) and their UB bytes
    per tile element."""
    return kernel_source(rule, dtype)


def sizes_header(rule, sizes: Mapping[str, int]) -> str:
    """fg_<op>_sizes.h: each dtype's UB bytes per tile element, {dtype: bytes}, for the host's tiling."""
    guard = f"FG_{rule.op.upper()}_SIZES_H"
    lines = ["// generated by fusedgrad: UB bytes per tile element of each kernel (for the host's tiling).",
             f"#ifndef {guard}", f"#define {guard}"]
    lines += [f"#define {naming.ascend_macro(rule.short, dtype, 'per_elem')} {per}u" for dtype, per in sizes.items()]
    return "\n".join(lines + ["#endif", ""])
