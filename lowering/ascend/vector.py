"""The small vector compiler of the Ascend packages: TE expressions -> three-address vector code over
UB tiles -> AscendC instructions.

A ``Lowerer`` walks the expression tree of each output once (shared subtrees, such as grad_c,
computed once), each node one instruction (Add, Sub, Mul, Div, Muls, Adds, Exp, Duplicate; tanh as
2 / (1 + e^-2x) - 1); per-row scalars and constants stay C operands.  ``allocate`` gives the
temporaries UB slots by a linear scan over their live ranges, and ``print_program`` prints the
instructions over the float slots of ``tmp`` (fp16 and bf16 input tiles cast to fp32 first).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tvm import tirx

from ..c_dialect import ASCENDC


@dataclass
class Program:
    """Three-address vector code: ops ("Add", dst, a, b) / ("Muls", dst, a, s) / ...; values are
    temp ids (int) or input streams ("in", key)."""
    ops: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)  # expression key -> (value, depends on the gate)
    streams: list = field(default_factory=list)  # input streams used: (tensor name, gate or None)
    temps: int = 0

    def new(self) -> int:
        self.temps += 1
        return self.temps - 1


def _key(e):
    """A structural key of a TE expression (tensors by name: they are unique within an op)."""
    kind = type(e).__name__
    if kind in ("IntImm", "FloatImm"):
        return (kind, e.value)
    if kind == "Var":
        return (kind, e.name)
    if kind == "Cast":
        return (kind, str(e.ty), _key(e.value))
    if kind == "Call":
        name = str(e.op.name)
        if name.endswith("tensor_load"):  # every stage is elementwise: only constant indices (a gate) tell apart
            return ("load", e.args[0].name) + tuple(
                int(a.value) if isinstance(a, tirx.IntImm) else "*" for a in e.args[1:])
        return (name,) + tuple(_key(a) for a in e.args)
    if hasattr(e, "a") and hasattr(e, "b"):
        return (kind, _key(e.a), _key(e.b))
    raise ValueError(f"Ascend lowering: expression {kind} is not supported: {e}")


def is_const(v) -> bool:
    return isinstance(v, tuple) and v[0] == "const"


class Lowerer:
    """Expression trees of one variant's outputs to a Program."""

    def __init__(self, gate: int | None = None, scalars: dict | None = None):
        self.p = Program()
        self.gate = gate
        self.scalars = scalars or {}  # tensor or variable name -> C expression of a per-row scalar
        self.dep = False  # whether the value being built depends on the gate

    def value(self, e):
        key = _key(e)
        if key in self.p.memo:
            v, dep = self.p.memo[key]
            self.dep = self.dep or dep
            return v
        outer, self.dep = self.dep, False
        v = self._value(e)
        dep = self.dep
        if not _scalar(v):
            self.p.memo[key] = (v, dep)
        self.dep = outer or dep
        return v

    def _value(self, e):
        kind = type(e).__name__
        if kind == "FloatImm":
            return ("const", float(e.value))
        if kind == "Var" and e.name in self.scalars:
            return ("s", self.scalars[e.name])
        if kind == "Cast":
            inner = self.value(e.value)  # inputs are float in UB; the output cast is the store's
            if isinstance(inner, tuple) and inner[0] == "s" and str(e.ty) == "float32":
                return ("s", f"((float){inner[1]})")
            return inner
        if kind == "Call":
            name = str(e.op.name)
            if name.endswith("tensor_load"):
                return self.load(e.args[0], list(e.args[1:]))
            if name.endswith(".if_then_else"):
                cond, a, b = e.args
                return self.value(a if self.pick(cond) else b)
            if name.endswith(".tanh"):
                return self.tanh(self.value(e.args[0]))
            raise ValueError(f"Ascend lowering: call {name} is not supported")
        if kind in ("Add", "Sub", "Mul", "Div"):
            return self.binary(kind, self.value(e.a), self.value(e.b))
        raise ValueError(f"Ascend lowering: expression {kind} is not supported: {e}")

    def pick(self, cond) -> bool:
        """An if_then_else on the gate axis, decided for this program's gate."""
        if type(cond).__name__ == "EQ" and isinstance(cond.b, tirx.IntImm) and self.gate is not None:
            self.dep = True
            return int(cond.b) == self.gate
        raise ValueError(f"Ascend lowering: condition {cond} is not a gate test")

    def load(self, tensor, idx):
        if tensor.name in self.scalars:
            return ("s", self.scalars[tensor.name])
        op = tensor.op
        if type(op).__name__ == "PlaceholderOp":
            # a constant index (storage's gate axis) names one gate's stream
            gate = next((int(a.value) for a in idx if isinstance(a, tirx.IntImm)), None)
            key = (tensor.name, gate)
            if key not in self.p.streams:
                self.p.streams.append(key)
            return ("in", key)
        # an intermediate stage (tanh_cy, grad_c): elementwise on the same (n, j)
        return self.value(op.body[0])

    def emit(self, op, *srcs):
        dst = self.p.new()
        self.p.ops.append((op, dst) + srcs)
        return dst

    def binary(self, kind, a, b):
        """One instruction for a tile op; a scalar op (constants, per-row scalars) stays C."""
        sym = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}[kind]
        if _scalar(a) and _scalar(b):
            if is_const(a) and is_const(b):
                raise ValueError("Ascend lowering: constant expression left unfolded")
            return ("s", f"({_c(a)} {sym} {_c(b)})")
        if not _scalar(a) and not _scalar(b):
            return self.emit(kind, a, b)
        t, c = (a, b) if _scalar(b) else (b, a)
        if kind == "Mul":
            return self.emit("Muls", t, _c(c))
        if kind == "Add":
            return self.emit("Adds", t, _c(c))
        if kind == "Sub" and t is a:  # x - c = x + (-c), exact
            return self.emit("Adds", t, _neg(c))
        if kind == "Sub":  # c - x = (-x) + c, exact
            return self.emit("Adds", self.emit("Muls", t, ASCENDC.float_literal(-1.0)), _c(c))
        dup = self.emit("Dup", _c(c))
        return self.emit("Div", t, dup) if t is a else self.emit("Div", dup, t)

    def tanh(self, x):
        # tanh(x) = 2 / (1 + e^(-2x)) - 1: +-inf give +-1, NaN stays NaN
        lit = ASCENDC.float_literal
        e = self.emit("Adds", self.emit("Exp", self.emit("Muls", x, lit(-2.0))), lit(1.0))
        return self.emit("Adds", self.emit("Div", self.emit("Dup", lit(2.0)), e), lit(-1.0))


def _scalar(v) -> bool:
    return isinstance(v, tuple) and v[0] in ("const", "s")


def _c(v) -> str:
    return ASCENDC.float_literal(v[1]) if v[0] == "const" else v[1]


def _neg(v) -> str:
    return ASCENDC.float_literal(-v[1]) if v[0] == "const" else f"-{v[1]}"



def allocate(prog: Program, outs) -> tuple[dict, int]:
    """UB slot of every temp by linear scan over live ranges (a value lives until its last read,
    an output until the end); returns ({temp: slot}, slot count)."""
    last = {}
    for i, op in enumerate(prog.ops):
        for s in op[2:]:
            if isinstance(s, int):
                last[s] = i
    end = len(prog.ops)
    for _, val in outs:
        if isinstance(val, int):
            last[val] = end
    slot, free, used = {}, [], 0
    for i, op in enumerate(prog.ops):
        dst = op[1]
        if free:
            slot[dst] = free.pop(0)
        else:
            slot[dst] = used
            used += 1
        for s in set(x for x in op[2:] if isinstance(x, int)):
            if last.get(s) == i and s != dst:
                free.append(slot[s])
                free.sort()
        if last.get(dst, -1) < i:  # never read: free at once
            free.append(slot[dst])
            free.sort()
    return slot, used


def print_program(w, prog, outs, dtype, name_of, alloc=None, indent="        "):
    """The instructions of ``prog`` over the float slots of ``tmp``, after the casts of fp16 input
    tiles (x_<name> -> f_<name>, in the slots after the temporaries); returns (slots used, ref), ref
    giving the C operand of a value.  ``alloc``: ``allocate(prog, outs)`` when the caller has it."""
    slot, nslots = alloc or allocate(prog, outs)
    src = {}
    for i, k in enumerate(prog.streams):
        s = name_of(k)
        if dtype == "float32":
            src[k] = f"x_{s}"
        else:
            w(f"{indent}LocalTensor<float> f_{s} = tmp[{nslots + i}u * t_.tile];")
            w(f"{indent}Cast(f_{s}, x_{s}, RoundMode::CAST_NONE, n);")
            src[k] = f"f_{s}"

    def ref(val):
        if isinstance(val, tuple) and val[0] == "in":
            return src[val[1]]
        if isinstance(val, tuple):
            raise ValueError(f"Ascend lowering: value {val} is not a tile")
        return f"tmp[{slot[val]}u * t_.tile]"
    for op in prog.ops:
        kind, dst = op[0], ref(op[1])
        if kind in ("Add", "Sub", "Mul", "Div"):
            w(f"{indent}{kind}({dst}, {ref(op[2])}, {ref(op[3])}, n);")
        elif kind in ("Muls", "Adds"):
            w(f"{indent}{kind}({dst}, {ref(op[2])}, {op[3]}, n);")
        elif kind == "Exp":
            w(f"{indent}Exp({dst}, {ref(op[2])}, n);")
        elif kind == "Dup":
            w(f"{indent}Duplicate({dst}, {op[2]}, n);")
        else:
            raise ValueError(f"Ascend lowering: instruction {kind}")
    return nslots + (len(prog.streams) if dtype != "float32" else 0), ref

