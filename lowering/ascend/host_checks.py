"""The aclnn host code's op-dependent parts, generated from the op's package record (its aclnn
parameters, schedules/ascend/records.py) and its te_defs definition (inputs, outputs with their shapes and ``when``
flags, variants, dtypes): the first phase's checks in the order NULLs, arrays, views, data types,
shapes; the tensors' slots, row strides and splits; the kernel tables; the executor's plan.

The kinds of aclnn parameter each add their part once: ``Tensor`` / ``Out`` a slot of the kernels'
tensors (given or wanted: ``tensors[k]`` not NULL), ``Unused`` a view checked against its like,
``Flag`` a variant bit, ``TrailingDims`` the dimensions of a symbol, ``OutputMask`` which outputs
are wanted.  The shapes are the definition's, each symbol (N, 4*H, M...) a group of the reference
tensor's dimensions: one each, or, with ``TrailingDims``, the array's trailing ones and the rest.
"""
from __future__ import annotations

import dataclasses
import re

from ... import te_defs
from ...schedules.ascend.records import Flag, Out, OutputMask, Tensor, TrailingDims, Unused
from ...targets.ascend import ACL_TYPES
from .. import naming
from ..c_dialect import ASCENDC
from . import fixed

PARTS = "host_checks.cpp.in"  # the checks' fixed statements, as sections
MAX_DIM = "0x7fffffff"  # the largest size the kernels' uint32_t tiling holds (as the first phase checks)


@dataclasses.dataclass(frozen=True)
class Slot:
    """One tensor the kernels see: its aclnn parameter, its definition and GM argument, and the C
    condition of its being given or wanted (None: always)."""

    index: int
    param: Tensor | Out
    spec: te_defs.TensorSpec
    gm: str
    given: str | None

    @property
    def enum(self) -> str:
        return "FG_" + self.gm.upper()


def _specs(opdef) -> dict:
    return {s.name: s for s in opdef.inputs + opdef.outputs}


def validate(rule) -> None:
    """Refuse (ValueError naming the op) a rule whose aclnn parameters do not name every input and
    output of the definition exactly once, in that role, with every variant flag bound."""
    opdef = te_defs.get(rule.op)
    where = f"Ascend rule {rule.op!r}"
    names = [p.name for p in rule.aclnn]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: an aclnn parameter named twice in {names}")
    for role, kind, specs in (("input", Tensor, opdef.inputs), ("output", Out, opdef.outputs)):
        named = [p.te for p in rule.aclnn if isinstance(p, kind)]
        want = [s.name for s in specs]
        if sorted(named) != sorted(want):
            raise ValueError(f"{where}: the aclnn {role}s name {sorted(named)}, the definition's are {sorted(want)}")
    kinds = [isinstance(p, Out) for p in rule.aclnn if isinstance(p, (Tensor, Out))]
    if kinds != sorted(kinds):
        raise ValueError(f"{where}: the aclnn outputs must follow the inputs")
    specs = _specs(opdef)
    flags = {f for v in opdef.variants for f in v}
    bound = [p.variant for p in rule.aclnn if isinstance(p, Flag)]
    bound += [specs[p.te].when for p in rule.aclnn if isinstance(p, Tensor) and specs[p.te].when]
    if sorted(bound) != sorted(flags):
        raise ValueError(f"{where}: the variant flags {sorted(flags)} are bound by {sorted(bound)} (each once)")
    for p in rule.aclnn:
        if isinstance(p, Tensor) and specs[p.te].when and not p.optional:
            raise ValueError(f"{where}: {p.name} selects a variant, and so must be optional")
        if isinstance(p, Unused) and p.like not in specs:
            raise ValueError(f"{where}: {p.name} is like {p.like!r}, not a tensor of the definition")
        if isinstance(p, OutputMask) and not set(p.outputs) <= {q.name for q in rule.aclnn if isinstance(q, Out)}:
            raise ValueError(f"{where}: {p.name} names outputs that are not aclnn outputs: {p.outputs}")
    if any(sum(isinstance(p, kind) for p in rule.aclnn) > 1 for kind in (OutputMask, TrailingDims)):
        raise ValueError(f"{where}: at most one OutputMask and one TrailingDims")
    if not set(rule.stats) <= {s.name for s in opdef.inputs}:
        raise ValueError(f"{where}: the statistics {rule.stats} are not all inputs")


def slots(rule) -> list[Slot]:
    """The kernels' tensors in the API's order (inputs, then outputs)."""
    validate(rule)
    specs = _specs(te_defs.get(rule.op))
    flag = {p.variant: p.name for p in rule.aclnn if isinstance(p, Flag)}
    mask = next((p.outputs for p in rule.aclnn if isinstance(p, OutputMask)), ())
    out = []
    for p in rule.aclnn:
        if not isinstance(p, (Tensor, Out)):
            continue
        spec = specs[p.te]
        if isinstance(p, Tensor):
            given = p.name if p.optional else None
        elif p.name in mask:
            given = f"want[{mask.index(p.name)}]"
        else:
            given = flag[spec.when] if spec.when else None
        out.append(Slot(len(out), p, spec, rule.gm[p.te], given))
    return out


def _is(s: Slot) -> str:
    """The C condition of the slot's tensor being there (after ``tensors`` is set)."""
    return f"tensors[{s.enum}]"


def any_given(group: list[Slot]) -> str | None:
    """The C condition of any of the slots' tensors being there (None: always)."""
    if any(s.given is None for s in group) or not group:
        return None
    return " || ".join(_is(s) for s in group)


def paren(cond: str) -> str:
    """``cond`` in parentheses when it is an || of several."""
    return f"({cond})" if " || " in cond else cond


def _if(terms: list[str], status: str, indent: str = "    ") -> list[str]:
    """``if (a || b ...) return status;``, wrapped at 120 columns."""
    head = f"{indent}if ("
    lines, line = [], head
    for i, term in enumerate(terms):
        word = term + (" ||" if i < len(terms) - 1 else ")")
        if line != head and len(line) + 1 + len(word) > 118:
            lines.append(line)
            line = indent + "    " + word
        else:
            line += ("" if line == head else " ") + word
    if len(lines) == 0 and len(line) + len(f" return {status};") <= 120:
        return [f"{line} return {status};"]
    return lines + [line + " {", f"{indent}    return {status};", f"{indent}}}"]


def _part(name: str, **fields) -> list[str]:
    """The lines of targets/ascend/host_checks.cpp.in's section ``name``, its fields filled (a list of
    lines: joined)."""
    fields = {k: "\n".join(v) if isinstance(v, list) else v for k, v in fields.items()}
    return fixed.section(PARTS, name, **fields).split("\n")


class Shapes:
    """The definition's shape symbols as groups of the reference tensor's dimensions."""

    def __init__(self, rule, slots_: list[Slot]):
        trailing = next((p for p in rule.aclnn if isinstance(p, TrailingDims)), None)
        if trailing:
            ref = next(s for s in slots_ if s.param.name == trailing.of)
        else:
            ref = next(s for s in slots_ if s.given is None and isinstance(s.param, Tensor))
        self.ref, self.trailing = ref, trailing
        self.symbols = [symbol_of(d) for d in ref.spec.shape]
        if any(te_defs.parse_dim(d)[0] != 1 for d in ref.spec.shape):
            raise ValueError(f"Ascend rule {rule.op!r}: the reference tensor {ref.param.name} has a scaled dimension")
        self.rows = self.symbols[0]
        self.rest = None
        if trailing:
            others = [s for s in self.symbols if s != trailing.symbol]
            if len(others) != 1 or self.symbols[-1] != trailing.symbol:
                raise ValueError(f"Ascend rule {rule.op!r}: {trailing.name} leaves {others} to the other dimensions")
            self.rest = others[0]

    def lines(self, arrays: dict) -> list[str]:
        """Bind each symbol's dimensions (dims_S, n_S) and size S, and check them."""
        out = [f"    // shapes: {self.ref.param.name} is [{', '.join(self.ref.spec.shape)}]",
               f"    const View &ref = v[{self.ref.enum}];"]
        if self.trailing:
            t = self.trailing
            out += _if([f"{arrays[t.name]} < 1", f"{arrays[t.name]} > ref.n"], "ACLNN_ERR_PARAM_INVALID")
            ns = {t.symbol: arrays[t.name], self.rest: f"ref.n - n_{t.symbol}"}
            out.append(f"    const uint64_t n_{t.symbol} = {ns[t.symbol]}, n_{self.rest} = {ns[self.rest]};")
        else:
            out += _if([f"ref.n != {len(self.symbols)}"], "ACLNN_ERR_PARAM_INVALID")
            out.append("    const uint64_t " + ", ".join(f"n_{s} = 1" for s in self.symbols) + ";")
        offsets, at = [], "0"
        for s in self.symbols:
            offsets.append(f"*dims_{s} = ref.dims" + ("" if at == "0" else f" + {at}"))
            at = f"n_{s}" if at == "0" else f"{at} + n_{s}"
        out.append("    const int64_t " + ", ".join(offsets) + ";")
        if self.trailing:
            t = self.trailing
            out += _part("each_dim", SYM=t.symbol,
                         CHECK=_if([f"(*{t.name})[i] != dims_{t.symbol}[i]"], "ACLNN_ERR_PARAM_INVALID", "        "))
        out.append("    const int64_t " + ", ".join(f"{s} = product(dims_{s}, n_{s})" for s in self.symbols) + ";")
        return out

    def expect(self, spec) -> tuple[str, str]:
        """(dims, count) of the shape ``spec`` as C expressions."""
        if tuple(spec) == tuple(self.ref.spec.shape):
            return "ref.dims", "ref.n"
        if len(spec) == 1 and te_defs.parse_dim(spec[0])[0] == 1:
            s = symbol_of(spec[0])
            return f"dims_{s}", f"n_{s}"
        if self.trailing:
            raise ValueError(f"the host generator cannot check the shape [{', '.join(spec)}] over dimension groups")
        return "{" + ", ".join(size(d) for d in spec) + "}", str(len(spec))


def symbol_of(dim: str) -> str:
    """The symbol of a shape dimension ("4*H" -> "H")."""
    k, base = te_defs.parse_dim(dim)
    if base.isdigit():
        raise ValueError(f"a literal dimension {dim!r} has no aclnn dimensions to bind")
    return base


def size(dim: str) -> str:
    """The C expression of a shape dimension ("4*H" -> "4 * H")."""
    k, base = te_defs.parse_dim(dim)
    return base if k == 1 else f"{k} * {base}"


def elem_bytes(dtype: str) -> int:
    """The size of one ``dtype`` element in bytes ("bfloat16" -> 2)."""
    return int(re.search(r"\d+", dtype).group(0)) // 8


def variant_bits(rule, slots_: list[Slot]) -> list[tuple[str, str]]:
    """The main kernels' variant bits, highest first, as (name, C condition): the definition's
    variant flags (from the parameter that binds each), then, with statistics, whether theirs is a
    wider type than the input's."""
    opdef = te_defs.get(rule.op)
    cond = {p.variant: p.name for p in rule.aclnn if isinstance(p, Flag)}
    cond.update({s.spec.when: f"{_is(s)} != nullptr" for s in slots_ if isinstance(s.param, Tensor) and s.spec.when})
    bits = [(f, cond[f]) for f in opdef.variants[0]]
    if rule.stats:
        bits.append(("wide_stats", "st != dt"))
    return bits


def entries(rule) -> dict[str, list[tuple[int, str, dict]]]:
    """The main kernels per dtype: [(variant key, symbol part, {variant flag: 0/1})], the key's bits
    those of ``variant_bits``."""
    opdef = te_defs.get(rule.op)
    out = {}
    for dtype in opdef_dtypes(rule):
        rows = []
        for v in opdef.variants:
            key = opdef.variant_key(v)
            tag = naming.ascend_variant_tag(v) if v else ""
            for suffix, ctype in rule.stat_types.get(dtype, (("", None),)):
                wide = ctype is not None and ctype != ASCENDC.type(dtype)
                part = "_".join(p for p in (tag, suffix) if p)
                rows.append((key * 2 + wide if rule.stats else key, part, {f: int(on) for f, on in v.items()}))
        out[dtype] = rows
    return out


def opdef_dtypes(rule) -> tuple[str, ...]:
    """The dtypes of the op's kernels, in the target's order (their dtype codes)."""
    from ... import targets

    return targets.get("ascend").dtypes_for(rule.op)


def _stat_rule(rule) -> list[str]:
    """The C condition of a statistics type ``st`` fitting the input's ``dt``."""
    ctypes = {c: d for d, c in ASCENDC.types.items()}
    terms = ["st == dt"]
    for dtype, stats in rule.stat_types.items():
        for _, ctype in stats:
            if ctypes[ctype] != dtype:
                terms.append(f"(dt == {ACL_TYPES[dtype]} && st == {ACL_TYPES[ctypes[ctype]]})")
    return terms


def checks(rule) -> dict:
    """The op-dependent fields of targets/ascend/host.cpp.in: the first phase's checks (CHECKS, which
    leave ``tensors``, their views ``v``, ``split``, ``code`` and the symbols' sizes), the slots and
    the executor's plan."""
    ss = slots(rule)
    by_te = {s.param.te: s for s in ss}
    shapes = Shapes(rule, ss)
    unused = [p for p in rule.aclnn if isinstance(p, Unused)]
    trailing = [p for p in rule.aclnn if isinstance(p, TrailingDims)]
    masks = [p for p in rule.aclnn if isinstance(p, OutputMask)]
    arrays = {p.name: f"n_{p.name}" for p in trailing + masks}
    lines = ["    // NULL: a required argument"]
    required = []
    for p in rule.aclnn:
        s = next((s for s in ss if s.param is p), None)
        if isinstance(p, (TrailingDims, OutputMask)) or (s and s.given is None):
            required.append(f"!{p.name}")
        elif s and isinstance(p, Out) and not s.given.startswith("want["):
            required.append(f"({s.given} && !{p.name})")
    lines += _if(required + ["!workspaceSize", "!executor"], "ACLNN_ERR_PARAM_NULLPTR")
    if arrays:
        lines.append("    uint64_t " + ", ".join(f"{n} = 0" for n in arrays.values()) + ";")
        get = {TrailingDims: "aclGetIntArraySize", OutputMask: "aclGetBoolArraySize"}
        lines += _if([f"{get[type(p)]}({p.name}, &{arrays[p.name]}) != ACLNN_SUCCESS" for p in trailing + masks],
                     "ACLNN_ERR_PARAM_NULLPTR")
    for m in masks:  # the outputs wanted, each given
        lines += _if([f"{arrays[m.name]} != {len(m.outputs)}"], "ACLNN_ERR_PARAM_INVALID")
        lines.append(f"    const bool want[{len(m.outputs)}] = {{" +
                     ", ".join(f"(*{m.name})[{i}]" for i in range(len(m.outputs))) + "};")
        lines += _if([f"(want[{i}] && !{o})" for i, o in enumerate(m.outputs)], "ACLNN_ERR_PARAM_NULLPTR")
    # views: the slots' tensors (NULL: not given, or not wanted) and the unused ones
    given = [s.param.name if s.given is None or isinstance(s.param, Tensor) else f"{s.given} ? {s.param.name} : nullptr"
             for s in ss]
    lines += wrap("    const aclTensor *tensors[FG_TENSORS] = {", given, "};")
    lines.append("    View v[FG_TENSORS]" + "".join(f", v_{p.name}" for p in unused) + ";")
    lines += _part("views")
    for p in unused:
        lines += _part("unused_view", NAME=p.name)
    # data types: one of the kernels', alike; the statistics all of one type that fits
    dtypes = opdef_dtypes(rule)
    lines += _part("dtypes_and_stats" if rule.stats else "dtypes", TYPES=", ".join(ACL_TYPES[d] for d in dtypes))
    lines.append(f"    const aclDataType dt = v[{shapes.ref.enum}].dtype;")
    lines.append("    const int code = " + " : ".join(f"dt == {ACL_TYPES[d]} ? {i}" for i, d in enumerate(dtypes)) +
                 " : -1;  // the kernels' type")
    stat_slots = [by_te[t] for t in rule.stats]
    if stat_slots:
        lines.append(f"    const aclDataType st = v[{stat_slots[0].enum}].dtype;")
        lines += _if(["code < 0", "!(" + " || ".join(_stat_rule(rule)) + ")"], "ACLNN_ERR_PARAM_INVALID")
        is_stat = " || ".join(f"k == {s.enum}" for s in stat_slots)
        check = f"tensors[k] && v[k].dtype != ({is_stat} ? st : dt)"
        lines += _part("every_tensor", CHECK=_if([check], "ACLNN_ERR_PARAM_INVALID", "        "))
    else:
        lines += _if(["code < 0"], "ACLNN_ERR_PARAM_INVALID")
        lines += _part("every_tensor",
                       CHECK=_if(["tensors[k] && v[k].dtype != dt"], "ACLNN_ERR_PARAM_INVALID", "        "))
    for p in unused:
        lines += _if([f"{p.name} && v_{p.name}.dtype != dt"], "ACLNN_ERR_PARAM_INVALID")
    # shapes: the definition's, over the reference's dimensions
    lines += shapes.lines(arrays)
    sizes = list(dict.fromkeys(size(d) for s in ss for d in s.spec.shape))
    lines += _if([f"{d} > {MAX_DIM}" for d in sizes], "ACLNN_ERR_PARAM_INVALID")
    groups: dict = {}
    for s in ss:
        groups.setdefault((s.spec.shape, isinstance(s.param, Tensor) and s.param.keepdims), []).append(s)
    kept = set()
    for (shape, keep), group in groups.items():
        dims, n = shapes.expect(shape)
        if dims.startswith("{"):
            name = f"shape_{group[0].gm}"
            lines.append(f"    const int64_t {name}[{n}] = {dims};  // [{', '.join(shape)}]")
            dims = name
        fits = [f"!same_dims(v[k], {dims}, {n})"]
        if keep:  # or the reference's shape with the other dimensions kept as 1
            sym = symbol_of(shape[0])
            if sym not in kept:
                kept.add(sym)
                lines += _part("kept", SYM=sym)
            fits.append(f"!same_dims(v[k], kept_{sym}, ref.n)")
        cond = ("tensors[k] && " if any(s.given for s in group) else "") + " && ".join(fits)
        if len(group) == 1:
            lines += _if([cond.replace("[k]", f"[{group[0].enum}]")], "ACLNN_ERR_PARAM_INVALID")
            continue
        ks = ", ".join(s.enum for s in group)
        lines += _part("each_of", KS=ks, CHECK=_if([cond], "ACLNN_ERR_PARAM_INVALID", "        "))
    for p in unused:
        dims, n = shapes.expect(by_te[p.like].spec.shape)
        lines += _if([f"{p.name} && !same_dims(v_{p.name}, {dims}, {n})"], "ACLNN_ERR_PARAM_INVALID")
    # the tensors as rows (the rows symbol's dimensions) of adjacent elements
    split = []
    for s in ss:
        if symbol_of(s.spec.shape[0]) != shapes.rows:
            split.append("0u")
        elif isinstance(s.param, Tensor) and s.param.keepdims:
            split.append(f"v[{s.enum}].n" if s.given is None else f"{_is(s)} ? v[{s.enum}].n : 0u")
        else:
            split.append(f"n_{shapes.rows}")
    lines += wrap("    const uint64_t split[FG_TENSORS] = {", split, "};")
    return {"CHECKS": "\n".join(lines), "shapes": shapes, "slots": ss}


def wrap(head: str, items: list[str], tail: str, sep: str = ",") -> list[str]:
    """``head a, b, ... tail`` filling lines of 120, continuation lines under the first item."""
    pad = " " * len(head)
    lines, line = [], head
    for i, item in enumerate(items):
        word = item + (sep if i < len(items) - 1 else tail)
        if line not in (head, pad) and len(line) + 1 + len(word) > 120:
            lines.append(line)
            line = pad + word
        else:
            line += ("" if line in (head, pad) else " ") + word
    return lines + [line]
