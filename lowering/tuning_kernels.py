"""The kernels ``fusedgrad tune`` measures (``lowering.tuning`` searches and records).

- ``specialised``: the op's definition made static at the tuned shape (meta-schedule's workload);
  ``scheduled``: the hand rule's kernel at given knobs, whether the rule schedules the definition
  or builds its own PrimFunc (the LSTM layer kernels).
- ``_arguments``: what every candidate runs on, the op's own sample inputs (an integer input such
  as the layers' batch_sizes keeps its dtype and valid values, which meta-schedule's random fill
  would not give); ``device_arguments`` hands them to meta-schedule's runners.
- ``time``: the best and the hand schedule side by side, each checked against the op's float64
  reference before it is timed.
"""
from __future__ import annotations

import math
import statistics

from .. import schedules, targets, te_defs
from ..schedules import tir_api
from . import tvm_api


def _kernel_shape(spec, dims: dict) -> list[int]:
    return [int(te_defs.dim_size(dims, d)) for d in spec.kshape]


def static(func, op, dims: dict):
    """``func`` (a PrimFunc of ``op`` over symbolic dims) with every tensor parameter a compact buffer
    of its kernel shape under ``dims`` and the scalars at their defaults: what meta-schedule measures."""
    import tvm

    specs = {t.name: t for t in op.inputs + op.outputs}
    binds = {}
    for var in func.params:
        scalar = next((s for s in op.scalars if s.name == var.name), None)
        if scalar is not None:
            binds[var] = tvm.tirx.const(scalar.default, "float32")
        elif all(isinstance(d, (tvm.tirx.Var, tvm.tirx.IntImm, int)) for d in var.shape):
            # buffers shaped by plain dims bind them; the others (e.g. [32*Nb]) follow
            shape = _kernel_shape(specs[var.name], dims)
            # a buffer declared with (free) strides gets the compact ones: specialising keeps their count
            strides = [math.prod(shape[k + 1:]) for k in range(len(shape))] if len(var.strides) else None
            binds[var] = tvm.tirx.decl_buffer(shape, var.dtype, name=var.name, strides=strides,
                                              data_alignment=var.data_alignment)
    return func.specialize(binds)


def definition(op_name: str, dtype: str):
    """The op's full variant (the first) as a shape-generic PrimFunc, and that variant."""
    op = te_defs.get(op_name)
    variant = op.variants[0]
    return tir_api.prim_func(op.compute(dtype, **op.split_variant(variant)[0]), "main", op_name), variant


def specialised(op_name: str, dtype: str, dims: dict):
    """The op's full variant as a compact, static-shape PrimFunc (scalars at their defaults)."""
    func, variant = definition(op_name, dtype)
    return static(func, te_defs.get(op_name), dims), variant


def builds_own(rule) -> bool:
    """Whether ``rule`` builds its own PrimFunc for the op (its ``apply`` returns a schedule of a new
    function, e.g. the LSTM layer kernels' IR-builder loop nests) instead of scheduling the definition."""
    return type(rule).apply is not schedules.ScheduleRule.apply


def scheduled(rule, func, target):
    """``func`` (the op's definition) scheduled by ``rule`` (knobs set): a PrimFunc, shape-generic
    where ``func`` is."""
    if builds_own(rule):
        return rule.apply(func, target).mod["main"]
    sch = tir_api.schedule(func)
    rule.schedule(sch, target)
    return sch.mod["main"]


def _arguments(op_name: str, dtype: str, dims: dict, names) -> list:
    """The arguments a kernel of the op is measured with, in parameter order ``names``: the op's own
    sample inputs at ``dims`` (``OpDef.sample``, seed 0: an integer input such as the LSTM layers'
    batch_sizes keeps its dtype and stays valid), outputs zero, scalars at their defaults; numpy
    arrays in kernel shapes."""
    import numpy as np

    op = te_defs.get(op_name)
    specs = {t.name: t for t in op.inputs + op.outputs}
    scalars = {s.name: s.default for s in op.scalars}
    sample = op.sample(dims, np.random.default_rng(0))
    args = []
    for name in names:
        if name in scalars:
            args.append(scalars[name])
            continue
        spec = specs[name]
        shape = _kernel_shape(spec, dims)
        if any(t is spec for t in op.inputs):
            args.append(np.ascontiguousarray(sample[name].astype(spec.dtype or dtype).reshape(shape)))
        else:
            args.append(np.zeros(shape, spec.dtype or dtype))
    return args


def device_arguments(op_name: str, dtype: str, dims: dict, names, device, args_info, alloc_repeat: int):
    """Meta-schedule's argument allocation (``f_alloc_argument``), for the op's sample inputs instead
    of its random fill (which would give an integer input such as batch_sizes any values)."""
    import tvm

    arrays = _arguments(op_name, dtype, dims, names)
    for name, array, info in zip(names, arrays, args_info):
        want = (str(info[1]), [int(d) for d in info[2]])
        if (str(array.dtype), list(array.shape)) != want:
            raise ValueError(f"{name}: the measured kernel takes {want}, the sample is "
                             f"{(str(array.dtype), list(array.shape))}")
    return [[tvm.runtime.tensor(a, device=device) for a in arrays] for _ in range(alloc_repeat)]


def rpc_arguments(op_name: str, dtype: str, dims: dict, names, session, device, args_info, alloc_repeat: int):
    """``device_arguments`` for meta-schedule's RPCRunner (the same, on the rpc_server's device)."""
    return device_arguments(op_name, dtype, dims, names, device, args_info, alloc_repeat)


TOLERANCE = 1e-3  # a checked kernel's largest error, relative to its output's largest value (+1)


def _check_outputs(op_name: str, dtype: str, dims: dict, names, module, knobs: dict) -> None:
    """Run ``module`` (the op's first variant scheduled with ``knobs``) once on ``_arguments`` and
    compare every output with the op's float64 reference; RuntimeError naming the knobs and the
    output when one is off by more than TOLERANCE (a wrong kernel, not rounding)."""
    import numpy as np
    import tvm

    op = te_defs.get(op_name)
    arrays = _arguments(op_name, dtype, dims, names)
    args = [a if isinstance(a, (int, float)) else tvm.runtime.tensor(a) for a in arrays]
    module["main"](*args)
    public = {t.name: [int(te_defs.dim_size(dims, d)) for d in t.shape] for t in op.inputs}
    ref = op.reference(**{n: (a.astype(np.float64) if a.dtype.kind == "f" else a).reshape(public[n])
                          for n, a in zip(names, arrays) if n in public}, **op.variants[0])
    for name, arg in zip(names, args):
        if name in ref and not isinstance(arg, (int, float)):
            got = arg.numpy().astype(np.float64)
            want = np.asarray(ref[name]).reshape(got.shape)
            err = np.abs(got - want).max(initial=0) / (np.abs(want).max(initial=0) + 1)
            if not err <= TOLERANCE:
                raise RuntimeError(f"tuning {op_name} {dtype}: the kernel with knobs {knobs} computes {name} "
                                   f"off the reference by {err:.3g} (relative; at most {TOLERANCE} expected)")


def time(op_name, dtype, dims, rule, knobs_list, repeat: int = 9) -> list[float]:
    """Median ms of the shape-generic kernel scheduled with each knob set, measured interleaved, each
    checked against the op's reference first (``_check_outputs``)."""
    import tvm

    func, _ = definition(op_name, dtype)
    names = [p.name for p in func.params]
    tgt = tvm_api.target(targets.get("llvm").tvm_target())
    funcs = [tvm_api.compile_module({"main": scheduled(rule.tuned(knobs), func, tgt)}, tgt).mod
             for knobs in knobs_list]
    for module, knobs in zip(funcs, knobs_list):
        _check_outputs(op_name, dtype, dims, names, module, knobs)
    args = [tvm.runtime.tensor(a) if not isinstance(a, (int, float)) else a
            for a in _arguments(op_name, dtype, dims, names)]
    timers = [m.time_evaluator("main", tvm.cpu(), number=5, repeat=1, min_repeat_ms=20) for m in funcs]
    samples = [[] for _ in funcs]
    for _ in range(repeat):
        for t, s in zip(timers, samples):
            s.append(t(*args).mean * 1e3)
    return [statistics.median(s) for s in samples]
