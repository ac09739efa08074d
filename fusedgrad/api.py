"""Public API: validate inputs, pick the kernel variant, call it, return outputs.

Inputs are numpy arrays or CPU tensors with ``__dlpack__`` (torch tensors are
passed to the kernel as they are, zero-copy); outputs come back as the kind of
the first tensor input (numpy for numpy and for other DLPack producers, torch
for torch).  Views with any row stride and a unit inner stride are passed
without a copy; any other layout is copied to a contiguous array first.
numpy bfloat16 (ml_dtypes) cannot cross DLPack itself: it goes through a
zero-copy torch view when torch is installed, else it is copied through a TVM
tensor.  Bad input raises TypeError/ValueError naming the argument, the
expected and the actual value, before anything is allocated or written.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

import numpy as np

from . import runtime  # first: it sizes TVM's thread pool before TVM is imported
from .lowering import tvm_api
from .te_defs import bind_dims, dim_size
from .te_defs import get as _get_op
from .tensors import HUGE_OUTPUT_BYTES, INDEX_MAX, NP_DTYPES, TORCH_DEVICES, alloc, classify, dtype_text  # noqa: F401


class _Arg:
    """One validated tensor argument: what to pass to the kernel and how to allocate alike."""

    def __init__(self, name: str, value: Any):
        self.name = name
        self.kind, self.obj = classify(name, value)
        self.dtype = dtype_text(self.obj.dtype)
        self.shape = tuple(int(d) for d in self.obj.shape)


def _strides(arg: _Arg) -> tuple[int, ...]:
    if arg.kind == "torch":
        return tuple(arg.obj.stride())
    return tuple(s // arg.obj.itemsize for s in arg.obj.strides)


def _kernel_view(arg: _Arg, kshape: tuple[int, ...]):
    """The kernel's view of an input: unit inner stride, positive row strides, no copy when possible."""
    obj, shape = arg.obj, arg.shape
    strides = _strides(arg)
    ok = all(st > 0 or sz == 1 for st, sz in zip(strides, shape))
    if shape and strides[-1] != 1 and shape[-1] > 1:
        ok = False
    if sum((sz - 1) * abs(st) for sz, st in zip(shape, strides) if sz > 1) > INDEX_MAX:
        ok = False  # the kernels index in 32 bits: a view reaching farther is copied (run checks the size)
    if not ok:
        obj = obj.contiguous() if arg.kind == "torch" else np.ascontiguousarray(obj)
    elif arg.kind == "numpy" and not obj.flags.writeable:  # DLPack export refuses read-only arrays
        obj = obj.copy()
    else:
        obj = _unit_axes_strided(obj, arg.kind, shape, strides)
    if tuple(kshape) != tuple(shape):
        obj = obj.view(*kshape) if arg.kind == "torch" else _np_view(obj, kshape)
    return _to_kernel(obj, arg.kind)


def _count(arg: _Arg) -> int:
    return arg.obj.numel() if arg.kind == "torch" else arg.obj.size


def _check_count(name: str, count: int) -> None:
    if count > INDEX_MAX:
        raise ValueError(f"{name}: expected at most 2**31 - 1 elements (the kernels index in 32 bits), "
                         f"got {count}")


def _unit_axes_strided(obj, kind: str, shape: tuple[int, ...], strides: tuple[int, ...]):
    """``obj`` with each size-1 axis given the stride it would have if contiguous from there in
    (a view, never a copy): such an axis is never stepped along, so its stride means nothing, but
    the kernels' argument checks compare it (an [N, 1] column of a wider array has stride 2 there)."""
    fixed, inner = list(strides), 1
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == 1:
            fixed[i] = inner
        inner = fixed[i] * shape[i] if shape[i] != 1 else inner
    if tuple(fixed) == tuple(strides):
        return obj
    if kind == "torch":
        return obj.as_strided(shape, fixed)
    item = obj.itemsize
    return np.lib.stride_tricks.as_strided(obj, shape=shape, strides=tuple(f * item for f in fixed),
                                           writeable=obj.flags.writeable)


def _np_view(a: np.ndarray, shape) -> np.ndarray:
    """View of ``a`` with one axis split in two (e.g. [N, 4H] -> [N, 4, H], [4H, H] -> [4, H, H]);
    never a copy."""
    shape = tuple(shape)
    for i in range(a.ndim):
        if len(shape) == a.ndim + 1 and shape[:i] == a.shape[:i] and shape[i + 2:] == a.shape[i + 1:] \
                and shape[i] * shape[i + 1] == a.shape[i] and shape[i] > 0:
            strides = a.strides[:i] + (a.strides[i] * shape[i + 1], a.strides[i]) + a.strides[i + 1:]
            return np.lib.stride_tricks.as_strided(a, shape=shape, strides=strides, writeable=a.flags.writeable)
    raise AssertionError(f"kernel shape {list(shape)} is not {list(a.shape)} with one axis split in two")


def _to_kernel(obj, kind: str):
    """What the kernel is given for ``obj``; numpy bfloat16 cannot cross DLPack itself."""
    if kind == "numpy" and obj.dtype == NP_DTYPES.get("bfloat16"):
        try:  # zero-copy: a torch bfloat16 view of the same memory
            import torch

            return torch.from_numpy(obj.view(np.uint16)).view(torch.bfloat16)
        except (ImportError, ValueError, TypeError):  # no torch, or a layout it cannot view
            return tvm_api.host_tensor(np.ascontiguousarray(obj))
    return obj


def run(op_name: str, tensors: Mapping[str, Any], scalars: Mapping[str, float], variant: Mapping[str, bool],
        target: str | None = None, library: "runtime.Library | None" = None):
    """Validate ``tensors`` against the op's spec, call the variant's kernel, return outputs by name.

    Tensors absent from the variant must be absent (or None) in ``tensors``;
    outputs absent from the variant come back as None.  The kernel comes from
    ``library`` (see ``runtime.load``) when given, else from the kernel cache.
    ``target`` defaults to the tensors' device: llvm for host memory, cuda for
    torch CUDA tensors (all on one device; outputs are allocated there).
    Schedule flags (``OpDef.schedule_flags``) left out of ``variant`` are False.
    """
    op = _get_op(op_name)
    variant = op.full_variant(variant)
    args = {}
    fixed = {}  # inputs whose dtype the definition fixes (TensorSpec.dtype)
    for spec in op.inputs:
        value = tensors.get(spec.name)
        if not op.present(spec, variant):
            continue
        args[spec.name] = _Arg(spec.name, value)
        if spec.dtype is not None:
            fixed[spec.name] = spec.dtype
    first = next(a for name, a in args.items() if name not in fixed)
    dtype = first.dtype
    if dtype not in NP_DTYPES:
        raise TypeError(f"{first.name}: expected dtype float32, float16 or bfloat16, got {dtype}")
    for a in args.values():
        want = fixed.get(a.name, dtype)
        if a.dtype != want:
            source = "(fixed by the op's definition)" if a.name in fixed else f"(the dtype of {first.name})"
            raise TypeError(f"{a.name}: expected dtype {want} {source}, got {a.dtype}")
    if len({a.kind for a in args.values()}) > 1:
        kinds = {a.name: a.kind for a in args.values()}
        raise TypeError(f"tensors must all be numpy arrays or all torch tensors, got {kinds}")
    device = first.obj.device if first.kind == "torch" else None
    for a in args.values():
        if a.kind == "torch" and a.obj.device != device:
            raise ValueError(f"{a.name}: expected a tensor on {device} (the device of {first.name}), "
                             f"got {a.obj.device}")
    expected = TORCH_DEVICES[device.type] if device is not None else "llvm"
    if target is None:
        target = expected
    elif target != expected:
        raise ValueError(f"target: expected {expected!r} for tensors on {device or 'the host'}, got {target!r}")
    if device is not None and device.type == "cpu":
        device = None
    from .targets import get as _get_target

    _get_target(target).check(op_name, dtype)
    dims: dict[str, int] = {}
    origin: dict[str, str] = {}  # which argument gave each size, for the messages
    for spec in op.inputs:
        if spec.name in args:
            bind_dims(dims, spec.shape, args[spec.name].shape, spec.name, origin)
    for s in op.scalars:
        value = scalars.get(s.name, s.default)
        if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{s.name}: expected a real number, got {type(value).__name__}")
        try:
            float(value)
        except OverflowError:
            raise ValueError(f"{s.name}: expected a real number within the range of a double, "
                             f"got {value!r:.40}") from None
    for a in args.values():
        _check_count(a.name, _count(a))
    for spec in op.outputs:
        if op.present(spec, variant):
            _check_count(spec.name, math.prod(dim_size(dims, d) for d in spec.shape))
    kind = first.kind
    outs = {}
    empty = any(_count(a) == 0 for a in args.values())
    for spec in op.outputs:
        if op.present(spec, variant):
            # with an empty input every output is empty or a sum over nothing: zeros
            outs[spec.name] = alloc(kind, [dim_size(dims, d) for d in spec.shape], spec.dtype or dtype, zero=empty,
                                    device=device)
    if empty:
        return {spec.name: outs.get(spec.name) for spec in op.outputs}
    if library is not None:
        kernel = library.kernel(op_name, dtype, variant, target)
    else:
        kernel = runtime.artifact(op_name, dtype, target).kernel(variant)
    call = []
    for spec in op.inputs:
        if spec.name in args:
            call.append(_kernel_view(args[spec.name], [dim_size(dims, d) for d in spec.kshape]))
    call += [float(scalars.get(s.name, s.default)) for s in op.scalars]
    out_views = {}
    for spec in op.outputs:
        if spec.name in outs:
            kshape = [dim_size(dims, d) for d in spec.kshape]
            o = outs[spec.name]
            v = o.view(*kshape) if kind == "torch" else o.reshape(kshape)
            out_views[spec.name] = _to_kernel(v, kind)
            call.append(out_views[spec.name])
    if device is not None:  # a device kernel runs on torch's current stream, ordered with torch's work
        with tvm_api.torch_stream(device):
            kernel(*call)
    else:
        kernel(*call)
    for name, v in out_views.items():
        if kind == "numpy" and type(v).__module__.startswith("tvm"):  # bfloat16 through a TVM tensor: copy back
            outs[name][...] = v.numpy().reshape(outs[name].shape)
    return {spec.name: outs.get(spec.name) for spec in op.outputs}


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, storage, has_bias: bool = True):
    """Fused LSTM-cell backward (PyTorch ``_thnn_fused_lstm_cell_backward`` semantics).

    grad_hy, grad_cy [N, H] (either may be None: an absent gradient is an exact
    zero), cx, cy [N, H], storage [N, 4H] (activated gates i, f, g, o).
    Returns (grad_gates [N, 4H], grad_cx [N, H], grad_bias [4H] or None).
    """
    if not isinstance(has_bias, (bool, np.bool_)):
        raise TypeError(f"has_bias: expected a bool, got {type(has_bias).__name__}")
    has_bias = bool(has_bias)
    variant = {"has_grad_hy": grad_hy is not None, "has_grad_cy": grad_cy is not None, "has_bias": has_bias}
    out = run("lstm_cell_backward",
              {"grad_hy": grad_hy, "grad_cy": grad_cy, "cx": cx, "cy": cy, "storage": storage}, {}, variant)
    return out["grad_gates"], out["grad_cx"], out["grad_bias"]


def layer_norm_backward(x, dy, mean, var, gamma, eps: float = 1e-5):
    """LayerNorm backward over the last axis.

    x, dy [..., D]; mean, var [...] (var is the variance, not rstd); gamma [D].
    Returns (dx [..., D], dgamma [D], dbeta [D]).
    """
    xs = _Arg("x", x)
    lead = xs.shape[:-1]
    if len(xs.shape) < 1:
        raise ValueError(f"x: expected shape [..., D] with at least one axis, got {list(xs.shape)}")
    rows = math.prod(lead)
    flat = {}
    for name, value, shape in (("x", x, (rows, xs.shape[-1])), ("dy", dy, (rows, xs.shape[-1])),
                               ("mean", mean, (rows,)), ("var", var, (rows,))):
        a = _Arg(name, value)
        want = lead + ((xs.shape[-1],) if name in ("x", "dy") else ())
        if a.shape != want:
            spec = "[..., D]" if name in ("x", "dy") else "[...] (x's leading shape)"
            raise ValueError(f"{name}: expected shape {spec} = {list(want)}, got {list(a.shape)}")
        flat[name] = a.obj.reshape(shape)
    flat["gamma"] = gamma
    out = run("layer_norm_backward", flat, {"eps": eps}, {})
    return out["dx"].reshape(xs.shape), out["dgamma"], out["dbeta"]
