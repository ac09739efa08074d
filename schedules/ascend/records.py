"""The packaging records of the Ascend kernels (see the package's docstring): ``KernelSet``, what a
kernel pattern of lowering.ascend reads to print a set of kernels, and its two kinds, ``OpPackage``
(an op's package with its aclnn API) and ``StepKernels`` (a full-LSTM step's kernels); and the kinds
of the aclnn parameters an op's CANN signature is made of.  Records are data, not schedule rules:
the ops' TIR rules are the ScheduleRules of vector.py."""
from __future__ import annotations

import dataclasses
from typing import Mapping

from ... import te_defs


# ---- the aclnn parameter kinds: each is one C type and one piece of the host code (lowering.ascend.host_checks)


@dataclasses.dataclass(frozen=True)
class Tensor:
    """An input tensor (``const aclTensor *``), the TE input ``te``.  ``optional``: NULL is allowed and
    means the tensor is absent (the variant without it when the definition gives it a ``when`` flag;
    otherwise a tiling flag of the record says so to the kernels).  ``keepdims``: its shape may also be
    the reference tensor's with the dimensions it does not have kept as 1 (CANN's statistics)."""

    name: str
    te: str
    optional: bool = False
    keepdims: bool = False
    ctype = "const aclTensor *"


@dataclasses.dataclass(frozen=True)
class Unused:
    """An optional input tensor the kernels do not read (``const aclTensor *``): when given, it is
    checked to have the data type and the shape of the TE tensor ``like``."""

    name: str
    like: str
    ctype = "const aclTensor *"


@dataclasses.dataclass(frozen=True)
class Out:
    """An output tensor (``aclTensor *``), the TE output ``te``; wanted unless the definition gives it
    a ``when`` flag that is off, or an ``OutputMask`` does not ask for it (then it may be NULL)."""

    name: str
    te: str
    ctype = "aclTensor *"


@dataclasses.dataclass(frozen=True)
class Flag:
    """A ``bool`` selecting the definition's variants with the flag ``variant`` on."""

    name: str
    variant: str
    ctype = "bool "


@dataclasses.dataclass(frozen=True)
class TrailingDims:
    """An ``aclIntArray`` (at least one element): the dimensions of the symbol ``symbol`` as the
    trailing dimensions of the reference tensor (the input ``of``); its other symbol takes the
    leading ones, each symbol standing for the product of its dimensions (LayerNorm's
    normalizedShape: [A.., R..] read as M x D)."""

    name: str
    of: str
    symbol: str
    ctype = "const aclIntArray *"


@dataclasses.dataclass(frozen=True)
class OutputMask:
    """An ``aclBoolArray`` of one boolean per output of ``outputs`` (aclnn names): the outputs
    wanted; one not wanted may be NULL and is not written."""

    name: str
    outputs: tuple[str, ...]
    ctype = "const aclBoolArray *"


Param = Tensor | Unused | Out | Flag | TrailingDims | OutputMask


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelSet:
    """Kernels lowered from an op's TE definition by one kernel pattern of lowering.ascend: what every
    pattern reads.

    op            the te_defs op (its short name, OpDef.short, is the kernels' C prefix: ``short``)
    kernel        the kernel pattern of lowering.ascend that lowers the TE definition
                  (lowering.ascend.patterns: "gates": elementwise rows with a gate axis; "rownorm":
                  two passes over each row)
    gm            TE tensor -> the main kernels' GM argument
    kernel_args   the main kernels' GM arguments, in order (workspace and tiling last)
    group_sums    the outputs (GM arguments) summed per row group in a fixed order
    addends       TE input -> further GM arguments of its shape whose values the kernel adds to it,
                  in order, as it reads it (each addend has its own row and gate strides)
    """

    op: str
    kernel: str
    gm: Mapping[str, str]
    kernel_args: tuple[str, ...]
    group_sums: tuple[str, ...] = ()
    addends: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def short(self) -> str:
        """The kernels' C prefix (fg_<short>_<dtype>..., Fg<Short>Tiling, FG_<SHORT>_...: naming.ascend_*):
        the definition's short name (te_defs ``OpDef.short``), which the op's tiling header in
        targets/ascend spells too."""
        short = te_defs.get(self.op).short
        if not short:
            raise ValueError(f"{self.op}: the definition names no short name (OpDef.short) for its kernels' symbols")
        return short


@dataclasses.dataclass(frozen=True, kw_only=True)
class OpPackage(KernelSet):
    """One op's Ascend package: its kernels (``KernelSet``'s fields) and its aclnn API.

    cann          CANN's operator name: the API is aclnn<cann>GetWorkspaceSize / aclnn<cann>, declared in
                  aclnnop/<naming.aclnn_stem(cann)>.h
    title         what the API is, for its header ("the LayerNorm backward (CANN aclnnLayerNormBackward)")
    aclnn         the first phase's parameters (before workspaceSize and executor), in CANN's order,
                  each of a kind above; together they name every input and output of the definition
                  once.  The first phase checks them (NULLs, views, data types, shapes against the
                  definition's, layouts) and plans the work from them; the second runs it.
    doc           the header's comment on the first phase
    group_sum_length  each group sum's length (a C expression over the tiling ``t``); the group-sum
                  kernel is fg_<short>_<dtype>_<reduce>
    reduce        the group-sum kernel's name part
    kernel_doc    the kernel files' description, after the "generated" line ({dtype} filled in)
    scalars       TE tensor or variable -> the C expression of a per-row scalar (rownorm)
    stat_types    dtype -> [(entry suffix, C type of the statistics)] (rownorm: one kernel per type)
    stats         the TE inputs of the statistics type: all alike, the input's type or one of
                  stat_types' wider ones (which selects that kernel)
    ub_per_elem   the C expression of a main kernel's UB bytes per tile element, from the kernels'
                  sizes header: {kernel} its macro prefix, {dtype} its dtype's, {elem_bytes} the
                  element size, and each variant flag as 0 or 1
    tiling_extra  the tiling function's arguments after the cores (fg_<short>_tiling(sizes..., per
                  element, UB bytes, cores, extra...))
    empty_tiling  tiling field -> value when a size is 0 (the tiling function is not called); None:
                  the tiling function takes any size
    tiling_flags  (macro, TE tensors): the tiling's ``flags`` get the macro when any of the tensors
                  is given or wanted (no tensors: always); empty: the tiling has no flags
    """

    cann: str
    title: str
    aclnn: tuple[Param, ...]
    doc: tuple[str, ...]
    group_sum_length: str
    reduce: str
    kernel_doc: tuple[str, ...]
    ub_per_elem: str
    scalars: Mapping[str, str] = dataclasses.field(default_factory=dict)
    stat_types: Mapping[str, tuple[tuple[str, str], ...]] = dataclasses.field(default_factory=dict)
    stats: tuple[str, ...] = ()
    tiling_extra: tuple[str, ...] = ()
    empty_tiling: Mapping[str, str] | None = None
    tiling_flags: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def params(self) -> tuple[tuple[str, str], ...]:
        """The first phase's parameters as (C type, name); the type joins the name directly."""
        return tuple((p.ctype, p.name) for p in self.aclnn)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepKernels(KernelSet):
    """The kernels of one step of the full LSTM on the vector cores, with no aclnn API of their own:
    the full LSTM's plan launches them.  ``tiling_header``: the fixed header
    (targets/ascend/<name>.h) of the kernels' tiling struct."""

    tiling_header: str
