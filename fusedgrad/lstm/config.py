"""The sizes an LSTM's launch plan depends on (:class:`Config`): shared by the plan's DAG
(``dag``) and its data (``launches``)."""
from __future__ import annotations

import dataclasses

RECURRENCES = ("layer", "step")


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything the launch plan depends on (sizes, not values)."""

    T: int
    B: int
    I: int
    H: int
    L: int
    D: int
    has_biases: bool
    varlen: bool
    recurrence: str = "layer"
    """How the time steps run: "layer", one generated kernel per layer and direction
    (``lstm_layer_forward`` / ``lstm_layer_backward``: the CPU, CUDA); "step", a GEMM and a pointwise kernel
    per time step driven from here (the other targets, until they have the layer kernels)."""

    def in_size(self, layer: int) -> int:
        return self.I if layer == 0 else self.D * self.H

    def steps(self, d: int, backward: bool = False) -> range:
        """Time steps of direction ``d`` in execution order."""
        fwd = range(self.T) if d == 0 else range(self.T - 1, -1, -1)
        return fwd if not backward else fwd[::-1]
