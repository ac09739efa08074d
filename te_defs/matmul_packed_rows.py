"""``matmul_packed`` for fewer rows than one of its row blocks (32).

The same product, C = A·B (+ bias) (+ addend) with B in column panels, and the
same arguments; a separate entry point because its schedule is built for a
handful of rows: the rows left over when M is not a multiple of the main
kernel's row block (an LSTM step with an odd batch size, or the shrinking
batch of variable-length sequences), where the main kernel's guarded tail
tiles run an order of magnitude slower.  float32 only.
"""
from __future__ import annotations

import dataclasses

from . import register
from .matmul_packed import OP as MAIN

OP = register(
    dataclasses.replace(
        MAIN,
        name="matmul_packed_rows",
        shapes={
            "M=1 N=32 K=1": {"M": 1, "Nb": 1, "K": 1},
            "odd, not a vector multiple": {"M": 13, "Nb": 2, "K": 19},
            "13 rows H=256": {"M": 13, "Nb": 32, "K": 256},
            "31 rows H=256 bwd": {"M": 31, "Nb": 8, "K": 1024},
        },
        doc=__doc__,
    )
)
