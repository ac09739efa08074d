"""The Python host of the LSTM's launch plan (:func:`fusedgrad.lstm.launches.plan`).

:func:`run` allocates the buffers the caller does not bind (outputs and saved activations new,
workspaces from the call's :class:`~fusedgrad.lstm.buffers.Workspace`), binds each argument's view
(offset, shape, strides) of its buffer and calls, in the plan's order, the generated op's kernel
(``op`` and ``variant``) or the host step.  Nothing here knows what a launch
means: the data says it.  Works for numpy arrays and torch tensors alike (``buffers``).

The two directions of a layer (no dependency path between them) run one after the other, each
on every thread.  Running them at the same time, each on half the threads, was built and measured
(docs/BENCHMARKS.md, "Both directions at once"): it works -- a kernel call releases the GIL
(``tvm_ffi.Function.release_gil``, on by default in apache-tvm-ffi 0.1.14: a Python loop in
another thread kept ~90% of its pace while kernels ran), and TVM's CPU thread pool is per calling
thread (``ThreadPool`` is thread-local: ``runtime.config_threadpool`` from a helper thread sizes
that thread's pool alone, ``runtime.NumThreads`` reads it), so a helper thread per direction with
a pool of its share runs the kernels side by side to the same bits -- but it is no faster on two
cores: the layer kernel's team already scales ~2x from 1 to 2 threads (forward at T, B, H = 50,
32, 256: 14.8 ms on 1 thread, 7.5 ms on 2), and the full LSTM took the same time either way.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .buffers import Operand, Workspace, gemm
from .config import Config
from .inputs import last_steps
from .launches import PARAMS, Plan


def param_buffers(cfg: Config, f32, params, names: tuple[str, ...]) -> dict:
    """{"w_ih.l.d": f32(w_ih of layer l, direction d), ...}: the LSTM's flat ``params`` as the plan's
    input buffers, those of ``names`` only."""
    per = 4 if cfg.has_biases else 2
    return {f"{n}.{l}.{d}": f32(params[(l * cfg.D + d) * per + k])
            for l in range(cfg.L) for d in range(cfg.D) for k, n in enumerate(PARAMS[:per])
            if n in names}


def run(plan: Plan, bound: Mapping[str, Any], ws: Workspace, host: Mapping[str, np.ndarray]) -> dict:
    """Run ``plan``; returns every buffer by name.

    ``bound``: the caller's arrays by buffer name (every "input" buffer, and the "saved" ones in a
    backward), each C-contiguous of the buffer's shape; ``host``: host copies of buffers whose
    values a host step reads (``batch_sizes``)."""
    xp = ws.arrays
    arrays: dict[str, Any] = {}
    for name, shape, _, role, zero in plan.buffers:
        a = bound.get(name)
        if a is None:
            if role == "input":
                raise ValueError(f"{name}: expected an array for the plan's input buffer, got none")
            a = ws.get(shape, zero) if role == "workspace" else xp.new(shape, zero)
        elif tuple(a.shape) != shape:
            raise ValueError(f"{name}: expected shape {list(shape)} (the plan's buffer), got {list(a.shape)}")
        elif not (a.flags.c_contiguous if isinstance(a, np.ndarray) else a.is_contiguous()):
            raise ValueError(f"{name}: expected a C-contiguous array (the plan's views index its elements), "
                             f"got strides {list(a.strides if isinstance(a, np.ndarray) else a.stride())}")
        arrays[name] = a
    flat = {name: a.reshape(-1) for name, a in arrays.items()}
    flat_host = {name: np.ascontiguousarray(a).reshape(-1) for name, a in host.items()}
    torch_views = not isinstance(next(iter(flat.values()), np.empty(0)), np.ndarray)
    for launch in plan.launches:
        op, variant = launch.op, launch.variant
        fn = HOST_STEPS.get(op)
        src = flat_host if fn is not None else {}
        args = [_view(src.get(a.buffer, flat[a.buffer]), *a.view, torch_views and a.buffer not in src)
                for a in launch.args]
        if fn is not None:
            fn(ws, dict(variant), *args)
        else:
            xp.kernel(op, **dict(variant))(*args)
    return arrays


def _view(flat, offset: int, shape: tuple, strides: tuple, torch_tensor: bool):
    if torch_tensor:
        return flat.as_strided(shape, strides, offset)
    item = flat.itemsize
    return np.ndarray(shape, flat.dtype, flat, offset * item, tuple(s * item for s in strides))


def _gemm(ws: Workspace, variant: dict, a, b, *rest) -> None:
    """The plan's gemm on this host: B packed as matmul_packed's panels (``Operand``); a b bound as a
    column-major view is a transposed weight, packed from its rows (``pack_bt``)."""
    rest = list(rest)
    bias = rest.pop(0) if variant["has_bias"] else None
    addend = rest.pop(0) if variant["has_addend"] else None
    (c,) = rest
    k = b.shape[0]
    strides = tuple(s // b.itemsize for s in b.strides) if isinstance(b, np.ndarray) else tuple(b.stride())
    operand = Operand.of_transposed(b.T, ws) if k > 1 and strides == (1, k) else Operand.of(b, ws)
    gemm(a, operand, c, bias=bias, addend=addend, ws=ws)


def _add(ws: Workspace, variant: dict, a, b, out) -> None:
    out[...] = a + b


def _copy(ws: Workspace, variant: dict, src, dst) -> None:
    dst[...] = src


def _zero_past_batch(ws: Workspace, variant: dict, batch_sizes, rows) -> None:
    for t, n in enumerate(batch_sizes.tolist()):
        if n < rows.shape[1]:
            rows[t, n:] = 0.0


def _gather_last_steps(ws: Workspace, variant: dict, batch_sizes, src, dst) -> None:
    for t, b0, b1 in last_steps(batch_sizes):
        dst[b0:b1] = src[t, b0:b1]


HOST_STEPS = {"gemm": _gemm, "add": _add, "copy": _copy, "zero_past_batch": _zero_past_batch,
              "gather_last_steps": _gather_last_steps}
"""How this host runs each of ``launches.HOST_OPS`` (the rest are generated kernels)."""
