"""One step of the full LSTM's forward on Ascend's vector cores: te_defs/lstm_cell_forward.py (the
activations, c and h from the step's pre-activation gates) lowered by the "gates" pattern, fp32 (the
full LSTM computes in fp32 whatever its public dtype).  The gates are two GEMM results of the Cube
unit (lowering/ascend/cube.py), each with its bias: this step's h_{t-1}.W_hh^T + b_hh and the
sequence's x_t.W_ih^T + b_ih (``xw``).  The Cube cannot add a matrix to its product, so the kernel
adds them as it reads them, in that order."""
from __future__ import annotations

from .records import StepKernels

KERNELS = StepKernels(
    op="lstm_cell_forward",
    kernel="gates",
    gm={"gates": "gates", "cx": "cx", "hy": "hy", "cy": "cy", "i": "i", "f": "f", "g": "g", "o": "o",
        "tanhc": "tanhc"},
    kernel_args=("gates", "xw", "cx", "hy", "cy", "i", "f", "g", "o", "tanhc", "workspace", "tiling"),
    tiling_header="lstm_step_tiling",
    addends={"gates": ("xw",)},
)
