"""The LSTM-cell backward on Ascend: CANN's ThnnFusedLstmCellBackward (aclnn two-phase API), its
kernels lowered by the "gates" pattern, one per variant (grad_hy, grad_cy, bias present or not) and
dtype, and grad_bias summed per 8-row group in a fixed order."""
from __future__ import annotations

from ...lowering import naming
from ...targets.ascend import ACL_TYPES
from .rule import AscendOp


def _host(rule: AscendOp) -> dict:
    """The host template's kernel tables: the main kernel per (dtype code * 8 + variant bits), with its
    UB sizes; the group-sum kernel per dtype code; the dtype code of an aclDataType."""
    from ...lowering.ascend import gates  # the variants as the kernels have them

    dtypes = gates.dtypes(rule)
    cases, reduces = [], []
    for code, dtype in enumerate(dtypes):
        for v in gates.variants(rule):
            u = naming.ascend_macro(rule.short, dtype, v.tag)
            cases.append(f"    case {code * 8 + v.key}: *slots = {u}_SLOTS; *streams = {u}_STREAMS; "
                         f"return aclrtlaunch_{naming.ascend_kernel(rule.short, dtype, v.tag)};")
        reduces.append(f"    case {code}: return aclrtlaunch_{naming.ascend_kernel(rule.short, dtype, rule.reduce)};")
    codes = " : ".join(f"dt == {ACL_TYPES[d]} ? {code}" for code, d in enumerate(dtypes)) + " : -1"
    return {"MAIN_CASES": "\n".join(cases), "REDUCE_CASES": "\n".join(reduces), "DTYPE_CODES": codes}


RULE = AscendOp(
    op="lstm_cell_backward",
    cann="ThnnFusedLstmCellBackward",
    title="the fused LSTM-cell backward (CANN ThnnFusedLstmCellGrad)",
    params=(("const aclTensor *", "gradHyOptional"), ("const aclTensor *", "gradCOptional"),
            ("const aclTensor *", "cx"), ("const aclTensor *", "cy"), ("const aclTensor *", "storage"),
            ("bool ", "hasBias"), ("aclTensor *", "gradGatesOut"), ("aclTensor *", "gradCxOut"),
            ("aclTensor *", "gradBiasOut")),
    doc=("First phase: check the tensors and plan the work.  gradHyOptional and gradCOptional may be NULL",
         "(an exact zero).  cx, cy, gradHyOptional, gradCOptional, gradCxOut: [N, H]; storage (gates i, f,",
         "g, o) and gradGatesOut: [N, 4H]; gradBiasOut: [4H] (used when hasBias).  FLOAT, FLOAT16 or BFLOAT16, all",
         "alike; rows may have any stride, elements within a row must be adjacent.",
         "ACLNN_ERR_PARAM_NULLPTR: a required tensor (or workspaceSize/executor) is NULL;",
         "ACLNN_ERR_PARAM_INVALID: a data type, a shape or a layout that does not fit."),
    short="lcg",
    kernel="gates",
    gm={"grad_hy": "dhy", "grad_cy": "dc", "cx": "cx", "cy": "cy", "storage": "storage",
        "grad_gates": "dgates", "grad_cx": "dcx", "grad_bias": "db"},
    kernel_args=("dhy", "dc", "cx", "cy", "storage", "dgates", "dcx", "db", "workspace", "tiling"),
    group_sums=("db",),
    group_sum_length="4u * t.h",
    reduce="bias_reduce",
    kernel_doc=("// AscendC kernels of the fused LSTM-cell backward, {dtype}: one per variant (grad_hy,",
                "// grad_cy, bias present or not), and the fixed-order grad_bias reduction."),
    host=_host,
)
