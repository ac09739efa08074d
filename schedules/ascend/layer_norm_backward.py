"""The LayerNorm backward on Ascend: CANN's aclnnLayerNormBackward (two-phase API, with CANN's
signature), its kernels lowered by the "rownorm" pattern (two passes over each row, the row sums in
the definition's 16 lanes), one per dtype and statistics type, and dgamma/dbeta summed per 8-row
group in a fixed order."""
from __future__ import annotations

from .records import OpPackage, Out, OutputMask, Tensor, TrailingDims, Unused

PACKAGE = OpPackage(
    op="layer_norm_backward",
    cann="LayerNormBackward",
    title="the LayerNorm backward (CANN aclnnLayerNormBackward)",
    # CANN's signature over the definition's [M, D] tensors: normalizedShape [R..] reads input [A.., R..]
    # as M = prod A rows of D = prod R; rstd is the definition's var (FG_LNG_RSTD below); NULL
    # weightOptional: ones (no FG_LNG_GAMMA); biasOptional is checked, not used; outputMask names the
    # outputs wanted
    aclnn=(Tensor("gradOut", "dy"), Tensor("input", "x"), TrailingDims("normalizedShape", of="input", symbol="D"),
           Tensor("mean", "mean", keepdims=True), Tensor("rstd", "var", keepdims=True),
           Tensor("weightOptional", "gamma", optional=True), Unused("biasOptional", like="gamma"),
           OutputMask("outputMask", ("gradInputOut", "gradWeightOut", "gradBiasOut")),
           Out("gradInputOut", "dx"), Out("gradWeightOut", "dgamma"), Out("gradBiasOut", "dbeta")),
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
    stats=("mean", "var"),
    # the kernels' UB use (fg_layer_norm_backward_sizes.h) and tiling (targets/ascend/layer_norm_backward_tiling.h)
    ub_per_elem="{dtype}_PER_ELEM",
    tiling_extra=("0.0f",),
    tiling_flags=(("FG_LNG_RSTD", ()), ("FG_LNG_GAMMA", ("gamma",)), ("FG_LNG_DX", ("dx",)),
                  ("FG_LNG_DGB", ("dgamma", "dbeta"))),
)
