"""Embedded DSPs: a standalone C99 library per chip with the vendor entry points
(``fp_/hp_layernormgrad_s/_p``, ``fp_/hp_lstmcellgrad_s/_p``), printed from the
DSP schedules' loop nests by lowering.c_emitter and packaged by lowering.dsp.

This folder also holds the library's fixed C sources (the porting interface,
its host implementation, the half type), copied into every chip's folder.
"""
from __future__ import annotations

from .. import TargetInfo, register

# chip -> what the library ships for it
CHIPS = {
    "ft78ne": {"dtypes": ("float32",)},
    "mt7004": {"dtypes": ("float32", "float16")},
}

INFO = register(
    TargetInfo(
        name="dsp",
        tvm_target=lambda: {"kind": "c"},
        schedules="fusedgrad.schedules.dsp",
        artifact="dsp_c",
        dtypes=("float32", "float16"),
        ops=("layer_norm_backward", "lstm_cell_backward"),
        runnable_here=False,
        facts={"chips": CHIPS},
        runtime_sources="dsp",
        description="embedded DSPs (FT78NE, MT7004): standalone C99 library with the vendor entry points",
    )
)
