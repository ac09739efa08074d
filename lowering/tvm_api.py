"""The one place that touches TVM's API (it churns between releases).

Everything else in fusedgrad goes through these helpers, so a TVM bump edits
this file only.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping

import tvm
from tvm import s_tir, te

OP_ATTR = "fusedgrad.op"


def tvm_version() -> str:
    return tvm.__version__


def tvm_ffi_version() -> str:
    import tvm_ffi

    return getattr(tvm_ffi, "__version__", "unknown")


def prim_func(args, symbol: str, op_name: str, strided: Iterable[str] = ()):
    """TE arguments -> PrimFunc named ``symbol``, tagged with the op name.

    Buffers named in ``strided`` get free strides with a unit innermost stride,
    so views with any row stride are accepted without a copy.  No buffer is
    assumed aligned beyond its element size (TVM's default of 64 bytes would
    let LLVM emit aligned vector loads that fault on ordinary numpy views).
    """
    func = te.create_prim_func(list(args))
    func = func.with_attr("global_symbol", symbol).with_attr(OP_ATTR, op_name)
    tensors = {t.op.name: t.dtype for t in args if isinstance(t, te.Tensor)}
    return _with_layout(func, tensors, set(strided))


def _with_layout(func, tensors: Mapping[str, str], strided: set[str]):
    # create_prim_func cannot declare strides or alignment; TVMScript can:
    # re-parse the printed function with both added to the parameters.
    src = func.script()
    for name, dtype in tensors.items():
        head = f"{name}: T.Buffer("
        found = re.search(rf"(?<![\w.]){re.escape(head)}", src)
        if found is None:
            raise ValueError(f"buffer {name!r} not found in function parameters")
        start = found.start()
        i, depth = start + len(head), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        inner = src[start + len(head): i - 1]
        rank = len([d for d in re.match(r"\((.*?)\)", inner).group(1).split(",") if d.strip()])
        extra = f", align={tvm.DataType(dtype).bits // 8}"
        if name in strided and rank >= 2:  # a 1-D view with unit stride is already compact
            strides = ", ".join([f'"{name}_s{k}"' for k in range(rank - 1)] + ["1"])
            extra += f", strides=({strides})"
        src = src[: i - 1] + extra + src[i - 1:]
    return tvm.script.from_source(src)


def op_name(func) -> str | None:
    value = func.attrs.get(OP_ATTR) if func.attrs is not None else None
    return str(value) if value is not None else None


def schedule(func):
    return s_tir.Schedule(func)


def target(spec: Mapping):
    return tvm.target.Target(dict(spec))


def compile_module(funcs: Mapping[str, object], tgt):
    """Compile named PrimFuncs into one executable module."""
    mod = tvm.IRModule({name: f for name, f in funcs.items()})
    return tvm.compile(mod, target=tgt)


def script(func) -> str:
    return func.script()


def export_library(exe, path: str) -> None:
    exe.export_library(path)


def load_module(path: str):
    return tvm.runtime.load_module(path)


def cpu_device():
    return tvm.cpu()


def time_function(module, name: str, args, number: int = 10, repeat: int = 5) -> list[float]:
    """Per-call seconds of ``module[name](*args)``, one entry per repeat."""
    timer = module.time_evaluator(name, tvm.cpu(), number=number, repeat=repeat)
    return list(timer(*args).results)
