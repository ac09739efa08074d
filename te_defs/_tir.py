"""Helpers for definitions written as TIR (TVM's IR builder), for recurrences TE cannot express.

A TIR definition is built as IR, never as text: parameters from the op's TensorSpecs (kernel
shapes, free row strides for inputs), named loops, stores and conditions.
"""
from __future__ import annotations

import contextlib
from typing import Mapping

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
    (float32 arithmetic stored into a half array)."""
    vt, bt = str(getattr(value, "ty", "")), str(buf.dtype)
    if vt != bt and vt.startswith("float") and bt.startswith("float"):
        value = value.astype(bt)
    T.buffer_store(buf, value, list(indices))


def local(name: str, shape_, dtype: str = "float32", scope: str = "global"):
    buf = T.alloc_buffer(list(shape_), dtype, scope=scope)
    IRBuilder.name(name, buf)
    return buf


def let(name: str, value):
    """A named value bound once (a ``T.let``), for readable TIR.  Not for values holding a tanh that
    are used more than once: a target's tanh lowering names its argument several times, and TVM's
    simplifier copes badly with such trees bound to variables (keep them in a scratch buffer)."""
    var = T.bind(value)
    IRBuilder.name(name, var)
    return var
