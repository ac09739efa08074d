"""``matmul_packed`` for fewer rows than one of its row blocks (32).

The same product, C = A·B (+ bias) (+ addend) with B in column panels, and the
same arguments; a separate entry point because its schedule is built for a
handful of rows: the rows left over when M is not a multiple of the main
kernel's row block (an LSTM step with an odd batch size, or the shrinking
batch of variable-length sequences), where the main kernel's guarded tail
tiles run an order of magnitude slower.  float32 only.
"""
from __future__ import annotations

import itertools

from . import OpDef, TensorSpec, register
from .matmul_packed import DTYPE, PANEL, compute, nbytes, reference, sample

OP = register(
    OpDef(
        name="matmul_packed_rows",
        inputs=(
            TensorSpec("a", ("M", "K")),
            TensorSpec("bp", ("Nb", "K", str(PANEL))),
            TensorSpec("bias", (f"{PANEL}*Nb",), when="has_bias"),
            TensorSpec("addend", ("M", f"{PANEL}*Nb"), when="has_addend"),
        ),
        outputs=(TensorSpec("c", ("M", f"{PANEL}*Nb")),),
        scalars=(),
        variants=tuple({"has_bias": x, "has_addend": y} for x, y in itertools.product((False, True), repeat=2)),
        compute=compute,
        reference=reference,
        sample=sample,
        nbytes=nbytes,
        shapes={
            "M=1 N=32 K=1": {"M": 1, "Nb": 1, "K": 1},
            "odd, not a vector multiple": {"M": 13, "Nb": 2, "K": 19},
            "13 rows H=256": {"M": 13, "Nb": 32, "K": 256},
            "31 rows H=256 bwd": {"M": 31, "Nb": 8, "K": 1024},
        },
        doc=__doc__,
        dtypes=(DTYPE,),
    )
)
