"""The names of what fusedgrad generates, in one place.

Kernel entry symbols (:func:`entry_symbol`: one per op variant, schedule
flags included), artifact file stems (:func:`artifact_stem`: libraries, CUDA
sources, generated TIR, tuning records) and the names inside the DSP library
and the Ascend packages (vendor entry points, kernels, classes, tilings,
macros, files).  A module that names a generated symbol or file takes the
name from here; TVM derives only its device kernels' names from an entry
symbol (``<symbol>_kernel``).
"""
from __future__ import annotations

import re
from typing import Mapping

from .. import te_defs
from ..targets import dsp

def entry_symbol(op: str, dtype: str, variant: Mapping[str, bool]) -> str:
    """C symbol of one kernel variant, e.g. ``fg_lstm_cell_backward_float32__bias_grad_cy``.

    The suffix lists the variant flags that are set (``has_`` dropped), sorted;
    ``none`` when a variant has flags but none is set.
    """
    base = f"fg_{op}_{dtype}"
    if not variant:
        return base
    flags = "_".join(k.removeprefix("has_") for k, v in sorted(variant.items()) if v)
    return f"{base}__{flags or 'none'}"


def artifact_stem(op: str, target: str, dtype: str, isa_class: str | None = None) -> str:
    """``<op>.<target>.<dtype>``, and for a CPU library its ISA class (``llvm.CpuFacts.isa_class``), so
    that one folder holds a library per class: ``column_sum.llvm.float32.x86-64-v3``."""
    return f"{op}.{target}.{dtype}" + (f".{isa_class}" if isa_class else "")


def dsp_kernel_symbol(op: str, dtype: str, variant: Mapping[str, bool]) -> str:
    """C symbol of one DSP kernel variant (static in the library), e.g. ``fg_lcg_float32__bias_grad_cy``:
    the op's short name (te_defs ``OpDef.short``)."""
    return entry_symbol(dsp_short(op), dtype, variant)


def dsp_short(op: str) -> str:
    """The op's short name in the DSP library's symbols and macros (te_defs ``OpDef.short``), e.g. ``lcg``."""
    short = te_defs.get(op).short
    if not short:
        raise ValueError(f"{op}: the definition names no short name (OpDef.short) for the C libraries' symbols")
    return short


def dsp_entry(op: str, dtype: str) -> str:
    """The vendor entry point's name without its _s/_p suffix, e.g. ``hp_layernormgrad``
    (the DSP target's ``DTYPE_PREFIXES`` and ``VENDOR_NAMES``)."""
    return f"{dsp.DTYPE_PREFIXES[dtype]}_{dsp_file(op)}"


def dsp_file(op: str) -> str:
    """The stem of the op's header and source in a chip's folder, e.g. ``lstmcellgrad`` (the DSP
    target's ``VENDOR_NAMES``)."""
    return dsp.VENDOR_NAMES[op]


def ascend_kernel(short: str, dtype: str, part: str = "") -> str:
    """C symbol of an Ascend kernel: ``fg_<short>_<dtype>[_<part>]``, e.g. ``fg_lcg_float32_hy_cy_bias``,
    ``fg_lng_float16_fp32stats``, ``fg_lng_float32_reduce``, ``fg_lcg_float16_copy``."""
    return f"fg_{short}_{dtype}" + (f"_{part}" if part else "")


def ascend_class(short: str, dtype: str, part: str = "") -> str:
    """The AscendC class behind an Ascend kernel, e.g. ``FgLcg_float32_hy_cy_bias``, ``FgLng_float16``."""
    return f"Fg{short.capitalize()}_{dtype}" + (f"_{part}" if part else "")


def ascend_tiling(short: str) -> str:
    """The tiling struct an Ascend package's host and kernels share, e.g. ``FgLcgTiling``."""
    return f"Fg{short.capitalize()}Tiling"


def ascend_macro(short: str, *parts: str) -> str:
    """A macro of an Ascend package, e.g. ``FG_LCG_FLOAT32_HY_CY_BIAS_SLOTS``."""
    return "_".join(("fg", short) + parts).upper()


def ascend_variant_tag(variant: Mapping[str, bool]) -> str:
    """An Ascend kernel variant's part of its symbol: the flags set, in the op's order, ``has_`` and
    ``grad_`` dropped (``hy_cy_bias``); ``none`` when none is set."""
    return "_".join(k.removeprefix("has_").removeprefix("grad_") for k, v in variant.items() if v) or "none"


def aclnn_stem(cann: str) -> str:
    """The file stem of a CANN operator's aclnn header and host source, e.g.
    ``aclnn_thnn_fused_lstm_cell_backward`` for ``ThnnFusedLstmCellBackward``, ``aclnn_lstm`` for ``LSTM``
    (an acronym is one word)."""
    return "aclnn_" + re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", cann).lower()
