"""The LSTM-cell backward on Ascend: CANN's ThnnFusedLstmCellBackward (aclnn two-phase API), its
kernels lowered by the "gates" pattern, one per variant (grad_hy, grad_cy, bias present or not) and
dtype, and grad_bias summed per 8-row group in a fixed order."""
from __future__ import annotations

from .records import OpPackage, Flag, Out, Tensor

PACKAGE = OpPackage(
    op="lstm_cell_backward",
    cann="ThnnFusedLstmCellBackward",
    title="the fused LSTM-cell backward (CANN ThnnFusedLstmCellGrad)",
    # NULL gradHyOptional / gradCOptional: the variant without it (an exact zero); hasBias: the
    # variants with grad_bias (the definition's has_bias)
    aclnn=(Tensor("gradHyOptional", "grad_hy", optional=True), Tensor("gradCOptional", "grad_cy", optional=True),
           Tensor("cx", "cx"), Tensor("cy", "cy"), Tensor("storage", "storage"), Flag("hasBias", "has_bias"),
           Out("gradGatesOut", "grad_gates"), Out("gradCxOut", "grad_cx"), Out("gradBiasOut", "grad_bias")),
    doc=("First phase: check the tensors and plan the work.  gradHyOptional and gradCOptional may be NULL",
         "(an exact zero).  cx, cy, gradHyOptional, gradCOptional, gradCxOut: [N, H]; storage (gates i, f,",
         "g, o) and gradGatesOut: [N, 4H]; gradBiasOut: [4H] (used when hasBias).  FLOAT, FLOAT16 or BFLOAT16, all",
         "alike; any non-negative strides (tensors whose rows are not dense are copied through the",
         "workspace).  gradBiasOut is summed over the rows in a fixed order: the same bits every run.",
         "NaN and Inf follow IEEE arithmetic through the formulas: tanh(+-Inf) is +-1, so an infinite cy",
         "does not by itself make the outputs NaN (CANN's description says an Inf input gives NaN).",
         "ACLNN_ERR_PARAM_NULLPTR: a required tensor (or workspaceSize/executor) is NULL;",
         "ACLNN_ERR_PARAM_INVALID: a data type, a shape or a layout that does not fit."),
    kernel="gates",
    gm={"grad_hy": "dhy", "grad_cy": "dc", "cx": "cx", "cy": "cy", "storage": "storage",
        "grad_gates": "dgates", "grad_cx": "dcx", "grad_bias": "db"},
    kernel_args=("dhy", "dc", "cx", "cy", "storage", "dgates", "dcx", "db", "workspace", "tiling"),
    group_sums=("db",),
    group_sum_length="4u * t.h",
    reduce="bias_reduce",
    kernel_doc=("// AscendC kernels of the fused LSTM-cell backward, {dtype}: one per variant (grad_hy,",
                "// grad_cy, bias present or not), and the fixed-order grad_bias reduction."),
    # the kernels' UB use (fg_lstm_cell_backward_sizes.h) and tiling (targets/ascend/lstm_cell_backward_tiling.h)
    ub_per_elem="fg_lcg_ub_per_elem({elem_bytes}u, {kernel}_STREAMS, {kernel}_SLOTS, {has_bias})",
    empty_tiling={"n": "(uint32_t)N", "h": "(uint32_t)H", "tile": "16u"},
)
