"""C-family dialects for lowering.c_emitter: what one language prints differently, as a table.

The printer (lowering.c_emitter) walks loop-level TIR and prints statements and
expressions the same way for every C-family language; a ``Dialect`` holds the
rest -- type names, the pointer qualifier, math intrinsics, integer division,
heap buffers, the half conversions and the headers the printed code needs (in
the spirit of tinygrad's renderer/cstyle.py, where C, CUDA and Metal differ by
such attributes).  ``C99`` is the DSP library's; an AscendC dialect would be
another table.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping


@dataclasses.dataclass(frozen=True)
class Dialect:
    """One C-family language.

    types            TVM dtype -> the language's type
    restrict         qualifier of pointer parameters that alias nothing
    index            type of loop variables and shape arguments (TVM narrows indices to int32)
    intrinsics       extern (libm) function -> the name printed for it
    floordiv         functions of (a, b) for TVM's floor division and modulo
    floormod
    alloc, free      macros taking bytes / a pointer for intermediate buffers too large for the stack
    half_to_float    float16 storage -> float and back: the kernels compute in float32
    half_from_float
    prologue         headers the printed code needs (fixed sources of the target)
    """

    name: str
    types: Mapping[str, str]
    restrict: str
    index: str
    intrinsics: Mapping[str, str]
    floordiv: str
    floormod: str
    alloc: str
    free: str
    half_to_float: str
    half_from_float: str
    prologue: tuple[str, ...]

    def type(self, dtype) -> str:
        text = str(dtype)
        if text not in self.types:
            raise ValueError(f"C emitter ({self.name}): dtype {text} is not supported")
        return self.types[text]


# C99 for the DSP library: helpers from targets/dsp/fg_dsp_kernel.h, half from fg_half.h
C99 = Dialect(
    name="c99",
    types={"float32": "float", "float16": "half", "int32": "int32_t", "int64": "int64_t", "bool": "int",
           "uint8": "uint8_t", "int8": "int8_t"},
    restrict="restrict",
    index="int32_t",
    intrinsics={"tanhf": "fg_tanhf"},  # the LLVM kernels' formula, without libm
    floordiv="fg_floordiv",
    floormod="fg_floormod",
    alloc="FG_DSP_ALLOC",
    free="FG_DSP_FREE",
    half_to_float="fg_half_to_float",
    half_from_float="fg_half_from_float",
    prologue=("fg_dsp_kernel.h",),
)
