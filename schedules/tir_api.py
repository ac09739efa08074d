"""What schedule rules need of TVM's API, below both the rules and lowering: PrimFuncs from the
definitions, tagged with their op and schedule flags and declared with their buffer layouts;
``s_tir.Schedule``s; :func:`choose`, one PrimFunc from several schedules with host tests; TVM's
generic GPU rules; TVMScript parsing without reading every frame's source
(``tvmscript_stack_without_source``, for the tensor intrinsics).  lowering/tvm_api.py (compiling, exporting,
loading, runtimes) builds on it; nothing here imports lowering.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
from typing import Iterable, Mapping

import tvm
from tvm import s_tir, te, tirx

from . import tir_rewrite

OP_ATTR = "fusedgrad.op"
FLAGS_ATTR = "fusedgrad.schedule_flags"
# set on a loop nest a rule builds whole (IR builder, no s_tir.Schedule): its buffers are allocated at
# the size they are used, so lowering skips TVM's buffer compaction
WHOLE_ATTR = "fusedgrad.built_whole"


def prim_func(args, symbol: str, op_name: str, strided: Iterable[str] = (), schedule_flags: Iterable[str] = ()):
    """TE arguments (or a definition already written as a PrimFunc) -> PrimFunc named ``symbol``,
    tagged with the op name and the variant's schedule flags that are set (``OpDef.split_variant``;
    no tag when none is).  A PrimFunc declares its own buffer layouts.

    Buffers named in ``strided`` get free strides with a unit innermost stride,
    so views with any row stride are accepted without a copy.  No buffer is
    assumed aligned beyond its element size (TVM's default of 64 bytes would
    let LLVM emit aligned vector loads that fault on ordinary numpy views).
    """
    if isinstance(args, tirx.PrimFunc):
        func = args.with_attr("global_symbol", symbol).with_attr(OP_ATTR, op_name)
    else:
        func = te.create_prim_func(list(args))
        func = func.with_attr("global_symbol", symbol).with_attr(OP_ATTR, op_name)
        tensors = {t.op.name: t.dtype for t in args if isinstance(t, te.Tensor)}
        func = _with_layout(func, tensors, set(strided))
    flags = sorted(schedule_flags)
    return func.with_attr(FLAGS_ATTR, flags) if flags else func


def _with_layout(func, tensors: Mapping[str, str], strided: set[str]):
    """``func`` with each parameter buffer named in ``tensors`` (name -> dtype) redeclared aligned to
    its element size, and those in ``strided`` of rank 2 or more with free strides ``<name>_s<k>``
    and a unit innermost one (create_prim_func declares compact, 64-byte aligned buffers)."""
    found = {p.name for p in func.params if isinstance(p.ty, tirx.BufferType)}
    missing = sorted(set(tensors) - found)
    if missing:
        raise ValueError(f"buffer {missing[0]!r} not found in function parameters")
    replaced = {}
    for param in func.params:
        if param.name not in tensors or not isinstance(param.ty, tirx.BufferType):
            continue
        rank = len(param.shape)
        strides = None
        if param.name in strided and rank >= 2:  # a 1-D view with unit stride is already compact
            strides = [tirx.Var(f"{param.name}_s{k}", "int32") for k in range(rank - 1)] + [1]
        replaced[param] = tirx.decl_buffer(
            param.shape, param.dtype, param.name, strides=strides, elem_offset=param.elem_offset,
            data_alignment=tvm.DataType(tensors[param.name]).bits // 8,
            offset_factor=param.offset_factor, layout=param.layout)
    return tir_rewrite.replace_vars(func, replaced)


def op_name(func) -> str | None:
    value = func.attrs.get(OP_ATTR) if func.attrs is not None else None
    return str(value) if value is not None else None


def schedule_flags(func) -> tuple[str, ...]:
    """The schedule flags ``func`` was tagged with by :func:`prim_func`."""
    value = func.attrs.get(FLAGS_ATTR) if func.attrs is not None else None
    return tuple(str(v) for v in value) if value is not None else ()


def buffer_layouts(func) -> dict[str, tuple[int, tuple[str, ...]]]:
    """{parameter buffer: (bits per element, the names of its variable strides)} of ``func``."""
    return {p.name: (tvm.DataType(p.dtype).bits,
                     tuple(s.name for s in p.strides if not isinstance(s, tvm.tirx.IntImm)))
            for p in func.params if hasattr(p, "strides")}


def schedule(func):
    return s_tir.Schedule(func)


ALIGNED = "fusedgrad_aligned"  # the host test that a buffer's address is a multiple of a byte count


def choose(alternatives):
    """One PrimFunc from schedules of the same PrimFunc, ``[(func, conditions), ..., (last, None)]``:
    the first ``func`` whose conditions hold runs, the last where none does.  Conditions (a dict,
    each part optional): ``multiple_of`` {dimension or stride: k}, each a multiple of k;
    ``at_most`` {dimension: k}, each at most k; ``aligned`` {buffer: bytes}, each buffer's address a
    multiple of that many bytes.  The tests run on the host, from the arguments, at every call;
    each schedule keeps its own kernels and intermediate buffers."""
    first = alternatives[0][0]
    # the shape and stride variables (M, D, x_s0): free in the body or the buffers, bound by the arguments
    sizes = {v.name: v for v in tvm.tirx.analysis.undefined_vars(first.body, list(first.params))}
    buffers = {p.name: p for p in first.params if hasattr(p, "strides")}
    sizes.update({e.name: e for b in buffers.values() for e in b.strides if not isinstance(e, tvm.tirx.IntImm)})
    tests = []
    for _, conditions in alternatives[:-1]:
        multiple_of, at_most, aligned = (conditions.get(k, {}) for k in ("multiple_of", "at_most", "aligned"))
        unknown = sorted((set(multiple_of) | set(at_most)) - set(sizes))
        if unknown:
            raise ValueError(f"branch: no dimension or stride named {unknown} (known: {sorted(sizes)})")
        unknown = sorted(set(aligned) - set(buffers))
        if unknown:
            raise ValueError(f"branch: no buffer named {unknown} (buffers: {sorted(buffers)})")
        conds = [tvm.tirx.floormod(sizes[n], k) == 0 for n, k in multiple_of.items()]
        conds += [sizes[n] <= k for n, k in at_most.items()]
        conds += [tvm.tirx.call_pure_extern("bool", ALIGNED, buffers[n].data, k) for n, k in aligned.items()]
        tests.append(tvm.tirx.all(*conds))
    # each schedule as a host loop that runs once or not at all: TVM places no barrier under an `if`,
    # even a host one around whole kernels
    names = ["then"] + [f"then_{i}" for i in range(1, len(tests))] + ["otherwise"]
    return tir_rewrite.joined(alternatives, tests, names, buffers)


def with_whole_bounds(func, names, lanes: int):
    """``func`` with every test ``x < d`` of a size ``d`` named in ``names`` written ``x < d // lanes * lanes``:
    equal where :func:`choose` runs it only for sizes that are multiples of ``lanes``, and visibly the same
    for ``lanes`` consecutive ``x`` from a multiple of ``lanes`` to TVM (a padded tile's vector copies)."""
    import tvm_ffi

    sizes = {v.name: v for v in tvm.tirx.analysis.undefined_vars(func.body, list(func.params)) if v.name in names}

    def whole(lt):
        size = next((v for v in sizes.values() if lt.b.same_as(v)), None)
        return lt if size is None else tvm.tirx.LT(lt.a, size // lanes * lanes)

    return func.with_body(tvm_ffi.structural_map(func.body, (tvm.tirx.LT, whole)))


def script(func) -> str:
    return func.script()


def gpu_generic_rules() -> list:
    """TVM's dlight GPU rules in the order to try them: matmul, GEMV, reductions, then anything."""
    from tvm.s_tir import dlight as dl

    return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


@contextlib.contextmanager
def tvmscript_stack_without_source():
    """TVMScript's ``prim_func`` decorator takes ``inspect.stack()`` for every function it parses and
    reads the source line of its caller's caller only (``is_defined_in_class``) and the frames'
    locals.  ``inspect.stack()`` reads the source line of every frame, and for a frame whose file is
    no module's (importlib's frozen frames, under an import) scans all of ``sys.modules`` each time:
    importing ``tvm.s_tir.tensor_intrin`` (496 functions) from a test or with torch loaded took
    40-145 s.  Here the first three frames keep their source line, the others are taken from the
    frame objects as they are (no source line), so no module is looked up."""
    real = inspect.stack

    def stack(context: int = 1):
        frames, frame = [], sys._getframe(1)  # from the caller's frame, as inspect.stack
        while frame is not None:
            if len(frames) < 3 and os.path.exists(frame.f_code.co_filename):  # not importlib's frozen frames
                tb = inspect.getframeinfo(frame, context)
                frames.append(inspect.FrameInfo(frame, tb.filename, tb.lineno, tb.function, tb.code_context,
                                                tb.index, positions=tb.positions))
            else:
                frames.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno,
                                                frame.f_code.co_name, None, None))
            frame = frame.f_back
        return frames

    inspect.stack = stack
    try:
        yield
    finally:
        inspect.stack = real
