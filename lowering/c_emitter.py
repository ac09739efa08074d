"""Work in progress (issue 4): print a scheduled, lowered PrimFunc as plain C99, no TVM runtime.

The PrimFunc goes through TVM's own lowering up to plain loops (the s_tir
pipeline without host/device splitting and the packed calling convention),
then this module prints that loop-level TIR as one C function:

    void NAME(const float *x, int32_t x_s0, ..., int32_t M, int32_t D, float eps, float *dx, ...)

Buffers become pointers (inputs const), shape and stride variables and scalar
parameters become trailing arguments in a fixed order (see ``signature``);
intermediate buffers of constant size become stack arrays, the others come
from ``FG_DSP_ALLOC``/``FG_DSP_FREE`` (the porting header).  Parallel loops are
printed serial; splitting them over cores is the entry points' business.
"""
from __future__ import annotations

import struct

import tvm
from tvm import s_tir, tirx

C_TYPES = {"float32": "float", "float16": "fg_half", "int32": "int32_t", "int64": "int64_t", "bool": "int",
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
                args.append((f"{ctype} *{name}", p.name))
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

    def stmt_For(self, s) -> None:
        v = self.var(s.loop_var)
        lo, ext = self.expr(s.min), self.expr(s.extent)
        start = "0" if lo == "0" else lo
        end = ext if start == "0" else f"{start} + {ext}"
        self.line(f"for (int32_t {v} = {start}; {v} < {end}; ++{v}) {{")
        self.scope(s.body)
        self.line("}")

    def stmt_IfThenElse(self, s) -> None:
        self.line(f"if ({self.expr(s.condition)}) {{")
        self.scope(s.then_case)
        if s.else_case is not None:
            self.line("} else {")
            self.scope(s.else_case)
        self.line("}")

    def stmt_BufferStore(self, s) -> None:
        (idx,) = s.indices
        self.line(f"{self.var(self.storage(s.buffer))}[{self.expr(idx)}] = {self.expr(s.value)};")

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
        return _float(float(e.value), dtype_of(e))

    def expr_TensorLoad(self, e) -> str:
        """A load straight from a buffer parameter (TVM 0.27 keeps these for unflattened 1-D params)."""
        src = e.source
        idx = list(e.indices)
        if len(idx) == 1:
            return f"{self.var(src)}[{self.expr(idx[0])}]"
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
        return f"{self.var(self.storage(e.buffer))}[{self.expr(idx)}]"

    def expr_Cast(self, e) -> str:
        return f"(({_ctype(dtype_of(e))})({self.expr(e.value)}))"

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

    def expr_Select(self, e) -> str:
        return f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"

    def expr_Call(self, e) -> str:
        op = str(e.op.name) if hasattr(e.op, "name") else str(e.op)
        op = op.replace("prim.", "tirx.", 1)
        if op == "tirx.if_then_else":
            c, a, b = e.args
            return f"({self.expr(c)} ? {self.expr(a)} : {self.expr(b)})"
        if op == "tirx.likely":
            return self.expr(e.args[0])
        if op in ("tirx.call_pure_extern", "tirx.call_extern"):  # LowerIntrin's libm calls (sqrtf, ...)
            fname = str(e.args[0].value) if hasattr(e.args[0], "value") else str(e.args[0])
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


PRELUDE = """#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef FG_DSP_ALLOC
#define FG_DSP_ALLOC(n) malloc(n)
#define FG_DSP_FREE(p) free(p)
#endif

static inline int32_t fg_floordiv(int32_t a, int32_t b) {
    int32_t q = a / b;
    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int32_t fg_floormod(int32_t a, int32_t b) {
    int32_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""


def emit(func, name: str, spmd: bool = False):
    """(C source of ``name``, its parameters as (C declaration, TIR name), workspace) for a scheduled
    PrimFunc; ``workspace`` lists (C type, element count) of the shared buffers in spmd mode."""
    em = Emitter(lower(func), name, spmd=spmd)
    body = em.function()
    return body, em.params, em.workspace
