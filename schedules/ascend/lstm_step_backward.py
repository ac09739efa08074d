"""One step of the full LSTM's backward through time on Ascend's vector cores: te_defs/lstm_step_backward.py
lowered by the "gates" pattern, fp32: dgates [N, 4H] and dcx from the step's gradients and the saved
activations.  The definition's third output, dgates transposed for the weight-gradient GEMMs, is not
among these kernels' outputs (not mapped here): a row pattern writes rows."""
from __future__ import annotations

from .records import StepKernels

KERNELS = StepKernels(
    op="lstm_step_backward",
    kernel="gates",
    gm={"dh": "dh", "dy": "dy", "dc": "dc", "cx": "cx", "i": "i", "f": "f", "g": "g", "o": "o", "tanhc": "tanhc",
        "dgates": "dgates", "dcx": "dcx"},
    kernel_args=("dh", "dy", "dc", "cx", "i", "f", "g", "o", "tanhc", "dgates", "dcx", "workspace", "tiling"),
    tiling_header="lstm_step_tiling",
)
