"""Print a scheduled, lowered PrimFunc as plain C99, no TVM runtime (the DSP library's kernels).

The PrimFunc goes through TVM's own lowering up to plain loops (the s_tir
pipeline without host/device splitting and the packed calling convention),
then this module prints that loop-level TIR as one C function:

    void NAME(float *restrict x, ..., int32_t M, int32_t D, int32_t x_s0, ..., float eps)

Buffers become restrict pointers, shape and stride variables and scalar
parameters become trailing arguments in a fixed order (see ``signature``);
intermediate buffers of constant size become stack arrays, the others come
from ``FG_DSP_ALLOC``/``FG_DSP_FREE`` (the porting header).  In spmd mode the
top-level parallel loops are split over the cores of a group, and the windows
of the inputs each iteration reads (TVM's bound analysis) are copied into the
core's local memory by DMA when there is room (``windows``).  The printer
reshapes loops around the schedule's bounds checks (see "guards" below) so
that a C compiler vectorises the inner loops; no arithmetic changes, so the
results keep their bits.  half values go through fg_half.h's conversions; the
helpers the printed code calls (fg_floordiv, fg_tanhf, FG_DSP_ALLOC...) are in
targets/dsp/fg_dsp_kernel.h.
"""
from __future__ import annotations

import contextlib
import struct

import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx

C_TYPES = {"float32": "float", "float16": "half", "int32": "int32_t", "int64": "int64_t", "bool": "int",
           "uint8": "uint8_t", "int8": "int8_t"}


def lower(func):
    """TVM's lowering of ``func`` down to flat loops over flat buffers (no packed API).

    Without LoopPartition: in one process its second run on the LSTM-cell
    kernel split the row loop differently from the first, so the committed C
    would depend on what ran before; the guards it removes stay in the loops.
    """
    mod = tvm.IRModule({"main": func})
    mod = tirx.transform.BindTarget(tvm.target.Target({"kind": "c"}))(mod)
    passes = [
        s_tir.transform.CanonicalizeLoop(), s_tir.transform.LowerCrossThreadReduction(),
        s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerMatchBuffer(), s_tir.transform.StmtSimplify(), s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(), tirx.transform.NarrowDataType(32),
        tirx.transform.VectorizeLoop(False), tirx.transform.StorageRewrite(), tirx.transform.UnrollLoop(),
        tirx.transform.StmtSimplify(), tirx.transform.RemoveNoOp(), tirx.transform.LowerIntrin(),
    ]
    return tvm.ir.transform.Sequential(passes)(mod)["main"]


def dtype_of(node) -> str:
    """An expression's dtype (TVM 0.27 keeps it as ``ty`` on expressions)."""
    try:
        return str(node.dtype)
    except AttributeError:
        return str(node.ty)


def _ctype(dtype) -> str:
    text = str(dtype)
    if text not in C_TYPES:
        raise ValueError(f"C emitter: dtype {text} is not supported")
    return C_TYPES[text]


def _float(value: float, dtype: str) -> str:
    if value != value:
        return "(0.0f / 0.0f)"
    if value in (float("inf"), float("-inf")):
        return ("-" if value < 0 else "") + "(1.0f / 0.0f)"
    if dtype == "float32":
        exact = struct.unpack("<f", struct.pack("<f", value))[0]
        return f"{exact!r}f" if "e" in repr(exact) or "." in repr(exact) else f"{exact!r}.0f"
    return repr(float(value))


# ---------------------------------------------------------------------------- guards
# The scheduled loop nests carry bounds checks (``if (row < M)``, ``select(d < D, ...)``) inside
# their innermost loops: with them, gcc neither hoists nor vectorises.  The printer reshapes
# loops around them without changing any arithmetic (the same statements run on the same
# indices in the same order):
#   hoist:  ``for v: if (c) S`` with c independent of v  ->  ``if (c) for v: S``;
#   bound:  ``for v < n: if (v + r < E) S``  ->  ``for v < min(n, E - r): S``;
#   split:  a tile loop ``for o`` whose checks ``c*o + (inner) < E`` hold for every o < E / c
#           is printed twice: the full tiles without the checks, then the last tile with them;
#   unswitch: ``for v: {A; if (c) B; C}`` with c independent of the loop (a reduction's
#           ``if (k == 0) acc = 0``)  ->  ``if (c) for v: {A; B; C} else for v: {A; C}``.

UNSWITCH_DEPTH = 2  # at most 2**2 copies of a loop


def _stmts(s):
    """``s`` and every statement inside it, parents before children, in program order."""
    yield s
    kind = type(s).__name__
    if kind == "SeqStmt":
        for x in s.seq:
            yield from _stmts(x)
    elif kind == "IfThenElse":
        yield from _stmts(s.then_case)
        if s.else_case is not None:
            yield from _stmts(s.else_case)
    elif kind in ("For", "AttrStmt", "LetStmt"):
        yield from _stmts(s.body)


def _exprs(s) -> list:
    """The expressions a statement itself evaluates (not those of the statements inside it)."""
    kind = type(s).__name__
    if kind == "IfThenElse":
        return [s.condition]
    if kind == "BufferStore":
        return list(s.indices) + [s.value]
    if kind in ("Bind", "LetStmt", "Evaluate"):
        return [s.value]
    return []


def _if_conditions(s) -> list:
    """The (stripped) conditions of the if statements in ``s``."""
    return [_strip(x.condition) for x in _stmts(s) if type(x).__name__ == "IfThenElse"]


def _strip(cond):
    if type(cond).__name__ == "Call" and str(getattr(cond.op, "name", "")).endswith(".likely"):
        return cond.args[0]
    return cond


def conjuncts(cond) -> list:
    cond = _strip(cond)
    if type(cond).__name__ == "And":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


_EXPR_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value")


def _walk_expr(e, visit) -> None:
    visit(e)
    for f in _EXPR_FIELDS:
        child = getattr(e, f, None) if type(e).__name__ not in ("IntImm", "FloatImm", "StringImm", "Var") else None
        if child is not None and not isinstance(child, (int, float, str)):
            _walk_expr(child, visit)
    for child in list(getattr(e, "args", None) or []) + list(getattr(e, "indices", None) or []):
        if not isinstance(child, (int, float, str)) and hasattr(child, "same_as"):
            _walk_expr(child, visit)


def _pure_index(e) -> bool:
    """An integer expression of variables and constants only (no loads, no calls)."""
    ok = [True]

    def visit(x):
        if type(x).__name__ in ("BufferLoad", "TensorLoad", "Call", "Let"):
            ok[0] = False
    _walk_expr(e, visit)
    return ok[0]


def _uses(e, var) -> bool:
    found = [False]

    def visit(x):
        if isinstance(x, tirx.Var) and x.same_as(var):
            found[0] = True
    _walk_expr(e, visit)
    return found[0]


def _member(c, conds) -> bool:
    return any(tvm_ffi.structural_equal(c, k) for k in conds)


_NEUTRAL = ("AllocBuffer", "DeclBuffer")


def _is_zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and int(e) == 0


def guard(s) -> list:
    """Conditions (pure integer conjuncts) under which alone ``s`` has any effect."""
    kind = type(s).__name__
    if kind == "IfThenElse" and s.else_case is None:
        own = [c for c in conjuncts(s.condition) if _pure_index(c)]
        return own + [c for c in guard(s.then_case) if not _member(c, own)]
    if kind == "For":
        return [c for c in guard(s.body) if not _uses(c, s.loop_var)]
    if kind == "AttrStmt":
        return guard(s.body)
    if kind == "SeqStmt":
        items = [x for x in s.seq if type(x).__name__ not in _NEUTRAL]
        if not items:
            return []
        common = guard(items[0])
        for x in items[1:]:
            if not common:
                break
            other = guard(x)
            common = [c for c in common if _member(c, other)]
        return common
    return []


def loop_bound(loop, cond):
    """``E - r`` when ``cond`` reads ``v + r < E`` for the loop's variable v, else None."""
    if type(cond).__name__ != "LT":
        return None
    coef = sym.detect_linear_equation(cond.b - cond.a, [loop.loop_var])
    if len(coef) != 2 or not isinstance(coef[0], tirx.IntImm) or int(coef[0]) != -1 or _uses(coef[1], loop.loop_var):
        return None
    return sym.Analyzer().simplify(coef[1])


def _inner_loops(s) -> list:
    """(variable, min, extent) of the loops in ``s`` with constant bounds."""
    return [(x.loop_var, int(x.min), int(x.extent)) for x in _stmts(s) if type(x).__name__ == "For"
            and isinstance(x.min, tirx.IntImm) and isinstance(x.extent, tirx.IntImm)]


def _defined(s) -> list:
    """Variables bound inside ``s`` (loop variables and lets)."""
    kinds = {"For": "loop_var", "Bind": "var", "LetStmt": "var"}
    return [getattr(x, kinds[type(x).__name__]) for x in _stmts(s) if type(x).__name__ in kinds]


def _conditions(s) -> list:
    """Every condition conjunct in ``s``: of its ifs, selects and if_then_else calls."""
    out = []

    def visit(x):
        kind = type(x).__name__
        if kind == "Select":
            out.extend(conjuncts(x.condition))
        elif kind == "Call" and str(getattr(x.op, "name", "")).endswith(".if_then_else"):
            out.extend(conjuncts(x.args[0]))
    for x in _stmts(s):
        if type(x).__name__ == "IfThenElse":
            out.extend(conjuncts(x.condition))
        for e in _exprs(x):
            _walk_expr(e, visit)
    return out


def tile_split(loop, known=lambda c: False):
    """(E, c, conditions): every listed condition ``c*o + inner < E`` holds for loop index o < E // c."""
    o = loop.loop_var
    inner = _inner_loops(loop.body)
    ivars = [v for v, _, _ in inner]
    local = _defined(loop.body)
    key, found = None, []
    for cond in _conditions(loop.body):
        if (type(cond).__name__ != "LT" or not _pure_index(cond) or not _uses(cond, o) or _member(cond, found)
                or known(cond)):
            continue
        coef = sym.detect_linear_equation(cond.a - cond.b, [o] + ivars)
        if len(coef) != len(ivars) + 2 or not all(isinstance(k, tirx.IntImm) for k in coef[:-1]):
            continue
        c, rest, base = int(coef[0]), [int(k) for k in coef[1:-1]], coef[-1]
        if c <= 0 or any(k < 0 for k in rest) or any(_uses(base, v) for v in [o] + local):
            continue
        if sum(k * (lo + n - 1) for k, (_, lo, n) in zip(rest, inner)) > c - 1 or any(
                k and lo < 0 for k, (_, lo, _) in zip(rest, inner)):
            continue
        bound = sym.Analyzer().simplify(-base)
        if key is None:
            key = (bound, c)
        if key[1] == c and tvm_ffi.structural_equal(key[0], bound):
            found.append(cond)
    return (key[0], key[1], found) if found else None


class Emitter:
    """One C function from one lowered PrimFunc."""

    BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%", "EQ": "==", "NE": "!=",
              "LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "And": "&&", "Or": "||", "RShift": ">>",
              "LShift": "<<", "BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^"}

    def __init__(self, func, name: str, spmd: bool = False):
        self.func = func
        self.name = name
        # spmd: every core of a group runs the function (fg_core of fg_ncores); top-level
        # parallel loops are split over the cores with a barrier after each, other top-level
        # statements run on core 0, and top-level buffers live in a shared workspace fg_ws
        self.spmd = spmd
        self.workspace: list[tuple[str, str]] = []  # (C type, element count expression)
        self.lines: list[str] = []
        self.indent = 1
        self.names: dict = {}
        self.heap: list[list[str]] = [[]]  # heap buffers per open scope, freed when it closes
        self.facts: list = []  # conditions known to hold where the printer is (see "guards")
        self.false: list = []  # conditions known not to hold there
        self.temps = 0
        self.unswitched = 0
        self.param_bufs: dict = {}  # C name of a pointer argument -> (C type, flat span, dims and strides)
        self.staged: dict = {}  # C name -> (local name, first staged index) while printing a staged loop

    # -- names
    @staticmethod
    def storage(buffer):
        """The variable naming a buffer's memory (TVM 0.27: ``buffer.data`` is ``buffer_data(var)``)."""
        data = buffer.data
        if type(data).__name__ == "Call" and str(getattr(data.op, "name", "")) == "tirx.buffer_data":
            return data.args[0]
        return data

    def var(self, v) -> str:
        for k, name in self.names.items():
            if k.same_as(v):
                return name
        name = str(v.name).replace(".", "_")
        taken = set(self.names.values())
        base, n = name, 1
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        self.names[v] = name
        return name

    # -- signature
    def signature(self) -> tuple[str, list[tuple[str, str]]]:
        args, scalars = [], []
        shape_vars: dict[str, object] = {}
        for p in self.func.params:
            shape = getattr(p, "shape", None)
            if shape is not None and len(shape):
                ctype = _ctype(p.dtype)
                name = self.var(p)
                # restrict: the entry points refuse outputs that overlap anything (TVM assumes the same)
                args.append((f"{ctype} *restrict {name}", p.name))
                strides = list(p.strides or [])
                if not strides:  # row-major
                    acc = tirx.IntImm("int32", 1)
                    for d in reversed(list(shape)):
                        strides.insert(0, acc)
                        acc = d * acc
                # flat element count a kernel may touch: sum of (extent - 1) * stride, plus one
                span = tirx.IntImm("int32", 1)
                for d, st in zip(shape, strides):
                    span = span + (d - 1) * st
                self.param_bufs[name] = (ctype, span, list(shape) + list(p.strides or []))
                for d in list(shape) + list(p.strides or []):
                    if isinstance(d, tirx.Var) and d.name not in shape_vars:
                        shape_vars[d.name] = d
            else:
                scalars.append((f"float {self.var(p)}", p.name))
        dims = [(f"int32_t {self.var(v)}", n) for n, v in shape_vars.items()]
        params = args + dims + scalars
        return f"void {self.name}({', '.join(p for p, _ in params)})", params

    # -- statements
    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def stmt(self, s) -> None:
        kind = type(s).__name__
        getattr(self, f"stmt_{kind}", self.unsupported)(s)

    def unsupported(self, s) -> None:
        raise ValueError(f"C emitter: statement {type(s).__name__} is not supported:\n{s}")

    def stmt_SeqStmt(self, s) -> None:
        for x in s.seq:
            self.stmt(x)

    def stmt_DeclBuffer(self, s) -> None:
        # a view of existing memory (``data`` = buffer_data(source)): accesses use the source's name
        data = s.data
        source = data.args[0] if type(data).__name__ == "Call" and data.args else data
        name = self.var(source)
        self.names[self.storage(s.buffer)] = name

    def count(self, buffer) -> str:
        """C expression of a buffer's element count."""
        return " * ".join(f"(size_t)({self.expr(d)})" for d in buffer.shape) or "1"

    def stmt_AllocBuffer(self, s) -> None:
        b = s.buffer
        name = self.var(self.storage(b))
        ctype = _ctype(b.dtype)
        size = 1
        const = True
        for d in b.shape:
            if isinstance(d, tirx.IntImm):
                size *= int(d)
            else:
                const = False
        if const:
            self.line(f"{ctype} {name}[{size}] = {{0}};")  # zeroed: guards hide the writes from gcc
        else:
            self.line(f"{ctype} *{name} = ({ctype} *)FG_DSP_ALLOC(sizeof({ctype}) * {self.count(b)});")
            self.heap[-1].append(name)

    def scope(self, body) -> None:
        """A braced block: its heap buffers are freed at its end."""
        self.indent += 1
        self.heap.append([])
        self.stmt(body)
        for name in reversed(self.heap.pop()):
            self.line(f"FG_DSP_FREE({name});")
        self.indent -= 1

    def known(self, cond) -> bool:
        return _member(cond, self.facts)

    def temp(self, prefix: str) -> str:
        self.temps += 1
        return f"{prefix}_{self.temps}"

    def stmt_For(self, s) -> None:
        hoist = [c for c in guard(s) if not self.known(c)]
        if hoist:
            self.line(f"if ({' && '.join(self.expr(c) for c in hoist)}) {{")
            self.indent += 1
            self.facts += hoist
            self.stmt_For(s)
            del self.facts[len(self.facts) - len(hoist):]
            self.indent -= 1
            self.line("}")
            return
        if len(self.false) + len(self.facts) < 64 and self.unswitched < UNSWITCH_DEPTH:
            local = [s.loop_var] + _defined(s.body)
            for cond in _if_conditions(s.body):
                if (_pure_index(cond) and not self.decided(cond) and not any(_uses(cond, v) for v in local)):
                    self.unswitch(s, cond)
                    return
        v = self.var(s.loop_var)
        lo, ext = self.expr(s.min), self.expr(s.extent)
        end = ext if lo == "0" else f"({lo} + {ext})"
        for cond in guard(s.body):
            bound = None if self.known(cond) else loop_bound(s, cond)
            if bound is not None:
                name, e = self.temp("fg_end"), self.expr(bound)
                self.line(f"const int32_t {name} = ({e}) < ({end}) ? ({e}) : ({end});")
                self.loop(v, lo, name, s.body, [cond])
                return
        split = tile_split(s, self.known)
        if split is not None:
            bound, c, conds = split
            name = self.temp("fg_full")
            self.line(f"const int32_t {name} = fg_floordiv({self.expr(bound)}, {c}); /* tiles without checks */")
            self.loop(v, lo, f"({name} < {end} ? {name} : {end})", s.body, conds)
            self.loop(v, name if lo == "0" else f"({name} > {lo} ? {name} : {lo})", end, s.body, [])
            return
        self.loop(v, lo, end, s.body, [])

    def decided(self, cond) -> bool:
        return self.known(cond) or all(self.known(c) for c in conjuncts(cond)) or self.refuted(cond)

    def refuted(self, cond) -> bool:
        return _member(_strip(cond), self.false) or any(_member(c, self.false) for c in conjuncts(cond))

    def unswitch(self, loop, cond) -> None:
        parts = conjuncts(cond)
        self.unswitched += 1
        self.line(f"if ({self.expr(cond)}) {{")
        self.indent += 1
        self.facts += parts
        self.stmt_For(loop)
        del self.facts[len(self.facts) - len(parts):]
        self.indent -= 1
        self.line("} else {")
        self.indent += 1
        self.false.append(cond)
        self.stmt_For(loop)
        self.false.pop()
        self.indent -= 1
        self.line("}")
        self.unswitched -= 1

    def loop(self, v: str, start: str, end: str, body, facts) -> None:
        self.line(f"for (int32_t {v} = {start}; {v} < {end}; ++{v}) {{")
        self.facts += facts
        self.scope(body)
        del self.facts[len(self.facts) - len(facts):]
        self.line("}")

    def stmt_IfThenElse(self, s) -> None:
        if self.refuted(s.condition):
            if s.else_case is not None:
                self.stmt(s.else_case)
            return
        conds = [c for c in conjuncts(s.condition) if not self.known(c)]
        if not conds:  # known to hold: the body alone (braced when it declares something)
            items = list(s.then_case.seq) if type(s.then_case).__name__ == "SeqStmt" else [s.then_case]
            if any(type(x).__name__ in _NEUTRAL + ("Bind",) for x in items):
                self.line("{")
                self.scope(s.then_case)
                self.line("}")
            else:
                self.stmt(s.then_case)
            return
        self.line(f"if ({' && '.join(self.expr(c) for c in conds)}) {{")
        self.scope(s.then_case)
        if s.else_case is not None:
            self.line("} else {")
            self.scope(s.else_case)
        self.line("}")

    def access(self, name: str, idx) -> str:
        if name in self.staged:
            local, first = self.staged[name]
            return f"{local}[({self.expr(idx)}) - {first}]"
        return f"{name}[{self.expr(idx)}]"

    def stmt_BufferStore(self, s) -> None:
        (idx,) = s.indices
        self.line(f"{self.access(self.var(self.storage(s.buffer)), idx)} = {self.expr(s.value)};")

    def stmt_LetStmt(self, s) -> None:
        self.line(f"const {_ctype(dtype_of(s.var))} {self.var(s.var)} = {self.expr(s.value)};")
        self.stmt(s.body)

    def stmt_Bind(self, s) -> None:
        self.line(f"const {_ctype(dtype_of(s.var))} {self.var(s.var)} = {self.expr(s.value)};")

    def stmt_AttrStmt(self, s) -> None:
        self.stmt(s.body)

    def stmt_Evaluate(self, s) -> None:
        if isinstance(s.value, tirx.IntImm):
            return
        self.line(f"{self.expr(s.value)};")

    # -- expressions
    def expr(self, e) -> str:
        kind = type(e).__name__
        if kind in self.BINARY:
            return f"({self.expr(e.a)} {self.BINARY[kind]} {self.expr(e.b)})"
        return getattr(self, f"expr_{kind}", self.unsupported_expr)(e)

    def unsupported_expr(self, e) -> str:
        raise ValueError(f"C emitter: expression {type(e).__name__} is not supported: {e}")

    def expr_IntImm(self, e) -> str:
        return str(int(e.value)) if dtype_of(e) != "bool" else ("1" if e.value else "0")

    def expr_FloatImm(self, e) -> str:
        if dtype_of(e) == "float16":
            return f"fg_half_from_float({_float(float(e.value), 'float32')})"
        return _float(float(e.value), dtype_of(e))

    def expr_TensorLoad(self, e) -> str:
        """A load straight from a buffer parameter (TVM 0.27 keeps these for unflattened 1-D params)."""
        src = e.source
        idx = list(e.indices)
        if len(idx) == 1:
            return self.access(self.var(src), idx[0])
        strides = list(src.strides) if src.strides else None
        if not strides:
            strides, acc = [], None
            for d in reversed(list(src.shape)):
                strides.insert(0, acc)
                acc = d if acc is None else d * acc
            strides = [s if s is not None else 1 for s in strides]
        flat = " + ".join(f"({self.expr(i)}) * ({self.expr(st) if not isinstance(st, int) else st})"
                          for i, st in zip(idx, strides))
        return f"{self.var(src)}[{flat}]"

    def expr_StringImm(self, e) -> str:
        return '"' + str(e.value) + '"'

    def expr_Var(self, e) -> str:
        return self.var(e)

    def expr_BufferLoad(self, e) -> str:
        (idx,) = e.indices
        return self.access(self.var(self.storage(e.buffer)), idx)

    def expr_Cast(self, e) -> str:
        # half goes through fg_half.h's conversions: a toolchain without a half type stores bits
        to, frm = dtype_of(e), dtype_of(e.value)
        if frm == "float16" and to != "float16":
            value = f"fg_half_to_float({self.expr(e.value)})"
            return value if to == "float32" else f"(({_ctype(to)})({value}))"
        if to == "float16":
            value = self.expr(e.value) if frm == "float32" else f"((float)({self.expr(e.value)}))"
            return f"fg_half_from_float({value})"
        return f"(({_ctype(to)})({self.expr(e.value)}))"

    def expr_FloorDiv(self, e) -> str:
        return f"fg_floordiv({self.expr(e.a)}, {self.expr(e.b)})"

    def expr_FloorMod(self, e) -> str:
        return f"fg_floormod({self.expr(e.a)}, {self.expr(e.b)})"

    def expr_Min(self, e) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        return f"(({a}) < ({b}) ? ({a}) : ({b}))"

    def expr_Max(self, e) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        return f"(({a}) > ({b}) ? ({a}) : ({b}))"

    def expr_Not(self, e) -> str:
        return f"(!{self.expr(e.a)})"

    def choose(self, cond, a, b) -> str:
        if self.refuted(cond):
            return self.expr(b)
        conds = [c for c in conjuncts(cond) if not self.known(c)]
        if not conds:
            return self.expr(a)
        return f"({' && '.join(self.expr(c) for c in conds)} ? {self.expr(a)} : {self.expr(b)})"

    def expr_Select(self, e) -> str:
        return self.choose(e.condition, e.true_value, e.false_value)

    def expr_Call(self, e) -> str:
        op = str(e.op.name) if hasattr(e.op, "name") else str(e.op)
        op = op.replace("prim.", "tirx.", 1)
        if op == "tirx.if_then_else":
            return self.choose(*e.args)
        if op == "tirx.likely":
            return self.expr(e.args[0])
        if op in ("tirx.call_pure_extern", "tirx.call_extern"):  # LowerIntrin's libm calls (sqrtf, ...)
            fname = str(e.args[0].value) if hasattr(e.args[0], "value") else str(e.args[0])
            fname = LIBM.get(fname, fname)
            return f"{fname}({', '.join(self.expr(a) for a in e.args[1:])})"
        raise ValueError(f"C emitter: call {op} is not supported")

    def spmd_body(self, body) -> None:
        stmts = list(body.seq) if type(body).__name__ == "SeqStmt" else [body]
        self.line("size_t fg_off = 0;")
        for st in stmts:
            kind = type(st).__name__
            if kind == "AllocBuffer":
                b = st.buffer
                ctype = _ctype(b.dtype)
                name = self.var(self.storage(b))
                count = self.count(b)
                self.line(f"{ctype} *{name} = ({ctype} *)(void *)(fg_ws + fg_off);")
                self.line(f"fg_off += FG_WS_ALIGN(sizeof({ctype}) * {count});")
                self.workspace.append((ctype, count))
            elif kind == "DeclBuffer":
                self.stmt(st)
            elif kind == "For" and int(st.kind) == 1:
                v = self.var(st.loop_var)
                ext = self.expr(st.extent)
                lo = self.expr(st.min)
                self.line("{")
                self.indent += 1
                self.line(f"const int32_t fg_n = {ext};")
                self.line("const int32_t fg_lo = (int32_t)(((int64_t)fg_n * fg_core) / fg_ncores);")
                self.line("const int32_t fg_hi = (int32_t)(((int64_t)fg_n * (fg_core + 1)) / fg_ncores);")
                start = "fg_lo" if lo == "0" else f"{lo} + fg_lo"
                end = "fg_hi" if lo == "0" else f"{lo} + fg_hi"
                windows = self.windows(st)
                if windows:
                    self.staged_loop(st, v, start, end, windows)
                else:
                    self.line(f"for (int32_t {v} = {start}; {v} < {end}; ++{v}) {{")
                    self.scope(st.body)
                    self.line("}")
                self.indent -= 1
                self.line("}")
                self.line("fg_dsp_barrier(fg_sync);")
            else:
                self.line("if (fg_core == 0) {")
                self.scope(st)
                self.line("}")
                self.line("fg_dsp_barrier(fg_sync);")
        self.line("(void)fg_off;")

    # -- DMA staging (spmd): inputs read in a parallel loop are copied into the core's local memory
    def windows(self, loop) -> list:
        """(C name, C type, first index as a function of the loop variable, width, span) of every
        pointer argument that the loop only reads, within a window of constant width per iteration."""
        o = loop.loop_var
        dom, reads, writes = {}, {}, set()

        def visit_expr(e):
            kind = type(e).__name__
            if kind == "BufferLoad":
                reads.setdefault(self.var(self.storage(e.buffer)), []).append(list(e.indices))
            elif kind == "TensorLoad":
                reads.setdefault(self.var(e.source), []).append(list(e.indices))

        for st in _stmts(loop.body):
            kind = type(st).__name__
            if kind == "For":
                ext = st.extent
                if type(ext).__name__ == "RShift" and isinstance(ext.b, tirx.IntImm):
                    ext = tirx.floordiv(ext.a, 1 << int(ext.b))  # NarrowDataType's shifts: bounded as divisions
                dom[st.loop_var] = sym.IntervalSet(st.min, st.min + ext - 1)
            elif kind == "BufferStore":
                writes.add(self.var(self.storage(st.buffer)))
            for e in _exprs(st):
                _walk_expr(e, visit_expr)
        local = [o] + _defined(loop.body)
        out = []
        for name in sorted(reads):
            if name not in self.param_bufs or name in writes or any(len(ix) != 1 for ix in reads[name]):
                continue
            ctype, span, dims = self.param_bufs[name]
            ana = sym.Analyzer()
            with contextlib.ExitStack() as stack:
                for d in dims:  # shapes and strides are never negative
                    if isinstance(d, tirx.Var):
                        stack.enter_context(ana.constraint_scope(d >= 0))
                pairs = []
                for (ix,) in reads[name]:
                    r = ana.int_set(ix, dom)
                    pairs.append((ana.simplify(r.min_value), ana.simplify(r.max_value)))
                # the window of all reads: a lowest first and a highest last index among them
                first = next((f for f, _ in pairs if all(ana.can_prove(f <= g) for g, _ in pairs)), None)
                last = next((h for _, h in pairs if all(ana.can_prove(h >= g) for _, g in pairs)), None)
                if first is None or last is None:
                    continue
                # both move with the loop index alike: the width is the difference of the constants
                lf, ll = sym.detect_linear_equation(first, [o]), sym.detect_linear_equation(last, [o])
                if len(lf) != 2 or len(ll) != 2 or not _is_zero(ana.simplify(ll[0] - lf[0])):
                    continue
                width = ana.simplify(ll[1] - lf[1] + 1)
            if any(_uses(first, x) for x in local[1:]) or any(_uses(width, x) for x in local) or not (
                    _pure_index(first) and _pure_index(width)) or "inf" in str(first) + str(width):
                continue
            out.append((name, ctype, first, width, span))
        return out

    def staged_loop(self, loop, v: str, start: str, end: str, windows) -> None:
        """The loop twice: with its inputs' windows copied into local memory by DMA (when the port
        has the room), and reading shared memory directly (otherwise).  Windows that move with the
        loop are double-buffered: the next iteration's copies run while this one computes."""
        fixed = [w for w in windows if not _uses(w[2], loop.loop_var)]  # the same window every iteration
        moving = [w for w in windows if _uses(w[2], loop.loop_var)]
        sizes = " + ".join(f"{2 if w in moving else 1}u * FG_WS_ALIGN(sizeof({w[1]}) * (size_t)({self.expr(w[3])}))"
                           for w in windows)
        self.line(f"const size_t fg_lb = {sizes};")
        self.line("char *fg_local = (fg_sync != NULL && fg_hi > fg_lo && fg_lb <= fg_dsp_local_bytes())")
        self.line("    ? (char *)fg_dsp_local_alloc(fg_lb) : NULL;")
        self.line("if (fg_local != NULL) {")
        self.indent += 1
        self.line("size_t fg_lo_off = 0;")
        bufs = [("fg_l", w) for w in fixed] + [(f"fg_l{k}", w) for w in moving for k in (0, 1)]
        for prefix, (name, ct, _, width, _) in bufs:
            self.line(f"{ct} *{prefix}_{name} = ({ct} *)(void *)(fg_local + fg_lo_off);")
            self.line(f"fg_lo_off += FG_WS_ALIGN(sizeof({ct}) * (size_t)({self.expr(width)}));")
        for name, ct, first, width, span in fixed:
            self.dma_get(f"fg_l_{name}", name, ct, first, width, span, f"fg_b_{name}")
            self.staged[name] = (f"fg_l_{name}", f"fg_b_{name}")
        if moving:  # the first iteration's windows
            self.line("{")
            self.indent += 1
            self.line(f"const int32_t fg_it = {start};")
            with self.renamed(loop.loop_var, "fg_it"):
                for name, ct, first, width, span in moving:
                    self.dma_get(f"fg_l0_{name}", name, ct, first, width, span, f"fg_nb_{name}")
            self.indent -= 1
            self.line("}")
        self.line("fg_dsp_dma_wait();")
        self.line(f"for (int32_t {v} = {start}; {v} < {end}; ++{v}) {{")
        self.indent += 1
        if moving:
            self.line(f"const int32_t fg_cur = ({v} - ({start})) & 1;")
            for name, ct, first, width, span in moving:
                self.line(f"{ct} *fg_l_{name} = fg_cur ? fg_l1_{name} : fg_l0_{name};")
                self.line(f"const int32_t fg_b_{name} = {self.expr(first)};")
                self.staged[name] = (f"fg_l_{name}", f"fg_b_{name}")
            self.line("fg_dsp_dma_wait(); /* this iteration's windows are in */")
            self.line(f"if ({v} + 1 < {end}) {{ /* the next one's copy runs while this one computes */")
            self.indent += 1
            self.line(f"const int32_t fg_it = {v} + 1;")
            with self.renamed(loop.loop_var, "fg_it"):
                for name, ct, first, width, span in moving:
                    self.dma_get(f"(fg_cur ? fg_l0_{name} : fg_l1_{name})", name, ct, first, width, span,
                                 f"fg_nb_{name}")
            self.indent -= 1
            self.line("}")
        self.indent -= 1
        self.scope(loop.body)
        for name, *_ in windows:
            del self.staged[name]
        self.line("}")
        self.line("fg_dsp_local_free(fg_local);")
        self.indent -= 1
        self.line("} else {")
        self.indent += 1
        self.line(f"for (int32_t {v} = {start}; {v} < {end}; ++{v}) {{")
        self.scope(loop.body)
        self.line("}")
        self.indent -= 1
        self.line("}")

    def dma_get(self, dst: str, name: str, ct: str, first, width, span, b: str) -> None:
        """Start the copy of a window (clamped to the array) into dst; ``b`` names its first index."""
        self.line(f"const int32_t {b} = {self.expr(first)};")
        c = f"fg_c{b[4:]}"
        self.line(f"const int32_t {c} = ({self.expr(span)}) - {b} < ({self.expr(width)}) "
                  f"? ({self.expr(span)}) - {b} : ({self.expr(width)});")
        self.line(f"if ({c} > 0) {{")
        self.line(f"    fg_dsp_dma_get({dst}, {name} + {b}, sizeof({ct}) * (size_t){c});")
        self.line("}")

    @contextlib.contextmanager
    def renamed(self, var, name: str):
        """Print ``var`` as ``name`` for a while."""
        key = next((k for k in self.names if k.same_as(var)), var)
        old = self.names.get(key)
        self.names[key] = name
        try:
            yield
        finally:
            if old is None:
                del self.names[key]
            else:
                self.names[key] = old

    def function(self) -> str:
        head, self.params = self.signature()
        # variants leave some arguments unread (e.g. cy without grad_hy): the signature stays uniform
        unread = " ".join(f"(void){decl.split()[-1].lstrip('*')};" for decl, _ in self.params)
        if self.spmd:
            head = "static " + head[:-1] + ", int fg_core, int fg_ncores, fg_dsp_sync_t *fg_sync, char *fg_ws)"
            self.line(unread + " (void)fg_ws; (void)fg_sync; (void)fg_core; (void)fg_ncores;")
            self.spmd_body(self.func.body)
        else:
            self.line(unread)
            self.stmt(self.func.body)
            for name in reversed(self.heap.pop()):
                self.line(f"FG_DSP_FREE({name});")
        return head + " {\n" + "\n".join(self.lines) + "\n}\n"


# libm functions printed as targets/dsp/fg_dsp_kernel.h's versions of the LLVM kernels' formulas
LIBM = {"tanhf": "fg_tanhf"}


def emit(func, name: str, spmd: bool = False):
    """(C source of ``name``, its parameters as (C declaration, TIR name), workspace) for a scheduled
    PrimFunc; ``workspace`` lists (C type, element count) of the shared buffers in spmd mode."""
    em = Emitter(lower(func), name, spmd=spmd)
    body = em.function()
    return body, em.params, em.workspace
