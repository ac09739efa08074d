"""One step of the full LSTM's forward on Ascend's vector cores: te_defs/lstm_cell_forward.py (the
activations, c and h from the step's pre-activation gates) lowered by the "gates" pattern, fp32 (the
full LSTM computes in fp32 whatever its public dtype).  The gates GEMM before it runs on the Cube
unit (lowering/ascend/cube.py)."""
from __future__ import annotations

from .rule import StepKernels

KERNELS = StepKernels(
    op="lstm_cell_forward",
    short="lcf",
    kernel="gates",
    gm={"gates": "gates", "cx": "cx", "hy": "hy", "cy": "cy", "i": "i", "f": "f", "g": "g", "o": "o",
        "tanhc": "tanhc"},
    kernel_args=("gates", "cx", "hy", "cy", "i", "f", "g", "o", "tanhc", "workspace", "tiling"),
    tiling_header="lstm_step_tiling",
)
