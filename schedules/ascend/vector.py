"""The Ascend kernels' schedules as TIR: what lowering.ascend's vector compiler reads.

An op's TE definition (``te_defs.get(op).compute(dtype, **flags)``) becomes a PrimFunc, and its
rule here inlines the elementwise stages it names into their consumers, so each row output's block
is one expression over the input buffers (the LSTM-cell backward: tanh_cy and grad_c into
grad_gates and grad_cx).  A stage the kernels keep as a per-row scalar (the LayerNorm backward's
rstd and row sums) stays a block of its own.  Loops are not split or bound here: the AscendC
kernels' rows, tiles and cores come from the op's fixed tiling header.
"""
from __future__ import annotations

from ... import te_defs
from .. import tir_api
from .. import ScheduleRule, apply, block_names


class InlineStages(ScheduleRule):
    """Inline the stages named in ``INLINE`` that the variant has into their consumers."""

    INLINE: tuple[str, ...] = ()

    def schedule(self, sch, target) -> None:
        present = block_names(sch)
        for name in self.INLINE:
            if name in present:  # a variant without grad_hy has neither stage
                sch.compute_inline(sch.get_sblock(name))


class LstmCellBackward(InlineStages):
    op = "lstm_cell_backward"
    INLINE = ("tanh_cy", "grad_c")


class LstmCellForward(InlineStages):
    op = "lstm_cell_forward"
    INLINE = ()  # every stage is an output; hy reads o and tanhc as the lowering computed them


class LstmStepBackward(InlineStages):
    op = "lstm_step_backward"
    INLINE = ("dh_t", "dc_t")


class LayerNormBackward(InlineStages):
    op = "layer_norm_backward"
    INLINE = ()  # rstd and the row sums are the passes' per-row scalars


RULES = (LstmCellBackward(), LstmCellForward(), LstmStepBackward(), LayerNormBackward())


def schedule(op: str, dtype: str, **flags):
    """``op``'s variant ``flags`` for ``dtype``, scheduled by its rule in the package's ``RULES``
    (``schedules.apply``, as every target's): (s_tir.Schedule, the TE arguments of the definition,
    in order)."""
    args = te_defs.get(op).compute(dtype, **flags)
    sch, _ = apply(__package__, tir_api.prim_func(args, op, op), None)
    return sch, args
