"""Ascend: the ops' TIR rules and the records of the packages lowering.ascend writes.

``RULES`` are the ops' ScheduleRules (vector.py), applied by ``schedules.apply`` as every target's:
each inlines the elementwise stages of its op's definition for lowering.ascend's vector compiler.

The rest is data, the packaging records (records.py): an op's ``OpPackage`` (one module per op) is
its CANN name and aclnn signature (each parameter of a named kind: input or output tensor, variant
flag, trailing dimensions, output mask, unused input, each mapped to the TE tensor of its
definition), the kernel pattern that lowers its TE definition and how the op's tensors map to that
pattern's GM arguments, the outputs summed per row group in a fixed order, and the few host facts
the definition does not have (statistics types, the kernels' UB use and tiling call, the tiling's
flags).  lowering.ascend.host_checks generates the first phase's checks and the second phase from
it into the one host template (targets/ascend/host.cpp.in); the rows' grouping and tiling are in
the op's fixed tiling header (targets/ascend/<op>_tiling.h).  ``STEP_KERNELS`` are the full LSTM's
step kernels (``StepKernels``: no aclnn API of their own).
"""
from __future__ import annotations

from . import vector
from .layer_norm_backward import PACKAGE as _LAYER_NORM_BACKWARD
from .lstm_cell_backward import PACKAGE as _LSTM_CELL_BACKWARD
from .lstm_cell_forward import KERNELS as _LSTM_CELL_FORWARD
from .lstm_step_backward import KERNELS as _LSTM_STEP_BACKWARD
from .records import KernelSet, OpPackage, StepKernels

RULES = vector.RULES
PACKAGES = (_LAYER_NORM_BACKWARD, _LSTM_CELL_BACKWARD)  # the ops' packages, each with its aclnn API
STEP_KERNELS = (_LSTM_CELL_FORWARD, _LSTM_STEP_BACKWARD)  # the full LSTM's step kernels (no aclnn API of their own)


def op_package(op: str) -> OpPackage:
    """``op``'s package record (ValueError when it has none)."""
    for package in PACKAGES:
        if package.op == op:
            return package
    raise ValueError(f"no Ascend package record for op {op!r} (known: {sorted(p.op for p in PACKAGES)})")


__all__ = ["KernelSet", "OpPackage", "StepKernels", "RULES", "PACKAGES", "STEP_KERNELS", "op_package"]
