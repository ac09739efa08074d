"""Ascend operator packages generated from the TE definitions: the LSTM-cell and LayerNorm backward.

op_kernel: AscendC kernels.  Each elementwise stage of the TE graph becomes a
sequence of vector instructions over a UB tile: the expression tree of every
output is walked once (shared subtrees, such as grad_c, computed once), each
node one instruction (Add, Sub, Mul, Div, Muls, Adds, Exp, Duplicate; tanh as
2 / (1 + e^-2x) - 1).  Temporaries get UB slots by a linear scan over their
live ranges.  fp16 and bf16 inputs are cast to fp32 in UB and computed in fp32;
outputs are rounded once (RINT).  Rows are split over the vector cores in groups of
FG_LCG_GROUP rows (and H as well when the groups are fewer than the cores), a
row into tiles sized from the UB capacity; inputs and
outputs stream through double-buffered queues.  grad_bias is deterministic:
one fp32 partial sum per row group (in the workspace), added in group order by
a second kernel, so the bits do not depend on the core count.

op_host: the aclnn two-phase API (aclnnThnnFusedLstmCellBackwardGetWorkspaceSize
/ aclnnThnnFusedLstmCellBackward; aclnnLayerNormBackward...) that checks the
aclTensors, plans the tiling and launches the kernels; CMakeLists.txt builds a
package with CANN.

The LayerNorm backward (ln_programs / ln_kernel_source): the same lowering
gives its two passes over a row (pass 1: the lane values of the two row sums
and the dgamma/dbeta terms; pass 2: dx), with the per-row scalars (mean, rstd,
the sums) as instruction operands.  The row sums keep the definition's 16
interleaved lanes added in lane order; dgamma/dbeta are summed per 8-row group
and the groups added in order by a second kernel.

Tensors whose elements are not adjacent are gathered into the workspace (and
outputs scattered back) by a copy kernel; both packages share its source and
the host code's planning (HOST_COMMON).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from tvm import tirx

from ..te_defs import lstm_cell_backward as cell_def

CTYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}
DTYPES = tuple(CTYPE)  # the operators' input types: fp16 and bf16 are computed in fp32 in UB
ACL_DTYPE = {"float32": "ACL_FLOAT", "float16": "ACL_FLOAT16", "bfloat16": "ACL_BF16"}
COPY_DTYPES = ("float32", "float16")  # copies move bits: one copy kernel per element size


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


def _is_const(v) -> bool:
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
            gate = int(idx[1]) if tensor.name == "storage" else None
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
            if _is_const(a) and _is_const(b):
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
            return self.emit("Adds", self.emit("Muls", t, "-1.0f"), _c(c))
        dup = self.emit("Dup", _c(c))
        return self.emit("Div", t, dup) if t is a else self.emit("Div", dup, t)

    def tanh(self, x):
        # tanh(x) = 2 / (1 + e^(-2x)) - 1: +-inf give +-1, NaN stays NaN
        e = self.emit("Adds", self.emit("Exp", self.emit("Muls", x, "-2.0f")), "1.0f")
        return self.emit("Adds", self.emit("Div", self.emit("Dup", "2.0f"), e), "-1.0f")


def _scalar(v) -> bool:
    return isinstance(v, tuple) and v[0] in ("const", "s")


def _c(v) -> str:
    return _flt(v[1]) if v[0] == "const" else v[1]


def _neg(v) -> str:
    return _flt(-v[1]) if v[0] == "const" else f"-{v[1]}"


@dataclass
class Variant:
    has_grad_hy: bool
    has_grad_cy: bool
    has_bias: bool

    @property
    def tag(self) -> str:
        parts = [p for p, on in (("hy", self.has_grad_hy), ("cy", self.has_grad_cy), ("bias", self.has_bias)) if on]
        return "_".join(parts) or "none"


def program(dtype: str, v: Variant):
    """One Program computing every output of the variant: [(output stream, value)]."""
    args = cell_def.compute(dtype, v.has_grad_hy, v.has_grad_cy, v.has_bias)
    gates = next(t for t in args if t.name == "grad_gates")
    dcx = next(t for t in args if t.name == "grad_cx")
    low = Lowerer()
    outs = []
    for g in range(4):
        low.gate = g
        low.p.memo = {k: m for k, m in low.p.memo.items() if not m[1]}  # drop what depended on the last gate
        outs.append((("grad_gates", g), low.value(gates.op.body[0])))
    low.gate = None
    outs.append((("grad_cx", None), low.value(dcx.op.body[0])))
    return low.p, outs


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


# ---------------------------------------------------------------------------- C++ (AscendC)

VARIANTS = [Variant(*flags) for flags in itertools.product((True, False), repeat=3)]
ARGS = ("dhy", "dc", "cx", "cy", "storage", "dgates", "dcx", "db", "workspace", "tiling")
GM = {"grad_hy": "dhy", "grad_cy": "dc", "cx": "cx", "cy": "cy", "storage": "storage"}


def _stream(key) -> str:
    name, gate = key
    return f"{GM[name]}{gate}" if gate is not None else GM[name]


def _flt(x: float) -> str:
    return repr(float(x)) + "f" if x == x and abs(x) != float("inf") else ("NAN" if x != x else "INFINITY")


def kernel_source(dtype: str, v: Variant) -> tuple[str, int, int]:
    """(C++ of the variant's main kernel, float temp slots, input streams) for ``dtype``."""
    t = CTYPE[dtype]
    prog, outs = program(dtype, v)
    slot, nslots = allocate(prog, outs)
    name = f"fg_lcg_{dtype}_{v.tag}"
    streams = prog.streams
    L = []
    w = L.append
    w(f"class FgLcg_{dtype}_{v.tag} {{")
    w("  public:")
    w(f"    __aicore__ inline void Init({', '.join(f'GM_ADDR {a}' for a in ARGS[:-1])}, const FgLcgTiling &t) {{")
    w("        t_ = t;")
    w("        (void)dhy; (void)dc; (void)cx; (void)cy; (void)storage;  // a variant reads only some")
    for gm in ("dhy", "dc", "cx", "cy"):
        if any(GM[k[0]] == gm for k in streams):
            w(f"        g_{gm}.SetGlobalBuffer((__gm__ {t} *){gm}, (uint64_t)(t.n - 1) * t.s_{gm} + t.h);")
    if any(k[0] == "storage" for k in streams):
        w(f"        g_storage.SetGlobalBuffer((__gm__ {t} *)storage, (uint64_t)(t.n - 1) * t.s_storage + 3u * t.g_storage + t.h);")
    w(f"        g_dgates.SetGlobalBuffer((__gm__ {t} *)dgates, (uint64_t)(t.n - 1) * t.s_dgates + 4u * t.h);")
    w(f"        g_dcx.SetGlobalBuffer((__gm__ {t} *)dcx, (uint64_t)(t.n - 1) * t.s_dcx + t.h);")
    w("        (void)db;")
    if v.has_bias:
        w("        g_ws.SetGlobalBuffer((__gm__ float *)workspace, (uint64_t)t.groups * 4u * t.h);")
    else:
        w("        (void)workspace;")
    for k in streams:
        w(f"        pipe_.InitBuffer(in_{_stream(k)}, 2, t.tile * sizeof({t}));")
    for g in range(4):
        w(f"        pipe_.InitBuffer(out_g{g}, 2, t.tile * sizeof({t}));")
    w(f"        pipe_.InitBuffer(out_cx, 2, t.tile * sizeof({t}));")
    nfloat = nslots + (len(streams) if dtype != "float32" else 0) + 1  # + input casts + one scratch
    w(f"        pipe_.InitBuffer(tmp_, {nfloat}u * t.tile * sizeof(float));")
    if v.has_bias:
        w("        pipe_.InitBuffer(acc_, 4u * t.tile * sizeof(float));")
    w("    }")
    w("")
    w("    __aicore__ inline void Process() {")
    w("        // whole groups of t_.group rows per core; with the bias, one partial sum per group")
    w("        // (and, when there are fewer row blocks than cores, a slice of H per core)")
    w("        const uint32_t block = (uint32_t)GetBlockIdx() / t_.h_parts, part = (uint32_t)GetBlockIdx() % t_.h_parts;")
    w("        const uint32_t row0 = block * t_.rows_per_core;")
    w("        const uint32_t row1 = row0 + t_.rows_per_core < t_.n ? row0 + t_.rows_per_core : t_.n;")
    w("        const uint32_t h0 = part * t_.h_span, h1 = h0 + t_.h_span < t_.h ? h0 + t_.h_span : t_.h;")
    w("        for (uint32_t g0 = row0; g0 < row1; g0 += t_.group) {")
    w("            const uint32_t g1 = g0 + t_.group < row1 ? g0 + t_.group : row1;")
    w("            for (uint32_t off = h0; off < h1; off += t_.tile) {")
    w("                const uint32_t len = h1 - off < t_.tile ? h1 - off : t_.tile;")
    if v.has_bias:
        w("                Duplicate(acc_.Get<float>(), 0.0f, (int32_t)(4u * t_.tile));")
    w("                for (uint32_t r = g0; r < g1; ++r) {")
    w("                    CopyIn(r, off, len);")
    w("                    Compute(len);")
    w("                    CopyOut(r, off, len);")
    w("                }")
    if v.has_bias:
        w("                PipeBarrier<PIPE_ALL>();  // the vector adds into acc_ land before the copy out")
        w("                for (uint32_t g = 0; g < 4; ++g) {")
        w("                    DataCopyExtParams p{1, len * (uint32_t)sizeof(float), 0, 0, 0};")
        w("                    DataCopyPad(g_ws[((uint64_t)(g0 / t_.group) * 4u + g) * t_.h + off], acc_.Get<float>()[g * t_.tile], p);")
        w("                }")
    w("            }")
    w("        }")
    w("    }")
    w("")
    w("  private:")
    w("    __aicore__ inline void CopyIn(uint32_t r, uint32_t off, uint32_t len) {")
    w(f"        DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    w(f"        DataCopyPadExtParams<{t}> pad{{false, 0, 0, {t}()}};")
    for k in streams:
        s = _stream(k)
        gm = GM[k[0]]
        base = f"(uint64_t)r * t_.s_{gm} + off" + (f" + {k[1]}u * t_.g_storage" if k[1] is not None else "")
        w(f"        LocalTensor<{t}> x_{s} = in_{s}.AllocTensor<{t}>();")
        w(f"        DataCopyPad(x_{s}, g_{gm}[{base}], p, pad);")
        w(f"        in_{s}.EnQue(x_{s});")
    w("        (void)r; (void)off; (void)p; (void)pad;")
    w("    }")
    w("")
    w("    __aicore__ inline void Compute(uint32_t len) {")
    w("        const int32_t n = (int32_t)len;")
    w("        LocalTensor<float> tmp = tmp_.Get<float>();")
    w("        (void)tmp;")
    for k in streams:
        s = _stream(k)
        w(f"        LocalTensor<{t}> x_{s} = in_{s}.DeQue<{t}>();")
    _, ref = _print_program(w, prog, outs, dtype, _stream, alloc=(slot, nslots))
    scratch = f"tmp[{nfloat - 1}u * t_.tile]"
    for (oname, g), val in outs:
        q = f"out_g{g}" if oname == "grad_gates" else "out_cx"
        w("        {")
        w(f"            LocalTensor<{t}> o = {q}.AllocTensor<{t}>();")
        if _is_const(val):
            w(f"            LocalTensor<float> c = {scratch};")
            w(f"            Duplicate(c, {_flt(val[1])}, n);")
            res = "c"
        else:
            res = ref(val)
        if dtype == "float32":
            w(f"            Muls(o, {res}, 1.0f, n);  // exact copy into the output queue")
        else:
            w(f"            Cast(o, {res}, RoundMode::CAST_RINT, n);")
        if v.has_bias and oname == "grad_gates":
            if dtype == "float32":
                w(f"            Add(acc_.Get<float>()[{g}u * t_.tile], acc_.Get<float>()[{g}u * t_.tile], o, n);")
            else:  # the bias sums the stored (rounded) gradients, as the definition says
                w(f"            LocalTensor<float> back = {scratch};")
                w("            Cast(back, o, RoundMode::CAST_NONE, n);")
                w(f"            Add(acc_.Get<float>()[{g}u * t_.tile], acc_.Get<float>()[{g}u * t_.tile], back, n);")
        w(f"            {q}.EnQue(o);")
        w("        }")
    for k in streams:
        s = _stream(k)
        w(f"        in_{s}.FreeTensor(x_{s});")
    w("    }")
    w("")
    w("    __aicore__ inline void CopyOut(uint32_t r, uint32_t off, uint32_t len) {")
    w(f"        DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    for g in range(4):
        w(f"        LocalTensor<{t}> o{g} = out_g{g}.DeQue<{t}>();")
        w(f"        DataCopyPad(g_dgates[(uint64_t)r * t_.s_dgates + {g}u * t_.h + off], o{g}, p);")
        w(f"        out_g{g}.FreeTensor(o{g});")
    w(f"        LocalTensor<{t}> oc = out_cx.DeQue<{t}>();")
    w("        DataCopyPad(g_dcx[(uint64_t)r * t_.s_dcx + off], oc, p);")
    w("        out_cx.FreeTensor(oc);")
    w("    }")
    w("")
    w("    FgLcgTiling t_;")
    w("    TPipe pipe_;")
    for k in streams:
        w(f"    TQue<TPosition::VECIN, 2> in_{_stream(k)};")
    for g in range(4):
        w(f"    TQue<TPosition::VECOUT, 2> out_g{g};")
    w("    TQue<TPosition::VECOUT, 2> out_cx;")
    w("    TBuf<TPosition::VECCALC> tmp_;")
    if v.has_bias:
        w("    TBuf<TPosition::VECCALC> acc_;")
        w("    GlobalTensor<float> g_ws;")
    for gm in ("dhy", "dc", "cx", "cy", "storage", "dgates", "dcx"):
        w(f"    GlobalTensor<{t}> g_{gm};")
    w("};")
    w("")
    w(f"extern \"C\" __global__ __aicore__ void {name}({', '.join(f'GM_ADDR {a}' for a in ARGS)}) {{")
    w("    FgLcgTiling t = *(const __gm__ FgLcgTiling *)tiling;")
    w(f"    FgLcg_{dtype}_{v.tag} op;")
    w(f"    op.Init({', '.join(ARGS[:-1])}, t);")
    w("    op.Process();")
    w("}")
    return "\n".join(L) + "\n", nfloat, len(streams)


COPY_PARAMS_H = """
// a strided view copied to another of the same shape (inputs gathered into a contiguous copy in the
// workspace, outputs scattered from one), for tensors whose elements do not fit the kernels' rows
#define FG_COPY_MAX_DIMS 8
struct FgCopyParams {
    uint32_t ndim, lines;                  // dimensions; lines = the product of all but the last
    uint32_t dims[FG_COPY_MAX_DIMS];
    int64_t src[FG_COPY_MAX_DIMS], dst[FG_COPY_MAX_DIMS];  // strides, in elements (never negative)
};
"""


def copy_source(name: str, dtype: str) -> str:
    """The copy kernel ``name``: lines (every dimension but the last) over the cores, each written to GM
    by DataCopyPad (never by scalar stores, which go out as whole cache lines and race other cores).
    A line adjacent on both sides goes GM -> UB -> GM in chunks; one adjacent in the destination is
    gathered element by element into UB first; one strided in the destination too is read as its
    whole span, its elements set in UB, and the span written back (the gaps as they were: the host
    orders the dimensions by destination stride, so the spans of different lines are disjoint)."""
    t = CTYPE[dtype]
    return f"""extern "C" __global__ __aicore__ void {name}(GM_ADDR src, GM_ADDR dst, GM_ADDR params) {{
    FgCopyParams p = *(const __gm__ FgCopyParams *)params;
    const uint32_t per = (p.lines + (uint32_t)GetBlockNum() - 1u) / (uint32_t)GetBlockNum();
    const uint32_t l0 = (uint32_t)GetBlockIdx() * per, l1 = l0 + per < p.lines ? l0 + per : p.lines;
    const uint32_t last = p.ndim - 1u, n = p.dims[last];
    const uint64_t ss = (uint64_t)p.src[last], ds = (uint64_t)p.dst[last];
    uint64_t src_end = 1u, dst_end = 1u;  // one past the farthest element of each view
    for (uint32_t k = 0; k < p.ndim; ++k) {{
        src_end += (uint64_t)(p.dims[k] - 1u) * (uint64_t)p.src[k];
        dst_end += (uint64_t)(p.dims[k] - 1u) * (uint64_t)p.dst[k];
    }}
    GlobalTensor<{t}> s, d;
    s.SetGlobalBuffer((__gm__ {t} *)src, src_end);
    d.SetGlobalBuffer((__gm__ {t} *)dst, dst_end);
    const uint32_t chunk = 8192u;  // elements of a line (or of its span) per trip through UB
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf_;
    pipe.InitBuffer(buf_, chunk * sizeof({t}));
    LocalTensor<{t}> buf = buf_.Get<{t}>();
    DataCopyPadExtParams<{t}> pad{{false, 0, 0, {t}()}};
    for (uint32_t l = l0; l < l1; ++l) {{
        uint64_t so = 0, do_ = 0;
        for (uint32_t k = last, rest = l; k-- > 0;) {{  // the line's index, last dimension first
            const uint32_t i = rest % p.dims[k];
            rest /= p.dims[k];
            so += (uint64_t)i * (uint64_t)p.src[k];
            do_ += (uint64_t)i * (uint64_t)p.dst[k];
        }}
        const uint64_t span = (uint64_t)(n - 1u) * ds + 1u;  // destination elements the line covers
        for (uint64_t off = 0; off < span; off += chunk) {{
            const uint32_t len = (uint32_t)(span - off < chunk ? span - off : chunk);
            DataCopyExtParams q{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};
            PipeBarrier<PIPE_ALL>();
            if (ds == 1u && ss == 1u) {{
                DataCopyPad(buf, s[so + off], q, pad);
            }} else {{
                if (ds != 1u) DataCopyPad(buf, d[do_ + off], q, pad);  // the gaps, written back as they are
                PipeBarrier<PIPE_ALL>();
                for (uint64_t c = (off + ds - 1u) / ds; c < n && c * ds < off + len; ++c) {{
                    buf.SetValue((uint32_t)(c * ds - off), s.GetValue(so + c * ss));
                }}
            }}
            PipeBarrier<PIPE_ALL>();
            DataCopyPad(d[do_ + off], buf, q);
        }}
    }}
    PipeBarrier<PIPE_ALL>();
}}
"""


def group_sum_source(name: str, dtype: str, tiling: str, length: str, outputs: list[str]) -> str:
    """A kernel adding the row groups' fp32 partial sums in group order (the same bits on any core
    count) into the outputs: workspace [groups][len(outputs)][length], each output ``length`` long;
    an output given as a null address is not wanted and not written."""
    t = CTYPE[dtype]
    store = ("Muls(o, acc, 1.0f, n);" if dtype == "float32" else "Cast(o, acc, RoundMode::CAST_RINT, n);")
    k = len(outputs)
    args = ", ".join(f"GM_ADDR {o}" for o in outputs)
    sets = "\n".join(f"    out[{i}].SetGlobalBuffer((__gm__ {t} *){o}, length);" for i, o in enumerate(outputs))
    addrs = ", ".join(outputs)
    return f"""extern "C" __global__ __aicore__ void {name}(GM_ADDR workspace, {args}, GM_ADDR tiling) {{
    {tiling} t = *(const __gm__ {tiling} *)tiling;
    const uint32_t length = {length}, per = (length + (uint32_t)GetBlockNum() - 1u) / (uint32_t)GetBlockNum();
    const uint32_t lo = (uint32_t)GetBlockIdx() * per, hi = lo + per < length ? lo + per : length;
    GlobalTensor<float> ws;
    GlobalTensor<{t}> out[{k}];
    ws.SetGlobalBuffer((__gm__ float *)workspace, (uint64_t)t.groups * {k}u * length);
{sets}
    TPipe pipe;
    TBuf<TPosition::VECCALC> acc_, part_;
    TQue<TPosition::VECOUT, 1> out_q;
    pipe.InitBuffer(acc_, t.tile * sizeof(float));
    pipe.InitBuffer(part_, t.tile * sizeof(float));
    pipe.InitBuffer(out_q, 1, t.tile * sizeof({t}));
    LocalTensor<float> acc = acc_.Get<float>(), part = part_.Get<float>();
    const GM_ADDR addr[{k}] = {{{addrs}}};
    for (uint32_t k = 0; k < {k}u; ++k) {{
        if (addr[k] == nullptr) continue;  // an output not wanted
        for (uint32_t off = lo; off < hi; off += t.tile) {{
            const uint32_t len = hi - off < t.tile ? hi - off : t.tile;
            const int32_t n = (int32_t)len;
            DataCopyExtParams p{{1, len * (uint32_t)sizeof(float), 0, 0, 0}};
            DataCopyPadExtParams<float> pad{{false, 0, 0, 0.0f}};
            Duplicate(acc, 0.0f, n);
            for (uint32_t g = 0; g < t.groups; ++g) {{  // row groups in order
                PipeBarrier<PIPE_ALL>();
                DataCopyPad(part, ws[((uint64_t)g * {k}u + k) * length + off], p, pad);
                PipeBarrier<PIPE_ALL>();
                Add(acc, acc, part, n);
            }}
            LocalTensor<{t}> o = out_q.AllocTensor<{t}>();
            {store}
            out_q.EnQue(o);
            LocalTensor<{t}> d = out_q.DeQue<{t}>();
            DataCopyExtParams q{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};
            DataCopyPad(out[k][off], d, q);
            out_q.FreeTensor(d);
        }}
    }}
}}
"""


TILING_H = """// generated by fusedgrad: the LSTM-cell backward's tiling, shared by the host and the kernels.
#ifndef FG_LSTM_CELL_BACKWARD_TILING_H
#define FG_LSTM_CELL_BACKWARD_TILING_H
#include <stdint.h>

#define FG_LCG_GROUP 8u  // rows per grad_bias partial sum

struct FgLcgTiling {
    uint32_t n, h;            // rows, hidden size
    uint32_t cores;           // vector cores of the main kernel; core b takes rows [b * rows_per_core, ...)
    uint32_t rows_per_core;   // a multiple of group
    uint32_t group, groups;   // rows per grad_bias partial sum (fixed: the bits do not depend on cores)
    uint32_t h_parts, h_span; // core b takes row block b / h_parts and columns [b % h_parts * h_span, ...)
    uint32_t tile;            // elements of a row per UB tile: a multiple of 16, from the UB capacity
    uint32_t s_dhy, s_dc, s_cx, s_cy, s_storage, s_dgates, s_dcx;  // row strides, in elements
    uint32_t g_storage;       // distance between the gates of a storage row, in elements
};

// UB bytes per tile element of each variant: double-buffered inputs and outputs, fp32 temporaries
// and, with the bias, the fp32 partial sums
static inline uint32_t fg_lcg_ub_per_elem(uint32_t elem_bytes, uint32_t streams, uint32_t float_slots, int bias) {
    return (streams + 5u) * 2u * elem_bytes + float_slots * 4u + (bias ? 16u : 0u);
}

// Rows over at most max_cores cores, and H too when the rows are fewer than the cores; tiles as long as
// the UB allows (never longer than a core's slice of H).
static inline struct FgLcgTiling fg_lcg_tiling(uint32_t n, uint32_t h, uint32_t per_elem, uint32_t ub_bytes,
                                                uint32_t max_cores) {
    struct FgLcgTiling t;
    uint32_t tile = ub_bytes / per_elem / 16u * 16u, h16 = (h + 15u) / 16u * 16u;
    t.n = n;
    t.h = h;
    uint32_t blocks, parts;
    t.group = FG_LCG_GROUP;
    t.groups = (n + t.group - 1u) / t.group;
    blocks = t.groups < max_cores ? t.groups : max_cores;
    t.rows_per_core = (t.groups + blocks - 1u) / blocks * t.group;
    blocks = (n + t.rows_per_core - 1u) / t.rows_per_core;
    /* fewer row blocks than cores: the idle cores take slices of H (16-element multiples) */
    parts = blocks < max_cores ? max_cores / blocks : 1u;
    parts = parts < h16 / 16u ? parts : h16 / 16u;
    parts = parts ? parts : 1u;
    t.h_span = (h16 / 16u + parts - 1u) / parts * 16u;
    t.h_parts = (h + t.h_span - 1u) / t.h_span;
    t.h_parts = t.h_parts ? t.h_parts : 1u;
    t.cores = blocks * t.h_parts;
    t.tile = tile < t.h_span ? tile : t.h_span;
    t.s_dhy = t.s_dc = t.s_cx = t.s_cy = t.s_dcx = h;
    t.s_storage = t.s_dgates = 4u * h;
    t.g_storage = h;
    return t;
}
#endif
"""


def _with_copy_params(header: str) -> str:
    """A package's tiling header with the copy kernels' parameters (the same in every package)."""
    body, endif = header.rsplit("#endif", 1)
    return body + COPY_PARAMS_H.lstrip("\n") + "#endif" + endif


def kernels() -> dict:
    """{(dtype, variant tag): (float slots, input streams)} and the kernel file's text, per dtype."""
    out = {}
    for dtype in DTYPES:
        parts = ["// generated by fusedgrad from te_defs/lstm_cell_backward.py -- do not edit.",
                 f"// AscendC kernels of the fused LSTM-cell backward, {dtype}: one per variant (grad_hy,",
                 "// grad_cy, bias present or not), and the fixed-order grad_bias reduction.",
                 '#include "kernel_operator.h"', '#include "fg_lstm_cell_backward_tiling.h"', "",
                 "using namespace AscendC;", ""]
        sizes = {}
        for v in VARIANTS:
            src, nfloat, nstreams = kernel_source(dtype, v)
            parts.append(src)
            sizes[v.tag] = (nfloat, nstreams)
        parts.append(group_sum_source(f"fg_lcg_{dtype}_bias_reduce", dtype, "FgLcgTiling", "4u * t.h", ["db"]))
        if dtype in COPY_DTYPES:
            parts.append(copy_source(f"fg_lcg_{dtype}_copy", dtype))
        out[dtype] = ("\n".join(parts), sizes)
    return out


def write(root, banner: str = "") -> list[str]:
    """generated/ascend/lstm_cell_backward/: op_kernel/ holds the kernels (one file per dtype), the
    tiling header and the per-variant UB sizes; op_host/ the aclnn API (header and implementation)
    and the kernels' launch declarations; CMakeLists.txt builds both with CANN.
    generated/ascend/layer_norm_backward/: the LayerNorm backward's package, in the same form
    (ln_write)."""
    from pathlib import Path
    base = Path(root) / "lstm_cell_backward" / "op_kernel"
    base.mkdir(parents=True, exist_ok=True)
    written = []
    sizes_h = ["// generated by fusedgrad: UB use of each kernel variant (for the host's tiling).",
               "#ifndef FG_LSTM_CELL_BACKWARD_SIZES_H", "#define FG_LSTM_CELL_BACKWARD_SIZES_H", ""]
    for dtype, (text, sizes) in kernels().items():
        fname = f"fg_lstm_cell_backward_{dtype}.cpp"
        (base / fname).write_text(banner + text)
        written.append(f"lstm_cell_backward/op_kernel/{fname}")
        for tag, (nfloat, nstreams) in sizes.items():
            sizes_h.append(f"#define FG_LCG_{dtype.upper()}_{tag.upper()}_SLOTS {nfloat}u")
            sizes_h.append(f"#define FG_LCG_{dtype.upper()}_{tag.upper()}_STREAMS {nstreams}u")
    sizes_h += ["", "#endif", ""]
    host = Path(root) / "lstm_cell_backward" / "op_host"
    (host / "aclnnop").mkdir(parents=True, exist_ok=True)
    for rel, text in (("aclnnop/aclnn_thnn_fused_lstm_cell_backward.h", ACLNN_H),
                      ("aclnn_thnn_fused_lstm_cell_backward.cpp", host_source()),
                      ("fg_lstm_cell_backward_launch.h", launch_header())):
        (host / rel).write_text(banner + text)
        written.append(f"lstm_cell_backward/op_host/{rel}")
    (base / "fg_lstm_cell_backward_tiling.h").write_text(banner + _with_copy_params(TILING_H))
    (base / "fg_lstm_cell_backward_sizes.h").write_text(banner + "\n".join(sizes_h))
    written += ["lstm_cell_backward/op_kernel/fg_lstm_cell_backward_tiling.h",
                "lstm_cell_backward/op_kernel/fg_lstm_cell_backward_sizes.h",
                _write_cmake(root, "lstm_cell_backward", "aclnn_thnn_fused_lstm_cell_backward.cpp",
                             "aclnn_thnn_fused_lstm_cell_backward.h", banner)]
    return written + ln_write(root, banner)


# ---------------------------------------------------------------------------- aclnn host code

ACLNN_H = """// generated by fusedgrad: the aclnn API of the fused LSTM-cell backward (CANN ThnnFusedLstmCellGrad).
#ifndef ACLNN_THNN_FUSED_LSTM_CELL_BACKWARD_H_
#define ACLNN_THNN_FUSED_LSTM_CELL_BACKWARD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* First phase: check the tensors and plan the work.  gradHyOptional and gradCOptional may be NULL
 * (an exact zero).  cx, cy, gradHyOptional, gradCOptional, gradCxOut: [N, H]; storage (gates i, f,
 * g, o) and gradGatesOut: [N, 4H]; gradBiasOut: [4H] (used when hasBias).  FLOAT, FLOAT16 or BFLOAT16, all
 * alike; rows may have any stride, elements within a row must be adjacent.
 * ACLNN_ERR_PARAM_NULLPTR: a required tensor (or workspaceSize/executor) is NULL;
 * ACLNN_ERR_PARAM_INVALID: a data type, a shape or a layout that does not fit. */
aclnnStatus aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(const aclTensor *gradHyOptional, const aclTensor *gradCOptional,
                                                           const aclTensor *cx, const aclTensor *cy,
                                                           const aclTensor *storage, bool hasBias,
                                                           aclTensor *gradGatesOut, aclTensor *gradCxOut,
                                                           aclTensor *gradBiasOut, uint64_t *workspaceSize,
                                                           aclOpExecutor **executor);

/* Second phase: run the planned work on stream (the executor is used up). */
aclnnStatus aclnnThnnFusedLstmCellBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                           aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif
"""

KERNEL_ARGS = "void *dhy, void *dc, void *cx, void *cy, void *storage, void *dgates, void *dcx, void *db, void *workspace, void *tiling"


HOST_COMMON = """struct View {
    int64_t dims[8], strides[8], offset;
    uint64_t n;
    aclDataType dtype;
    char *addr;
};

aclnnStatus view_of(const aclTensor *t, View *v) {
    int64_t *dims = nullptr, *strides = nullptr;
    uint64_t nd = 0, ns = 0;
    void *addr = nullptr;
    aclnnStatus s = aclGetViewShape(t, &dims, &nd);
    if (s == ACLNN_SUCCESS) s = aclGetViewStrides(t, &strides, &ns);
    if (s == ACLNN_SUCCESS) s = aclGetViewOffset(t, &v->offset);
    if (s == ACLNN_SUCCESS) s = aclGetDataType(t, &v->dtype);
    if (s == ACLNN_SUCCESS) s = aclGetRawTensorAddr(t, &addr);
    if (s == ACLNN_SUCCESS && (nd > FG_COPY_MAX_DIMS || ns != nd)) s = ACLNN_ERR_PARAM_INVALID;
    if (s == ACLNN_SUCCESS) {
        v->n = nd;
        for (uint64_t i = 0; i < nd; ++i) {
            v->dims[i] = dims[i];
            v->strides[i] = strides[i];
            if (dims[i] < 0 || dims[i] > 0x7fffffff) s = ACLNN_ERR_PARAM_INVALID;
        }
    }
    delete[] dims;
    delete[] strides;
    v->addr = (char *)addr;
    return s;
}

size_t elem_bytes(aclDataType dt) { return dt == ACL_FLOAT16 || dt == ACL_BF16 ? 2u : 4u; }

bool same_dims(const View &v, const int64_t *dims, uint64_t n) {
    if (v.n != n) return false;
    for (uint64_t i = 0; i < n; ++i) {
        if (v.dims[i] != dims[i]) return false;
    }
    return true;
}

// the view's elements all at different addresses (dimensions of size > 1 by stride: each stride
// beyond the reach of the smaller ones)
bool apart(const View &v) {
    int64_t d[8], st[8];
    uint64_t k = 0;
    for (uint64_t i = 0; i < v.n; ++i) {
        if (v.dims[i] == 0) return true;  // no elements
        if (v.dims[i] == 1) continue;
        uint64_t j = k++;
        for (; j > 0 && st[j - 1] > v.strides[i]; --j) {
            d[j] = d[j - 1];
            st[j] = st[j - 1];
        }
        d[j] = v.dims[i];
        st[j] = v.strides[i];
    }
    int64_t reach = 0;  // the farthest element of the dimensions so far
    for (uint64_t j = 0; j < k; ++j) {
        if (st[j] <= reach) return false;
        reach += st[j] * (d[j] - 1);
    }
    return true;
}

enum { FG_BAD = 0, FG_ROWS = 1, FG_STRIDED = 2 };

// The view as rows (the dimensions before `split`) of adjacent elements (those from `split` on).
// FG_ROWS: row r starts r * *s0 elements in; FG_STRIDED: any other non-negative strides, gathered
// into (or, for an output whose elements are all apart, scattered from) a contiguous copy in the
// workspace; FG_BAD: a negative stride, or an output's elements on top of each other.
int plan(const View &v, uint64_t split, bool output, int64_t *s0) {
    int64_t rows = 1, cols = 1, expect = 1;
    bool dense = true, uniform = true, first = true;
    for (uint64_t i = 0; i < v.n; ++i) {
        if (v.strides[i] < 0) return FG_BAD;
        (i < split ? rows : cols) *= v.dims[i];
    }
    for (uint64_t i = v.n; i-- > split;) {  // the row's own dimensions, innermost first
        if (v.dims[i] == 1) continue;         // the stride of a dimension of size 1 means nothing
        dense = dense && v.strides[i] == expect;
        expect *= v.dims[i];
    }
    *s0 = cols;
    for (uint64_t i = split; i-- > 0;) {  // the rows' dimensions: one stride between rows
        if (v.dims[i] == 1) continue;
        if (first) *s0 = v.strides[i];
        uniform = uniform && (first || v.strides[i] == expect);
        expect = v.strides[i] * v.dims[i];
        first = false;
    }
    if (rows == 0 || cols == 0) return FG_ROWS;  // nothing to read or write
    if (dense && uniform && *s0 <= 0x7fffffff && (!output || rows == 1 || *s0 >= cols)) return FG_ROWS;
    if (output && !apart(v)) return FG_BAD;
    return FG_STRIDED;
}

// the copy between the view and a contiguous one of its shape (from the view for an input).  The
// dimensions go in order of destination stride, largest first: the copy kernel writes each line's
// span of the destination whole, and so the spans of different lines must not overlap.
struct FgCopyParams copy_params(const View &v, bool output) {
    struct FgCopyParams p;
    memset(&p, 0, sizeof(p));
    p.ndim = v.n ? (uint32_t)v.n : 1u;
    p.dims[0] = 1u;
    p.lines = 1u;
    int64_t dense = 1;
    for (uint64_t i = v.n; i-- > 0;) {
        p.dims[i] = (uint32_t)v.dims[i];
        (output ? p.src : p.dst)[i] = dense;
        (output ? p.dst : p.src)[i] = v.strides[i];
        dense *= v.dims[i];
    }
    // insertion sort, stable; dimensions of size 1 outermost, whatever their stride
    auto key = [&p](uint32_t k) { return p.dims[k] == 1u ? INT64_MAX : p.dst[k]; };
    for (uint32_t i = 1; i < p.ndim; ++i) {
        for (uint32_t j = i; j > 0 && key(j - 1) < key(j); --j) {
            uint32_t dim = p.dims[j];
            int64_t src = p.src[j], dst = p.dst[j];
            p.dims[j] = p.dims[j - 1], p.src[j] = p.src[j - 1], p.dst[j] = p.dst[j - 1];
            p.dims[j - 1] = dim, p.src[j - 1] = src, p.dst[j - 1] = dst;
        }
    }
    for (uint32_t i = 0; i + 1 < p.ndim; ++i) p.lines *= p.dims[i];
    return p;
}

uint64_t copy_elems(const struct FgCopyParams &p) { return (uint64_t)p.lines * p.dims[p.ndim - 1]; }

uint32_t copy_blocks(const struct FgCopyParams &p) { return p.lines < FG_ASCEND_VECTOR_CORES ? p.lines : FG_ASCEND_VECTOR_CORES; }

void *data(const View &v) { return v.addr + v.offset * (int64_t)elem_bytes(v.dtype); }

// a tensor the kernels do not read in place: its contiguous copy at workspace offset `at`
struct FgCopy {
    int used, output;
    aclDataType dtype;
    void *user;
    struct FgCopyParams params;  // user -> copy for an input, copy -> user for an output
    uint64_t at;
};

// tensor v (at `user`) given its contiguous copy at workspace offset `at`; returns the next free offset
uint64_t add_copy(FgCopy &c, const View &v, void *user, bool output, uint64_t at) {
    c.used = 1;
    c.output = output;
    c.dtype = v.dtype;
    c.user = user;
    c.at = at;
    c.params = copy_params(v, output);
    return at + (copy_elems(c.params) * elem_bytes(v.dtype) + 31u) / 32u * 32u;
}

typedef uint32_t (*fg_copy_launch)(uint32_t, aclrtStream, void *, void *, void *);

// The second phase's start: the executor checked against the workspace and the tiling copied to the
// workspace's start.  An executor refused here is used up too.
aclnnStatus upload(void *workspace, uint64_t size, uint64_t needed, const void *tiling, size_t bytes,
                   aclrtStream stream) {
    if (size < needed) return ACLNN_ERR_PARAM_INVALID;
    return aclrtMemcpyAsync(workspace, FG_TILING_BYTES, tiling, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream) == ACL_SUCCESS
               ? ACLNN_SUCCESS
               : ACLNN_ERR_INNER;
}

// ptr[k]: tensor k as the kernels see it (its copy in the workspace where it has one); the copies'
// parameters go to the workspace and the inputs with a copy are gathered into it (copy2 / copy4:
// the copy kernels for 2- and 4-byte elements)
aclnnStatus gather(const FgCopy *copy, void *const *user, int n, char *ws, aclrtStream stream, fg_copy_launch copy2,
                   fg_copy_launch copy4, void **ptr) {
    aclnnStatus s = ACLNN_SUCCESS;
    for (int k = 0; k < n; ++k) {
        const FgCopy &c = copy[k];
        ptr[k] = c.used ? (void *)(ws + c.at) : user[k];
        if (s != ACLNN_SUCCESS || !c.used || copy_elems(c.params) == 0) continue;
        char *params = ws + FG_TILING_BYTES + (uint64_t)k * FG_COPY_PARAMS_BYTES;
        if (aclrtMemcpyAsync(params, FG_COPY_PARAMS_BYTES, &c.params, sizeof(c.params), ACL_MEMCPY_HOST_TO_DEVICE,
                             stream) != ACL_SUCCESS) {
            s = ACLNN_ERR_INNER;
        } else if (!c.output &&
                   (elem_bytes(c.dtype) == 2u ? copy2 : copy4)(copy_blocks(c.params), stream, c.user, ptr[k], params) != 0) {
            s = ACLNN_ERR_INNER;
        }
    }
    return s;
}

// the outputs with a copy scattered from it to the user's tensor
aclnnStatus scatter(const FgCopy *copy, void *const *ptr, int n, char *ws, aclrtStream stream, fg_copy_launch copy2,
                    fg_copy_launch copy4) {
    for (int k = 0; k < n; ++k) {
        const FgCopy &c = copy[k];
        if (!c.used || !c.output || copy_elems(c.params) == 0) continue;
        char *params = ws + FG_TILING_BYTES + (uint64_t)k * FG_COPY_PARAMS_BYTES;
        if ((elem_bytes(c.dtype) == 2u ? copy2 : copy4)(copy_blocks(c.params), stream, ptr[k], c.user, params) != 0) {
            return ACLNN_ERR_INNER;
        }
    }
    return ACLNN_SUCCESS;
}
"""


def _launch_header(guard: str, decls: list[str]) -> str:
    """The launch functions CANN's AscendC build makes for the kernels, declared for the host code;
    where that build's own headers (aclrtlaunch_<kernel>.h) are on the include path they come first,
    so a declaration that does not match theirs fails to compile."""
    names = [d.split("aclrtlaunch_", 1)[1].split("(", 1)[0] for d in decls]
    lines = ["// generated by fusedgrad: the launch functions CANN's AscendC build makes for the kernels",
             "// (aclrtlaunch_<kernel>.h), declared for the host code.",
             f"#ifndef {guard}", f"#define {guard}", '#include <stdint.h>', '#include "acl/acl.h"', "",
             "#if defined(__has_include)"]
    for n in names:
        lines += [f'#if __has_include("aclrtlaunch_{n}.h")', f'#include "aclrtlaunch_{n}.h"', "#endif"]
    lines += ["#endif", "", '#ifdef __cplusplus', 'extern "C" {', "#endif", *decls,
              "#ifdef __cplusplus", "}", "#endif", "#endif", ""]
    return "\n".join(lines)


def launch_header() -> str:
    decls = []
    for dtype in DTYPES:
        for v in VARIANTS:
            decls.append(f"uint32_t aclrtlaunch_fg_lcg_{dtype}_{v.tag}(uint32_t blockDim, aclrtStream stream, {KERNEL_ARGS});")
        decls.append(f"uint32_t aclrtlaunch_fg_lcg_{dtype}_bias_reduce(uint32_t blockDim, aclrtStream stream, "
                     "void *workspace, void *db, void *tiling);")
    for dtype in COPY_DTYPES:
        decls.append(f"uint32_t aclrtlaunch_fg_lcg_{dtype}_copy(uint32_t blockDim, aclrtStream stream, void *src, "
                     "void *dst, void *params);")
    return _launch_header("FG_LSTM_CELL_BACKWARD_LAUNCH_H", decls)


def _host_preamble(op: str, header: str, tiling: str, extra: str = "") -> str:
    """The start of a package's host code: the includes, the part's sizes and the workspace layout."""
    return f"""// generated by fusedgrad: the host side of the AscendC kernels in op_kernel/ (two-phase aclnn API:
// check and plan, then run on a stream).
#include <stdint.h>
#include <string.h>

#include <new>

#include "acl/acl.h"
#include "aclnn/aclnn_base.h"
#include "aclnnop/{header}"
#include "fg_{op}_launch.h"
#include "fg_{op}_sizes.h"
#include "fg_{op}_tiling.h"
{extra}
#ifndef FG_ASCEND_VECTOR_CORES
#define FG_ASCEND_VECTOR_CORES 40u  // vector cores of an Ascend 910B
#endif
#ifndef FG_ASCEND_UB_BYTES
#define FG_ASCEND_UB_BYTES (192u * 1024u - 8u * 1024u)  // a vector core's UB, less what the runtime keeps
#endif
#define FG_TILING_BYTES 128u  // the workspace: the tiling, the copies' parameters, the partial sums of
#define FG_COPY_PARAMS_BYTES 192u  // the deterministic reductions, and the contiguous copies
static_assert(sizeof(struct {tiling}) <= FG_TILING_BYTES, "the tiling outgrew its place in the workspace");
static_assert(sizeof(struct FgCopyParams) <= FG_COPY_PARAMS_BYTES, "the copy parameters outgrew their place");
"""


def host_source() -> str:
    cases = []
    for code, dtype in enumerate(DTYPES):
        for v in VARIANTS:
            key = (int(v.has_grad_hy) << 2) | (int(v.has_grad_cy) << 1) | int(v.has_bias)
            u = f"FG_LCG_{dtype.upper()}_{v.tag.upper()}"
            cases.append(f"    case {code * 8 + key}: *slots = {u}_SLOTS; *streams = {u}_STREAMS; "
                         f"return aclrtlaunch_fg_lcg_{dtype}_{v.tag};")
    reduces = "\n".join(f"    case {code}: return aclrtlaunch_fg_lcg_{d}_bias_reduce;" for code, d in enumerate(DTYPES))
    codes = " : ".join(f"dt == {ACL_DTYPE[d]} ? {code}" for code, d in enumerate(DTYPES)) + " : -1"
    nl = "\n"
    return _host_preamble("lstm_cell_backward", "aclnn_thnn_fused_lstm_cell_backward.h", "FgLcgTiling") + f"""
typedef uint32_t (*fg_main_launch)(uint32_t, aclrtStream, void *, void *, void *, void *, void *, void *, void *,
                                   void *, void *, void *);

namespace {{

{HOST_COMMON}
}}  // namespace

struct aclOpExecutor {{
    struct FgLcgTiling tiling;
    int dtype, variant, empty;  // dtype: the kernels' type (0 float32, 1 float16, 2 bfloat16)
    void *ptr[8];  // dhy, dc, cx, cy, storage, dgates, dcx, db as the kernels see them
    struct FgCopy copy[8];
    uint64_t workspace;
}};

namespace {{

fg_main_launch main_kernel(int dtype, int variant, uint32_t *slots, uint32_t *streams) {{
    switch (dtype * 8 + variant) {{
{nl.join(cases)}
    default: return nullptr;
    }}
}}

typedef uint32_t (*fg_reduce_launch)(uint32_t, aclrtStream, void *, void *, void *);

fg_reduce_launch reduce_kernel(int dtype) {{
    switch (dtype) {{
{reduces}
    default: return nullptr;
    }}
}}

}}  // namespace

extern "C" aclnnStatus aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(
    const aclTensor *gradHyOptional, const aclTensor *gradCOptional, const aclTensor *cx, const aclTensor *cy,
    const aclTensor *storage, bool hasBias, aclTensor *gradGatesOut, aclTensor *gradCxOut, aclTensor *gradBiasOut,
    uint64_t *workspaceSize, aclOpExecutor **executor) {{
    if (!cx || !cy || !storage || !gradGatesOut || !gradCxOut || (hasBias && !gradBiasOut) || !workspaceSize ||
        !executor) {{
        return ACLNN_ERR_PARAM_NULLPTR;
    }}
    View vcx, vcy, vst, vg, vdcx, vhy, vdc, vdb;
    aclnnStatus s = view_of(cx, &vcx);
    if (s == ACLNN_SUCCESS) s = view_of(cy, &vcy);
    if (s == ACLNN_SUCCESS) s = view_of(storage, &vst);
    if (s == ACLNN_SUCCESS) s = view_of(gradGatesOut, &vg);
    if (s == ACLNN_SUCCESS) s = view_of(gradCxOut, &vdcx);
    if (s == ACLNN_SUCCESS && gradHyOptional) s = view_of(gradHyOptional, &vhy);
    if (s == ACLNN_SUCCESS && gradCOptional) s = view_of(gradCOptional, &vdc);
    if (s == ACLNN_SUCCESS && hasBias) s = view_of(gradBiasOut, &vdb);
    if (s != ACLNN_SUCCESS) return s;
    const aclDataType dt = vcx.dtype;
    const int code = {codes};  // the kernels' type
    if (code < 0 || vcx.n != 2) return ACLNN_ERR_PARAM_INVALID;
    const int64_t N = vcx.dims[0], H = vcx.dims[1];
    if (N < 0 || H < 0 || N > 0x7fffffff || 4 * H > 0x7fffffff) return ACLNN_ERR_PARAM_INVALID;
    // dhy, dc, cx, cy, storage, dgates, dcx, db
    const View *views[8] = {{gradHyOptional ? &vhy : nullptr, gradCOptional ? &vdc : nullptr, &vcx, &vcy, &vst, &vg,
                            &vdcx, hasBias ? &vdb : nullptr}};
    const int64_t cols[8] = {{H, H, H, H, 4 * H, 4 * H, H, 4 * H}};
    int kinds[8];
    int64_t s0[8];
    for (int k = 0; k < 8; ++k) {{
        if (!views[k]) {{
            kinds[k] = FG_ROWS;
            continue;
        }}
        const int64_t shape[2] = {{N, cols[k]}};
        const bool fits = views[k]->dtype == dt && (k == 7 ? same_dims(*views[k], shape + 1, 1) : same_dims(*views[k], shape, 2));
        kinds[k] = fits ? plan(*views[k], k == 7 ? 0u : 1u, k >= 5, &s0[k]) : FG_BAD;
        if (kinds[k] == FG_BAD) return ACLNN_ERR_PARAM_INVALID;
    }}
    aclOpExecutor *e = new (std::nothrow) aclOpExecutor;
    if (!e) return ACLNN_ERR_INNER;
    memset(e, 0, sizeof(*e));
    e->dtype = code;
    e->variant = ((gradHyOptional != nullptr) << 2) | ((gradCOptional != nullptr) << 1) | (hasBias ? 1 : 0);
    e->empty = N == 0 || H == 0;
    uint32_t slots = 0, streams = 0;
    main_kernel(e->dtype, e->variant, &slots, &streams);
    if (!e->empty) {{
        uint32_t per = fg_lcg_ub_per_elem((uint32_t)elem_bytes(dt), streams, slots, hasBias);
        e->tiling = fg_lcg_tiling((uint32_t)N, (uint32_t)H, per, FG_ASCEND_UB_BYTES, FG_ASCEND_VECTOR_CORES);
    }} else {{
        e->tiling.n = (uint32_t)N;
        e->tiling.h = (uint32_t)H;
        e->tiling.tile = 16u;
    }}
    uint64_t at = FG_TILING_BYTES + 8u * FG_COPY_PARAMS_BYTES +
                  (hasBias ? (uint64_t)e->tiling.groups * 4u * (uint64_t)H * 4u : 0u);
    uint32_t *row_strides[7] = {{&e->tiling.s_dhy, &e->tiling.s_dc, &e->tiling.s_cx, &e->tiling.s_cy,
                                &e->tiling.s_storage, &e->tiling.s_dgates, &e->tiling.s_dcx}};
    for (int k = 0; k < 8; ++k) {{
        e->ptr[k] = views[k] ? data(*views[k]) : nullptr;
        if (k < 7) *row_strides[k] = (uint32_t)cols[k];
        if (!views[k] || (e->empty && k != 7)) continue;  // with no rows, the bias is still written (zeros)
        if (kinds[k] == FG_ROWS) {{
            if (k < 7) *row_strides[k] = (uint32_t)s0[k];
            continue;
        }}
        at = add_copy(e->copy[k], *views[k], e->ptr[k], k >= 5, at);  // the kernels use a contiguous copy
    }}
    e->workspace = at;
    *workspaceSize = e->workspace;
    *executor = e;
    return ACLNN_SUCCESS;
}}

extern "C" aclnnStatus aclnnThnnFusedLstmCellBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                      aclrtStream stream) {{
    if (!executor || (!workspace && executor->workspace)) return ACLNN_ERR_PARAM_NULLPTR;
    aclOpExecutor *e = executor;
    char *ws = (char *)workspace;
    const fg_copy_launch copy2 = aclrtlaunch_fg_lcg_float16_copy, copy4 = aclrtlaunch_fg_lcg_float32_copy;
    void *ptr[8];
    aclnnStatus s = upload(ws, workspaceSize, e->workspace, &e->tiling, sizeof(e->tiling), stream);
    if (s == ACLNN_SUCCESS) s = gather(e->copy, e->ptr, 8, ws, stream, copy2, copy4, ptr);
    uint32_t slots = 0, streams = 0;
    fg_main_launch main = main_kernel(e->dtype, e->variant, &slots, &streams);
    if (s == ACLNN_SUCCESS && !e->empty &&
        main(e->tiling.cores, stream, ptr[0], ptr[1], ptr[2], ptr[3], ptr[4], ptr[5], ptr[6], ptr[7],
             ws + FG_TILING_BYTES + 8u * FG_COPY_PARAMS_BYTES, ws) != 0) {{
        s = ACLNN_ERR_INNER;
    }}
    if (s == ACLNN_SUCCESS && (e->variant & 1) && e->tiling.h > 0) {{  // grad_bias, zeros when N == 0
        uint32_t total = 4u * e->tiling.h, blocks = (total + e->tiling.tile - 1u) / e->tiling.tile;
        blocks = blocks < FG_ASCEND_VECTOR_CORES ? blocks : FG_ASCEND_VECTOR_CORES;
        if (reduce_kernel(e->dtype)(blocks, stream, ws + FG_TILING_BYTES + 8u * FG_COPY_PARAMS_BYTES, ptr[7], ws) != 0) {{
            s = ACLNN_ERR_INNER;
        }}
    }}
    if (s == ACLNN_SUCCESS) s = scatter(e->copy, ptr, 8, ws, stream, copy2, copy4);
    delete e;
    return s;
}}
"""


# ---------------------------------------------------------------------------- LayerNorm backward

def _unwrap(e):
    """The tensor behind a (cast of a) load."""
    while type(e).__name__ == "Cast":
        e = e.value
    return e.args[0]


def _reduce_src(tensor):
    return tensor.op.body[0].source[0]


def _find_load(e, name):
    kind = type(e).__name__
    if kind == "Call" and str(e.op.name).endswith("tensor_load"):
        if e.args[0].name == name:
            return e.args[0]
        return None
    for f in ("a", "b", "value"):
        c = getattr(e, f, None)
        if c is not None and hasattr(c, "same_as"):
            got = _find_load(c, name)
            if got is not None:
                return got
    for c in list(getattr(e, "args", None) or []):
        if hasattr(c, "same_as") and type(c).__name__ != "Tensor":
            got = _find_load(c, name)
            if got is not None:
                return got
    return None


LN_SCALARS = {"rstd": "rstd", "sum_dyg": "s1", "sum_dyg_xhat": "s2", "mean": "mean_m", "eps": "t_.eps", "D": "t_.d"}


def ln_programs(dtype: str):
    """Pass 1 (the row sums' lane values, dgamma's and dbeta's terms) and pass 2 (dx) of a row tile,
    from te_defs/layer_norm_backward.py: [(name, value)] each."""
    from ..te_defs import layer_norm_backward as ln_def
    x, dy, mean, var, gamma, eps, dx, dgamma, dbeta = ln_def.compute(dtype)
    body = dx.op.body[0]
    lanes = []
    for name in ("sum_dyg", "sum_dyg_xhat"):
        total = _find_load(body, name)
        lane_t = _unwrap(_reduce_src(total))
        lanes.append(_reduce_src(lane_t).args[1])  # if_then_else(d < D, value, 0): the value
    p1 = Lowerer(scalars=LN_SCALARS)
    outs1 = [("lanes1", p1.value(lanes[0])), ("lanes2", p1.value(lanes[1])),
             ("dgamma", p1.value(_reduce_src(_unwrap(dgamma.op.body[0])))),
             ("dbeta", p1.value(_reduce_src(_unwrap(dbeta.op.body[0]))))]
    p2 = Lowerer(scalars=LN_SCALARS)
    outs2 = [("dx", p2.value(body))]
    return (p1.p, outs1), (p2.p, outs2)


def _print_program(w, prog, outs, dtype, name_of, alloc=None, indent="        "):
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


LN_TILING_H = """// generated by fusedgrad: the LayerNorm backward's tiling, shared by the host and the kernels.
#ifndef FG_LAYER_NORM_BACKWARD_TILING_H
#define FG_LAYER_NORM_BACKWARD_TILING_H
#include <stdint.h>

#define FG_LNG_GROUP 8u  // rows per dgamma/dbeta partial sum
#define FG_LNG_SMALL (FG_LNG_GROUP * 32u + 32u)  // floats: a group's row-sum lanes, and a scratch

// what a launch computes (FgLngTiling.flags)
#define FG_LNG_RSTD 1u   // the second statistic is rstd (else the variance: rstd = 1 / sqrt(var + eps))
#define FG_LNG_GAMMA 2u  // gamma is given (else all ones)
#define FG_LNG_DX 4u     // dx is written
#define FG_LNG_DGB 8u    // dgamma's and dbeta's partial sums are written

struct FgLngTiling {
    uint32_t m, d;            // rows, normalised size
    uint32_t cores, rows_per_core;
    uint32_t group, groups;   // rows per partial sum; core b takes whole groups
    uint32_t tile;            // elements of a row per UB tile (a multiple of 16)
    uint32_t s_x, s_dy, s_dx; // row strides, in elements
    uint32_t s_mean, s_stat;  // strides of the per-row statistics (mean, and var or rstd), in elements
    uint32_t flags;
    float eps;
};

static inline struct FgLngTiling fg_lng_tiling(uint32_t m, uint32_t d, uint32_t per_elem, uint32_t ub_bytes,
                                               uint32_t max_cores, float eps) {
    struct FgLngTiling t;
    uint32_t tile = (ub_bytes - FG_LNG_SMALL * 4u - 512u) / per_elem / 16u * 16u, d16 = (d + 15u) / 16u * 16u, blocks;
    t.m = m;
    t.d = d;
    t.group = FG_LNG_GROUP;
    t.groups = (m + t.group - 1u) / t.group;
    blocks = t.groups < max_cores ? t.groups : max_cores;
    blocks = blocks ? blocks : 1u;
    t.rows_per_core = (t.groups + blocks - 1u) / blocks * t.group;
    t.cores = m ? (m + t.rows_per_core - 1u) / t.rows_per_core : 0u;
    t.tile = tile < d16 ? tile : d16;
    t.s_x = t.s_dy = t.s_dx = d;
    t.s_mean = t.s_stat = 1u;
    t.flags = FG_LNG_GAMMA | FG_LNG_DX | FG_LNG_DGB;
    t.eps = eps;
    return t;
}
#endif
"""


# the kernels' entry points per input dtype: (name suffix, type of mean and var/rstd); with fp16 input
# the statistics may be fp16 or fp32
LN_STATS = {"float32": [("", "float")], "float16": [("", "half"), ("_fp32stats", "float")],
            "bfloat16": [("", "bfloat16_t"), ("_fp32stats", "float")]}



def ln_kernel_source(dtype: str) -> tuple[str, int]:
    """(C++ of the LayerNorm backward kernels for ``dtype``, UB bytes per tile element).

    A core takes whole 8-row groups.  For each group, pass 1 walks the row in UB tiles, and within
    a tile the group's rows in order: gamma's tile is read once for the group, each row adds its
    tile to its own 16 lanes of the row sums, and dgamma's and dbeta's terms are summed over the
    group's rows in UB and written to the workspace once per tile.  Pass 2 does the same walk for
    dx; when a row fits one tile, its dx follows its pass 1 while the row is still in UB (x and dy
    read once).  Each row's lanes still take the tiles in order and each partial sum the rows in
    order, so the bits do not depend on the tile size or the core count."""
    t = CTYPE[dtype]
    (p1, outs1), (p2, outs2) = ln_programs(dtype)
    L = []
    w = L.append
    w("template <typename S>  // the statistics' type")
    w(f"class FgLng_{dtype} {{")
    w("  public:")
    w("    __aicore__ inline void Init(GM_ADDR x, GM_ADDR dy, GM_ADDR mean, GM_ADDR stat, GM_ADDR gamma, GM_ADDR dx,")
    w("                                GM_ADDR workspace, const FgLngTiling &t) {")
    w("        t_ = t;")
    w(f"        g_x.SetGlobalBuffer((__gm__ {t} *)x, (uint64_t)(t.m - 1) * t.s_x + t.d);")
    w(f"        g_dy.SetGlobalBuffer((__gm__ {t} *)dy, (uint64_t)(t.m - 1) * t.s_dy + t.d);")
    w(f"        g_dx.SetGlobalBuffer((__gm__ {t} *)dx, (uint64_t)(t.m - 1) * t.s_dx + t.d);")
    w("        g_mean.SetGlobalBuffer((__gm__ S *)mean, (uint64_t)(t.m - 1) * t.s_mean + 1u);")
    w("        g_stat.SetGlobalBuffer((__gm__ S *)stat, (uint64_t)(t.m - 1) * t.s_stat + 1u);")
    w(f"        g_gamma.SetGlobalBuffer((__gm__ {t} *)gamma, t.d);")
    w("        g_ws.SetGlobalBuffer((__gm__ float *)workspace, (uint64_t)t.groups * 2u * t.d);")
    w(f"        pipe_.InitBuffer(in_x, 2, t.tile * sizeof({t}));")
    w(f"        pipe_.InitBuffer(in_dy, 2, t.tile * sizeof({t}));")
    w(f"        pipe_.InitBuffer(out_dx, 2, t.tile * sizeof({t}));")
    w(f"        pipe_.InitBuffer(gam_, t.tile * sizeof({t}));")
    w("        pipe_.InitBuffer(tmp_, FG_LNG_SLOTS * t.tile * sizeof(float));")
    w("        pipe_.InitBuffer(part_, 2u * t.tile * sizeof(float));  // dgamma's and dbeta's group sums")
    w("        pipe_.InitBuffer(small_, FG_LNG_SMALL * sizeof(float));  // the rows' lanes, the rstd scratch")
    w("    }")
    w("")
    w("    __aicore__ inline void Process() {")
    w("        const uint32_t row0 = (uint32_t)GetBlockIdx() * t_.rows_per_core;")
    w("        const uint32_t row1 = row0 + t_.rows_per_core < t_.m ? row0 + t_.rows_per_core : t_.m;")
    w("        LocalTensor<float> small = small_.Get<float>(), sc = small[FG_LNG_GROUP * 32u];")
    w("        float mean_g[FG_LNG_GROUP], rstd_g[FG_LNG_GROUP], s1_g[FG_LNG_GROUP], s2_g[FG_LNG_GROUP];")
    w("        for (uint32_t g0 = row0; g0 < row1; g0 += t_.group) {")
    w("            const uint32_t rows = (g0 + t_.group < row1 ? g0 + t_.group : row1) - g0;")
    w("            for (uint32_t i = 0; i < rows; ++i) {")
    w("                mean_g[i] = static_cast<float>(g_mean.GetValue((uint64_t)(g0 + i) * t_.s_mean));")
    w("                const float stat = static_cast<float>(g_stat.GetValue((uint64_t)(g0 + i) * t_.s_stat));")
    w("                rstd_g[i] = stat;")
    w("                if (!(t_.flags & FG_LNG_RSTD)) {")
    w("                    // rstd = 1 / sqrt(var + eps), on the vector unit (the scalar unit has no sqrt)")
    w("                    Duplicate(sc, stat + t_.eps, 16);")
    w("                    Sqrt(sc, sc, 16);")
    w("                    Duplicate(sc[16], 1.0f, 16);")
    w("                    Div(sc, sc[16], sc, 16);")
    w("                    PipeBarrier<PIPE_ALL>();")
    w("                    rstd_g[i] = sc.GetValue(0);")
    w("                }")
    w("            }")
    w("            Duplicate(small, 0.0f, (int32_t)(rows * 32u));  // the lanes of the group's rows")
    w("            const bool one_tile = t_.d <= t_.tile && (t_.flags & FG_LNG_DX);")
    w("            for (uint32_t off = 0; off < t_.d; off += t_.tile) {")
    w("                const uint32_t len = t_.d - off < t_.tile ? t_.d - off : t_.tile;")
    w("                LoadGamma(off, len);")
    w("                for (uint32_t i = 0; i < rows; ++i) {")
    w("                    CopyIn(g0 + i, off, len);")
    w(f"                    LocalTensor<{t}> x_x = in_x.DeQue<{t}>(), x_dy = in_dy.DeQue<{t}>();")
    w("                    Pass1(x_x, x_dy, len, i, mean_g[i], rstd_g[i]);")
    w("                    if (one_tile) {  // the whole row is in UB: dx now, without reading it again")
    w("                        PipeBarrier<PIPE_ALL>();")
    w("                        LaneSums(i, s1_g, s2_g);")
    w("                        Pass2(x_x, x_dy, len, mean_g[i], rstd_g[i], s1_g[i], s2_g[i]);")
    w("                        CopyOut(g0 + i, off, len);")
    w("                    }")
    w("                    in_x.FreeTensor(x_x);")
    w("                    in_dy.FreeTensor(x_dy);")
    w("                }")
    w("                if (t_.flags & FG_LNG_DGB) {  // the group's sums of this tile, written once")
    w("                    LocalTensor<float> part = part_.Get<float>();")
    w("                    DataCopyExtParams q{1, len * (uint32_t)sizeof(float), 0, 0, 0};")
    w("                    PipeBarrier<PIPE_ALL>();")
    w("                    for (uint32_t k = 0; k < 2u; ++k) {")
    w("                        DataCopyPad(g_ws[((uint64_t)(g0 / t_.group) * 2u + k) * t_.d + off], part[k * t_.tile], q);")
    w("                    }")
    w("                    PipeBarrier<PIPE_ALL>();")
    w("                }")
    w("            }")
    w("            if (!(t_.flags & FG_LNG_DX) || one_tile) continue;")
    w("            PipeBarrier<PIPE_ALL>();")
    w("            for (uint32_t i = 0; i < rows; ++i) LaneSums(i, s1_g, s2_g);")
    w("            for (uint32_t off = 0; off < t_.d; off += t_.tile) {")
    w("                const uint32_t len = t_.d - off < t_.tile ? t_.d - off : t_.tile;")
    w("                LoadGamma(off, len);")
    w("                for (uint32_t i = 0; i < rows; ++i) {")
    w("                    CopyIn(g0 + i, off, len);")
    w(f"                    LocalTensor<{t}> x_x = in_x.DeQue<{t}>(), x_dy = in_dy.DeQue<{t}>();")
    w("                    Pass2(x_x, x_dy, len, mean_g[i], rstd_g[i], s1_g[i], s2_g[i]);")
    w("                    in_x.FreeTensor(x_x);")
    w("                    in_dy.FreeTensor(x_dy);")
    w("                    CopyOut(g0 + i, off, len);")
    w("                }")
    w("            }")
    w("        }")
    w("    }")
    w("")
    w("  private:")
    w("    // row i's two row sums: its lanes added in lane order")
    w("    __aicore__ inline void LaneSums(uint32_t i, float *s1_g, float *s2_g) {")
    w("        LocalTensor<float> small = small_.Get<float>();")
    w("        float s1 = 0.0f, s2 = 0.0f;")
    w("        for (uint32_t l = 0; l < 16u; ++l) {")
    w("            s1 += small.GetValue(i * 32u + l);")
    w("            s2 += small.GetValue(i * 32u + 16u + l);")
    w("        }")
    w("        s1_g[i] = s1;")
    w("        s2_g[i] = s2;")
    w("    }")
    w("")
    w("    // gamma's tile, read once for the group's rows (ones without gamma)")
    w("    __aicore__ inline void LoadGamma(uint32_t off, uint32_t len) {")
    w(f"        LocalTensor<{t}> x_gamma = gam_.Get<{t}>();")
    w("        PipeBarrier<PIPE_ALL>();  // the last tile's instructions are done with it")
    w("        if (t_.flags & FG_LNG_GAMMA) {")
    w(f"            DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    w(f"            DataCopyPadExtParams<{t}> pad{{false, 0, 0, {t}()}};")
    w("            DataCopyPad(x_gamma, g_gamma[off], p, pad);")
    w("        } else {")
    w(f"            Duplicate(x_gamma, static_cast<{t}>(1.0f), (int32_t)len);")
    w("        }")
    w("        PipeBarrier<PIPE_ALL>();")
    w("    }")
    w("")
    w("    __aicore__ inline void CopyIn(uint32_t r, uint32_t off, uint32_t len) {")
    w(f"        DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    w(f"        DataCopyPadExtParams<{t}> pad{{false, 0, 0, {t}()}};")
    for nme in ("x", "dy"):
        w(f"        LocalTensor<{t}> x_{nme} = in_{nme}.AllocTensor<{t}>();")
        w(f"        DataCopyPad(x_{nme}, g_{nme}[(uint64_t)r * t_.s_{nme} + off], p, pad);")
        w(f"        in_{nme}.EnQue(x_{nme});")
    w("    }")
    w("")
    nslots = 0
    for which, (prog, outs) in (("Pass1", (p1, outs1)), ("Pass2", (p2, outs2))):
        if which == "Pass1":
            w(f"    __aicore__ inline void Pass1(const LocalTensor<{t}> &x_x, const LocalTensor<{t}> &x_dy, uint32_t len, "
              "uint32_t i, float mean_m, float rstd) {")
        else:
            w(f"    __aicore__ inline void Pass2(const LocalTensor<{t}> &x_x, const LocalTensor<{t}> &x_dy, uint32_t len, "
              "float mean_m, float rstd, float s1, float s2) {")
        w("        const int32_t n = (int32_t)len;")
        w("        LocalTensor<float> tmp = tmp_.Get<float>();")
        w("        (void)mean_m; (void)rstd;")
        w(f"        LocalTensor<{t}> x_gamma = gam_.Get<{t}>();")
        used, ref = _print_program(w, prog, outs, dtype, lambda k: k[0])
        refs = {name: ref(val) for name, val in outs}
        nslots = max(nslots, used)
        if which == "Pass1":
            w("        // row i's lanes: element j of the row goes to lane j % 16, the tiles added in order")
            w("        LocalTensor<float> lanes = small_.Get<float>()[i * 32u];")
            w("        const uint32_t full = len / 16u;")
            w("        for (uint32_t c = 0; c < full; ++c) {")
            w(f"            Add(lanes, lanes, {refs['lanes1']}[c * 16u], 16);")
            w(f"            Add(lanes[16], lanes[16], {refs['lanes2']}[c * 16u], 16);")
            w("        }")
            w("        PipeBarrier<PIPE_ALL>();")
            w("        for (uint32_t j = full * 16u; j < len; ++j) {")
            w(f"            lanes.SetValue(j % 16u, lanes.GetValue(j % 16u) + {refs['lanes1']}.GetValue(j));")
            w(f"            lanes.SetValue(16u + j % 16u, lanes.GetValue(16u + j % 16u) + {refs['lanes2']}.GetValue(j));")
            w("        }")
            w("        PipeBarrier<PIPE_ALL>();")
            w("        // dgamma's and dbeta's terms added to the group's sums in UB (the first row's start them)")
            w("        if (t_.flags & FG_LNG_DGB) {")
            w("            LocalTensor<float> part = part_.Get<float>();")
            for k, key in enumerate(("dgamma", "dbeta")):
                dst = f"part[{k}u * t_.tile]"
                w("            if (i == 0) {")
                w(f"                Adds({dst}, {refs[key]}, 0.0f, n);")
                w("            } else {")
                w(f"                Add({dst}, {dst}, {refs[key]}, n);")
                w("            }")
            w("        }")
        else:
            w(f"        LocalTensor<{t}> o = out_dx.AllocTensor<{t}>();")
            if dtype == "float32":
                w(f"        Muls(o, {refs['dx']}, 1.0f, n);  // exact copy into the output queue")
            else:
                w(f"        Cast(o, {refs['dx']}, RoundMode::CAST_RINT, n);")
            w("        out_dx.EnQue(o);")
            w("        (void)s1; (void)s2;")
        w("    }")
        w("")
    w("    __aicore__ inline void CopyOut(uint32_t r, uint32_t off, uint32_t len) {")
    w(f"        DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    w(f"        LocalTensor<{t}> o = out_dx.DeQue<{t}>();")
    w("        DataCopyPad(g_dx[(uint64_t)r * t_.s_dx + off], o, p);")
    w("        out_dx.FreeTensor(o);")
    w("    }")
    w("")
    w("    FgLngTiling t_;")
    w("    TPipe pipe_;")
    w("    TQue<TPosition::VECIN, 2> in_x, in_dy;")
    w("    TQue<TPosition::VECOUT, 2> out_dx;")
    w("    TBuf<TPosition::VECCALC> gam_, tmp_, part_, small_;")
    w(f"    GlobalTensor<{t}> g_x, g_dy, g_dx, g_gamma;")
    w("    GlobalTensor<S> g_mean, g_stat;")
    w("    GlobalTensor<float> g_ws;")
    w("};")
    w("")
    for suffix, stat_t in LN_STATS[dtype]:
        w(f'extern "C" __global__ __aicore__ void fg_lng_{dtype}{suffix}(GM_ADDR x, GM_ADDR dy, GM_ADDR mean, '
          "GM_ADDR stat, GM_ADDR gamma, GM_ADDR dx, GM_ADDR workspace, GM_ADDR tiling) {")
        w("    FgLngTiling t = *(const __gm__ FgLngTiling *)tiling;")
        w(f"    FgLng_{dtype}<{stat_t}> op;")
        w("    op.Init(x, dy, mean, stat, gamma, dx, workspace, t);")
        w("    op.Process();")
        w("}")
        w("")
    w(group_sum_source(f"fg_lng_{dtype}_reduce", dtype, "FgLngTiling", "t.d", ["dgamma", "dbeta"]))
    if dtype in COPY_DTYPES:
        w(copy_source(f"fg_lng_{dtype}_copy", dtype))
    elem = 4 if dtype == "float32" else 2
    # x and dy in, dx out (double-buffered), gamma's tile, fp32 temporaries and the two group sums
    per_elem = 7 * elem + nslots * 4 + 8
    head = [f"#define FG_LNG_SLOTS {nslots}u"]
    return "\n".join(head + L) + "\n", per_elem


def ln_write(root, banner: str = "") -> list[str]:
    from pathlib import Path
    base = Path(root) / "layer_norm_backward" / "op_kernel"
    base.mkdir(parents=True, exist_ok=True)
    written = []
    sizes = ["// generated by fusedgrad: UB bytes per tile element of each kernel (for the host's tiling).",
             "#ifndef FG_LAYER_NORM_BACKWARD_SIZES_H", "#define FG_LAYER_NORM_BACKWARD_SIZES_H"]
    for dtype in DTYPES:
        src, per = ln_kernel_source(dtype)
        text = "\n".join(["// generated by fusedgrad from te_defs/layer_norm_backward.py -- do not edit.",
                          f"// AscendC kernels of the LayerNorm backward, {dtype}: dx with the row sums in 16 lanes",
                          "// (as the definition says), dgamma/dbeta partial sums per 8-row group, and their",
                          "// fixed-order reduction.",
                          '#include "kernel_operator.h"', '#include "fg_layer_norm_backward_tiling.h"', "",
                          "using namespace AscendC;", "", src.replace("FG_LNG_SLOTS", f"FG_LNG_{dtype.upper()}_SLOTS")])
        fname = f"fg_layer_norm_backward_{dtype}.cpp"
        (base / fname).write_text(banner + text)
        written.append(f"layer_norm_backward/op_kernel/{fname}")
        sizes.append(f"#define FG_LNG_{dtype.upper()}_PER_ELEM {per}u")
    sizes += ["#endif", ""]
    (base / "fg_layer_norm_backward_tiling.h").write_text(banner + _with_copy_params(LN_TILING_H))
    (base / "fg_layer_norm_backward_sizes.h").write_text(banner + "\n".join(sizes))
    written += ["layer_norm_backward/op_kernel/fg_layer_norm_backward_tiling.h",
                "layer_norm_backward/op_kernel/fg_layer_norm_backward_sizes.h"]
    host = Path(root) / "layer_norm_backward" / "op_host"
    (host / "aclnnop").mkdir(parents=True, exist_ok=True)
    for rel, text in (("aclnnop/aclnn_layer_norm_backward.h", LN_ACLNN_H),
                      ("aclnn_layer_norm_backward.cpp", ln_host_source()),
                      ("fg_layer_norm_backward_launch.h", ln_launch_header())):
        (host / rel).write_text(banner + text)
        written.append(f"layer_norm_backward/op_host/{rel}")
    written.append(_write_cmake(root, "layer_norm_backward", "aclnn_layer_norm_backward.cpp",
                                "aclnn_layer_norm_backward.h", banner))
    return written


# ---------------------------------------------------------------------------- LayerNorm aclnn host code

LN_ACLNN_H = """// generated by fusedgrad: the aclnn API of the LayerNorm backward (CANN aclnnLayerNormBackward).
#ifndef ACLNN_LAYER_NORM_BACKWARD_H_
#define ACLNN_LAYER_NORM_BACKWARD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* First phase: check the tensors and plan the work.
 * gradOut, input: [A1..Ai, R1..Rj], FLOAT, FLOAT16 or BFLOAT16, alike; normalizedShape: [R1..Rj] (j >= 1, the
 * input's trailing dimensions); mean, rstd: [A1..Ai, 1 (j times)] or [A1..Ai], both FLOAT or both the
 * input's type; weightOptional (NULL: ones) and biasOptional (checked, not used): [R1..Rj], the
 * input's type.  outputMask (3 booleans) names the outputs wanted: gradInputOut (the input's shape),
 * gradWeightOut, gradBiasOut ([R1..Rj]), all of the input's type; one not wanted may be NULL and is
 * not written.  Any non-negative strides (tensors whose rows are not dense are copied through the
 * workspace).  dgamma and dbeta are summed over the rows in a fixed order: the same bits every run.
 * ACLNN_ERR_PARAM_NULLPTR: a required argument, or a wanted output, is NULL;
 * ACLNN_ERR_PARAM_INVALID: a data type, shape, layout or mask that does not fit. */
aclnnStatus aclnnLayerNormBackwardGetWorkspaceSize(const aclTensor *gradOut, const aclTensor *input,
                                                   const aclIntArray *normalizedShape, const aclTensor *mean,
                                                   const aclTensor *rstd, const aclTensor *weightOptional,
                                                   const aclTensor *biasOptional, const aclBoolArray *outputMask,
                                                   aclTensor *gradInputOut, aclTensor *gradWeightOut,
                                                   aclTensor *gradBiasOut, uint64_t *workspaceSize,
                                                   aclOpExecutor **executor);

/* Second phase: run the planned work on stream (the executor is used up). */
aclnnStatus aclnnLayerNormBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                   aclrtStream stream);

#ifdef __cplusplus
}
#endif
#endif
"""

LN_KERNEL_ARGS = "void *x, void *dy, void *mean, void *stat, void *gamma, void *dx, void *workspace, void *tiling"


def _ln_kernels():
    """(entry point, input dtype, fp32 statistics) of every LayerNorm kernel variant."""
    return [(f"fg_lng_{dtype}{suffix}", dtype, stat_t == "float" and dtype != "float32")
            for dtype in DTYPES for suffix, stat_t in LN_STATS[dtype]]


def ln_launch_header() -> str:
    decls = [f"uint32_t aclrtlaunch_{name}(uint32_t blockDim, aclrtStream stream, {LN_KERNEL_ARGS});"
             for name, _, _ in _ln_kernels()]
    for dtype in DTYPES:
        decls.append(f"uint32_t aclrtlaunch_fg_lng_{dtype}_reduce(uint32_t blockDim, aclrtStream stream, "
                     "void *workspace, void *dgamma, void *dbeta, void *tiling);")
    for dtype in COPY_DTYPES:
        decls.append(f"uint32_t aclrtlaunch_fg_lng_{dtype}_copy(uint32_t blockDim, aclrtStream stream, void *src, "
                     "void *dst, void *params);")
    return _launch_header("FG_LAYER_NORM_BACKWARD_LAUNCH_H", decls)


def ln_host_source() -> str:
    mains = "\n".join(f"    if (dt == {ACL_DTYPE[d]} && fp32_stats == {int(f)}) return aclrtlaunch_{n};"
                      for n, d, f in _ln_kernels())
    reduces = "\n".join(f"    if (dt == {ACL_DTYPE[d]}) return aclrtlaunch_fg_lng_{d}_reduce;" for d in DTYPES)
    return _host_preamble("layer_norm_backward", "aclnn_layer_norm_backward.h", "FgLngTiling",
                          '#include "opdev/common_types.h"  // aclIntArray / aclBoolArray elements\n') + f"""
enum {{ FG_DY, FG_X, FG_MEAN, FG_RSTD, FG_GAMMA, FG_DX, FG_DGAMMA, FG_DBETA, FG_TENSORS }};

namespace {{

{HOST_COMMON}
}}  // namespace

struct aclOpExecutor {{
    struct FgLngTiling tiling;
    aclDataType dtype;
    int fp32_stats, run_main, run_reduce;
    void *ptr[FG_TENSORS];  // as the kernels see them (NULL: not given, or not wanted)
    struct FgCopy copy[FG_TENSORS];
    uint64_t workspace;
}};

namespace {{

typedef uint32_t (*fg_main_launch)(uint32_t, aclrtStream, void *, void *, void *, void *, void *, void *, void *,
                                   void *);
typedef uint32_t (*fg_reduce_launch)(uint32_t, aclrtStream, void *, void *, void *, void *);

fg_main_launch main_kernel(aclDataType dt, int fp32_stats) {{
{mains}
    return nullptr;
}}

fg_reduce_launch reduce_kernel(aclDataType dt) {{
{reduces}
    return nullptr;
}}

}}  // namespace

extern "C" aclnnStatus aclnnLayerNormBackwardGetWorkspaceSize(
    const aclTensor *gradOut, const aclTensor *input, const aclIntArray *normalizedShape, const aclTensor *mean,
    const aclTensor *rstd, const aclTensor *weightOptional, const aclTensor *biasOptional,
    const aclBoolArray *outputMask, aclTensor *gradInputOut, aclTensor *gradWeightOut, aclTensor *gradBiasOut,
    uint64_t *workspaceSize, aclOpExecutor **executor) {{
    if (!gradOut || !input || !normalizedShape || !mean || !rstd || !outputMask || !workspaceSize || !executor) {{
        return ACLNN_ERR_PARAM_NULLPTR;
    }}
    uint64_t masks = 0, nnorm = 0;
    if (aclGetBoolArraySize(outputMask, &masks) != ACLNN_SUCCESS ||
        aclGetIntArraySize(normalizedShape, &nnorm) != ACLNN_SUCCESS) {{
        return ACLNN_ERR_PARAM_NULLPTR;
    }}
    if (masks != 3) return ACLNN_ERR_PARAM_INVALID;
    const bool want[3] = {{(*outputMask)[0], (*outputMask)[1], (*outputMask)[2]}};
    aclTensor *outs[3] = {{gradInputOut, gradWeightOut, gradBiasOut}};
    for (int k = 0; k < 3; ++k) {{
        if (want[k] && !outs[k]) return ACLNN_ERR_PARAM_NULLPTR;
    }}
    const aclTensor *tensors[FG_TENSORS] = {{gradOut, input, mean, rstd, weightOptional,
                                            want[0] ? gradInputOut : nullptr, want[1] ? gradWeightOut : nullptr,
                                            want[2] ? gradBiasOut : nullptr}};
    View v[FG_TENSORS], vbias;
    for (int k = 0; k < FG_TENSORS; ++k) {{
        aclnnStatus s = tensors[k] ? view_of(tensors[k], &v[k]) : ACLNN_SUCCESS;
        if (s != ACLNN_SUCCESS) return s;
    }}
    if (biasOptional) {{
        aclnnStatus s = view_of(biasOptional, &vbias);
        if (s != ACLNN_SUCCESS) return s;
    }}
    // types: FLOAT, FLOAT16 or BF16 throughout, the statistics alike and no narrower than the input
    const aclDataType dt = v[FG_X].dtype, st = v[FG_MEAN].dtype;
    if ((dt != ACL_FLOAT && dt != ACL_FLOAT16 && dt != ACL_BF16) || (st != dt && st != ACL_FLOAT) ||
        v[FG_RSTD].dtype != st) {{
        return ACLNN_ERR_PARAM_INVALID;
    }}
    for (int k = 0; k < FG_TENSORS; ++k) {{
        if (tensors[k] && k != FG_MEAN && k != FG_RSTD && v[k].dtype != dt) return ACLNN_ERR_PARAM_INVALID;
    }}
    if (biasOptional && vbias.dtype != dt) return ACLNN_ERR_PARAM_INVALID;
    // shapes: input [A.., R..] with R normalizedShape; M = prod A rows of D = prod R
    const View &x = v[FG_X];
    if (nnorm < 1 || nnorm > x.n) return ACLNN_ERR_PARAM_INVALID;
    const uint64_t na = x.n - nnorm;
    int64_t M = 1, D = 1, stat_dims[8];
    for (uint64_t i = 0; i < x.n; ++i) {{
        if (i >= na && (*normalizedShape)[i - na] != x.dims[i]) return ACLNN_ERR_PARAM_INVALID;
        (i < na ? M : D) *= x.dims[i];
        stat_dims[i] = i < na ? x.dims[i] : 1;
    }}
    if (M > 0x7fffffff || D > 0x7fffffff) return ACLNN_ERR_PARAM_INVALID;
    for (int k : {{FG_DY, FG_DX}}) {{
        if (tensors[k] && !same_dims(v[k], x.dims, x.n)) return ACLNN_ERR_PARAM_INVALID;
    }}
    for (int k : {{FG_MEAN, FG_RSTD}}) {{  // [A.., 1..] or [A..]
        if (!same_dims(v[k], stat_dims, x.n) && !same_dims(v[k], stat_dims, na)) return ACLNN_ERR_PARAM_INVALID;
    }}
    for (int k : {{FG_GAMMA, FG_DGAMMA, FG_DBETA}}) {{
        if (tensors[k] && !same_dims(v[k], x.dims + na, nnorm)) return ACLNN_ERR_PARAM_INVALID;
    }}
    if (biasOptional && !same_dims(vbias, x.dims + na, nnorm)) return ACLNN_ERR_PARAM_INVALID;
    // layouts: rows the kernels read in place, or copies through the workspace
    int kinds[FG_TENSORS];
    int64_t s0[FG_TENSORS];
    for (int k = 0; k < FG_TENSORS; ++k) {{
        const uint64_t split = k <= FG_X || k == FG_DX ? na : (k <= FG_RSTD ? v[k].n : 0u);
        kinds[k] = tensors[k] ? plan(v[k], split, k >= FG_DX, &s0[k]) : FG_ROWS;
        if (kinds[k] == FG_BAD) return ACLNN_ERR_PARAM_INVALID;
    }}

    aclOpExecutor *e = new (std::nothrow) aclOpExecutor;
    if (!e) return ACLNN_ERR_INNER;
    memset(e, 0, sizeof(*e));
    e->dtype = dt;
    e->fp32_stats = dt != ACL_FLOAT && st == ACL_FLOAT;
    const uint32_t per = dt == ACL_FLOAT ? FG_LNG_FLOAT32_PER_ELEM : dt == ACL_FLOAT16 ? FG_LNG_FLOAT16_PER_ELEM
                                                                                      : FG_LNG_BFLOAT16_PER_ELEM;
    e->tiling = fg_lng_tiling((uint32_t)M, (uint32_t)D, per, FG_ASCEND_UB_BYTES, FG_ASCEND_VECTOR_CORES, 0.0f);
    e->tiling.flags = FG_LNG_RSTD | (weightOptional ? FG_LNG_GAMMA : 0u) | (want[0] ? FG_LNG_DX : 0u) |
                      (want[1] || want[2] ? FG_LNG_DGB : 0u);
    e->run_main = M > 0 && D > 0 && (want[0] || want[1] || want[2]);
    e->run_reduce = D > 0 && (want[1] || want[2]);  // with no rows: zeros
    uint64_t at = FG_TILING_BYTES + FG_TENSORS * FG_COPY_PARAMS_BYTES +
                  (want[1] || want[2] ? (uint64_t)e->tiling.groups * 2u * (uint64_t)D * 4u : 0u);
    uint32_t *strides[FG_TENSORS] = {{&e->tiling.s_dy, &e->tiling.s_x, &e->tiling.s_mean, &e->tiling.s_stat,
                                     nullptr, &e->tiling.s_dx, nullptr, nullptr}};
    for (int k = 0; k < FG_TENSORS; ++k) {{
        if (!tensors[k]) continue;
        e->ptr[k] = data(v[k]);
        if (kinds[k] == FG_ROWS) {{
            if (strides[k]) *strides[k] = (uint32_t)s0[k];
            continue;
        }}
        at = add_copy(e->copy[k], v[k], e->ptr[k], k >= FG_DX, at);  // the kernels use a contiguous copy
        if (strides[k]) *strides[k] = k == FG_MEAN || k == FG_RSTD ? 1u : (uint32_t)D;
    }}
    e->workspace = at;
    *workspaceSize = e->workspace;
    *executor = e;
    return ACLNN_SUCCESS;
}}

extern "C" aclnnStatus aclnnLayerNormBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                              aclrtStream stream) {{
    if (!executor || (!workspace && executor->workspace)) return ACLNN_ERR_PARAM_NULLPTR;
    aclOpExecutor *e = executor;
    char *ws = (char *)workspace, *partials = ws + FG_TILING_BYTES + FG_TENSORS * FG_COPY_PARAMS_BYTES;
    const fg_copy_launch copy2 = aclrtlaunch_fg_lng_float16_copy, copy4 = aclrtlaunch_fg_lng_float32_copy;
    void *ptr[FG_TENSORS];
    aclnnStatus s = upload(ws, workspaceSize, e->workspace, &e->tiling, sizeof(e->tiling), stream);
    if (s == ACLNN_SUCCESS) s = gather(e->copy, e->ptr, FG_TENSORS, ws, stream, copy2, copy4, ptr);
    if (s == ACLNN_SUCCESS && e->run_main &&
        main_kernel(e->dtype, e->fp32_stats)(e->tiling.cores, stream, ptr[FG_X], ptr[FG_DY], ptr[FG_MEAN],
                                             ptr[FG_RSTD], ptr[FG_GAMMA], ptr[FG_DX], partials, ws) != 0) {{
        s = ACLNN_ERR_INNER;
    }}
    if (s == ACLNN_SUCCESS && e->run_reduce) {{  // dgamma, dbeta: the groups' partial sums in order
        uint32_t blocks = (e->tiling.d + e->tiling.tile - 1u) / e->tiling.tile;
        blocks = blocks < FG_ASCEND_VECTOR_CORES ? blocks : FG_ASCEND_VECTOR_CORES;
        if (reduce_kernel(e->dtype)(blocks, stream, partials, ptr[FG_DGAMMA], ptr[FG_DBETA], ws) != 0) {{
            s = ACLNN_ERR_INNER;
        }}
    }}
    if (s == ACLNN_SUCCESS) s = scatter(e->copy, ptr, FG_TENSORS, ws, stream, copy2, copy4);
    delete e;
    return s;
}}
"""


# ---------------------------------------------------------------------------- the packages' build

def cmake_lists(op: str, kernel_files: list[str], host_file: str, header: str) -> str:
    """CMakeLists.txt of an operator package: the kernels through CANN's ascendc_library (which also
    makes the aclrtlaunch_<kernel> functions the host code calls), and the aclnn host library."""
    kernels = "\n".join(f"    op_kernel/{f}" for f in kernel_files)
    return f"""# Builds the {op} package with CANN: the AscendC kernels (ascendc_library, which also makes the
# aclrtlaunch_<kernel> launch functions) and the aclnn library libfg_{op}.so with its header.
#   cmake -S . -B build -DSOC_VERSION=Ascend910B1 [-DASCEND_CANN_PACKAGE_PATH=<CANN>] && cmake --build build
cmake_minimum_required(VERSION 3.16)
project(fg_{op} CXX)

set(SOC_VERSION "Ascend910B1" CACHE STRING "the Ascend SoC the kernels are built for")
set(RUN_MODE "npu" CACHE STRING "AscendC run mode")
if(NOT ASCEND_CANN_PACKAGE_PATH)
    if(DEFINED ENV{{ASCEND_HOME_PATH}})
        set(ASCEND_CANN_PACKAGE_PATH $ENV{{ASCEND_HOME_PATH}})
    else()
        set(ASCEND_CANN_PACKAGE_PATH /usr/local/Ascend/ascend-toolkit/latest)
    endif()
endif()
if(NOT ASCENDC_CMAKE_DIR)
    foreach(dir compiler/tikcpp/ascendc_kernel_cmake tools/tikcpp/ascendc_kernel_cmake)
        if(EXISTS ${{ASCEND_CANN_PACKAGE_PATH}}/${{dir}}/ascendc.cmake)
            set(ASCENDC_CMAKE_DIR ${{ASCEND_CANN_PACKAGE_PATH}}/${{dir}})
            break()
        endif()
    endforeach()
endif()
if(NOT ASCENDC_CMAKE_DIR)
    message(FATAL_ERROR "no ascendc.cmake under ASCEND_CANN_PACKAGE_PATH=${{ASCEND_CANN_PACKAGE_PATH}}: is CANN installed?")
endif()
include(${{ASCENDC_CMAKE_DIR}}/ascendc.cmake)

ascendc_library(fg_{op}_kernels SHARED
{kernels}
)
ascendc_include_directories(fg_{op}_kernels PRIVATE ${{CMAKE_CURRENT_SOURCE_DIR}}/op_kernel)

add_library(fg_{op} SHARED op_host/{host_file})
set_target_properties(fg_{op} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
target_include_directories(fg_{op}
    PUBLIC ${{CMAKE_CURRENT_SOURCE_DIR}}/op_host ${{ASCEND_CANN_PACKAGE_PATH}}/include
    PRIVATE ${{CMAKE_CURRENT_SOURCE_DIR}}/op_kernel)
target_link_directories(fg_{op} PRIVATE ${{ASCEND_CANN_PACKAGE_PATH}}/lib64)
target_link_libraries(fg_{op} PRIVATE fg_{op}_kernels ascendcl nnopbase)

install(TARGETS fg_{op} fg_{op}_kernels LIBRARY DESTINATION lib)
install(FILES op_host/aclnnop/{header} DESTINATION include/aclnnop)
"""


def _write_cmake(root, op: str, host_file: str, header: str, banner: str) -> str:
    from pathlib import Path
    base = Path(root) / op
    kernel_files = sorted(p.name for p in (base / "op_kernel").glob("*.cpp"))
    hash_banner = "".join("# " + line[3:] + "\n" if line.startswith("// ") else line + "\n"
                          for line in banner.splitlines())
    (base / "CMakeLists.txt").write_text(hash_banner + cmake_lists(op, kernel_files, host_file, header))
    return f"{op}/CMakeLists.txt"
