"""The small vector compiler of the Ascend packages: scheduled TIR -> three-address vector code over
UB tiles -> AscendC instructions.

The TIR is an op's definition as schedules/ascend/vector.py schedules it: its elementwise stages
inlined, so each row output's block stores one expression over the parameter buffers.  A
``Lowerer`` walks those values once (shared subexpressions, such as grad_c, computed once: they are
keyed by their structure), each node one instruction (Add, Sub, Mul, Div, Muls, Adds, Exp,
Duplicate; tanh as 2 / (1 + e^-2x) - 1).  A load of a parameter buffer is an input stream (one per
gate index it reads); a load of a per-row scalar buffer or a scalar variable (the package record's
``scalars``), and constants, stay C operands, printed by the shared C printer (lowering.c_emitter)
in the ASCENDC dialect.  A gate slice of an output binds the block's gate variable to the gate,
and the analyzer folds the if_then_else tests on it and the gate indices of the loads.
``allocate`` gives the temporaries UB slots by a linear scan over their live ranges, and
``print_program`` prints the instructions, spelled by the dialect's instruction table, over the
float slots of ``tmp`` (fp16 and bf16 input tiles cast to fp32 first).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tvm import tirx
from tvm.sym import Analyzer

from ..c_dialect import ASCENDC
from ..c_emitter import Emitter, dtype_of


@dataclass
class Program:
    """Three-address vector code: ops ("Add", dst, a, b) / ("Muls", dst, a, s) / ...; values are
    temp ids (int) or input streams ("in", key)."""
    ops: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)  # expression key -> (value, depends on the gate)
    streams: list = field(default_factory=list)  # input streams used: (buffer name, gate or None)
    temps: int = 0

    def new(self) -> int:
        self.temps += 1
        return self.temps - 1


def is_const(v) -> bool:
    return isinstance(v, tuple) and v[0] == "const"


def _scalar(v) -> bool:
    return isinstance(v, tuple) and v[0] in ("const", "s")


class ScalarPrinter(Emitter):
    """The shared C printer (lowering.c_emitter) in the ASCENDC dialect, for the scalar operands: a
    per-row scalar buffer's load or a scalar variable prints as its C expression (``names``)."""

    def __init__(self, names):
        super().__init__(None, "", dialect=ASCENDC)
        self.c_names = dict(names)

    def operand(self, name: str) -> str:
        if name not in self.c_names:
            raise ValueError(f"Ascend lowering: {name} is not a per-row scalar (known: {sorted(self.c_names)})")
        return self.c_names[name]

    def expr_Var(self, e) -> str:
        return self.operand(str(e.name))

    def expr_TensorLoad(self, e) -> str:
        return self.operand(str(e.source.name))


class Lowerer:
    """The values of one PrimFunc's output blocks to a Program.

    ``func``: the scheduled PrimFunc (its parameter buffers are the input streams); ``scalars``:
    buffer or variable name -> the C expression of a per-row scalar; ``produced``: output buffer name
    -> its block's store, for outputs that other outputs read (the LSTM-cell forward's hy reads o and
    tanhc): a load of one at the same element is its stored value, computed once."""

    def __init__(self, func, scalars=None, produced=None):
        self.p = Program()
        self.params = list(func.params)
        self.scalars = dict(scalars or {})
        self.produced = dict(produced or {})
        self.printer = ScalarPrinter(self.scalars)
        self.gate = None  # the gate of the slice being lowered
        self.analyzer = Analyzer()
        self.dep = False  # whether the value being built depends on the gate

    def slice(self, var, gate: int | None) -> None:
        """The next values are gate ``gate`` of an output: ``var`` (the block's gate variable) is bound
        to it, and what depended on the last gate is dropped.  None: an output without a gate."""
        self.gate = gate
        self.analyzer = Analyzer()
        if gate is not None:
            self.analyzer.bind(var, tirx.IntImm(dtype_of(var), gate))
            self.p.memo = {k: m for k, m in self.p.memo.items() if not m[1]}

    def key(self, e):
        """A structural key of a TIR expression (buffers and variables by name: unique within an op);
        a load keyed by its constant indices only (every stage is elementwise: only a gate index
        tells two apart)."""
        kind = type(e).__name__
        if kind in ("IntImm", "FloatImm"):
            return (kind, e.value)
        if kind == "Var":
            return (kind, str(e.name))
        if kind == "Cast":
            return (kind, str(e.ty), self.key(e.value))
        if kind == "TensorLoad":
            return ("load", str(e.source.name)) + tuple(
                int(i.value) if isinstance(i, tirx.IntImm) else "*" for i in self.indices(e))
        if kind == "Call":
            return (str(e.op.name),) + tuple(self.key(a) for a in e.args)
        if hasattr(e, "a") and hasattr(e, "b"):
            return (kind, self.key(e.a), self.key(e.b))
        raise ValueError(f"Ascend lowering: expression {kind} is not supported: {e}")

    def indices(self, load):
        return [self.analyzer.simplify(i) for i in load.indices]

    def value(self, e):
        key = self.key(e)
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
        if kind == "Var" and str(e.name) in self.scalars:
            return ("s", e)
        if kind == "Cast":
            inner = self.value(e.value)  # inputs are float in UB; the output cast is the store's
            if isinstance(inner, tuple) and inner[0] == "s" and str(e.ty) == "float32":
                return ("s", e)
            return inner
        if kind == "TensorLoad":
            return self.load(e)
        if kind == "Call":
            name = str(e.op.name)
            if name.endswith(".if_then_else"):
                cond, a, b = e.args
                return self.value(a if self.pick(cond) else b)
            if name.endswith(".tanh"):
                return self.tanh(self.value(e.args[0]))
            raise ValueError(f"Ascend lowering: call {name} is not supported")
        if kind in ("Add", "Sub", "Mul", "Div"):
            a, b = self.value(e.a), self.value(e.b)
            if _scalar(a) and _scalar(b):  # a scalar operation stays C
                if is_const(a) and is_const(b):
                    raise ValueError("Ascend lowering: constant expression left unfolded")
                return ("s", e)
            return self.binary(kind, a, b)
        raise ValueError(f"Ascend lowering: expression {kind} is not supported: {e}")

    def pick(self, cond) -> bool:
        """An if_then_else on the gate axis, decided for this slice's gate."""
        decided = self.analyzer.simplify(cond) if self.gate is not None else cond
        if isinstance(decided, tirx.IntImm):
            self.dep = True
            return bool(decided.value)
        raise ValueError(f"Ascend lowering: condition {cond} is not a gate test")

    def load(self, e):
        source = e.source
        if str(source.name) in self.scalars:
            return ("s", e)
        if str(source.name) in self.produced:  # another output's value at the same element
            st = self.produced[str(source.name)]
            if len(e.indices) != len(st.indices) or not all(isinstance(i, tirx.Var) for i in e.indices):
                raise ValueError(f"Ascend lowering: {source.name} is read at {list(e.indices)}, not elementwise")
            return self.value(st.value)  # the row pattern's stages all index [n, j]: the same values
        if not any(source.same_as(p) for p in self.params):
            raise ValueError(f"Ascend lowering: {source.name} is neither a parameter nor a per-row scalar "
                             "(a stage left to inline?)")
        # a constant index (storage's gate axis) names one gate's stream
        idx = self.indices(e)
        if any(isinstance(i, tirx.IntImm) and not isinstance(r, tirx.IntImm) for i, r in zip(idx, e.indices)):
            self.dep = True  # the gate index came from the slice's gate
        gate = next((int(i.value) for i in idx if isinstance(i, tirx.IntImm)), None)
        key = (str(source.name), gate)
        if key not in self.p.streams:
            self.p.streams.append(key)
        return ("in", key)

    def c(self, v) -> str:
        """The C operand of a scalar value."""
        return ASCENDC.float_literal(v[1]) if v[0] == "const" else self.printer.expr(v[1])

    def neg(self, v) -> str:
        return ASCENDC.float_literal(-v[1]) if v[0] == "const" else f"-{self.c(v)}"

    def emit(self, op, *srcs):
        dst = self.p.new()
        self.p.ops.append((op, dst) + srcs)
        return dst

    def binary(self, kind, a, b):
        """One instruction for a tile op (a scalar operand printed as C)."""
        if not _scalar(a) and not _scalar(b):
            return self.emit(kind, a, b)
        t, c = (a, b) if _scalar(b) else (b, a)
        if kind == "Mul":
            return self.emit("Muls", t, self.c(c))
        if kind == "Add":
            return self.emit("Adds", t, self.c(c))
        if kind == "Sub" and t is a:  # x - c = x + (-c), exact
            return self.emit("Adds", t, self.neg(c))
        if kind == "Sub":  # c - x = (-x) + c, exact
            return self.emit("Adds", self.emit("Muls", t, ASCENDC.float_literal(-1.0)), self.c(c))
        dup = self.emit("Dup", self.c(c))
        return self.emit("Div", t, dup) if t is a else self.emit("Div", dup, t)

    def tanh(self, x):
        # tanh(x) = 2 / (1 + e^(-2x)) - 1: +-inf give +-1, NaN stays NaN
        lit = ASCENDC.float_literal
        e = self.emit("Adds", self.emit("Exp", self.emit("Muls", x, lit(-2.0))), lit(1.0))
        return self.emit("Adds", self.emit("Div", self.emit("Dup", lit(2.0)), e), lit(-1.0))


def store(sch, name: str):
    """The BufferStore of block ``name`` of a scheduled function."""
    return sch.get(sch.get_sblock(name)).body


def update(sch, name: str):
    """What block ``name`` stores; for a reduction, what each step adds (acc + value: the value)."""
    block = sch.get(sch.get_sblock(name))
    value = block.body.value
    return value.b if block.init is not None else value


def producer(sch, e):
    """What the block producing the buffer that ``e`` loads (through casts) stores, as ``update``."""
    while type(e).__name__ == "Cast":
        e = e.value
    return update(sch, str(e.source.name))


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


def print_program(w, prog, outs, dtype, name_of, alloc=None, indent="        ", narrow=None):
    """The instructions of ``prog`` over the float slots of ``tmp``, after the casts of fp16 input
    tiles (x_<name> -> f_<name>, in the slots after the temporaries); returns (slots used, ref), ref
    giving the C operand of a value.  ``alloc``: ``allocate(prog, outs)`` when the caller has it;
    ``narrow``: the streams of fp16 or bf16 tiles (default: all of them unless ``dtype`` is float32)."""
    slot, nslots = alloc or allocate(prog, outs)
    narrow = [k for k in prog.streams if (k in narrow if narrow is not None else dtype != "float32")]
    src = {}
    for k in prog.streams:
        s = name_of(k)
        if k not in narrow:
            src[k] = f"x_{s}"
        else:
            w(f"{indent}LocalTensor<float> f_{s} = tmp[{nslots + narrow.index(k)}u * t_.tile];")
            w(indent + ASCENDC.instruction("Cast", f"f_{s}", f"x_{s}", ASCENDC.round_mode("none"), "n"))
            src[k] = f"f_{s}"

    def ref(val):
        if isinstance(val, tuple) and val[0] == "in":
            return src[val[1]]
        if isinstance(val, tuple):
            raise ValueError(f"Ascend lowering: value {val} is not a tile")
        return f"tmp[{slot[val]}u * t_.tile]"
    for op in prog.ops:  # tile operands by reference, scalar operands (C strings) as they are
        w(indent + ASCENDC.instruction(op[0], ref(op[1]), *(ref(x) if not isinstance(x, str) else x for x in op[2:]),
                                       "n"))
    return nslots + len(narrow), ref

