"""The "gates" kernel pattern: rows of elementwise stages (the LSTM-cell backward's).

The op's definition is scheduled as TIR (schedules/ascend/vector.py: its stages inlined), and the
values of its row output blocks become one vector Program over UB tiles (vector.Lowerer); an output
with a gate axis (kernel shape [N, G, H]) gets one program slice per gate, the block's gate variable
bound to the gate so that its if_then_else folds, and an input with a gate axis one stream per gate
read.  fp16 and bf16 input tiles are cast to fp32 and outputs rounded once (RINT).  Rows are split
over the vector cores in groups (and H as well when the groups are fewer than the cores; the op's
tiling header), a row into tiles sized from the UB capacity; inputs and outputs stream through
double-buffered queues.  The group-summed output (grad_bias) gets one fp32 partial per row group and
gate in the workspace, added in group order by the group-sum kernel, so its bits do not depend on
the core count.  One kernel per variant of the op's definition (its optional inputs and outputs).

The kernel class has the LSTM cell's shape: inputs of [N, H] rows plus one gated input; row outputs
and at most one gated output (the cell backward: dgates and dcx; the step forward: hy, cy and the
activations); the gated output's group sums, when the op has them.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

from ... import targets, te_defs
from ...schedules.ascend import vector as vector_schedules
from .. import naming
from ..c_dialect import ASCENDC
from .kernels import COPY_DTYPES, SCALAR_CASTS, copy_source, group_sum_source
from .vector import Lowerer, allocate, is_const, print_program, store


@dataclasses.dataclass(frozen=True)
class Variant:
    """One variant of the op's kernels: its flags (te_defs OpDef.variants, in the op's order), read as
    attributes (``v.has_bias``)."""

    flags: tuple[tuple[str, bool], ...]

    def __getattr__(self, name):
        for k, on in object.__getattribute__(self, "flags"):
            if k == name:
                return on
        raise AttributeError(name)

    @property
    def tag(self) -> str:
        """The variant's part of its kernels' symbols (``hy_cy_bias``)."""
        return naming.ascend_variant_tag(dict(self.flags))

    @property
    def key(self) -> int:
        """The flags as bits, the first flag the highest (the host's variant code)."""
        return sum(int(on) << (len(self.flags) - 1 - i) for i, (_, on) in enumerate(self.flags))


def dtypes(rule) -> tuple[str, ...]:
    """The dtypes of the op's kernels, in the target's order."""
    return targets.get("ascend").dtypes_for(rule.op)


def variants(rule) -> list[Variant]:
    return [Variant(tuple(v.items())) for v in te_defs.get(rule.op).variants]


def _row_outputs(rule, args):
    """The kernel's row outputs among the TE tensors ``args``, in the definition's order, each with its
    gate count (None: no gate axis); the group-summed outputs are not among them."""
    by_name = {t.name: t for t in args}
    out = []
    for spec in te_defs.get(rule.op).outputs:  # an output the rule does not map is another kernel's
        if spec.name in by_name and spec.name in rule.gm and rule.gm[spec.name] not in rule.group_sums:
            out.append((by_name[spec.name], int(spec.kshape[1]) if len(spec.kshape) == 3 else None))
    return out


def program(rule, dtype: str, v: Variant):
    """One Program computing every row output of the variant: [((output, gate), value)].  An output
    another one reads (the forward's hy reads o and tanhc) is computed once, for both."""
    sch, args = vector_schedules.schedule(rule.op, dtype, **dict(v.flags))
    row_outputs = _row_outputs(rule, args)
    low = Lowerer(sch.mod["main"], produced={t.name: store(sch, t.name) for t, _ in row_outputs})
    outs = []
    for tensor, gates in row_outputs:
        out = store(sch, tensor.name)  # the output's block: out[n, g, j] or out[n, j] = value
        for g in range(gates) if gates else [None]:
            low.slice(out.indices[1] if g is not None else None, g)
            outs.append(((tensor.name, g), low.value(out.value)))
    return low.p, outs


def _stream(rule, key) -> str:
    """The C name of an input stream: its GM argument, and its gate."""
    name, gate = key
    return f"{rule.gm[name]}{gate}" if gate is not None else rule.gm[name]


def sync(w, event: str, indent: int, why: str) -> None:
    """One pipe waiting for another (AscendC HardEvent ``event``, e.g. "MTE3_V"): SetFlag on the
    source pipe, WaitFlag on the destination, with an event ID the TPipe has free."""
    pad = " " * indent
    w(f"{pad}{{  // {why}")
    w(f"{pad}    const TEventID e = pipe_.FetchEventID(HardEvent::{event});")
    w(f"{pad}    SetFlag<HardEvent::{event}>(e);")
    w(f"{pad}    WaitFlag<HardEvent::{event}>(e);")
    w(f"{pad}}}")


def kernel_source(rule, dtype: str, v: Variant) -> tuple[str, int, int, int]:
    """(C++ of the variant's main kernel, float temp slots, input streams, output tiles) for ``dtype``."""
    t = ASCENDC.type(dtype)
    ins = ASCENDC.instruction  # a vector instruction, spelled by the dialect
    ARGS, GM = rule.kernel_args, rule.gm
    cls, tiling = naming.ascend_class(rule.short, dtype, v.tag), naming.ascend_tiling(rule.short)
    prog, outs = program(rule, dtype, v)
    gated = next((o for (o, g), _ in outs if g is not None), None)  # the gated output (if any), and its gates
    ngates = 1 + max(g for (o, g), _ in outs if o == gated) if gated is not None else 0
    summed = any(te_defs.OpDef.present(s, dict(v.flags)) for s in te_defs.get(rule.op).outputs
                 if rule.gm.get(s.name) in rule.group_sums)  # the variant has the group-summed output
    spec = te_defs.get(rule.op)
    rows_in = [GM[i.name] for i in spec.inputs if len(i.kshape) == 2]  # [N, H] inputs
    gated_spec = next((i for i in spec.inputs if len(i.kshape) == 3), None)  # the [N, G, H] input, if any
    gated_in = GM[gated_spec.name] if gated_spec is not None else None
    in_gates = int(gated_spec.kshape[1]) if gated_spec is not None else 0
    addends = {GM[name]: tuple(more) for name, more in rule.addends.items()}
    if addends and dtype != "float32":
        raise ValueError(f"{rule.op}: inputs with addends are read as float32 only, got dtype {dtype}")
    streams = prog.streams
    # the addends' reads: (slot of the stream they add to, addend GM name, gate), after the streams
    added = [(i, a, k[1]) for i, k in enumerate(streams) for a in addends.get(GM[k[0]], ())]
    reads = rows_in + ([gated_in] if gated_in is not None else []) + [a for more in addends.values() for a in more]
    dgated = GM[gated] if gated is not None else None
    drows = list(dict.fromkeys(GM[o] for (o, g), _ in outs if g is None))  # the row outputs, in order
    slot, nslots = allocate(prog, outs)
    name = naming.ascend_kernel(rule.short, dtype, v.tag)
    L = []
    w = L.append
    w(f"class {cls} {{")
    w("  public:")
    w(f"    {ASCENDC.helper} void Init({', '.join(ASCENDC.pointer(a) for a in ARGS[:-1])}, const {tiling} &t) {{")
    w("        t_ = t;")
    w(f"        {' '.join(f'(void){gm};' for gm in reads)}  // a variant reads only some")
    for gm in rows_in:
        if any(GM[k[0]] == gm for k in streams):
            w(f"        g_{gm}.SetGlobalBuffer((__gm__ {t} *){gm}, (uint64_t)(t.n - 1) * t.s_{gm} + t.h);")
    if gated_in is not None and any(GM[k[0]] == gated_in for k in streams):
        for gm in (gated_in,) + addends.get(gated_in, ()):
            w(f"        g_{gm}.SetGlobalBuffer((__gm__ {t} *){gm}, (uint64_t)(t.n - 1) * t.s_{gm} + "
              f"{in_gates - 1}u * t.g_{gm} + t.h);")
    for gm in rows_in:
        for a in addends.get(gm, ()):
            w(f"        g_{a}.SetGlobalBuffer((__gm__ {t} *){a}, (uint64_t)(t.n - 1) * t.s_{a} + t.h);")
    if dgated is not None:
        w(f"        g_{dgated}.SetGlobalBuffer((__gm__ {t} *){dgated}, (uint64_t)(t.n - 1) * t.s_{dgated} + {ngates}u * t.h);")
    for drow in drows:
        w(f"        g_{drow}.SetGlobalBuffer((__gm__ {t} *){drow}, (uint64_t)(t.n - 1) * t.s_{drow} + t.h);")
    if rule.group_sums:
        w(f"        {' '.join(f'(void){o};' for o in rule.group_sums)}")
    if summed:
        w(f"        g_ws.SetGlobalBuffer((__gm__ float *)workspace, (uint64_t)t.groups * {ngates}u * t.h);")
    else:
        w("        (void)workspace;")
    # one double-buffered queue for a row tile's input streams and one for its outputs, each stream
    # or output a t.tile slice (16-element multiples: 32-byte aligned): every queue buffer holds an
    # event ID of its position, and Ascend910B has 8 per position (QUE_MAX_EVENT)
    if streams:  # (a variant without inputs computes constants; InitBuffer takes no empty buffer)
        w(f"        pipe_.InitBuffer(in_, 2, {len(streams) + len(added)}u * t.tile * sizeof({t}));")
    w(f"        pipe_.InitBuffer(out_, 2, {ngates + len(drows)}u * t.tile * sizeof({t}));")
    nfloat = nslots + (len(streams) if dtype != "float32" else 0) + 1  # + input casts + one scratch
    w(f"        pipe_.InitBuffer(tmp_, {nfloat}u * t.tile * sizeof(float));")
    if summed:
        w(f"        pipe_.InitBuffer(acc_, {ngates}u * t.tile * sizeof(float));")
    w("    }")
    w("")
    w(f"    {ASCENDC.helper} void Process() {{")
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
    if summed:
        w("                " + ins("Dup", "acc_.Get<float>()", ASCENDC.float_literal(0.0),
                                    f"(int32_t)({ngates}u * t_.tile)"))
    w("                for (uint32_t r = g0; r < g1; ++r) {")
    w("                    CopyIn(r, off, len);")
    w("                    Compute(len);")
    w("                    CopyOut(r, off, len);")
    w("                }")
    if summed:
        sync(w, "V_MTE3", 16, "the vector adds into acc_ land before the copy out")
        w(f"                for (uint32_t g = 0; g < {ngates}; ++g) {{")
        w("                    DataCopyExtParams p{1, len * (uint32_t)sizeof(float), 0, 0, 0};")
        w(f"                    DataCopyPad(g_ws[((uint64_t)(g0 / t_.group) * {ngates}u + g) * t_.h + off], "
          "acc_.Get<float>()[g * t_.tile], p);")
        w("                }")
        sync(w, "MTE3_V", 16, "the copy out of acc_ is done before it is written again")
    w("            }")
    w("        }")
    w("    }")
    w("")
    w("  private:")
    w(f"    {ASCENDC.helper} void CopyIn(uint32_t r, uint32_t off, uint32_t len) {{")
    w(f"        DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    w(f"        DataCopyPadExtParams<{t}> pad{{false, 0, 0, {t}()}};")
    if streams:
        w(f"        LocalTensor<{t}> x = in_.AllocTensor<{t}>();")
    for i, k in enumerate(streams):
        gm = GM[k[0]]
        base = f"(uint64_t)r * t_.s_{gm} + off" + (f" + {k[1]}u * t_.g_{gated_in}" if k[1] is not None else "")
        w(f"        DataCopyPad(x[{i}u * t_.tile], g_{gm}[{base}], p, pad);")
    for j, (_, a, gate) in enumerate(added):
        base = f"(uint64_t)r * t_.s_{a} + off" + (f" + {gate}u * t_.g_{a}" if gate is not None else "")
        w(f"        DataCopyPad(x[{len(streams) + j}u * t_.tile], g_{a}[{base}], p, pad);")
    if streams:
        w("        in_.EnQue(x);")
    w("        (void)r; (void)off; (void)p; (void)pad;")
    w("    }")
    w("")
    w(f"    {ASCENDC.helper} void Compute(uint32_t len) {{")
    w("        const int32_t n = (int32_t)len;")
    w("        LocalTensor<float> tmp = tmp_.Get<float>();")
    w("        (void)tmp;")
    if streams:
        w(f"        LocalTensor<{t}> x = in_.DeQue<{t}>();")
    for i, k in enumerate(streams):
        s = _stream(rule, k)
        w(f"        LocalTensor<{t}> x_{s} = x[{i}u * t_.tile];")
        w(f"        (void)x_{s};")
    for j, (i, a, gate) in enumerate(added):  # the input is the sum of its reads, in the rule's order
        s = _stream(rule, streams[i])
        w("        " + ins("Add", f"x_{s}", f"x_{s}", f"x[{len(streams) + j}u * t_.tile]", "n")
          + f"  // + {a}" + (f" gate {gate}" if gate is not None else ""))
    w(f"        LocalTensor<{t}> out = out_.AllocTensor<{t}>();")
    _, ref = print_program(w, prog, outs, dtype, lambda k: _stream(rule, k), alloc=(slot, nslots))
    scratch = f"tmp[{nfloat - 1}u * t_.tile]"
    for (oname, g), val in outs:
        w("        {")
        w(f"            LocalTensor<{t}> o = out[{g if oname == gated else ngates + drows.index(GM[oname])}u * t_.tile];")
        if is_const(val):
            w(f"            LocalTensor<float> c = {scratch};")
            w("            " + ins("Dup", "c", ASCENDC.float_literal(val[1]), "n"))
            res = "c"
        else:
            res = ref(val)
        if dtype == "float32":
            w("            " + ins("Muls", "o", res, ASCENDC.float_literal(1.0), "n")
              + "  // exact copy into the output queue")
        else:
            w("            " + ins("Cast", "o", res, ASCENDC.round_mode("rint"), "n"))
        if summed and oname == gated:
            acc = f"acc_.Get<float>()[{g}u * t_.tile]"
            if dtype == "float32":
                w("            " + ins("Add", acc, acc, "o", "n"))
            else:  # the bias sums the stored (rounded) gradients, as the definition says
                w(f"            LocalTensor<float> back = {scratch};")
                w("            " + ins("Cast", "back", "o", ASCENDC.round_mode("none"), "n"))
                w("            " + ins("Add", acc, acc, "back", "n"))
        w("        }")
    w("        out_.EnQue(out);")
    if streams:
        w("        in_.FreeTensor(x);")
    w("    }")
    w("")
    w(f"    {ASCENDC.helper} void CopyOut(uint32_t r, uint32_t off, uint32_t len) {{")
    w(f"        DataCopyExtParams p{{1, len * (uint32_t)sizeof({t}), 0, 0, 0}};")
    w(f"        LocalTensor<{t}> out = out_.DeQue<{t}>();")
    for g in range(ngates):
        w(f"        DataCopyPad(g_{dgated}[(uint64_t)r * t_.s_{dgated} + {g}u * t_.h + off], out[{g}u * t_.tile], p);")
    for k, drow in enumerate(drows):
        w(f"        DataCopyPad(g_{drow}[(uint64_t)r * t_.s_{drow} + off], out[{ngates + k}u * t_.tile], p);")
    w("        out_.FreeTensor(out);")
    w("    }")
    w("")
    w(f"    {tiling} t_;")
    w("    TPipe pipe_;")
    if streams:
        w("    TQue<TPosition::VECIN, 2> in_;")
    w("    TQue<TPosition::VECOUT, 2> out_;")
    w("    TBuf<TPosition::VECCALC> tmp_;")
    if summed:
        w("    TBuf<TPosition::VECCALC> acc_;")
        w("    GlobalTensor<float> g_ws;")
    for gm in reads + ([dgated] if dgated is not None else []) + drows:
        w(f"    GlobalTensor<{t}> g_{gm};")
    w("};")
    w("")
    w(f"{ASCENDC.kernel} {name}({', '.join(ASCENDC.pointer(a) for a in ARGS)}) {{")
    w(f"    {tiling} t = *(const __gm__ {tiling} *)tiling;")
    w(f"    {cls} op;")
    w(f"    op.Init({', '.join(ARGS[:-1])}, t);")
    w("    op.Process();")
    w("}")
    return "\n".join(L) + "\n", nfloat, len(streams) + len(added), ngates + len(drows)



def step_kernel_file(rule, dtype: str) -> tuple[str, dict]:
    """The kernel file of a full-LSTM step's kernels (schedules/ascend STEP_KERNELS: no group sums, no
    copy kernel), and {variant tag: (float slots, input streams, output tiles)}."""
    head = ['#include "kernel_operator.h"', f'#include "fg_{rule.tiling_header}.h"', "", "using namespace AscendC;", "",
            SCALAR_CASTS]
    parts, sizes = [], {}
    for v in variants(rule):
        src, nfloat, nstreams, nout = kernel_source(rule, dtype, v)
        parts.append(src)
        sizes[v.tag] = (nfloat, nstreams, nout)
    return "\n".join(head + parts), sizes


def entries(rule, dtype: str) -> list[str]:
    """The main kernels' symbol parts (after the dtype): one per variant."""
    return [v.tag for v in variants(rule)]


def kernel_file(rule, dtype: str) -> tuple[str, dict]:
    """The kernels of ``dtype`` (every variant's, the group sum, the copy) and {variant tag: (float
    slots, input streams)}."""
    parts, sizes = [], {}
    for v in variants(rule):
        src, nfloat, nstreams, _ = kernel_source(rule, dtype, v)
        parts.append(src)
        sizes[v.tag] = (nfloat, nstreams)
    parts.append(group_sum_source(naming.ascend_kernel(rule.short, dtype, rule.reduce), dtype,
                                  naming.ascend_tiling(rule.short), rule.group_sum_length, rule.group_sums))
    if dtype in COPY_DTYPES:
        parts.append(copy_source(naming.ascend_kernel(rule.short, dtype, "copy"), dtype))
    return "\n".join(parts), sizes


def sizes_header(rule, sizes: Mapping[str, dict]) -> str:
    """fg_<op>_sizes.h: each variant's UB use, {dtype: kernel_file's sizes}, for the host's tiling."""
    guard = f"FG_{rule.op.upper()}_SIZES_H"
    lines = ["// generated by fusedgrad: UB use of each kernel variant (for the host's tiling).",
             f"#ifndef {guard}", f"#define {guard}", ""]
    for dtype, per_tag in sizes.items():
        for tag, (nfloat, nstreams) in per_tag.items():
            lines.append(f"#define {naming.ascend_macro(rule.short, dtype, tag)}_SLOTS {nfloat}u")
            lines.append(f"#define {naming.ascend_macro(rule.short, dtype, tag)}_STREAMS {nstreams}u")
    return "\n".join(lines + ["", "#endif", ""])
