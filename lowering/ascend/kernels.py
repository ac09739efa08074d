"""The kernels every Ascend package has besides its op's own, from the target's templates: the copy
kernel (a strided view to or from a contiguous copy in the workspace) and the fixed-order group sum
(the row groups' fp32 partial sums added in group order); and the package's tiling header."""
from __future__ import annotations

from ..c_dialect import ASCENDC
from . import fixed

COPY_DTYPES = ("float32", "float16")  # copies move bits: one copy kernel per element size

SCALAR_CASTS = fixed.text("scalar_casts.h").rstrip("\n")  # FgCast, once in a translation unit


def copy_source(name: str, dtype: str) -> str:
    """The copy kernel ``name``: lines (every dimension but the last) over the cores, each written to GM
    by DataCopyPad (never by scalar stores, which go out as whole cache lines and race other cores).
    A line adjacent on both sides goes GM -> UB -> GM in chunks; one adjacent in the destination is
    gathered element by element into UB first; one strided in the destination too is read as its
    whole span, its elements set in UB, and the span written back (the gaps as they were: the host
    orders the dimensions by destination stride, so the spans of different lines are disjoint)."""
    return fixed.render("copy_kernel.cpp.in", NAME=name, T=ASCENDC.type(dtype))


def group_sum_source(name: str, dtype: str, tiling: str, length: str, outputs: tuple[str, ...]) -> str:
    """A kernel adding the row groups' fp32 partial sums in group order (the same bits on any core
    count) into the outputs: workspace [groups][len(outputs)][length], each output ``length`` long;
    an output given as a null address is not wanted and not written."""
    t = ASCENDC.type(dtype)
    return fixed.render(
        "group_sum_kernel.cpp.in", NAME=name, T=t, TILING=tiling, LENGTH=length, K=str(len(outputs)),
        ARGS=", ".join(ASCENDC.pointer(o) for o in outputs), ADDRS=", ".join(outputs),
        SETS="\n".join(f"    out[{i}].SetGlobalBuffer((__gm__ {t} *){o}, length);" for i, o in enumerate(outputs)),
        STORE=(ASCENDC.instruction("Muls", "o", "acc", ASCENDC.float_literal(1.0), "n") if dtype == "float32"
               else ASCENDC.instruction("Cast", "o", "acc", ASCENDC.round_mode("rint"), "n")))


def tiling_header(op: str) -> str:
    """The op's tiling header (targets/ascend/<op>_tiling.h) with the copy kernels' parameters
    (copy_params.h, the same in every package) before its closing #endif."""
    body, endif = fixed.text(f"{op}_tiling.h").rsplit("#endif", 1)
    return body + fixed.text("copy_params.h") + "#endif" + endif
