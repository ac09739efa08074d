"""The layer recurrence's launch plan for every size at once: :func:`template` is the data of
:func:`fusedgrad.lstm.launches.build` with the sizes (T, B, I, H, the layer count L) and the layer
index l as polynomials (:class:`Expr`), made by running that same generator on symbols.

A compiled host (the Ascend package's, whose calls bring their sizes at run time) cannot ask Python
for a plan per call: it evaluates this one.  A plan differs between sizes only in its numbers, and
between layers only in the layer index and the layer's kind (:data:`KINDS`: the only layer, the
first, one between, the last), so a kind of plan (pass, directions, biases, variable lengths, train
or need_dx) is four layer templates; :func:`instance` evaluates them for a configuration and gives
what ``launches.build`` gives (less the stages and the launches' ``after``, which a host that runs
the launches in order does not need).  :func:`tables` gives every kind as the rows of the C tables
of the evaluator in ``targets/ascend/lstm_plan.h.in`` (lowering/ascend/lstm_plan.py prints them).
"""
from __future__ import annotations

import functools
import itertools
import re
from typing import Mapping

from . import launches
from .config import Config

VARS = ("T", "B", "I", "H", "L", "l")
"""The plan's variables, in the order of an :class:`Expr`'s exponents."""

KINDS = ("only", "first", "between", "last")
"""The kinds of layer: L = 1's layer; then layer 0, layers 1 .. L-2, layer L-1."""

_MARK = re.compile(r"\{l([+-]\d+)?\}")


class Expr:
    """A polynomial in :data:`VARS` with integer coefficients: ``terms`` {exponents: coefficient}."""

    __slots__ = ("terms",)
    __hash__ = None  # compared by value

    def __init__(self, terms: Mapping[tuple, int]):
        self.terms = {e: int(c) for e, c in terms.items() if c}

    @staticmethod
    def var(name: str) -> "Expr":
        return Expr({tuple(int(v == name) for v in VARS): 1})

    @staticmethod
    def lift(v) -> "Expr":
        if isinstance(v, Expr):
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            return Expr({(0,) * len(VARS): v})
        raise TypeError(f"expected an int or an Expr, got {type(v).__name__}")

    def __add__(self, o):
        o, out = Expr.lift(o), dict(self.terms)
        for e, c in o.terms.items():
            out[e] = out.get(e, 0) + c
        return Expr(out)

    __radd__ = __add__

    def __neg__(self):
        return Expr({e: -c for e, c in self.terms.items()})

    def __sub__(self, o):
        return self + -Expr.lift(o)

    def __rsub__(self, o):
        return Expr.lift(o) - self

    def __mul__(self, o):
        o, out = Expr.lift(o), {}
        for (e1, c1), (e2, c2) in itertools.product(self.terms.items(), o.terms.items()):
            e = tuple(a + b for a, b in zip(e1, e2))
            out[e] = out.get(e, 0) + c1 * c2
        return Expr(out)

    __rmul__ = __mul__

    def __eq__(self, o):
        try:
            return self.terms == Expr.lift(o).terms
        except TypeError:
            return NotImplemented

    def __bool__(self):
        raise TypeError(f"{self!r}: a plan's size has no truth value (its branches are on the kind of layer)")

    def evaluate(self, sizes: Mapping[str, int]) -> int:
        return sum(c * functools.reduce(lambda p, ve: p * sizes[ve[0]] ** ve[1], ((v, n) for v, n in zip(VARS, e) if n), 1)
                   for e, c in self.terms.items())

    def layer_offset(self):
        """n where this is l + n, else None."""
        rest = self - Expr.var("l")
        if all(not any(e) for e in rest.terms):
            return rest.terms.get((0,) * len(VARS), 0)
        return None

    def __format__(self, spec: str) -> str:  # a layer's name: "{l}", "{l-1}", "{l+1}"
        n = self.layer_offset()
        if n is None or spec:
            raise TypeError(f"{self!r}: only l + n goes into a buffer's or stage's name")
        return "{l}" if n == 0 else f"{{l{n:+d}}}"

    def __repr__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for e, c in sorted(self.terms.items(), reverse=True):
            names = "*".join(v if p == 1 else f"{v}^{p}" for v, p in zip(VARS, e) if p)
            parts.append(str(c) if not names else names if c == 1 else f"{c}*{names}")
        return " + ".join(parts)


class Layer(Expr):
    """The layer index l of one kind of layer: the generator's tests on it (l == 0, l == L - 1, l
    itself) answer as that kind's layers do."""

    __slots__ = ("kind",)

    def __init__(self, kind: str):
        super().__init__(Expr.var("l").terms)
        self.kind = kind

    def __eq__(self, o):
        if isinstance(o, int) and not isinstance(o, bool) and o == 0:
            return self.kind in ("only", "first")
        if isinstance(o, Expr) and o == Expr.var("L") - 1:
            return self.kind in ("only", "last")
        raise TypeError(f"layer index compared with {o!r}: the generator tests l == 0 and l == L - 1 only")

    def __bool__(self):
        return self.kind not in ("only", "first")

    def __ge__(self, o):
        if o == 0:
            return True
        raise TypeError(f"layer index compared with {o!r}")


def kinds_of(L: int) -> list[str]:
    """The kind of each layer of an L-layer LSTM."""
    if L == 1:
        return ["only"]
    return ["first"] + ["between"] * (L - 2) + ["last"]


# --------------------------------------------------------------------------- templates


def _key(pass_: str, D: int, has_biases: bool, varlen: bool, train: bool, need_dx: bool) -> tuple:
    if pass_ not in launches.PASSES:
        raise ValueError(f"pass_: expected one of {launches.PASSES}, got {pass_!r}")
    if D not in (1, 2):
        raise ValueError(f"D: expected 1 or 2, got {D!r}")
    if pass_ == "backward" and not train:
        raise ValueError("train: expected True for the backward, got False")
    return pass_, D, bool(has_biases), bool(varlen), bool(train), bool(need_dx)


def variants() -> list[tuple]:
    """Every kind of plan: (pass, D, has_biases, varlen, train, need_dx); a forward's need_dx is
    True and a backward's train is True (neither changes their plans)."""
    return [(p, D, hb, vl, tr if p == "forward" else True, nd if p == "backward" else True)
            for p in launches.PASSES for D in (1, 2) for hb in (False, True) for vl in (False, True)
            for tr, nd in ((True, True), (False, False))]


@functools.lru_cache(maxsize=None)
def template(pass_: str, D: int, has_biases: bool, varlen: bool, train: bool = True, need_dx: bool = True) -> dict:
    """{kind: {"buffers": [...], "head": [launch, ...], "body": [launch, ...]}} for one kind of plan:
    ``launches.build``'s buffers and launches for one layer of that kind, their names with "{l}"
    ("{l-1}", "{l+1}") where the layer index goes and every number an :class:`Expr`.  ``head``: the
    launches of the plan's opening stage (every layer's come before any layer's body)."""
    key = _key(pass_, D, has_biases, varlen, train, need_dx)
    sym = {v: Expr.var(v) for v in VARS}
    cfg = Config(T=sym["T"], B=sym["B"], I=sym["I"], H=sym["H"], L=sym["L"], D=D, has_biases=key[2],
                 varlen=key[3])
    out = {}
    for kind in KINDS:
        buffers, _, launched = launches.layer_launches(cfg, pass_, key[4], key[5], [Layer(kind)])
        out[kind] = {"buffers": buffers, "head": [x for x in launched if x["stage"] == "input"],
                     "body": [x for x in launched if x["stage"] != "input"]}
    return out


def name_at(name: str, l: int) -> str:
    """A template's buffer name at layer ``l``."""
    return _MARK.sub(lambda m: str(l + int(m.group(1) or 0)), name)


def _value(v, sizes):
    return v.evaluate(sizes) if isinstance(v, Expr) else v


def instance(cfg: Config, pass_: str = "forward", train: bool = True, need_dx: bool = True) -> dict:
    """:func:`template` evaluated for ``cfg``: ``launches.build``'s buffers (by name) and launches
    (in order, without ``stage`` and ``after``)."""
    tmpl = template(pass_, cfg.D, cfg.has_biases, cfg.varlen, train if pass_ == "forward" else True,
                    need_dx if pass_ == "backward" else True)
    kinds = kinds_of(cfg.L)
    buffers, out = {}, []
    for l, kind in enumerate(kinds):
        sizes = {"T": cfg.T, "B": cfg.B, "I": cfg.I, "H": cfg.H, "L": cfg.L, "l": l}
        for buf in tmpl[kind]["buffers"]:
            name = name_at(buf["name"], l)
            buffers.setdefault(name, dict(buf, name=name, shape=[_value(n, sizes) for n in buf["shape"]]))
    order = [(l, "head") for l in range(cfg.L)] + [(l, "body") for l in range(cfg.L)]
    if pass_ == "backward":
        order = [(l, part) for l, part in reversed(order)]
    for l, part in order:
        sizes = {"T": cfg.T, "B": cfg.B, "I": cfg.I, "H": cfg.H, "L": cfg.L, "l": l}
        for x in tmpl[kinds[l]][part]:
            out.append({"op": x["op"], "variant": dict(x["variant"]), "args": [
                {"param": a["param"], "io": a["io"], "buffer": name_at(a["buffer"], l),
                 "view": {k: ([_value(n, sizes) for n in v] if isinstance(v, list) else _value(v, sizes))
                          for k, v in a["view"].items()}} for a in x["args"]]})
    return {"buffers": buffers, "launches": out}


# --------------------------------------------------------------------------- C tables

ROLES = launches.ROLES
DTYPES = launches.DTYPES


class _Pool:
    """Distinct rows of a C table, each kept once: index of a row by its key."""

    def __init__(self):
        self.rows: list = []
        self.index: dict = {}

    def add(self, key, row=None) -> int:
        if key not in self.index:
            self.index[key] = len(self.rows)
            self.rows.append(key if row is None else row)
        return self.index[key]


def _ckey(e: Expr) -> tuple:
    return tuple(sorted(e.terms.items(), reverse=True))


def family(name: str) -> tuple[str, int | None]:
    """A template name's family (its layer mark as "{l}") and the layer offset of its mark (None: a
    buffer of the whole call, one for every layer)."""
    m = _MARK.search(name)
    return (_MARK.sub("{l}", name), int(m.group(1) or 0)) if m else (name, None)


def _param_grads(tmpl: dict) -> set:
    """The names of the parameters' gradients in a backward template: its outputs of each layer (dx,
    dh0 and dc0 are the call's)."""
    return {b["name"] for k in tmpl.values() for b in k["buffers"]
            if b["role"] == "output" and family(b["name"])[1] is not None}


def dparams_only(key: tuple) -> dict:
    """{(kind, part, index): bool} of a kind of plan's launches: whether the launch only makes the
    parameters' gradients (no output a call wants without them, nor a workspace buffer a wanted launch
    reads), so a call that wants no parameter gradients leaves it out.  Decided on the plans of 1 to 4
    layers; ValueError where a template's launch would be wanted in one layer and not another."""
    tmpl = template(*key)
    unwanted = _param_grads(tmpl)
    out: dict = {}
    for L in range(1, 5):
        kinds = kinds_of(L)
        roles = {name_at(b["name"], l): b["role"] for l, k in enumerate(kinds) for b in tmpl[k]["buffers"]}
        grads = {name_at(n, l) for l in range(L) for n in unwanted}
        order = [(l, part) for l in range(L) for part in ("head", "body")]
        order = sorted(order, key=lambda lp: (lp[1] == "body", lp[0]))
        if key[0] == "backward":
            order.reverse()
        steps = [(l, part, i, x) for l, part in order for i, x in enumerate(tmpl[kinds[l]][part])]
        needed: set = set()
        for l, part, i, x in reversed(steps):
            args = [(a["io"], name_at(a["buffer"], l)) for a in x["args"]]
            live = any(io == "out" and n not in grads and (roles[n] != "workspace" or n in needed) for io, n in args)
            needed |= {n for io, n in args if io == "in" and live}
            if out.setdefault((kinds[l], part, i), not live) != (not live):
                raise ValueError(f"{key}: launch {i} of the {kinds[l]} layer's {part} is wanted in some plans only")
    return out


def tables() -> dict:
    """Every kind of plan (:func:`variants`) as the rows of the C tables ``targets/ascend/lstm_plan.h.in``
    declares: distinct expressions, views, arguments, launches and names kept once; the names'
    families (:func:`family`) and each launch's :func:`dparams_only`."""
    terms: list[tuple] = []
    args: list[tuple] = []  # every distinct launch's arguments, in a row each
    exprs, views, launch_rows, bufs = _Pool(), _Pool(), _Pool(), _Pool()
    names, ops, params, flags, families = _Pool(), _Pool(), _Pool(), _Pool(), _Pool()
    lists: list[int] = []  # the kinds' parts: indices into fg_plan_buffers / fg_plan_launches

    def expr(v) -> int:
        key = _ckey(Expr.lift(v))
        if key not in exprs.index:
            exprs.add(key, (len(terms), len(key)))
            terms.extend(key)
        return exprs.index[key]

    def view(v) -> int:
        return views.add((expr(v["offset"]), tuple(expr(n) for n in v["shape"]), tuple(expr(n) for n in v["strides"])))

    def launch(x, only: bool) -> int:  # a distinct launch with its arguments in a row of their own
        keys = tuple((params.add(a["param"]), names.add(a["buffer"]), int(a["io"] == "out"), view(a["view"]))
                     for a in x["args"])
        flags_set = sum(1 << flags.add(k) for k in x["variant"])
        flags_on = sum(1 << flags.add(k) for k, on in x["variant"].items() if on)
        key = (ops.add(x["op"]), flags_set, flags_on, keys, int(only))
        if key not in launch_rows.index:
            launch_rows.add(key, key[:3] + (len(args), len(keys), int(only)))
            args.extend(keys)
        return launch_rows.index[key]

    def part(items) -> tuple[int, int]:
        first = len(lists)
        lists.extend(items)
        return first, len(items)

    variant_rows = []
    for key in variants():
        tmpl = template(*key)
        only = dparams_only(key) if key[0] == "backward" else {}
        kinds = []
        for kind in KINDS:
            k = tmpl[kind]
            b = part([bufs.add((names.add(x["name"]), DTYPES.index(x["dtype"]), ROLES.index(x["role"]), int(x["zero"]),
                                tuple(expr(n) for n in x["shape"]))) for x in k["buffers"]])
            kinds.append((b, *(part([launch(x, only.get((kind, p, i), False)) for i, x in enumerate(k[p])])
                               for p in ("head", "body"))))
        variant_rows.append((int(key[0] == "backward"), key[1], *(int(v) for v in key[2:]), kinds))
    at = []
    for n in names.rows:
        fam, delta = family(n)
        at.append((families.add(fam), delta or 0, int(delta is not None)))
    return {"names": names.rows, "ops": ops.rows, "params": params.rows, "flags": flags.rows, "roles": list(ROLES),
            "dtypes": list(DTYPES), "terms": terms, "exprs": exprs.rows, "views": views.rows, "args": args,
            "launches": launch_rows.rows, "buffers": bufs.rows, "lists": lists, "variants": variant_rows,
            "families": families.rows, "at": at}
