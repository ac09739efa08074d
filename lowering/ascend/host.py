"""The aclnn host glue of an Ascend package, from the op's rule (schedules/ascend) and the target's
templates: the public header (aclnnop/aclnn_<op>.h: both phases' declarations), the kernels' launch
declarations (fg_<op>_launch.h) and the host code (aclnn_<op>.cpp: the common start and helpers, then
the op's own first-phase checks and second phase from targets/ascend/<op>_host.cpp.in, with the
kernel tables the rule gives)."""
from __future__ import annotations

from .. import naming
from . import fixed, kernels

WIDTH = 120  # the host code's line length


def _phase1(rule) -> list[str]:
    return [f"{ctype}{name}" for ctype, name in rule.params] + ["uint64_t *workspaceSize", "aclOpExecutor **executor"]


PHASE2 = ["void *workspace", "uint64_t workspaceSize", "aclOpExecutor *executor", "aclrtStream stream"]


def _aligned(head: str, params: list[str], per_line: int) -> str:
    """``head(params)``, ``per_line`` parameters a line, continuation lines under the first."""
    pad = " " * (len(head) + 1)
    lines = [", ".join(params[i:i + per_line]) for i in range(0, len(params), per_line)]
    return head + "(" + (",\n" + pad).join(lines) + ")"


def _filled(head: str, params: list[str]) -> str:
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
    api = f"aclnn{rule.cann}"
    doc = "/* " + "\n * ".join(rule.doc) + " */"
    return fixed.render("aclnn.h.in", TITLE=rule.title, GUARD=naming.aclnn_stem(rule.cann).upper() + "_H_", DOC=doc,
                        PHASE1=_aligned(f"aclnnStatus {api}GetWorkspaceSize", _phase1(rule), 2),
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
    includes = [f'#if __has_include("aclrtlaunch_{n}.h")\n#include "aclrtlaunch_{n}.h"\n#endif' for n, _ in decls]
    return fixed.render("launch.h.in", GUARD=f"FG_{rule.op.upper()}_LAUNCH_H", INCLUDES="\n".join(includes),
                        DECLS="\n".join(f"uint32_t aclrtlaunch_{n}(uint32_t blockDim, aclrtStream stream, {a});"
                                        for n, a in decls))


def host_source(rule) -> str:
    facts = fixed.facts()
    api = f'extern "C" aclnnStatus aclnn{rule.cann}'
    start = fixed.render("host_preamble.cpp.in", OP=rule.op, ACLNN_HEADER=naming.aclnn_stem(rule.cann) + ".h",
                         TILING=naming.ascend_tiling(rule.short), EXTRA=rule.host_includes,
                         VECTOR_CORES=str(facts["vector_cores"]), UB_KIB=str(facts["ub_kib"]),
                         UB_RESERVED_KIB=str(facts["ub_reserved_kib"]))
    copy = {d: "aclrtlaunch_" + naming.ascend_kernel(rule.short, d, "copy") for d in kernels.COPY_DTYPES}
    return start + fixed.render(f"{rule.op}_host.cpp.in", HOST_COMMON=fixed.text("host_common.cpp"),
                                PHASE1=_filled(f"{api}GetWorkspaceSize", _phase1(rule)),
                                PHASE2=_aligned(api, PHASE2, 3) + " {",
                                COPY2=copy["float16"], COPY4=copy["float32"], **rule.host(rule))
