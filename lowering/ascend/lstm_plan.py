"""The full LSTM's plan header, op_host/fg_lstm_plan.h: the rows of fusedgrad.lstm.symbolic's tables in
targets/ascend/lstm_plan.h.in, the enums that name their ops, parameters, flags and buffer families (the
host takes each by its index, decided here, not by its name at run time), and how the host keeps each
family's buffers (:func:`keep`).
"""
from __future__ import annotations

import re
import textwrap

from ...lstm import launches, symbolic
from . import fixed


def enum_name(prefix: str, name: str) -> str:
    """The C enumerator of a plan name ("w_ih.{l}.0" -> FG_PB_W_IH_L_0)."""
    return prefix + re.sub(r"[^A-Z0-9]+", "_", name.replace("{l}", "L").upper()).strip("_")


def _enum(prefix: str, names: list[str], bits: bool = False) -> str:
    out = [enum_name(prefix, n) for n in names]
    if len(set(out)) != len(out):
        raise ValueError(f"plan names {names} give one enumerator twice under {prefix}")
    return textwrap.fill(", ".join(f"{e} = {1 << i}u" if bits else e for i, e in enumerate(out)), 112,
                         subsequent_indent=" " * 7, break_on_hyphens=False)


def keep(t: dict) -> list[tuple[int, int, int]]:
    """(store, kmajor, gemm) of each family of ``t`` (symbolic.tables): a layer backward's dgates_t is
    kept as its dgates (the host writes dgates only, the GEMMs read it K-major), what gather_last_steps
    writes is kept K-major; ``gemm``: a GEMM reads it as an operand.  ValueError where a K-major
    family is read but as a GEMM's A."""
    fam = [f for f, _, _ in t["at"]]
    params, ops = t["params"], t["ops"]
    store, kmajor, gemm, read = list(range(len(t["families"]))), set(), set(), {}
    for op, _, _, first, n, _ in t["launches"]:
        args = {params[p]: (fam[b], out) for p, b, out, _ in t["args"][first:first + n]}
        for p, (f, out) in args.items():
            if not out:
                read.setdefault(f, set()).add((ops[op], p))
                if ops[op] == "gemm" and p != "addend":
                    gemm.add(f)
        if ops[op] == "lstm_layer_backward":
            store[args["dgates_t"][0]] = args["dgates"][0]
            kmajor.add(args["dgates_t"][0])
        elif ops[op] == "gather_last_steps":
            kmajor.add(args["dst"][0])
    for f in kmajor:
        if read.get(f, set()) - {("gemm", "a")}:
            raise ValueError(f"{t['families'][f]} is kept K-major but read as {sorted(read[f])}")
    return [(store[f], int(f in kmajor), int(f in gemm)) for f in range(len(t["families"]))]


PARAMS = launches.PARAMS  # each layer and direction's parameters in params' order (CANN's)
DIRECTIONS = 2


def param_families(families: list[str]) -> str:
    """fg_lstm_param_families' rows: the FG_PB_ family of each parameter, [gradient][direction][k]; ValueError
    where the plan has no such family."""
    rows = []
    for grad in ("", "d"):
        per = []
        for d in range(DIRECTIONS):
            names = [f"{grad}{p}.{{l}}.{d}" for p in PARAMS]
            missing = [n for n in names if n not in families]
            if missing:
                raise ValueError(f"the plan's families have no {missing}")
            per.append("{" + ", ".join(enum_name("FG_PB_", n) for n in names) + "}")
        rows.append("{" + ", ".join(per) + "}")
    return ", ".join(rows)


def _rows(rows, fmt, per_line: int = 1) -> str:
    items = [fmt(r) for r in rows] or ["{0}"]
    return "\n".join("    " + " ".join(x + "," for x in items[i:i + per_line]) for i in range(0, len(items), per_line))


def _dims(ns) -> str:
    return "{" + ", ".join(str(n) for n in ns) + "}" if ns else "{0}"


def _strs(names) -> str:
    return ", ".join(f'"{s}"' for s in names)


def header() -> str:
    """op_host/fg_lstm_plan.h's text."""
    t = symbolic.tables()
    def variant(v) -> str:
        *head, kinds = v
        return "{" + ", ".join(str(x) for x in head) + ", {" + ", ".join(
            "{" + ", ".join(f"{{{a}, {n}}}" for a, n in k) + "}" for k in kinds) + "}}"

    tables = {k: t[k] for k in ("names", "ops", "params", "flags", "roles", "dtypes", "terms", "exprs", "views",
                                "args", "launches", "buffers", "lists", "variants")}
    return fixed.render(
        "lstm_plan.h.in", **{f"N_{k.upper()}": str(max(len(v), 1)) for k, v in tables.items()},
        OPS_ENUM=_enum("FG_OP_", t["ops"]), PARAMS_ENUM=_enum("FG_PP_", t["params"]),
        FLAGS_ENUM=_enum("FG_PF_", t["flags"], bits=True), ROLES_ENUM=_enum("FG_PR_", t["roles"]),
        FAMILIES_ENUM=_enum("FG_PB_", t["families"]),
        **{k.upper(): _strs(t[k]) for k in ("names", "ops", "params", "flags", "roles", "dtypes")},
        TERMS=_rows(t["terms"], lambda r: f"{{{r[1]}, {_dims(r[0])}}}"),
        EXPRS=_rows(t["exprs"], lambda r: f"{{{r[0]}, {r[1]}}}"),
        VIEWS=_rows(t["views"], lambda r: f"{{{r[0]}, {len(r[1])}, {_dims(r[1])}, {_dims(r[2])}}}"),
        ARGS=_rows(t["args"], lambda r: "{" + ", ".join(str(x) for x in r) + "}"),
        LAUNCHES=_rows(t["launches"], lambda r: "{" + ", ".join(str(x) for x in r) + "}"),
        BUFFERS=_rows(t["buffers"], lambda r: f"{{{r[0]}, {r[1]}, {r[2]}, {r[3]}, {len(r[4])}, {_dims(r[4])}}}"),
        LISTS=_rows(t["lists"], str, 16), VARIANTS=_rows(t["variants"], variant),
        AT=_rows(t["at"], lambda r: "{" + ", ".join(str(x) for x in r) + "}"),
        KEEP=_rows(keep(t), lambda r: "{" + ", ".join(str(x) for x in r) + "}"),
        PARAM_NAMES=", ".join(PARAMS), N_DIRECTIONS=str(DIRECTIONS), N_PARAMS_PER=str(len(PARAMS)),
        PARAM_FAMILIES=param_families(t["families"]))
