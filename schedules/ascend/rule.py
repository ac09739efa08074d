"""The record of one op's Ascend package (see the package's docstring)."""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping


@dataclasses.dataclass(frozen=True)
class AscendOp:
    """One op's Ascend package.

    op            the te_defs op
    cann          CANN's operator name: the API is aclnn<cann>GetWorkspaceSize / aclnn<cann>, declared in
                  aclnnop/<naming.aclnn_stem(cann)>.h
    title         what the API is, for its header ("the LayerNorm backward (CANN aclnnLayerNormBackward)")
    params        the first phase's parameters as (C type, name), before workspaceSize and executor; the
                  type is written to join the name directly ("bool ", "const aclTensor *")
    doc           the header's comment on the first phase
    short         the kernels' short name (fg_<short>_<dtype>..., naming.ascend_*)
    kernel        the kernel pattern of lowering.ascend that lowers the TE definition
                  ("gates": elementwise rows with a gate axis; "rownorm": two passes over each row)
    gm            TE tensor -> the main kernels' GM argument
    kernel_args   the main kernels' GM arguments, in order (workspace and tiling last)
    group_sums    the outputs (GM arguments) summed per row group in a fixed order, by the
                  group-sum kernel fg_<short>_<dtype>_<reduce>, each group_sum_length long
    kernel_doc    the kernel files' description, after the "generated" line ({dtype} filled in)
    scalars       TE tensor or variable -> the C expression of a per-row scalar (rownorm)
    stat_types    dtype -> [(entry suffix, C type of the statistics)] (rownorm: one kernel per type)
    host_includes extra lines of the host code's includes
    host          (rule) -> the per-op fields of the op's host template (kernel tables)
    """

    op: str
    cann: str
    title: str
    params: tuple[tuple[str, str], ...]
    doc: str
    short: str
    kernel: str
    gm: Mapping[str, str]
    kernel_args: tuple[str, ...]
    group_sums: tuple[str, ...]
    group_sum_length: str
    reduce: str
    kernel_doc: tuple[str, ...]
    host: Callable[["AscendOp"], Mapping[str, str]]
    scalars: Mapping[str, str] = dataclasses.field(default_factory=dict)
    stat_types: Mapping[str, tuple[tuple[str, str], ...]] = dataclasses.field(default_factory=dict)
    host_includes: str = ""
