"""Helpers for definitions written as TIR (TVM's IR builder), for recurrences TE cannot express.

A TIR definition is built as IR, never as text: parameters from the op's TensorSpecs (kernel
shapes, free row strides for inputs), named loops, stores and conditions.
"""
from __future__ import annotations

import contextlib
from typing import Mapping

import numpy as np
import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder

from . import parse_dim


class _Dialect:
    """TVM's TIR IR-builder dialect (``tvm.script.ir_builder.tirx``), imported at first use: that
    import needs TVM's compiler library, which a runtime-only install (the GPU machine's) lacks, and
    the operators' shapes, samples and references must load there without it."""

    def __getattr__(self, name):
        from tvm.script.ir_builder import tirx

        return getattr(tirx, name)


T = _Dialect()


def dims(*names: str) -> dict[str, tirx.Var]:
    """Symbolic int32 sizes by name."""
    return {n: tirx.Var(n, "int32") for n in names}


def shape(spec_shape, sizes: Mapping[str, tirx.Var]) -> list:
    """A TensorSpec shape ("4", "H", "4*H") over ``sizes``."""
    out = []
    for sym in spec_shape:
        k, base = parse_dim(sym)
        out.append(k * int(base) if base.isdigit() else (sizes[base] if k == 1 else k * sizes[base]))
    return out


def params(op, variant: Mapping[str, bool], dtype: str, sizes: Mapping[str, tirx.Var]) -> dict:
    """Declare the kernel parameters of ``op``'s ``variant`` in kernel order (inputs, then outputs):
    {name: Buffer}.  Inputs and ``strided`` outputs take any row stride with a unit inner stride;
    no buffer is assumed aligned beyond its element size."""
    specs = [s for s in op.inputs if op.present(s, variant)] + [s for s in op.outputs if op.present(s, variant)]
    handles = [(s, T.arg(s.name, T.handle())) for s in specs]
    out = {}
    for spec, handle in handles:
        dt = spec.dtype or dtype
        shp = shape(spec.kshape, sizes)
        free = spec in op.inputs or spec.strided
        strides = None
        if free and len(shp) > 1:
            strides = [tirx.Var(f"{spec.name}_s{k}", "int32") for k in range(len(shp) - 1)] + [1]
        buf = T.match_buffer(handle, shp, dt, strides=strides, align=int(dt[-2:]) // 8 if dt[-2:].isdigit() else 4)
        IRBuilder.name(spec.name, buf)
        out[spec.name] = buf
    return out


@contextlib.contextmanager
def loop(name: str, extent, kind: str = "serial", start=0, **kwargs):
    """A loop whose variable is called ``name``; ``kind``: serial, parallel, vectorized, unroll."""
    stop = extent if isinstance(start, int) and start == 0 else start + extent
    with getattr(T, kind)(start, stop, **kwargs) as v:
        IRBuilder.name(name, v)
        yield v


@contextlib.contextmanager
def when(cond):
    """``if cond:`` (no else)."""
    with T.If(cond):
        with T.Then():
            yield


def store(buf, indices, value) -> None:
    """``buf[indices] = value``; a float value of another float dtype is rounded once to the buffer's
    (float32 arithmetic stored into a half array; into a bfloat16 one by ``_store_bfloat16``)."""
    vt, bt = str(getattr(value, "ty", "")), str(buf.dtype)
    if vt != bt and vt.startswith("float") and bt == "bfloat16":
        _store_bfloat16(buf, list(indices), value)
        return
    if vt != bt and vt.startswith("float") and bt.startswith("float"):
        value = value.astype(bt)
    elif (vt, bt) == ("bfloat16", BFLOAT16_BITS):
        value = bfloat16_bits(value)
    T.buffer_store(buf, value, list(indices))


# the dtype a kernel's own bfloat16 buffer holds its values' bits in (``local``): BF16ComputeLegalize
# allocates a bfloat16 buffer of the kernel's own as float32 (a shared W_hh slice twice the bytes) and
# leaves the bit widening of its loads to a 16-bit value that is no longer there
BFLOAT16_BITS = "uint16"

# bfloat16 is float32's upper 16 bits.  Both conversions are written on the bits, so no bfloat16
# cast is left for TVM's legalization (BF16ComputeLegalize does not lower a cast inside a ``T.bind``
# value, which LLVM then refuses: "BF16 needs to be storaged lowered first"), and the CUDA kernels
# and their host loop nests convert with the same integer arithmetic.


def _u32(v: int):
    return tirx.const(v, "uint32")


def _exact_bfloat16(value: float) -> int:
    """The float32 bits of constant ``value``, which bfloat16 holds exactly (ValueError otherwise)."""
    bits = int(np.float32(value).view(np.uint32))
    if bits & 0xFFFF:
        raise ValueError(f"value: expected a constant bfloat16 holds exactly (float32's low 16 bits zero), "
                         f"got {value!r}")
    return bits


def bfloat16_bits(v):
    """The bits (``BFLOAT16_BITS``) of bfloat16 ``v``: a load's reinterpreted, an ``if_then_else``'s
    of its choices' bits, a constant's.  Never a reinterpret of another expression: BF16ComputeLegalize
    widens any bfloat16 expression but a load to float32, under the reinterpret, which then has 32 bits
    to reinterpret as 16 (TVM refuses it: "Reinterpret requires size match")."""
    if isinstance(v, tvm.ir.TensorLoad):  # a buffer load (tirx.BufferLoad builds one)
        return tirx.reinterpret(BFLOAT16_BITS, v)
    if getattr(getattr(v, "op", None), "name", None) == "prim.if_then_else":
        cond, then, other = v.args
        return tirx.if_then_else(cond, bfloat16_bits(then), bfloat16_bits(other))
    if isinstance(v, tirx.FloatImm):
        return tirx.const(_exact_bfloat16(v.value) >> 16, BFLOAT16_BITS)
    raise ValueError(f"v: expected a bfloat16 load, if_then_else or constant, got {type(v).__name__} {v}")


def widen_bfloat16(v):
    """bfloat16 ``v`` (or its bits, a ``BFLOAT16_BITS`` value) in float32, exactly: the bits as the upper
    half of a float32's."""
    bits = v if str(v.ty) == BFLOAT16_BITS else bfloat16_bits(v)
    return tirx.reinterpret("float32", tirx.Cast("uint32", bits) << _u32(16))


def _store_bfloat16(buf, indices, v) -> None:
    """``buf[indices]`` = float32 ``v`` rounded once to bfloat16: to nearest, ties to even (Inf stays
    Inf; past the largest finite a value rounds to Inf); a NaN stays a NaN, quieted, its sign and upper
    payload kept.  TVM's own cast adds the rounding bias to a NaN's bits too, so a NaN whose payload is
    in the low 16 bits comes out as Inf or zero (0x7F800001 as Inf, 0x7FFFFFFF as -0).  A NaN and a
    number are stored by two branches: one select of both kept a value more live, and the forward's
    reverse training w_hh_global kernel spilled 8 bytes on sm_80.  A constant (a zero stored) is stored
    as one: the bits of a literal are a reinterpret that TVM's CUDA source takes the address of."""
    if isinstance(v, tirx.FloatImm):
        _exact_bfloat16(v.value)
        T.buffer_store(buf, tirx.const(v.value, "bfloat16"), indices)
        return
    bits = let("bits", tirx.reinterpret("uint32", v))

    def put(top):
        T.buffer_store(buf, tirx.reinterpret("bfloat16", tirx.Cast("uint16", top >> _u32(16))), indices)

    with T.If((bits & _u32(0x7FFFFFFF)) > _u32(0x7F800000)):
        with T.Then():
            put(bits | _u32(0x400000))
        with T.Else():
            put(bits + ((bits >> _u32(16)) & _u32(1)) + _u32(0x7FFF))


def local(name: str, shape_, dtype: str = "float32", scope: str = "global"):
    """A buffer of the kernel's own; of bfloat16 values: their bits (``BFLOAT16_BITS``; ``store`` and
    ``widen_bfloat16`` take them)."""
    buf = T.alloc_buffer(list(shape_), BFLOAT16_BITS if dtype == "bfloat16" else dtype, scope=scope)
    IRBuilder.name(name, buf)
    return buf


def let(name: str, value):
    """A named value bound once (a ``T.let``), for readable TIR.  Not for values holding a tanh that
    are used more than once: a target's tanh lowering names its argument several times, and TVM's
    simplifier copes badly with such trees bound to variables (keep them in a scratch buffer)."""
    var = T.bind(value)
    IRBuilder.name(name, var)
    return var
