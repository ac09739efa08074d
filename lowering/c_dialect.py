"""C-family dialects: what one language prints differently, as a table.

The printers (lowering.c_emitter for loop-level TIR; lowering.ascend's kernel patterns and vector
compiler for AscendC) print statements and expressions the same way for every C-family language; a
``Dialect`` holds the rest -- type names, float literals, qualifiers, the kernels' pointer
parameters, math intrinsics, integer division, heap buffers, scalar conversions, vector
instructions (AscendC's tile operations and their rounding modes) and the headers the printed code
needs (in the spirit of tinygrad's renderer/cstyle.py, where C, CUDA and Metal differ
by such attributes).  ``C99`` is the DSP library's, ``ASCENDC`` the Ascend packages'.  Both print
their types through ``Dialect.type`` and their float literals through ``Dialect.float_literal``.
"""
from __future__ import annotations

import dataclasses
import struct
from typing import Mapping


@dataclasses.dataclass(frozen=True)
class Dialect:
    """One C-family language.

    types            TVM dtype -> the language's type (``type`` refuses any other dtype)
    restrict         qualifier of pointer parameters that alias nothing
    index            type of loop variables and shape arguments (TVM narrows indices to int32)
    intrinsics       extern (libm) function -> the name printed for it
    floordiv         functions of (a, b) for TVM's floor division and modulo
    floormod
    alloc, free      macros taking bytes / a pointer for intermediate buffers too large for the stack
    half_to_float    16-bit float storage -> float and back (functions of one scalar): the kernels
    half_from_float  compute in float32
    prologue         headers the printed code needs (fixed sources of the target)
    float_exact      whether a float32 literal is printed as the float32 it stores (C99) or as the
                     Python float it came from (AscendC: the digits of the TE constant)
    nan, inf         the spelling of a NaN and of +infinity (-infinity is ``-`` and ``inf``)
    kernel           what precedes a kernel entry's name: qualifiers and return type
    helper           qualifiers of a helper function (a device function in AscendC)
    param            a kernel entry's pointer parameter, from {type}, {restrict} and {name}
    cast             a scalar conversion, from {type} and {value}
    vector           vector operation -> the instruction printed for it (AscendC's tile instructions:
                     ``instruction("Muls", dst, src, scalar, count)``); operands in the order given
    round_modes      a vector Cast's rounding ("none": exact widening, "rint": to nearest even) -> its
                     spelling
    absent           fields the language has no spelling for (their value is None, checked when
                     the table is built)
    """

    name: str
    types: Mapping[str, str]
    restrict: str | None
    index: str
    intrinsics: Mapping[str, str]
    floordiv: str | None
    floormod: str | None
    alloc: str | None
    free: str | None
    half_to_float: str
    half_from_float: str
    prologue: tuple[str, ...]
    float_exact: bool = True
    nan: str = "(0.0f / 0.0f)"
    inf: str = "(1.0f / 0.0f)"
    kernel: str = "void"
    helper: str = "static inline"
    param: str = "{type} *{restrict} {name}"
    cast: str = "(({type})({value}))"
    vector: Mapping[str, str] | None = None
    round_modes: Mapping[str, str] | None = None
    absent: frozenset[str] = frozenset()

    def __post_init__(self):
        unknown = self.absent - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"dialect {self.name}: absent names no field: {sorted(unknown)}")
        for f in dataclasses.fields(self):
            if (getattr(self, f.name) is None) != (f.name in self.absent):
                raise ValueError(f"dialect {self.name}: field {f.name} must be "
                                 + ("None (it is absent)" if f.name in self.absent else "set"))

    def type(self, dtype) -> str:
        """The language's name of TVM dtype ``dtype``; a ValueError naming it if it has none."""
        text = str(dtype)
        if text not in self.types:
            raise ValueError(f"{self.name}: dtype {text} is not supported (expected one of {sorted(self.types)})")
        return self.types[text]

    def float_literal(self, value: float, dtype: str = "float32") -> str:
        """``value`` as a literal of ``dtype``: float32 with an ``f`` suffix (see ``float_exact``),
        any other dtype as a double; NaN and infinities by the dialect's spelling."""
        value = float(value)
        if value != value:
            return self.nan
        if value in (float("inf"), float("-inf")):
            return ("-" if value < 0 else "") + self.inf
        if dtype != "float32":
            return repr(value)
        if self.float_exact:
            value = struct.unpack("<f", struct.pack("<f", value))[0]
        return f"{value!r}f"  # a finite float's repr always has a "." or an exponent

    def convert(self, dtype: str, value: str) -> str:
        """The scalar C expression ``value`` converted to ``dtype``."""
        return self.cast.format(type=self.type(dtype), value=value)

    def instruction(self, op: str, *operands: str) -> str:
        """The vector instruction ``op`` over ``operands`` (destination first), as a statement."""
        if op not in (self.vector or {}):
            raise ValueError(f"{self.name}: no vector instruction {op!r} (known: {sorted(self.vector or {})})")
        return f"{self.vector[op]}({', '.join(operands)});"

    def round_mode(self, mode: str) -> str:
        """The spelling of a vector Cast's rounding ``mode`` ("none", "rint")."""
        if mode not in (self.round_modes or {}):
            raise ValueError(f"{self.name}: no rounding mode {mode!r} (known: {sorted(self.round_modes or {})})")
        return self.round_modes[mode]

    def pointer(self, name: str, dtype: str | None = None) -> str:
        """A kernel entry's pointer parameter ``name`` (of element type ``dtype`` where the dialect's
        pointers are typed)."""
        return self.param.format(type=self.type(dtype) if "{type}" in self.param else "",
                                 restrict=self.restrict, name=name)


# C99 for the DSP library: helpers from targets/dsp/fg_dsp_kernel.h, fg_half from fg_half.h
C99 = Dialect(
    name="c99",
    types={"float32": "float", "float16": "fg_half", "int32": "int32_t", "int64": "int64_t", "bool": "int",
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
    absent=frozenset({"vector", "round_modes"}),  # no vector instructions: the C compiler vectorises the loops
)

# AscendC for the Ascend packages (lowering.ascend): fp16 and bf16 are stored as half and
# bfloat16_t and computed in float32 in UB.  Global memory comes in as untyped GM_ADDR; buffers are
# the TPipe's queues (no heap), and the vector compiler lowers tanh itself (no libm), so
# ``restrict``, ``floordiv``, ``floormod``, ``alloc`` and ``free`` have no AscendC spelling here.
ASCENDC = Dialect(
    name="ascendc",
    types={"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"},
    restrict=None,
    index="uint32_t",  # rows, offsets and lengths of the kernels' loops
    intrinsics={},
    floordiv=None,
    floormod=None,
    alloc=None,
    free=None,
    half_to_float="FgCast<float>",  # FgCast: lowering.ascend.kernels.SCALAR_CASTS
    half_from_float="FgCast<half>",
    prologue=("kernel_operator.h",),
    float_exact=False,
    nan="NAN",
    inf="INFINITY",
    kernel='extern "C" __global__ __aicore__ void',
    helper="__aicore__ inline",
    param="GM_ADDR {name}",
    cast="FgCast<{type}>({value})",
    # the vector unit's instructions over UB tiles (dst, sources or a scalar, element count)
    vector={"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "Adds": "Adds", "Muls": "Muls", "Exp": "Exp",
            "Sqrt": "Sqrt", "Dup": "Duplicate", "Cast": "Cast"},
    round_modes={"none": "RoundMode::CAST_NONE", "rint": "RoundMode::CAST_RINT"},
    absent=frozenset({"restrict", "floordiv", "floormod", "alloc", "free"}),
)
