"""The LayerNorm backward on Ascend: CANN's aclnnLayerNormBackward (two-phase API, with CANN's
signature), its kernels lowered by the "rownorm" pattern (two passes over each row, the row sums in
the definition's 16 lanes), one per dtype and statistics type, and dgamma/dbeta summed per 8-row
group in a fixed order."""
from __future__ import annotations

from ...lowering import naming
from ...targets.ascend import ACL_TYPES
from .rule import AscendOp


def _host(rule: AscendOp) -> dict:
    """The host template's kernel tables: the main kernel per (aclDataType, fp32 statistics), the
    group-sum kernel per aclDataType."""
    mains, reduces = [], []
    for dtype, stats in rule.stat_types.items():
        for suffix, stat_t in stats:
            fp32_stats = int(stat_t == "float" and dtype != "float32")
            mains.append(f"    if (dt == {ACL_TYPES[dtype]} && fp32_stats == {fp32_stats}) "
                         f"return aclrtlaunch_{naming.ascend_kernel(rule.short, dtype, suffix)};")
        reduces.append(f"    if (dt == {ACL_TYPES[dtype]}) return "
                       f"aclrtlaunch_{naming.ascend_kernel(rule.short, dtype, rule.reduce)};")
    return {"MAIN_CASES": "\n".join(mains), "REDUCE_CASES": "\n".join(reduces)}


RULE = AscendOp(
    op="layer_norm_backward",
    cann="LayerNormBackward",
    title="the LayerNorm backward (CANN aclnnLayerNormBackward)",
    params=(("const aclTensor *", "gradOut"), ("const aclTensor *", "input"),
            ("const aclIntArray *", "normalizedShape"), ("const aclTensor *", "mean"),
            ("const aclTensor *", "rstd"), ("const aclTensor *", "weightOptional"),
            ("const aclTensor *", "biasOptional"), ("const aclBoolArray *", "outputMask"),
            ("aclTensor *", "gradInputOut"), ("aclTensor *", "gradWeightOut"), ("aclTensor *", "gradBiasOut")),
    doc=("First phase: check the tensors and plan the work.",
         "gradOut, input: [A1..Ai, R1..Rj], FLOAT, FLOAT16 or BFLOAT16, alike; normalizedShape: [R1..Rj] (j >= 1, the",
         "input's trailing dimensions); mean, rstd: [A1..Ai, 1 (j times)] or [A1..Ai], both FLOAT or both the",
         "input's type; weightOptional (NULL: ones) and biasOptional (checked, not used): [R1..Rj], the",
         "input's type.  outputMask (3 booleans) names the outputs wanted: gradInputOut (the input's shape),",
         "gradWeightOut, gradBiasOut ([R1..Rj]), all of the input's type; one not wanted may be NULL and is",
         "not written.  Any non-negative strides (tensors whose rows are not dense are copied through the",
         "workspace).  dgamma and dbeta are summed over the rows in a fixed order: the same bits every run.",
         "ACLNN_ERR_PARAM_NULLPTR: a required argument, or a wanted output, is NULL;",
         "ACLNN_ERR_PARAM_INVALID: a data type, shape, layout or mask that does not fit."),
    short="lng",
    kernel="rownorm",
    gm={"x": "x", "dy": "dy", "mean": "mean", "var": "stat", "gamma": "gamma", "dx": "dx",
        "dgamma": "dgamma", "dbeta": "dbeta"},
    kernel_args=("x", "dy", "mean", "stat", "gamma", "dx", "workspace", "tiling"),
    group_sums=("dgamma", "dbeta"),
    group_sum_length="t.d",
    reduce="reduce",
    kernel_doc=("// AscendC kernels of the LayerNorm backward, {dtype}: dx with the row sums in 16 lanes",
                "// (as the definition says), dgamma/dbeta partial sums per 8-row group, and their",
                "// fixed-order reduction."),
    # the per-row scalars of the two passes: mean and rstd of the row, its two row sums, eps and D
    scalars={"rstd": "rstd", "sum_dyg": "s1", "sum_dyg_xhat": "s2", "mean": "mean_m", "eps": "t_.eps", "D": "t_.d"},
    # with fp16 or bf16 input the statistics may be of the input's type or fp32
    stat_types={"float32": (("", "float"),), "float16": (("", "half"), ("fp32stats", "float")),
                "bfloat16": (("", "bfloat16_t"), ("fp32stats", "float"))},
    host_includes='#include "opdev/common_types.h"  // aclIntArray / aclBoolArray elements\n',
    host=_host,
)
