"""The LSTM's launch plan data: its schema, JSON text and validator (:func:`validate`).

The plan of one pass (one generated kernel per layer and direction for the recurrence) as plain
JSON data (dicts, lists, str, int, bool)::

    schema     SCHEMA
    config     the Config's fields (sizes, layers, directions, has_biases, varlen)
    pass       "forward" or "backward"; train (forward: save the activations), need_dx (backward)
    buffers    [{name, shape (elements), dtype, role, zero}]: role "input" (the caller's), "output",
               "saved" (written by the forward, read by the backward) or "workspace"; zero: the
               buffer must read as zero before the first launch
    stages     [{name, kind, layer, dir, after}]: the nodes of graph.graph (what `fusedgrad graph`
               draws), ``after`` the stages each one follows
    launches   in execution order, [{stage, op, variant, args, after}]: ``op`` a generated op
               (te_defs: lstm_layer_forward, lstm_layer_backward, column_sum) or a host step
               (:data:`HOST_OPS`: gemm, add, copy, zero_past_batch, gather_last_steps); ``args`` one
               {param, io, buffer, view} per parameter in the op's TensorSpec order (inputs, then
               outputs; those whose ``when`` flag is off left out), ``view`` = {offset, shape,
               strides} in elements of the buffer (shape: the kernel's, TensorSpec.kshape);
               ``after`` the earlier launches this one must follow (it reads what they write or
               writes what they read or write, overlapping): launches with no path between them
               may run at once (the two directions of a layer)

``gemm`` is c = a·b (+ bias) (+ addend) in float32, lowered by each host onto its own GEMM
kernels (:data:`HOST_OPS` specifies each host step as a generated op is specified).
:func:`validate` checks a plan (loaded or generated) and names the first bad field;
:func:`loads` / :func:`dumps` are the JSON text.  The generator is :mod:`fusedgrad.lstm.launches`.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, Mapping

from ..te_defs import TensorSpec, bind_dims
from .config import Config

SCHEMA = 2
PASSES = ("forward", "backward")
ROLES = ("input", "output", "saved", "workspace")
DTYPES = ("float32", "int32")
GENERATED_OPS = ("lstm_layer_forward", "lstm_layer_backward", "column_sum")


@dataclasses.dataclass(frozen=True)
class HostOp:
    """A host step of the plan, specified as a generated op is (TensorSpec inputs and outputs)."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    variants: tuple[Mapping[str, bool], ...]
    doc: str


HOST_OPS = {op.name: op for op in (
    HostOp("gemm", (TensorSpec("a", ("M", "K")), TensorSpec("b", ("K", "N")),
                    TensorSpec("bias", ("N",), when="has_bias"), TensorSpec("addend", ("M", "N"), when="has_addend")),
           (TensorSpec("c", ("M", "N")),),
           tuple({"has_bias": hb, "has_addend": ha} for hb in (False, True) for ha in (False, True)),
           "c = a·b (+ bias) (+ addend), float32"),
    HostOp("add", (TensorSpec("a", ("N",)), TensorSpec("b", ("N",))), (TensorSpec("out", ("N",)),), ({},),
           "out = a + b"),
    HostOp("copy", (TensorSpec("src", ("X", "Y", "Z")),), (TensorSpec("dst", ("X", "Y", "Z")),), ({},), "dst = src"),
    HostOp("zero_past_batch", (TensorSpec("batch_sizes", ("T",), dtype="int32"),),
           (TensorSpec("rows", ("T", "B", "N")),), ({},),
           "rows[t, b] = 0 for every b >= batch_sizes[t] (the others are kept)"),
    HostOp("gather_last_steps", (TensorSpec("batch_sizes", ("T",), dtype="int32"), TensorSpec("src", ("T", "B", "N"))),
           (TensorSpec("dst", ("B", "N")),), ({},),
           "dst[b] = src[t, b] at row b's last step t (the last t with b < batch_sizes[t])"),
)}


def op_spec(name: str):
    """The OpDef (generated op) or :class:`HostOp` named ``name``; ValueError for another name."""
    if name in HOST_OPS:
        return HOST_OPS[name]
    if name in GENERATED_OPS:
        from .. import te_defs

        return te_defs.get(name)
    raise ValueError(f"op: expected one of {sorted(GENERATED_OPS + tuple(HOST_OPS))}, got {name!r}")


def params_of(spec, variant: Mapping[str, bool]) -> list[tuple[TensorSpec, str]]:
    """(TensorSpec, "in" / "out") of every parameter of ``variant``, in the op's order."""
    return [(t, io) for io, ts in (("in", spec.inputs), ("out", spec.outputs)) for t in ts
            if t.when is None or bool(variant.get(t.when, False))]


def extent(view: Mapping[str, Any]) -> tuple[int, int]:
    """[first, last + 1) elements a view touches; (0, 0) when it is empty."""
    if any(n == 0 for n in view["shape"]):
        return 0, 0
    last = view["offset"] + sum((n - 1) * s for n, s in zip(view["shape"], view["strides"]))
    return view["offset"], last + 1



# --------------------------------------------------------------------------- JSON and validation


def dumps(plan: Mapping[str, Any]) -> str:
    """The plan as JSON text (validated first): one line per field, buffer, stage and launch."""
    validate(plan)
    fields = []
    for k, v in plan.items():
        if isinstance(v, list) and v:
            v = "[\n" + ",\n".join("  " + json.dumps(x) for x in v) + "\n ]"
        else:
            v = json.dumps(v)
        fields.append(f" {json.dumps(k)}: {v}")
    return "{\n" + ",\n".join(fields) + "\n}\n"


def loads(text: str) -> dict:
    """A plan from JSON text, validated (ValueError naming the first bad field)."""
    try:
        plan = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"plan: expected JSON text, got {e}") from None
    validate(plan)
    return plan


def _want(cond: bool, field: str, expected: str, got: Any) -> None:
    if not cond:  # the first bad field, by its path in the plan
        raise ValueError(f"plan: {field}: expected {expected}, got {got!r}")


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _fields(obj, field: str, keys: tuple[str, ...]) -> None:
    _want(isinstance(obj, dict), field, "an object", type(obj).__name__)
    for k in keys:
        _want(k in obj, f"{field}.{k}", "a field", "nothing")


def validate(plan: Any) -> None:
    """Check ``plan`` against the schema: every field's type, the buffers each launch binds (known,
    of the parameter's dtype, its view inside the buffer, shapes consistent across the parameters as
    the op's TensorSpecs say), parameters in the op's order, inputs never written, dependencies on
    earlier launches only.  ValueError naming the first bad field (e.g. ``launches[3].args[1].view``)."""
    _fields(plan, "plan", ("schema", "config", "pass", "train", "need_dx", "buffers", "stages", "launches"))
    _want(plan["schema"] == SCHEMA and _int(plan["schema"]), "schema", f"{SCHEMA}", plan["schema"])
    cfg = plan["config"]
    _fields(cfg, "config", tuple(f.name for f in dataclasses.fields(Config)))
    for k in ("T", "B", "I", "H", "L", "D"):
        _want(_int(cfg[k]) and cfg[k] >= 0, f"config.{k}", "an integer >= 0", cfg[k])
    for k in ("has_biases", "varlen"):
        _want(isinstance(cfg[k], bool), f"config.{k}", "a bool", cfg[k])
    _want(plan["pass"] in PASSES, "pass", f"one of {PASSES}", plan["pass"])
    for k in ("train", "need_dx"):
        _want(isinstance(plan[k], bool), k, "a bool", plan[k])
    buffers = _check_buffers(plan["buffers"])
    _want(isinstance(plan["stages"], list), "stages", "a list", type(plan["stages"]).__name__)
    stages: set[str] = set()
    for n, st in enumerate(plan["stages"]):
        f = f"stages[{n}]"
        _fields(st, f, ("name", "kind", "layer", "dir", "after"))
        _want(isinstance(st["name"], str) and st["name"] not in stages, f"{f}.name", "a new name", st["name"])
        _want(isinstance(st["kind"], str), f"{f}.kind", "a str", st["kind"])
        for k in ("layer", "dir"):
            _want(_int(st[k]), f"{f}.{k}", "an integer", st[k])
        _want(isinstance(st["after"], list) and all(a in stages for a in st["after"]), f"{f}.after",
              "a list of earlier stages' names", st["after"])
        stages.add(st["name"])
    _want(isinstance(plan["launches"], list), "launches", "a list", type(plan["launches"]).__name__)
    for n, launch in enumerate(plan["launches"]):
        _check_launch(launch, f"launches[{n}]", n, buffers, stages)


def _check_buffers(items) -> dict[str, dict]:
    _want(isinstance(items, list), "buffers", "a list", type(items).__name__)
    out: dict[str, dict] = {}
    for n, buf in enumerate(items):
        f = f"buffers[{n}]"
        _fields(buf, f, ("name", "shape", "dtype", "role", "zero"))
        _want(isinstance(buf["name"], str) and buf["name"] not in out, f"{f}.name", "a new name", buf["name"])
        _want(isinstance(buf["shape"], list) and all(_int(v) and v >= 0 for v in buf["shape"]), f"{f}.shape",
              "a list of integers >= 0", buf["shape"])
        _want(buf["dtype"] in DTYPES, f"{f}.dtype", f"one of {DTYPES}", buf["dtype"])
        _want(buf["role"] in ROLES, f"{f}.role", f"one of {ROLES}", buf["role"])
        _want(isinstance(buf["zero"], bool), f"{f}.zero", "a bool", buf["zero"])
        out[buf["name"]] = buf
    return out


def _check_launch(launch, f: str, n: int, buffers: dict, stages: set) -> None:
    _fields(launch, f, ("stage", "op", "variant", "args", "after"))
    _want(launch["stage"] in stages, f"{f}.stage", "a stage's name", launch["stage"])
    try:
        spec = op_spec(launch["op"]) if isinstance(launch["op"], str) else None
    except ValueError:
        spec = None
    _want(spec is not None, f"{f}.op", f"one of {sorted(GENERATED_OPS + tuple(HOST_OPS))}", launch["op"])
    variant = launch["variant"]
    flags = getattr(spec, "schedule_flags", ())
    known = [dict(v) for v in spec.variants]
    _want(isinstance(variant, dict) and {k: v for k, v in variant.items() if k not in flags} in known,
          f"{f}.variant", f"one of {known}", variant)
    params, args = params_of(spec, variant), launch["args"]
    _want(isinstance(args, list) and len(args) == len(params), f"{f}.args",
          f"{len(params)} arguments ({', '.join(t.name for t, _ in params)})",
          f"{len(args)}" if isinstance(args, list) else args)
    dims: dict[str, int] = {}
    origin: dict[str, str] = {}
    for m, ((t, io), arg) in enumerate(zip(params, args)):
        g = f"{f}.args[{m}]"
        _fields(arg, g, ("param", "io", "buffer", "view"))
        _want(arg["param"] == t.name, f"{g}.param", repr(t.name), arg["param"])
        _want(arg["io"] == io, f"{g}.io", repr(io), arg["io"])
        buf = buffers.get(arg["buffer"]) if isinstance(arg["buffer"], str) else None
        _want(buf is not None, f"{g}.buffer", "a buffer's name", arg["buffer"])
        _want(buf["dtype"] == (t.dtype or "float32"), f"{g}.buffer", f"a {t.dtype or 'float32'} buffer",
              f"{buf['name']} ({buf['dtype']})")
        _want(io == "in" or buf["role"] not in ("input",), f"{g}.buffer", "a buffer other than an input "
              "(it is written)", buf["name"])
        view = arg["view"]
        _fields(view, f"{g}.view", ("offset", "shape", "strides"))
        rank = len(t.kshape)
        _want(_int(view["offset"]) and view["offset"] >= 0, f"{g}.view.offset", "an integer >= 0", view["offset"])
        for k in ("shape", "strides"):
            _want(isinstance(view[k], list) and len(view[k]) == rank and all(_int(v) and v >= 0 for v in view[k]),
                  f"{g}.view.{k}", f"{rank} integers >= 0", view[k])
        size = functools.reduce(lambda p, v: p * v, buf["shape"], 1)
        lo, hi = extent(view)
        _want(hi <= size and view["offset"] <= size, f"{g}.view", f"elements within {buf['name']}'s {size}",
              f"offset {view['offset']}, shape {view['shape']}, strides {view['strides']}")
        try:
            bind_dims(dims, t.kshape, tuple(view["shape"]), t.name, origin)
        except ValueError as e:
            raise ValueError(f"plan: {g}.view.shape: {e}") from None
    after = launch["after"]
    _want(isinstance(after, list) and all(_int(i) and 0 <= i < n for i in after) and len(set(after)) == len(after),
          f"{f}.after", f"a list of distinct earlier launches' indices (< {n})", after)
