"""Ascend rules: how each op becomes an AscendC package, as data (lowering.ascend reads them).

An op's rule (``AscendOp``, one module per op) is its CANN name and aclnn signature (each parameter
of a named kind: input or output tensor, variant flag, trailing dimensions, output mask, unused
input, each mapped to the TE tensor of its definition), the kernel pattern that lowers its TE
definition and how the op's tensors map to that pattern's GM arguments, the outputs summed per row
group in a fixed order, and the few host facts the definition does not have (statistics types,
the kernels' UB use and tiling call, the tiling's flags).  lowering.ascend.host_checks generates the
first phase's checks and the second phase from it into the one host template
(targets/ascend/host.cpp.in); the rows' grouping and tiling are in the op's fixed tiling header
(targets/ascend/<op>_tiling.h).
"""
from __future__ import annotations

from .layer_norm_backward import RULE as _LAYER_NORM_BACKWARD
from .lstm_cell_backward import RULE as _LSTM_CELL_BACKWARD
from .lstm_cell_forward import KERNELS as _LSTM_CELL_FORWARD
from .lstm_step_backward import KERNELS as _LSTM_STEP_BACKWARD
from .rule import AscendOp, StepKernels

RULES = (_LAYER_NORM_BACKWARD, _LSTM_CELL_BACKWARD)
STEP_KERNELS = (_LSTM_CELL_FORWARD, _LSTM_STEP_BACKWARD)  # the full LSTM's step kernels (no aclnn API of their own)

__all__ = ["AscendOp", "StepKernels", "RULES", "STEP_KERNELS"]
