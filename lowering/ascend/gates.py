"""The "gates" kernel pattern (a ``patterns.KernelPattern``): rows of elementwise stages (the LSTM-cell
backward's).

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
from typing import Collection, Mapping

from ... import targets, te_defs
from ...schedules.ascend import vector as vector_schedules
from .. import naming
from ..c_dialect import ASCENDC
from . import fixed
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


def kernel_source(rule, dtype: str, v: Variant, io: Mapping[str, str] | None = None,
                  kept: Collection[str] | None = None) -> tuple[str, int, int, int]:
    """(C++ of the variant's main kernel, float temp slots, input streams, output tiles) for ``dtype``.

    The kernel is targets/ascend/gates_kernel.cpp.in; the lines that depend on the variant's input
    streams and outputs (one per stream, gate or output) are made here and fill its fields.  ``io``:
    the GM tensors (kernel arguments) of another element dtype than a float32 kernel's, {argument:
    "float16" or "bfloat16"}: each read into its fp32-sized queue slot as it is and cast to fp32 in UB,
    or rounded (RINT) into its slot from fp32, as a kernel of that dtype does for all of them.  ``kept``:
    the row outputs (kernel arguments) copied to GM, default all; the others are computed in UB (another
    output may read them) and not written."""
    io = dict(io or {})
    if io and (dtype != "float32" or not set(io) <= set(rule.kernel_args) or "float32" in io.values()):
        raise ValueError(f"{rule.op}: io must map some of the kernel arguments {rule.kernel_args} to float16 or "
                         f"bfloat16 in a float32 kernel, got dtype {dtype} and io {io}")
    elem = ASCENDC.type(dtype)
    def elem_of(gm: str) -> str:  # a GM tensor's element type
        return ASCENDC.type(io.get(gm, dtype))
    narrow_types = list(dict.fromkeys(ASCENDC.type(d) for d in io.values()))
    def tile_of(local: str, gm: str) -> str:  # a queue slot of float32 elements as the GM tensor's
        return f"{local}.ReinterpretCast<{elem_of(gm)}>()" if gm in io else local
    def params_of(gm: str) -> str:  # the DataCopyPad parameters of a GM tensor's row
        return f"p{narrow_types.index(elem_of(gm)) + 1}" if gm in io else "p"
    instruction = ASCENDC.instruction  # a vector instruction, spelled by the dialect
    args, GM = rule.kernel_args, rule.gm
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
    if addends and (dtype != "float32" or set(io) & {a for base, more in addends.items() for a in (base,) + more}):
        raise ValueError(f"{rule.op}: inputs with addends are read as float32 only, got dtype {dtype} and io {io}")
    streams = prog.streams
    # the addends' reads: (slot of the stream they add to, addend GM name, gate), after the streams
    added = [(i, a, k[1]) for i, k in enumerate(streams) for a in addends.get(GM[k[0]], ())]
    reads = rows_in + ([gated_in] if gated_in is not None else []) + [a for more in addends.values() for a in more]
    dgated = GM[gated] if gated is not None else None
    drows = list(dict.fromkeys(GM[o] for (o, g), _ in outs if g is None))  # the row outputs, in order
    slot, nslots = allocate(prog, outs)
    tensors = reads + ([dgated] if dgated is not None else []) + drows
    def rows_of_h(gm: str) -> str:  # the global buffer of a tensor of [N, H] rows
        return f"g_{gm}.SetGlobalBuffer((__gm__ {elem_of(gm)} *){gm}, (uint64_t)(t.n - 1) * t.s_{gm} + t.h);"

    global_buffers = []  # the GM tensors' extents: rows of H, a gated input's gates, the gated output's
    for gm in rows_in:
        if any(GM[k[0]] == gm for k in streams):
            global_buffers.append(rows_of_h(gm))
    if gated_in is not None and any(GM[k[0]] == gated_in for k in streams):
        for gm in (gated_in,) + addends.get(gated_in, ()):
            global_buffers.append(f"g_{gm}.SetGlobalBuffer((__gm__ {elem_of(gm)} *){gm}, (uint64_t)(t.n - 1) * t.s_{gm} + "
                                  f"{in_gates - 1}u * t.g_{gm} + t.h);")
    for gm in rows_in:
        for a in addends.get(gm, ()):
            global_buffers.append(rows_of_h(a))
    if dgated is not None:
        global_buffers.append(f"g_{dgated}.SetGlobalBuffer((__gm__ {elem_of(dgated)} *){dgated}, "
                              f"(uint64_t)(t.n - 1) * t.s_{dgated} + {ngates}u * t.h);")
    for drow in drows:
        global_buffers.append(rows_of_h(drow))
    if rule.group_sums:
        global_buffers.append(" ".join(f"(void){o};" for o in rule.group_sums))
    if summed:
        global_buffers.append(f"g_ws.SetGlobalBuffer((__gm__ float *)workspace, (uint64_t)t.groups * {ngates}u * t.h);")
    else:
        global_buffers.append("(void)workspace;")
    # one double-buffered queue for a row tile's input streams and one for its outputs, each stream
    # or output a t.tile slice (16-element multiples: 32-byte aligned): every queue buffer holds an
    # event ID of its position, and Ascend910B has 8 per position (QUE_MAX_EVENT)
    narrow = [k for k in streams if GM[k[0]] in io or dtype != "float32"]  # the streams cast to fp32 in UB
    nfloat = nslots + len(narrow) + 1  # + input casts + one scratch
    def row_params(gms, part: str) -> list[str]:  # each narrow type's DataCopyPad parameters (p1, pad1, ...) gms use
        types = {elem_of(gm) for gm in gms if gm in io}
        return [line for k, t in enumerate(narrow_types, 1) if t in types
                for line in fixed.section("gates_narrow_params.cpp.in", part, K=str(k), T=t).splitlines()]
    copy_in = [f"LocalTensor<{elem}> x = in_.AllocTensor<{elem}>();"] if streams else []
    copy_in += row_params([GM[k[0]] for k in streams], "in")
    for i, k in enumerate(streams):
        gm = GM[k[0]]
        base = f"(uint64_t)r * t_.s_{gm} + off" + (f" + {k[1]}u * t_.g_{gated_in}" if k[1] is not None else "")
        pad = params_of(gm).replace("p", "pad")
        copy_in.append(f"DataCopyPad({tile_of(f'x[{i}u * t_.tile]', gm)}, g_{gm}[{base}], {params_of(gm)}, {pad});")
    for j, (_, a, gate) in enumerate(added):
        base = f"(uint64_t)r * t_.s_{a} + off" + (f" + {gate}u * t_.g_{a}" if gate is not None else "")
        copy_in.append(f"DataCopyPad(x[{len(streams) + j}u * t_.tile], g_{a}[{base}], p, pad);")
    copy_in += ["in_.EnQue(x);"] if streams else []
    inputs = [f"LocalTensor<{elem}> x = in_.DeQue<{elem}>();"] if streams else []
    for i, k in enumerate(streams):
        inputs += [f"LocalTensor<{elem_of(GM[k[0]])}> x_{_stream(rule, k)} = {tile_of(f'x[{i}u * t_.tile]', GM[k[0]])};",
                   f"(void)x_{_stream(rule, k)};"]
    for j, (i, a, gate) in enumerate(added):  # the input is the sum of its reads, in the rule's order
        s = _stream(rule, streams[i])
        inputs.append(instruction("Add", f"x_{s}", f"x_{s}", f"x[{len(streams) + j}u * t_.tile]", "n")
                      + f"  // + {a}" + (f" gate {gate}" if gate is not None else ""))
    compute: list[str] = []
    _, ref = print_program(compute.append, prog, outs, dtype, lambda k: _stream(rule, k), alloc=(slot, nslots),
                           narrow=narrow)
    compute = [line.removeprefix(" " * 8) for line in compute]
    scratch = f"tmp[{nfloat - 1}u * t_.tile]"
    for (oname, g), val in outs:  # each output's tile of out: its value stored, and added to its group sum
        tile = g if oname == gated else ngates + drows.index(GM[oname])
        compute += ["{", f"    LocalTensor<{elem_of(GM[oname])}> o = {tile_of(f'out[{tile}u * t_.tile]', GM[oname])};"]
        if is_const(val):
            compute += [f"    LocalTensor<float> c = {scratch};",
                        "    " + instruction("Dup", "c", ASCENDC.float_literal(val[1]), "n")]
            res = "c"
        else:
            res = ref(val)
        if dtype == "float32" and GM[oname] not in io:
            compute.append("    " + instruction("Muls", "o", res, ASCENDC.float_literal(1.0), "n")
                           + "  // exact copy into the output queue")
        else:
            compute.append("    " + instruction("Cast", "o", res, ASCENDC.round_mode("rint"), "n"))
        if summed and oname == gated:
            if GM[oname] in io:
                raise ValueError(f"{rule.op}: the group-summed output {GM[oname]} is not written narrow by io")
            acc = f"acc_.Get<float>()[{g}u * t_.tile]"
            if dtype == "float32":
                compute.append("    " + instruction("Add", acc, acc, "o", "n"))
            else:  # the bias sums the stored (rounded) gradients, as the definition says
                compute += [f"    LocalTensor<float> back = {scratch};",
                            "    " + instruction("Cast", "back", "o", ASCENDC.round_mode("none"), "n"),
                            "    " + instruction("Add", acc, acc, "back", "n")]
        compute.append("}")
    written = drows if kept is None else [d for d in drows if d in kept]
    if kept is not None and set(kept) - set(written):
        raise ValueError(f"{rule.op}: kept must name some of the row outputs {drows}, got {sorted(kept)}")
    copy_out = row_params(([dgated] if dgated else []) + written, "out")
    copy_out += [f"DataCopyPad(g_{dgated}[(uint64_t)r * t_.s_{dgated} + {g}u * t_.h + off], "
                 f"{tile_of(f'out[{g}u * t_.tile]', dgated)}, {params_of(dgated)});" for g in range(ngates)]
    copy_out += [f"DataCopyPad(g_{drow}[(uint64_t)r * t_.s_{drow} + off], "
                 f"{tile_of(f'out[{ngates + k}u * t_.tile]', drow)}, {params_of(drow)});" for k, drow in enumerate(drows)
                 if drow in written]
    write_sums = fixed.render("gates_write_sums.cpp.in", NGATES=str(ngates)).rstrip("\n")
    text = fixed.render(
        "gates_kernel.cpp.in", CLASS=cls, TILING=tiling, T=elem, NAME=naming.ascend_kernel(rule.short, dtype, v.tag),
        PARAMS=", ".join(ASCENDC.pointer(a) for a in args),
        INIT_PARAMS=", ".join(ASCENDC.pointer(a) for a in args[:-1]),
        INIT_ARGS=", ".join(args[:-1]), UNUSED=" ".join(f"(void){gm};" for gm in reads),
        GLOBAL_BUFFERS=_lines(global_buffers, 8), OUT_TILES=str(ngates + len(drows)), FLOAT_TILES=str(nfloat),
        # (a variant without inputs computes constants; InitBuffer takes no empty buffer)
        IN_QUEUE=(_lines([f"pipe_.InitBuffer(in_, 2, {len(streams) + len(added)}u * t.tile * sizeof({elem}));"], 8)
                  if streams else ""),
        SUM_BUFFER=_lines([f"pipe_.InitBuffer(acc_, {ngates}u * t.tile * sizeof(float));"], 8) if summed else "",
        CLEAR_SUMS=(_lines([instruction("Dup", "acc_.Get<float>()", ASCENDC.float_literal(0.0),
                                        f"(int32_t)({ngates}u * t_.tile)")], 16) if summed else ""),
        WRITE_SUMS="\n" + write_sums if summed else "",
        COPY_IN=_lines(copy_in, 8), INPUTS=_lines(inputs, 8), COMPUTE=_lines(compute, 8),
        FREE_INPUTS=_lines(["in_.FreeTensor(x);"], 8) if streams else "", COPY_OUT=_lines(copy_out, 8),
        IN_QUEUE_MEMBER=_lines(["TQue<TPosition::VECIN, 2> in_;"], 4) if streams else "",
        SUM_MEMBERS=_lines(["TBuf<TPosition::VECCALC> acc_;", "GlobalTensor<float> g_ws;"], 4) if summed else "",
        GLOBAL_TENSORS=_lines([f"GlobalTensor<{elem_of(gm)}> g_{gm};" for gm in tensors], 4))
    return text, nfloat, len(streams) + len(added), ngates + len(drows)


def _lines(lines: list[str], indent: int) -> str:
    """``lines`` indented by ``indent``, each after a newline: a template field that follows a line."""
    return "".join("\n" + (" " * indent + line if line else line) for line in lines)


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
