"""The LSTM's launch plan as data: one generator (:func:`build`), every host a consumer.

For the layer recurrence (``Config.recurrence == "layer"``: one generated kernel per layer and
direction) the plan of one pass is plain JSON data (dicts, lists, str, int, bool)::

    schema     SCHEMA
    config     the Config's fields (sizes, layers, directions, has_biases, varlen, recurrence)
    pass       "forward" or "backward"; train (forward: save the activations), need_dx (backward)
    buffers    [{name, shape (elements), dtype, role, zero}]: role "input" (the caller's), "output",
               "saved" (written by the forward, read by the backward) or "workspace"; zero: the
               buffer must read as zero before the first launch
    stages     [{name, kind, layer, dir, after}]: the nodes of lstm_plan.plan (what `fusedgrad graph`
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

Each host binds the views and calls: the Python driver (``lstm_run``) today; the Ascend host is
the next consumer (``fusedgrad graph --json`` writes the data).  ``gemm`` is c = a·b (+ bias)
(+ addend) in float32, lowered by each host onto its own GEMM kernels (the CPU: ``pack_b`` /
``pack_bt`` and ``matmul_packed``'s entries; b bound as a column-major view [K, N] is a
transposed weight [N, K]).  :func:`validate` checks a plan (loaded or generated) and names the
first bad field; :func:`loads` / :func:`dumps` are the JSON text.

The per-step recurrence (``"step"``) has no such data: its launches' row counts are the
batch sizes' values, which the driver reads per step (``lstm_plan.run_plan``).
"""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, Mapping

from .lstm_config import Config
from .te_defs import TensorSpec, bind_dims

SCHEMA = 1
PASSES = ("forward", "backward")
ROLES = ("input", "output", "saved", "workspace")
DTYPES = ("float32", "int32")
SAVED = ("c", "i", "f", "g", "o", "tanhc")
"""The activations a train=True forward saves besides h ([D·L, T, B, H] each)."""
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
        from . import te_defs

        return te_defs.get(name)
    raise ValueError(f"op: expected one of {sorted(GENERATED_OPS + tuple(HOST_OPS))}, got {name!r}")


def params_of(spec, variant: Mapping[str, bool]) -> list[tuple[TensorSpec, str]]:
    """(TensorSpec, "in" / "out") of every parameter of ``variant``, in the op's order."""
    return [(t, io) for io, ts in (("in", spec.inputs), ("out", spec.outputs)) for t in ts
            if t.when is None or bool(variant.get(t.when, False))]


# --------------------------------------------------------------------------- the generator


def _strides(shape) -> list[int]:
    out, step = [], 1
    for n in reversed(list(shape)):
        out.append(step)
        step *= int(n)
    return out[::-1]


def _view(shape, offset: int = 0, strides=None) -> dict:
    shape = [int(n) for n in shape]
    return {"offset": int(offset), "shape": shape, "strides": list(strides) if strides is not None else _strides(shape)}


class _Builder:
    """Buffers, stages and launches of one plan as they are named, in execution order."""

    def __init__(self):
        self.buffers: dict[str, dict] = {}
        self.stages: list[dict] = []
        self.launches: list[dict] = []

    def buf(self, name: str, shape, role: str, dtype: str = "float32", zero: bool = False) -> str:
        if name not in self.buffers:
            self.buffers[name] = {"name": name, "shape": [int(n) for n in shape], "dtype": dtype, "role": role,
                                  "zero": bool(zero)}
        return name

    def stage(self, kind: str, layer: int, d: int, after: list[str], io: bool = False) -> None:
        """A stage named kind.layer.dir (``io``: kind alone; -1: no layer, no direction)."""
        name = ".".join([kind] + [str(v) for v in (layer, d) if v >= 0 and not io])
        self.stages.append({"name": name, "kind": kind, "layer": layer, "dir": d, "after": after})

    def launch(self, op: str, variant: dict, **binds: tuple[str, dict]) -> None:
        args = []
        for t, io in params_of(op_spec(op), variant):
            buffer, view = binds.pop(t.name)
            args.append({"param": t.name, "io": io, "buffer": buffer, "view": view})
        assert not binds, f"{op}: no parameters {sorted(binds)}"
        self.launches.append({"stage": self.stages[-1]["name"], "op": op, "variant": dict(variant), "args": args,
                              "after": []})


def build(cfg: Config, pass_: str = "forward", train: bool = True, need_dx: bool = True) -> dict:
    """The plan of one pass of ``cfg`` (layer recurrence) as JSON-ready data (a new object each
    call).  ``train``: the forward saves the activations (the backward needs them); ``need_dx``:
    the backward computes the input's gradient (else its layer-0 GEMMs are left out)."""
    if not isinstance(cfg, Config):
        raise TypeError(f"cfg: expected an lstm_plan.Config, got {type(cfg).__name__}")
    if pass_ not in PASSES:
        raise ValueError(f"pass_: expected one of {PASSES}, got {pass_!r}")
    if cfg.recurrence != "layer":
        raise ValueError(f"cfg.recurrence: expected 'layer' (the per-step launches depend on the batch sizes' "
                         f"values, walked by lstm_plan.run_plan), got {cfg.recurrence!r}")
    if pass_ == "backward" and not train:
        raise ValueError("train: expected True for the backward (it reads the activations a train=True "
                         "forward saves), got False")
    return json.loads(_text(cfg, pass_, bool(train), bool(need_dx)))


@functools.lru_cache(maxsize=256)
def _text(cfg: Config, pass_: str, train: bool, need_dx: bool) -> str:
    b = _Builder()
    (_forward if pass_ == "forward" else _backward)(cfg, b, train, need_dx)
    _dependencies(b.launches)
    plan = {"schema": SCHEMA, "config": dataclasses.asdict(cfg), "pass": pass_, "train": train,
            "need_dx": need_dx, "buffers": list(b.buffers.values()), "stages": b.stages, "launches": b.launches}
    return json.dumps(plan)


def _common_inputs(cfg: Config, b: _Builder) -> None:
    T, B, H, LD = cfg.T, cfg.B, cfg.H, cfg.L * cfg.D
    b.buf("x", (T * B, cfg.I), "input")
    for name in ("h0", "c0"):
        b.buf(name, (LD, B, H), "input")
    b.buf("batch_sizes", (T,), "input", dtype="int32")
    for l in range(cfg.L):
        for d in range(cfg.D):
            b.buf(f"w_ih.{l}.{d}", (4 * H, cfg.in_size(l)), "input")
            b.buf(f"w_hh.{l}.{d}", (4 * H, H), "input")


def _forward(cfg: Config, b: _Builder, train: bool, need_dx: bool) -> None:
    T, B, H, L, D = cfg.T, cfg.B, cfg.H, cfg.L, cfg.D
    TB, TBH, BH = T * B, T * B * H, B * H
    _common_inputs(cfg, b)
    if cfg.has_biases:
        for l in range(L):
            for d in range(D):
                b.buf(f"b_ih.{l}.{d}", (4 * H,), "input")
                b.buf(f"b_hh.{l}.{d}", (4 * H,), "input")
    b.buf("y", (TB, D * H), "output")
    b.buf("h", (L * D, T, B, H), "saved" if train else "workspace")
    for name in SAVED if train else ():
        b.buf(name, (L * D, T, B, H), "saved")
    for name in ("hy", "cy"):
        b.buf(name, (L * D, B, H), "output")
    b.stage("input", -1, -1, [])
    for l in range(L):
        for d in range(D) if cfg.has_biases else ():
            bias = b.buf(f"bias.{l}.{d}", (4 * H,), "workspace")
            b.launch("add", {}, a=(f"b_ih.{l}.{d}", _view((4 * H,))), b=(f"b_hh.{l}.{d}", _view((4 * H,))),
                     out=(bias, _view((4 * H,))))
    for l in range(L):
        n_in = cfg.in_size(l)
        if l == 0:
            layer_in = ("x", _view((TB, n_in)))
        elif D == 1:  # the layer below's h is this layer's input
            layer_in = ("h", _view((TB, H), (l - 1) * TBH))
        else:
            layer_in = (f"y.{l - 1}", _view((TB, n_in)))
        for d in range(D):
            k = l * D + d
            b.stage("xw", l, d, ["input" if l == 0 else f"output.{l - 1}"])
            xw = b.buf(f"xw.{d}", (TB, 4 * H), "workspace")
            binds = {"bias": (f"bias.{l}.{d}", _view((4 * H,)))} if cfg.has_biases else {}
            # x·W_ihᵀ: W_ih [4H, n_in] seen as the column-major [n_in, 4H]
            b.launch("gemm", {"has_bias": cfg.has_biases, "has_addend": False}, a=layer_in,
                     b=(f"w_ih.{l}.{d}", _view((n_in, 4 * H), 0, (1, n_in))), c=(xw, _view((TB, 4 * H))), **binds)
            b.stage("layer", l, d, [f"xw.{l}.{d}"])
            state = {name: (name, _view((T, B, H), k * TBH)) for name in ("h",) + (SAVED if train else ())}
            ends = {name: (name, _view((B, H), k * BH)) for name in ("h0", "c0", "hy", "cy")}
            b.launch("lstm_layer_forward", {"train": train, "reverse": d == 1},
                     xw=(xw, _view((T, B, 4, H))), w_hh=(f"w_hh.{l}.{d}", _view((4, H, H))),
                     batch_sizes=("batch_sizes", _view((T,))), **state, **ends)
        b.stage("output", l, -1, [f"layer.{l}.{d}" for d in range(D)])
        if D == 2:  # the layer's output [T, B, 2H]: forward h, then reverse h
            y = b.buf("y" if l == L - 1 else f"y.{l}", (TB, 2 * H), "output" if l == L - 1 else "workspace")
            for d in range(D):
                b.launch("copy", {}, src=("h", _view((T, B, H), (l * D + d) * TBH)),
                         dst=(y, _view((T, B, H), d * H, (B * 2 * H, 2 * H, 1))))
        elif l == L - 1:  # the output in its own memory (h is returned too)
            b.launch("copy", {}, src=("h", _view((T, B, H), l * TBH)), dst=("y", _view((T, B, H))))


def _backward(cfg: Config, b: _Builder, train: bool, need_dx: bool) -> None:
    T, B, H, L, D = cfg.T, cfg.B, cfg.H, cfg.L, cfg.D
    TB, TBH, BH, DH = T * B, T * B * H, B * H, D * H
    _common_inputs(cfg, b)
    b.buf("dy", (TB, DH), "input")
    for name in ("grad_hy", "grad_cy"):
        b.buf(name, (L * D, B, H), "input")
    for name in ("h",) + SAVED:
        b.buf(name, (L * D, T, B, H), "saved")
    if need_dx:
        b.buf("dx", (TB, cfg.I), "output")
    for name in ("dh0", "dc0"):
        b.buf(name, (L * D, B, H), "output")
    for l in range(L):
        for d in range(D):
            b.buf(f"dw_ih.{l}.{d}", (4 * H, cfg.in_size(l)), "output")
            b.buf(f"dw_hh.{l}.{d}", (4 * H, H), "output")
            if cfg.has_biases:
                b.buf(f"db_ih.{l}.{d}", (4 * H,), "output")
                b.buf(f"db_hh.{l}.{d}", (4 * H,), "output")
    bs = ("batch_sizes", _view((T,)))
    b.stage("grad_output", L, -1, [], io=True)  # the weights are packed by the GEMMs that read them
    for l in reversed(range(L)):
        n_in = cfg.in_size(l)
        dy = "dy" if l == L - 1 else f"dy.{l}"
        for d in range(D):
            k = l * D + d
            b.stage("blayer", l, d, ["grad_output" if l == L - 1 else f"dx.{l + 1}"])
            # rows past a step's batch size must read as zero
            dg = b.buf(f"dgates.{d}", (T, B, 4 * H), "workspace", zero=cfg.varlen)
            dgt = b.buf(f"dgates_t.{d}", (4 * H, TB), "workspace", zero=cfg.varlen)
            at_k = {name: (name, _view((T, B, H), k * TBH)) for name in ("c",) + SAVED[1:]}
            ends = {name: (name, _view((B, H), k * BH)) for name in ("c0", "grad_hy", "grad_cy", "dh0", "dc0")}
            b.launch("lstm_layer_backward", {"reverse": d == 1}, dy=(dy, _view((T, B, H), d * H, (B * DH, DH, 1))),
                     w_hh=(f"w_hh.{l}.{d}", _view((4, H, H))), batch_sizes=bs, dgates=(dg, _view((T, B, 4, H))),
                     dgates_t=(dgt, _view((4, H, T, B))), **at_k, **ends)
        for d in range(D):
            k = l * D + d
            dg, dgt = f"dgates.{d}", f"dgates_t.{d}"
            b.stage("dw", l, d, [f"blayer.{l}.{d}"])
            layer_in = _layer_input(cfg, b, l, d == 0)
            # dW_ih = dgatesᵀ·x over all steps
            b.launch("gemm", {"has_bias": False, "has_addend": False}, a=(dgt, _view((4 * H, TB))),
                     b=(layer_in, _view((TB, n_in))), c=(f"dw_ih.{l}.{d}", _view((4 * H, n_in))))
            # dW_hh = Σ_t dgates_tᵀ·h_prev(t): h0 at each row's first step, else the neighbouring step's h
            first = b.buf(f"first.{l}.{d}", (4 * H, H), "workspace")
            if d == 0:
                a_first = (dgt, _view((4 * H, B), 0, (TB, 1)))
                rest = ((dgt, _view((4 * H, (T - 1) * B), B, (TB, 1))), ("h", _view(((T - 1) * B, H), k * TBH)))
            else:  # dgates at each sequence's first step in the reverse direction: its last time index
                e_t = b.buf(f"e_t.{l}.{d}", (4 * H, B), "workspace")
                b.launch("gather_last_steps", {}, batch_sizes=bs, src=(dg, _view((T, B, 4 * H))),
                         dst=(e_t, _view((B, 4 * H), 0, (1, B))))
                a_first = (e_t, _view((4 * H, B)))
                h_next = ("h", _view(((T - 1) * B, H), k * TBH + BH))
                if cfg.varlen:  # h past a sequence's end must not reach its last step's dgates
                    rest_h = b.buf(f"rest_h.{l}.{d}", (T - 1, B, H), "workspace")
                    b.launch("copy", {}, src=("h", _view((T - 1, B, H), k * TBH + BH)),
                             dst=(rest_h, _view((T - 1, B, H))))
                    b.launch("zero_past_batch", {}, batch_sizes=("batch_sizes", _view((T - 1,), 1)),
                             rows=(rest_h, _view((T - 1, B, H))))
                    h_next = (rest_h, _view(((T - 1) * B, H)))
                rest = ((dgt, _view((4 * H, (T - 1) * B), 0, (TB, 1))), h_next)
            b.launch("gemm", {"has_bias": False, "has_addend": False}, a=a_first, b=("h0", _view((B, H), k * BH)),
                     c=(first, _view((4 * H, H))))
            b.launch("gemm", {"has_bias": False, "has_addend": True}, a=rest[0], b=rest[1],
                     addend=(first, _view((4 * H, H))), c=(f"dw_hh.{l}.{d}", _view((4 * H, H))))
            if cfg.has_biases:
                b.launch("column_sum", {}, a=(dg, _view((TB, 4 * H))), s=(f"db_ih.{l}.{d}", _view((4 * H,))))
                b.launch("copy", {}, src=(f"db_ih.{l}.{d}", _view((1, 1, 4 * H))),
                         dst=(f"db_hh.{l}.{d}", _view((1, 1, 4 * H))))
        b.stage("dx", l, -1, [f"blayer.{l}.{d}" for d in range(D)])
        if l == 0 and not need_dx:  # nobody wants the input's gradient: no GEMMs
            continue
        # the gradient of this layer's input: Σ_directions dgates·W_ih
        out = "dx" if l == 0 else b.buf(f"dy.{l - 1}", (TB, n_in), "workspace")
        acc = None
        for d in range(D):
            c = out if d == D - 1 else b.buf(f"{out}.part", (TB, n_in), "workspace")
            binds = {"addend": (acc, _view((TB, n_in)))} if acc else {}
            b.launch("gemm", {"has_bias": False, "has_addend": acc is not None},
                     a=(f"dgates.{d}", _view((TB, 4 * H))), b=(f"w_ih.{l}.{d}", _view((4 * H, n_in))),
                     c=(c, _view((TB, n_in))), **binds)
            acc = c


def _layer_input(cfg: Config, b: _Builder, l: int, make: bool) -> str:
    """The buffer holding layer l's input [T·B, n_in] with the rows past each step's batch size
    zero (variable lengths); its launches are added when ``make`` (the layer's first dW stage)."""
    T, B, H, D = cfg.T, cfg.B, cfg.H, cfg.D
    if l == 0 and not cfg.varlen:
        return "x"
    n_in = cfg.in_size(l)
    name = b.buf(f"x.{l}", (T * B, n_in), "workspace")
    if make:
        if l == 0:
            b.launch("copy", {}, src=("x", _view((T, B, n_in))), dst=(name, _view((T, B, n_in))))
        for d in range(D) if l else ():
            b.launch("copy", {}, src=("h", _view((T, B, H), ((l - 1) * D + d) * T * B * H)),
                     dst=(name, _view((T, B, H), d * H, (B * n_in, n_in, 1))))
        if cfg.varlen:
            b.launch("zero_past_batch", {}, batch_sizes=("batch_sizes", _view((T,))), rows=(name, _view((T, B, n_in))))
    return name


# --------------------------------------------------------------------------- dependencies


def extent(view: Mapping[str, Any]) -> tuple[int, int]:
    """[first, last + 1) elements a view touches; (0, 0) when it is empty."""
    if any(n == 0 for n in view["shape"]):
        return 0, 0
    last = view["offset"] + sum((n - 1) * s for n, s in zip(view["shape"], view["strides"]))
    return view["offset"], last + 1


def _dependencies(launches: list[dict]) -> None:
    """Set each launch's ``after``: the earlier launches it conflicts with (one writes what the other
    reads or writes, the extents overlapping), less those implied through another (transitive
    reduction)."""
    def touched(launch, io):
        return [(a["buffer"],) + extent(a["view"]) for a in launch["args"] if a["io"] == io]

    def meet(xs, ys):
        return any(bx == by and lo < hi2 and lo2 < hi for bx, lo, hi in xs for by, lo2, hi2 in ys)

    acc = [(touched(x, "in"), touched(x, "out")) for x in launches]
    before: list[set[int]] = []  # every launch each one follows, directly or not
    for j, (rj, wj) in enumerate(acc):
        direct = [i for i in range(j) if meet(acc[i][1], rj) or meet(acc[i][1], wj) or meet(acc[i][0], wj)]
        implied = set().union(*(before[i] for i in direct)) if direct else set()
        launches[j]["after"] = [i for i in direct if i not in implied]
        before.append(implied | set(direct))


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
    _want(cfg["recurrence"] == "layer", "config.recurrence", "'layer'", cfg["recurrence"])
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
