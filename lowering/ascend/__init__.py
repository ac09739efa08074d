"""Ascend operator packages generated from the TE definitions: AscendC kernels, CANN's aclnn
two-phase API and a CMakeLists.txt per op (targets/ascend: the target; schedules/ascend: each op's
TIR rule and package record).

  vector    the small vector compiler: scheduled TIR (schedules/ascend/vector.py) -> vector
            instructions over UB tiles, printed in the ASCENDC dialect
  gates     the "gates" kernel pattern (the LSTM-cell backward: elementwise rows, a gate axis)
  rownorm   the "rownorm" kernel pattern (the LayerNorm backward: two passes over each row)
  patterns  what a kernel pattern provides (``KernelPattern``) and the registered ones by name
  kernels   the copy and fixed-order group-sum kernels every package has, and the tiling header
  cube      the GEMM on an AI Cube core (C = A . B^T: L1, L0A/L0B, Mmad, Fixpipe), for the full LSTM
  host      the aclnn header, the launch declarations and the host code
  host_checks  the host code's op-dependent parts (checks, kernel tables, plan) from the rule's
               aclnn parameters and the op's definition
  lstm      the full LSTM's package (aclnnLSTM / aclnnLstmBackward): its files, from cube, the step
            kernels and targets/ascend/lstm_host.cpp
  lstm_plan the full LSTM's plan header: the shared plan's tables, the enums the host takes them by,
            and how the host keeps each buffer
  package   the writer: ``write(root, banner)`` / ``write_op(root, op, banner)`` / ``write_lstm(root, banner)``
  fixed     the target's fixed sources and templates (targets/ascend/)
"""
from __future__ import annotations

from ... import te_defs
from ...schedules.ascend import op_package
from ..c_dialect import ASCENDC
from . import gates as _gates
from .package import write, write_lstm, write_op

CTYPE = ASCENDC.types  # how the kernels spell each dtype (lowering.c_dialect.ASCENDC)
DTYPES = tuple(CTYPE)  # the operators' input types: fp16 and bf16 are computed in fp32 in UB

# the LSTM-cell kernels' variants, as the tests and benchmarks name them
VARIANTS = _gates.variants(op_package("lstm_cell_backward"))


def Variant(has_grad_hy: bool, has_grad_cy: bool, has_bias: bool) -> _gates.Variant:
    """The LSTM-cell kernels' variant with these flags."""
    op = te_defs.get("lstm_cell_backward")
    flags = op.variant(has_grad_hy=has_grad_hy, has_grad_cy=has_grad_cy, has_bias=has_bias)
    return _gates.Variant(tuple(flags.items()))


__all__ = ["write", "write_lstm", "write_op", "op_package", "DTYPES", "CTYPE", "VARIANTS", "Variant"]
