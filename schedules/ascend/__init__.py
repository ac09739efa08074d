"""Ascend rules: how each op becomes an AscendC package, as data (lowering.ascend reads them).

An op's rule (``AscendOp``, one module per op) is its CANN name and aclnn signature, the kernel
pattern that lowers its TE definition and how the op's tensors map to that pattern's GM arguments,
the outputs summed per row group in a fixed order, and the few host-code tables that differ per op
(``host``).  The rows' grouping and tiling are in the op's fixed tiling header
(targets/ascend/<op>_tiling.h), and the first phase's checks in its host template
(targets/ascend/<op>_host.cpp.in).
"""
from __future__ import annotations

from .layer_norm_backward import RULE as _LAYER_NORM_BACKWARD
from .lstm_cell_backward import RULE as _LSTM_CELL_BACKWARD
from .rule import AscendOp

RULES = (_LAYER_NORM_BACKWARD, _LSTM_CELL_BACKWARD)

__all__ = ["AscendOp", "RULES"]
