"""The sizes an LSTM's launch plan depends on (:class:`Config`): the key of its plan
(``launches.plan``)."""
from __future__ import annotations

import dataclasses


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

    def in_size(self, layer: int) -> int:
        return self.I if layer == 0 else self.D * self.H
