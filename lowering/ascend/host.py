"""The aclnn host glue of an Ascend package, from the op's package record (schedules/ascend) and the target's
templates: the public header (aclnnop/aclnn_<op>.h: both phases' declarations), the kernels' launch
declarations (fg_<op>_launch.h) and the host code (aclnn_<op>.cpp: the common start and helpers, then
targets/ascend/host.cpp.in, the same for every op, with the first phase's checks, the kernel tables
and the plan that host_checks generates from the rule's aclnn parameters and the op's definition)."""
from __future__ import annotations

from ... import te_defs
from .. import naming
from ...schedules.ascend.records import Out, OutputMask, TrailingDims
from . import fixed, host_checks, kernels

WIDTH = 120  # the host code's line length


def _phase1(rule) -> list[str]:
    return [f"{ctype}{name}" for ctype, name in rule.params] + ["uint64_t *workspaceSize", "aclOpExecutor **executor"]


PHASE2 = ["void *workspace", "uint64_t workspaceSize", "aclOpExecutor *executor", "aclrtStream stream"]


def _aligned(head: str, params: list[str], per_line: int) -> str:
    """``head(params)``, ``per_line`` parameters a line, continuation lines under the first."""
    pad = " " * (len(head) + 1)
    lines = [", ".join(params[i:i + per_line]) for i in range(0, len(params), per_line)]
    return head + "(" + (",\n" + pad).join(lines) + ")"


def filled(head: str, params: list[str]) -> str:
    """``head(``, then the parameters filling lines of WIDTH indented by four, then ``) {``."""
    words = [p + "," for p in params[:-1]] + [params[-1] + ") {"]
    lines, line = [], "   "
    for word in words:
        if len(line) + 1 + len(word) > WIDTH:
            lines.append(line)
            line = "   "
        line += " " + word
    return head + "(\n" + "\n".join(lines + [line])


def aclnn_header(rule) -> str:
    return aclnn_header_text(rule.cann, rule.title, _phase1(rule), rule.doc)


def aclnn_header_text(cann: str, title: str, phase1: list[str], doc) -> str:
    """aclnnop/aclnn_<op>.h of the CANN operator ``cann``: both phases' declarations, the first with the
    parameters ``phase1`` (C declarations) and the comment lines ``doc``."""
    api = f"aclnn{cann}"
    return fixed.render("aclnn.h.in", TITLE=title, GUARD=naming.aclnn_stem(cann).upper() + "_H_",
                        DOC="/* " + "\n * ".join(doc) + " */",
                        PHASE1=_aligned(f"aclnnStatus {api}GetWorkspaceSize", phase1, 2),
                        PHASE2=_aligned(f"aclnnStatus {api}", PHASE2, 3))


def launch_header(rule, entries: dict) -> str:
    """The launch functions CANN's AscendC build makes for the kernels ({dtype: main kernels' symbol
    parts}), declared for the host code; where that build's own headers (aclrtlaunch_<kernel>.h) are on
    the include path they come first, so a declaration that does not match theirs fails to compile."""
    main_args = ", ".join(f"void *{a}" for a in rule.kernel_args)
    sums = ", ".join(f"void *{o}" for o in rule.group_sums)
    decls = []
    for dtype, parts in entries.items():
        decls += [(naming.ascend_kernel(rule.short, dtype, p), main_args) for p in parts]
        decls.append((naming.ascend_kernel(rule.short, dtype, rule.reduce), f"void *workspace, {sums}, void *tiling"))
    decls += [(naming.ascend_kernel(rule.short, d, "copy"), "void *src, void *dst, void *params")
              for d in kernels.COPY_DTYPES]
    return launch_file(f"FG_{rule.op.upper()}_LAUNCH_H", decls)


def launch_file(guard: str, decls: list[tuple[str, str]]) -> str:
    """launch.h.in declaring the launch functions ``decls`` ((kernel symbol, its C parameters) each), each
    kernel's own launch header first where CANN's build made one (launch_include.h.in)."""
    return fixed.render("launch.h.in", GUARD=guard,
                        INCLUDES="".join(fixed.render("launch_include.h.in", NAME=n) for n, _ in decls).rstrip("\n"),
                        DECLS="\n".join(f"uint32_t aclrtlaunch_{n}(uint32_t blockDim, aclrtStream stream, {a});"
                                        for n, a in decls))


def _tables(rule, variants: int) -> tuple[list[str], list[str]]:
    """The cases of main_kernel (dtype code * variants + variant key -> the kernel and its UB bytes per
    tile element) and of reduce_kernel (dtype code -> the group-sum kernel)."""
    cases, reduces = [], []
    for code, (dtype, rows) in enumerate(host_checks.entries(rule).items()):
        for key, part, flags in sorted(rows, key=lambda r: r[0]):
            per = rule.ub_per_elem.format(kernel=naming.ascend_macro(rule.short, dtype, part),
                                          dtype=naming.ascend_macro(rule.short, dtype),
                                          elem_bytes=host_checks.elem_bytes(dtype), **flags)
            launch = "aclrtlaunch_" + naming.ascend_kernel(rule.short, dtype, part)
            case = f"    case {code * variants + key}: return {{{launch}, {per}}};"
            cases += [case] if len(case) <= WIDTH else [f"    case {code * variants + key}:",
                                                         f"        return {{{launch},", f"                {per}}};"]
        reduces.append(f"    case {code}: return aclrtlaunch_{naming.ascend_kernel(rule.short, dtype, rule.reduce)};")
    return cases, reduces


def _u32(expr: str) -> str:
    """A C size expression as uint32_t ("1" -> "1u", "4 * H" -> "(uint32_t)(4 * H)")."""
    if expr.isdigit():
        return f"{expr}u"
    return f"(uint32_t){expr}" if expr.isidentifier() else f"(uint32_t)({expr})"


def _fields(rule) -> dict:
    """host.cpp.in's op-dependent fields, less the signatures and the copied helpers."""
    found = host_checks.checks(rule)
    slots, shapes = found["slots"], found["shapes"]
    by_gm = {s.gm: s for s in slots}
    bits = host_checks.variant_bits(rule, slots)
    variants = 1 << len(bits)
    cases, reduces = _tables(rule, variants)
    casts = {name: f"(int){c}" if c.isidentifier() else f"(int)({c})" for name, c in bits}
    opdef = te_defs.get(rule.op)
    variant = opdef.variant_key_c({f: casts.pop(f) for f in opdef.flags}, extra=list(casts.values()))
    args = [f"(uint32_t){s}" for s in shapes.symbols] + ["main_kernel(code, e->variant).per_elem", "FG_ASCEND_UB_BYTES",
                                                         "e->cores", *rule.tiling_extra]
    if rule.empty_tiling is None:
        setup = host_checks.wrap(f"    t = fg_{rule.short}_tiling(", args, ");")
    else:
        setup = ["    if (" + " && ".join(f"{s} > 0" for s in shapes.symbols) + ") {",
                 *host_checks.wrap(f"        t = fg_{rule.short}_tiling(", args, ");"),
                 "    } else {  // no work: the sizes and a tile",
                 *(f"        t.{k} = {v};" for k, v in rule.empty_tiling.items()), "    }"]
    if rule.tiling_flags:
        terms = []
        for macro, tes in rule.tiling_flags:
            cond = host_checks.any_given([s for s in slots if s.param.te in tes]) if tes else None
            terms.append(macro if cond is None else f"({host_checks.paren(cond)} ? {macro} : 0u)")
        setup += host_checks.wrap("    t.flags = ", terms, ";", " |")
    outputs = [s for s in slots if isinstance(s.param, Out)]
    sums = [by_gm[g] for g in rule.group_sums]
    run_main = [f"{s} > 0" for s in shapes.symbols]
    if host_checks.any_given(outputs):
        run_main.append(host_checks.paren(host_checks.any_given(outputs)))
    any_sum = host_checks.any_given(sums)
    rows = [s for s in slots if host_checks.symbol_of(s.spec.shape[0]) == shapes.rows]
    dense = {s.gm: " * ".join(host_checks.size(d) for d in s.spec.shape[1:]) or "1" for s in rows}
    strides = (host_checks.wrap("    uint32_t *strides[FG_TENSORS] = {",
                                [f"&t.s_{s.gm}" if s.gm in dense else "nullptr" for s in slots], "};") +
               host_checks.wrap("    const uint32_t dense[FG_TENSORS] = {",
                                [_u32(dense[s.gm]) if s.gm in dense else "0u" for s in slots], "};"))
    args = [f"ptr[{by_gm[a].enum}]" for a in rule.kernel_args[:-2]]  # then the workspace and the tiling
    call = host_checks.wrap("        launch(", ["t.cores", "stream", *args, "partials", "ws"], ") != 0) {")
    return {
        "CHECKS": found["CHECKS"],
        "SLOTS": "\n".join(host_checks.wrap("enum { ", [s.enum for s in slots] + ["FG_TENSORS"], " };")),
        "FIRST_OUTPUT": outputs[0].enum,
        "LAUNCH_TYPES": "\n".join(
            host_checks.wrap("typedef uint32_t (*fg_main_launch)(", ["uint32_t", "aclrtStream"] +
                             ["void *"] * len(rule.kernel_args), ");") +
            host_checks.wrap("typedef uint32_t (*fg_reduce_launch)(", ["uint32_t", "aclrtStream"] +
                             ["void *"] * (len(rule.group_sums) + 2), ");")),
        "TILING": naming.ascend_tiling(rule.short),
        "VARIANTS": str(variants),
        "MAIN_CASES": "\n".join(cases),
        "REDUCE_CASES": "\n".join(reduces),
        "VARIANT": variant,
        "TILING_SETUP": "\n".join(setup),
        "RUN_MAIN": " && ".join(run_main),
        "RUN_REDUCE": (f"{host_checks.paren(any_sum)} && " if any_sum else "") + f"{rule.group_sum_length} > 0u",
        "ANY_SUM": host_checks.paren(any_sum) if any_sum else "true",
        "SUMS": str(len(rule.group_sums)),
        "LENGTH": rule.group_sum_length,
        "STRIDES": "\n".join(strides),
        "MAIN_CALL": "\n".join(call),
        "SUM_ARGS": ", ".join(f"ptr[{s.enum}]" for s in sums),
    }


def host_source(rule) -> str:
    """op_host/aclnn_<op>.cpp: the common start, then host.cpp.in with the helpers and the op's fields."""
    facts = fixed.facts()
    api = f'extern "C" aclnnStatus aclnn{rule.cann}'
    arrays = any(isinstance(p, (TrailingDims, OutputMask)) for p in rule.aclnn)
    extra = '#include "opdev/common_types.h"  // aclIntArray / aclBoolArray elements\n' if arrays else ""
    start = fixed.render("host_preamble.cpp.in", OP=rule.op, ACLNN_HEADER=naming.aclnn_stem(rule.cann) + ".h",
                         TILING=naming.ascend_tiling(rule.short), EXTRA=extra,
                         VECTOR_CORES=str(facts["vector_cores"]), UB_KIB=str(facts["ub_kib"]),
                         UB_RESERVED_KIB=str(facts["ub_reserved_kib"]))
    copy = {d: "aclrtlaunch_" + naming.ascend_kernel(rule.short, d, "copy") for d in kernels.COPY_DTYPES}
    return start + fixed.render("host.cpp.in", HOST_COMMON=fixed.text("host_common.cpp"),
                                PHASE1=filled(f"{api}GetWorkspaceSize", _phase1(rule)),
                                PHASE2=_aligned(api, PHASE2, 3) + " {",
                                COPY2=copy["float16"], COPY4=copy["float32"], **_fields(rule))
