"""The LSTM's launch plan as data: one generator (:func:`build`), every host a consumer.

The plan of one pass (the recurrence: one generated kernel per layer and direction) is plain
JSON data: buffers, stages and launches binding views of
the buffers, each launch's dependencies (its schema, JSON text and validator in
:mod:`fusedgrad.lstm.schema`, whose names are importable from here too).

Each host binds the views and calls: the Python driver (``run``) today (``fusedgrad graph --json``
writes the data).  A compiled host, whose calls bring their sizes at run time, evaluates the same data
held for every size at once (:mod:`~fusedgrad.lstm.symbolic`, which runs this generator on symbols;
the Ascend package's ``op_host/fg_lstm_plan.h``): the layer loops below take the layers as a
sequence so that one symbolic layer can stand for its kind.  ``gemm`` is c = a·b (+ bias)
(+ addend) in float32, lowered by each host onto its own GEMM kernels (the CPU: ``pack_b`` /
``pack_bt`` and ``matmul_packed``'s entries; b bound as a column-major view [K, N] is a
transposed weight [N, K]).  :func:`validate` checks a plan (loaded or generated) and names the
first bad field; :func:`loads` / :func:`dumps` are the JSON text.

A run reads the plan as objects (:func:`plan`: a :class:`Plan` of tuples, made once per
configuration); :func:`build` is the same plan as JSON-ready data.  A sequence with no steps
(T·B = 0) is a plan too: the final state is the initial one, the weights' gradients zero.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

from .config import Config
from .schema import (  # noqa: F401  (part of this module's API)
    DTYPES, GENERATED_OPS, HOST_OPS, PASSES, ROLES, SCHEMA, HostOp, dumps, extent, loads, op_spec,
    params_of, validate)

PARAMS = ("w_ih", "w_hh", "b_ih", "b_hh")
"""Each layer and direction's parameters, in the order of the call's flat params (torch's, CANN's)."""

SAVED = ("c", "i", "f", "g", "o", "tanhc")
"""The activations a train=True forward saves besides h ([D·L, T, B, H] each)."""


# --------------------------------------------------------------------------- the generator


def _n(n):
    """A size as the plan holds it: an int, or (the symbolic plan, :mod:`~fusedgrad.lstm.symbolic`) an
    expression of the sizes kept as it is."""
    return n if hasattr(n, "terms") else int(n)


def _strides(shape) -> list[int]:
    out, step = [], 1
    for n in reversed(list(shape)):
        out.append(step)
        step *= _n(n)
    return out[::-1]


def _view(shape, offset: int = 0, strides=None) -> dict:
    shape = [_n(n) for n in shape]
    return {"offset": _n(offset), "shape": shape, "strides": list(strides) if strides is not None else _strides(shape)}


class _Builder:
    """Buffers, stages and launches of one plan as they are named, in execution order."""

    def __init__(self):
        self.buffers: dict[str, dict] = {}
        self.stages: list[dict] = []
        self.launches: list[dict] = []

    def buf(self, name: str, shape, role: str, dtype: str = "float32", zero: bool = False) -> str:
        if name not in self.buffers:
            self.buffers[name] = {"name": name, "shape": [_n(n) for n in shape], "dtype": dtype, "role": role,
                                  "zero": bool(zero)}
        return name

    def stage(self, kind: str, layer: int, d: int, after: list[str], io: bool = False) -> None:
        """A stage named kind.layer.dir (``io``: kind alone; -1: no layer, no direction)."""
        name = ".".join([kind] + [str(v) for v in (layer, d) if not io and v >= 0])
        self.stages.append({"name": name, "kind": kind, "layer": layer, "dir": d, "after": after})

    def launch(self, op: str, variant: dict, **binds: tuple[str, dict]) -> None:
        args = []
        for t, io in params_of(op_spec(op), variant):
            buffer, view = binds.pop(t.name)
            args.append({"param": t.name, "io": io, "buffer": buffer, "view": view})
        assert not binds, f"{op}: no parameters {sorted(binds)}"
        self.launches.append({"stage": self.stages[-1]["name"], "op": op, "variant": dict(variant), "args": args,
                              "after": []})


class View(NamedTuple):
    """The elements a launch's parameter sees of its buffer: offset, shape, strides (elements)."""

    offset: int
    shape: tuple
    strides: tuple


class Arg(NamedTuple):
    param: str
    io: str
    """"in" or "out"."""
    buffer: str
    view: View


class Buffer(NamedTuple):
    name: str
    shape: tuple
    dtype: str
    role: str
    """"input" (the caller's), "output", "saved" (the forward's, for the backward) or "workspace"."""
    zero: bool
    """It must read as zero before the first launch."""


class Stage(NamedTuple):
    name: str
    kind: str
    layer: int
    dir: int
    after: tuple


class Launch(NamedTuple):
    stage: str
    op: str
    variant: tuple
    """The variant's (flag, value) pairs, sorted."""
    args: tuple
    """One :class:`Arg` per parameter, in the op's order."""
    after: tuple
    """The earlier launches (indices) this one must follow."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """The plan of one pass of a configuration, as the Python host runs it (:func:`plan`)."""

    cfg: Config
    pass_: str
    train: bool
    need_dx: bool
    buffers: tuple
    stages: tuple
    launches: tuple

    @staticmethod
    def of(data) -> "Plan":
        """The plan of JSON-ready data (:func:`build`'s, or :func:`loads`'s of a file)."""
        return Plan(Config(**data["config"]), data["pass"], data["train"], data["need_dx"],
                    tuple(Buffer(b["name"], tuple(b["shape"]), b["dtype"], b["role"], b["zero"])
                          for b in data["buffers"]),
                    tuple(Stage(st["name"], st["kind"], st["layer"], st["dir"], tuple(st["after"]))
                          for st in data["stages"]),
                    tuple(Launch(x["stage"], x["op"], tuple(sorted(x["variant"].items())),
                                 tuple(Arg(a["param"], a["io"], a["buffer"], View(a["view"]["offset"],
                                                                                  tuple(a["view"]["shape"]),
                                                                                  tuple(a["view"]["strides"])))
                                       for a in x["args"]), tuple(x["after"])) for x in data["launches"]))

    def data(self) -> dict:
        """The plan as JSON-ready data, in :mod:`~fusedgrad.lstm.schema`'s format (a new object)."""
        return {"schema": SCHEMA, "config": dataclasses.asdict(self.cfg), "pass": self.pass_, "train": self.train,
                "need_dx": self.need_dx, "buffers": [{**b._asdict(), "shape": list(b.shape)} for b in self.buffers],
                "stages": [{**st._asdict(), "after": list(st.after)} for st in self.stages],
                "launches": [{"stage": x.stage, "op": x.op, "variant": dict(x.variant),
                              "args": [{"param": a.param, "io": a.io, "buffer": a.buffer,
                                        "view": {"offset": a.view.offset, "shape": list(a.view.shape),
                                                 "strides": list(a.view.strides)}} for a in x.args],
                              "after": list(x.after)} for x in self.launches]}


def plan(cfg: Config, pass_: str = "forward", train: bool = True, need_dx: bool = True) -> Plan:
    """The plan of one pass of ``cfg``, made once per configuration (the same object while kept).
    ``train``: the forward saves the activations (the backward needs them); ``need_dx``: the
    backward computes the input's gradient (else its layer-0 GEMMs are left out)."""
    if not isinstance(cfg, Config):
        raise TypeError(f"cfg: expected a fusedgrad.lstm.Config, got {type(cfg).__name__}")
    if pass_ not in PASSES:
        raise ValueError(f"pass_: expected one of {PASSES}, got {pass_!r}")
    if pass_ == "backward" and not train:
        raise ValueError("train: expected True for the backward (it reads the activations a train=True "
                         "forward saves), got False")
    return _plan(cfg, pass_, bool(train), bool(need_dx))


@functools.lru_cache(maxsize=256)
def _plan(cfg: Config, pass_: str, train: bool, need_dx: bool) -> Plan:
    buffers, stages, launched = layer_launches(cfg, pass_, train, need_dx, range(cfg.L))
    _dependencies(launched)
    return Plan.of({"config": dataclasses.asdict(cfg), "pass": pass_, "train": train, "need_dx": need_dx,
                    "buffers": buffers, "stages": stages, "launches": launched})


def build(cfg: Config, pass_: str = "forward", train: bool = True, need_dx: bool = True) -> dict:
    """:func:`plan` as JSON-ready data (a new object each call): what ``fusedgrad graph --json`` writes."""
    return plan(cfg, pass_, train, need_dx).data()


def layer_launches(cfg: Config, pass_: str, train: bool, need_dx: bool, layers) -> tuple[list, list, list]:
    """(buffers, stages, launches) of one pass for ``layers``, the launches without their ``after``:
    what :func:`build` writes for every layer (``range(cfg.L)``), and what the symbolic plan
    (:mod:`~fusedgrad.lstm.symbolic`) takes for one layer of each kind."""
    b = _Builder()
    (_forward if pass_ == "forward" else _backward)(cfg, b, train, need_dx, layers)
    return list(b.buffers.values()), b.stages, b.launches


def _empty(cfg: Config) -> bool:
    """No steps (T·B = 0; never for the symbolic plan's sizes)."""
    tb = cfg.T * cfg.B
    return not hasattr(tb, "terms") and tb == 0


def _common_inputs(cfg: Config, b: _Builder, layers) -> None:
    T, B, H, LD = cfg.T, cfg.B, cfg.H, cfg.L * cfg.D
    b.buf("x", (T * B, cfg.I), "input")
    for name in ("h0", "c0"):
        b.buf(name, (LD, B, H), "input")
    b.buf("batch_sizes", (T,), "input", dtype="int32")
    for l in layers:
        for d in range(cfg.D):
            b.buf(f"w_ih.{l}.{d}", (4 * H, cfg.in_size(l)), "input")
            b.buf(f"w_hh.{l}.{d}", (4 * H, H), "input")


def _forward(cfg: Config, b: _Builder, train: bool, need_dx: bool, layers) -> None:
    """The forward's launches for ``layers`` (every layer, in order; the symbolic plan: one layer
    index standing for its kind of layer)."""
    T, B, H, L, D = cfg.T, cfg.B, cfg.H, cfg.L, cfg.D
    TB, TBH, BH = T * B, T * B * H, B * H
    _common_inputs(cfg, b, layers)
    if cfg.has_biases:
        for l in layers:
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
    if _empty(cfg):  # no steps: the final state is the initial state
        for src, dst in (("h0", "hy"), ("c0", "cy")):
            b.launch("copy", {}, src=(src, _view((L * D, B, H))), dst=(dst, _view((L * D, B, H))))
        return
    for l in layers:
        for d in range(D) if cfg.has_biases else ():
            bias = b.buf(f"bias.{l}.{d}", (4 * H,), "workspace")
            b.launch("add", {}, a=(f"b_ih.{l}.{d}", _view((4 * H,))), b=(f"b_hh.{l}.{d}", _view((4 * H,))),
                     out=(bias, _view((4 * H,))))
    for l in layers:
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


def _backward(cfg: Config, b: _Builder, train: bool, need_dx: bool, layers) -> None:
    """The backward's launches for ``layers`` (every layer, in increasing order: the launches run
    them in decreasing order; the symbolic plan: one layer index standing for its kind of layer)."""
    T, B, H, L, D = cfg.T, cfg.B, cfg.H, cfg.L, cfg.D
    TB, TBH, BH, DH = T * B, T * B * H, B * H, D * H
    _common_inputs(cfg, b, layers)
    b.buf("dy", (TB, DH), "input")
    for name in ("grad_hy", "grad_cy"):
        b.buf(name, (L * D, B, H), "input")
    for name in ("h",) + SAVED:
        b.buf(name, (L * D, T, B, H), "saved")
    if need_dx:
        b.buf("dx", (TB, cfg.I), "output")
    for name in ("dh0", "dc0"):
        b.buf(name, (L * D, B, H), "output")
    empty = _empty(cfg)  # no steps: zero gradients for the weights, the state's pass through
    for l in layers:
        for d in range(D):
            b.buf(f"dw_ih.{l}.{d}", (4 * H, cfg.in_size(l)), "output", zero=empty)
            b.buf(f"dw_hh.{l}.{d}", (4 * H, H), "output", zero=empty)
            if cfg.has_biases:
                b.buf(f"db_ih.{l}.{d}", (4 * H,), "output", zero=empty)
                b.buf(f"db_hh.{l}.{d}", (4 * H,), "output", zero=empty)
    bs = ("batch_sizes", _view((T,)))
    b.stage("grad_output", L, -1, [], io=True)  # the weights are packed by the GEMMs that read them
    if empty:
        for src, dst in (("grad_hy", "dh0"), ("grad_cy", "dc0")):
            b.launch("copy", {}, src=(src, _view((L * D, B, H))), dst=(dst, _view((L * D, B, H))))
        return
    for l in reversed(layers):
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
