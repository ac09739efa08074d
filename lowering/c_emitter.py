"""Print a scheduled, lowered PrimFunc as plain C, no TVM runtime (the DSP library's kernels).

The PrimFunc goes through TVM's own lowering up to plain loops (the s_tir
pipeline without host/device splitting and the packed calling convention),
then this module prints that loop-level TIR as one C function, in a C-family
dialect given as a table of differences (lowering.c_dialect; C99 by default):

    void NAME(float *restrict x, ..., int32_t M, int32_t D, int32_t x_s0, ..., float eps)

Buffers become restrict pointers, shape and stride variables and scalar
parameters become trailing arguments in a fixed order (see ``signature``);
intermediate buffers of constant size become stack arrays, the others come
from the dialect's alloc/free (C99: ``FG_DSP_ALLOC``/``FG_DSP_FREE``).  In spmd
mode the top-level parallel loops are split over the cores of a group, and the
windows of the inputs each iteration reads (TVM's bound analysis) are copied
into the core's local memory by DMA when there is room (lowering.c_spmd).  The
printer reshapes loops around the schedule's bounds checks (lowering.c_guards)
so that a C compiler vectorises the inner loops; no arithmetic changes, so the
results keep their bits.  half values go through the dialect's conversions;
the helpers the printed C99 calls (fg_floordiv, fg_tanhf, fg_half_to_float...)
are in the dialect's prologue headers (targets/dsp/fg_dsp_kernel.h, fg_half.h).
"""
from __future__ import annotations


import tvm
from tvm import s_tir, tirx

from .c_guards import (NEUTRAL, UNSWITCH_DEPTH, conjuncts, defined, guard, if_conditions, loop_bound, member,
                       pure_index, strip, tile_split, uses)
from .c_dialect import C99, Dialect
from .c_spmd import SpmdPrinter

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


class Emitter(SpmdPrinter):
    """One C function from one lowered PrimFunc."""

    BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%", "EQ": "==", "NE": "!=",
              "LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "And": "&&", "Or": "||", "RShift": ">>",
              "LShift": "<<", "BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^"}

    def __init__(self, func, name: str, spmd: bool = False, dialect: Dialect = C99):
        self.func = func
        self.dialect = dialect
        self.name = name
        # spmd: every core of a group runs the function (fg_core of fg_ncores); top-level
        # parallel loops are split over the cores with a barrier after each, other top-level
        # statements run on core 0, and top-level buffers live in a shared workspace fg_ws
        self.spmd = spmd
        self.workspace: list[tuple[str, tuple[str, ...]]] = []  # (C type, C dimension expressions)
        # spmd: buffers allocated inside the body, one slot each in the core's own scratch (fg_cs)
        self.core_scratch: list[tuple[str, str]] = []
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

    def ctype(self, dtype) -> str:
        return self.dialect.type(dtype)

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
                ctype = self.ctype(p.dtype)
                name = self.var(p)
                # restrict: the entry points refuse outputs that overlap anything (TVM assumes the same)
                args.append((self.dialect.pointer(name, p.dtype), p.name))
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
                scalars.append((f"{self.ctype(str(p.ty))} {self.var(p)}", p.name))
        dims = [(f"{self.dialect.index} {self.var(v)}", n) for n, v in shape_vars.items()]
        params = args + dims + scalars
        return f"{self.dialect.kernel} {self.name}({', '.join(p for p, _ in params)})", params

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

    def dims(self, buffer) -> tuple[str, ...]:
        """C expressions of a buffer's dimensions."""
        return tuple(self.expr(d) for d in buffer.shape)

    def count(self, buffer) -> str:
        """C expression of a buffer's element count."""
        return count_of(self.dims(buffer))

    def stmt_AllocBuffer(self, s) -> None:
        b = s.buffer
        name = self.var(self.storage(b))
        ctype = self.ctype(b.dtype)
        size = 1
        const = True
        for d in b.shape:
            if isinstance(d, tirx.IntImm):
                size *= int(d)
            else:
                const = False
        if const:
            self.line(f"{ctype} {name}[{size}] = {{0}};")  # zeroed: guards hide the writes from gcc
        elif self.spmd:  # a slot of the core's scratch, sized by the arguments alone: no allocator, no failure
            local = defined(self.func.body)
            if any(uses(d, v) for d in b.shape for v in local):
                raise ValueError(f"C emitter: buffer {b.name}'s size depends on a loop or local variable: {b.shape}")
            self.line(f"{ctype} *{name} = ({ctype} *)(void *)(fg_cs + {scratch_bytes(self.core_scratch)});")
            self.core_scratch.append((ctype, self.dims(b)))
        else:
            self.line(f"{ctype} *{name} = ({ctype} *){self.dialect.alloc}(sizeof({ctype}) * {self.count(b)});")
            self.heap[-1].append(name)

    def scope(self, body) -> None:
        """A braced block: its heap buffers are freed at its end."""
        self.indent += 1
        self.heap.append([])
        self.stmt(body)
        for name in reversed(self.heap.pop()):
            self.line(f"{self.dialect.free}({name});")
        self.indent -= 1

    def known(self, cond) -> bool:
        return member(cond, self.facts)

    def condition(self, conds) -> str:
        """An ``if``'s condition: the conjunction of ``conds``, a lone operation without the parentheses
        its expression has (clang's -Wparentheses-equality rejects ``if ((i == 0))``)."""
        if len(conds) == 1 and type(conds[0]).__name__ in self.BINARY:
            return self.expr(conds[0])[1:-1]
        return " && ".join(self.expr(c) for c in conds)

    def temp(self, prefix: str) -> str:
        self.temps += 1
        return f"{prefix}_{self.temps}"

    def stmt_For(self, s) -> None:
        hoist = [c for c in guard(s) if not self.known(c)]
        if hoist:
            self.line(f"if ({self.condition(hoist)}) {{")
            self.indent += 1
            self.facts += hoist
            self.stmt_For(s)
            del self.facts[len(self.facts) - len(hoist):]
            self.indent -= 1
            self.line("}")
            return
        if len(self.false) + len(self.facts) < 64 and self.unswitched < UNSWITCH_DEPTH:
            local = [s.loop_var] + defined(s.body)
            for cond in if_conditions(s.body):
                if (pure_index(cond) and not self.decided(cond) and not any(uses(cond, v) for v in local)):
                    self.unswitch(s, cond)
                    return
        v = self.var(s.loop_var)
        lo, ext = self.expr(s.min), self.expr(s.extent)
        end = ext if lo == "0" else f"({lo} + {ext})"
        for cond in guard(s.body):
            bound = None if self.known(cond) else loop_bound(s, cond)
            if bound is not None:
                name, e = self.temp("fg_end"), self.expr(bound)
                self.line(f"const {self.dialect.index} {name} = ({e}) < ({end}) ? ({e}) : ({end});")
                self.loop(v, lo, name, s.body, [cond])
                return
        split = tile_split(s, self.known)
        if split is not None:
            bound, c, conds = split
            name = self.temp("fg_full")
            self.line(f"const {self.dialect.index} {name} = {self.dialect.floordiv}({self.expr(bound)}, {c}); /* tiles without checks */")
            self.loop(v, lo, f"({name} < {end} ? {name} : {end})", s.body, conds)
            self.loop(v, name if lo == "0" else f"({name} > {lo} ? {name} : {lo})", end, s.body, [])
            return
        self.loop(v, lo, end, s.body, [])

    def decided(self, cond) -> bool:
        return self.known(cond) or all(self.known(c) for c in conjuncts(cond)) or self.refuted(cond)

    def refuted(self, cond) -> bool:
        return member(strip(cond), self.false) or any(member(c, self.false) for c in conjuncts(cond))

    def unswitch(self, loop, cond) -> None:
        parts = conjuncts(cond)
        self.unswitched += 1
        self.line(f"if ({self.condition([cond])}) {{")
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
        self.line(f"for ({self.dialect.index} {v} = {start}; {v} < {end}; ++{v}) {{")
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
            if any(type(x).__name__ in NEUTRAL + ("Bind",) for x in items):
                self.line("{")
                self.scope(s.then_case)
                self.line("}")
            else:
                self.stmt(s.then_case)
            return
        self.line(f"if ({self.condition(conds)}) {{")
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
        self.line(f"const {self.ctype(dtype_of(s.var))} {self.var(s.var)} = {self.expr(s.value)};")
        self.stmt(s.body)

    def stmt_Bind(self, s) -> None:
        self.line(f"const {self.ctype(dtype_of(s.var))} {self.var(s.var)} = {self.expr(s.value)};")

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
            return f"{self.dialect.half_from_float}({self.dialect.float_literal(e.value)})"
        return self.dialect.float_literal(e.value, dtype_of(e))

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
            value = f"{self.dialect.half_to_float}({self.expr(e.value)})"
            return value if to == "float32" else self.dialect.convert(to, value)
        if to == "float16":
            value = self.expr(e.value) if frm == "float32" else self.dialect.convert("float32", self.expr(e.value))
            return f"{self.dialect.half_from_float}({value})"
        return self.dialect.convert(to, self.expr(e.value))

    def expr_FloorDiv(self, e) -> str:
        return f"{self.dialect.floordiv}({self.expr(e.a)}, {self.expr(e.b)})"

    def expr_FloorMod(self, e) -> str:
        return f"{self.dialect.floormod}({self.expr(e.a)}, {self.expr(e.b)})"

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
            fname = self.dialect.intrinsics.get(fname, fname)
            return f"{fname}({', '.join(self.expr(a) for a in e.args[1:])})"
        raise ValueError(f"C emitter: call {op} is not supported")

    def function(self) -> str:
        head, self.params = self.signature()
        # variants leave some arguments unread (e.g. cy without grad_hy): the signature stays uniform
        unread = " ".join(f"(void){decl.split()[-1].lstrip('*')};" for decl, _ in self.params)
        if self.spmd:
            head = "static " + head[:-1] + ", int fg_core, int fg_ncores, fg_dsp_sync_t *fg_sync, char *fg_ws)"
            self.line(unread + " (void)fg_ws; (void)fg_sync; (void)fg_core; (void)fg_ncores;")
            self.spmd_body(self.func.body)
            if self.core_scratch:  # the cores' scratch follows the shared buffers, one region per core
                self.lines.insert(2, f"    char *fg_cs = fg_ws + {scratch_bytes(self.workspace)} + "
                                     f"(size_t)fg_core * ({scratch_bytes(self.core_scratch)});")
        else:
            self.line(unread)
            self.stmt(self.func.body)
            for name in reversed(self.heap.pop()):
                self.line(f"{self.dialect.free}({name});")
        return head + " {\n" + "\n".join(self.lines) + "\n}\n"


def count_of(dims, size_type: str = "size_t") -> str:
    """C expression of the element count of a buffer of C dimensions ``dims``, in ``size_type``."""
    return " * ".join(f"({size_type})({d})" for d in dims) or "1"


def scratch_bytes(buffers, wide: bool = False) -> str:
    """C expression of the bytes of consecutive (C type, C dimensions) buffers, each 64-byte aligned:
    in size_t, or with ``wide`` in unsigned long long (a sum that cannot wrap where size_t has 32 bits)."""
    align, size_type = ("FG_WS_ALIGN_LL", "unsigned long long") if wide else ("FG_WS_ALIGN", "size_t")
    return " + ".join(f"{align}(sizeof({ct}) * {count_of(dims, size_type)})" for ct, dims in buffers) or "0"


def emit(func, name: str, spmd: bool = False, dialect: Dialect = C99):
    """(C source of ``name``, its parameters as (C declaration, TIR name), workspace) for a scheduled
    PrimFunc, printed in ``dialect``.  In spmd mode ``workspace`` is (shared, per core): the (C type,
    C dimensions) of the buffers in the workspace fg_ws, then of those each core has in its own
    region after them (fg_cs: buffers allocated inside a parallel loop)."""
    em = Emitter(lower(func), name, spmd=spmd, dialect=dialect)
    body = em.function()
    return body, em.params, (em.workspace, em.core_scratch) if spmd else em.workspace
