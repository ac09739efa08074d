"""The full LSTM's Ascend package (generated/ascend/lstm): CANN's aclnnLSTM and aclnnLstmBackward
(torch_npu's ``_lstm_npu`` / ``_lstm_npu_backward``: layers, directions, batch_first, variable length
through batchSizes) from the same definitions as the other targets' full LSTM.

  op_kernel/  the Cube GEMMs (lowering/ascend/cube.py: x.W_ih^T + bias over the sequence, h.W_hh^T per
              step, dgates.W_hh per step, the weight gradients dgates^T.x and dgates^T.h, db as
              ones.dgates, dx as dgates.W_ih), the two step kernels on the vector cores
              (schedules/ascend STEP_KERNELS through the "gates" pattern), the persistent forward and
              backward (lowering/ascend/persistent.py: a layer and direction's whole recurrence as one
              mixed kernel, W_hh in the cube cores' L1), the copy, zero-fill and add kernels; their
              tiling headers
  op_host/    aclnnop/aclnn_lstm.h, aclnnop/aclnn_lstm_backward.h; aclnn_lstm.cpp (the package's start,
              the common host helpers, the launch dispatcher from this module's table of the kernels,
              targets/ascend/lstm_host.cpp: the binders, the walk of the shared plan lowered onto these
              kernels, and the entry points lstm_entry.py generates from its record of their parameters); fg_lstm_launch.h (the launch functions, and the kernels' sizes);
              fg_lstm_plan.h (the layer recurrence's launch plan,
              fusedgrad/lstm/launches.py's data, for every size at once: fusedgrad.lstm.symbolic's tables
              and their evaluator, and lowering/ascend/lstm_plan.py's decisions for this host)

The aclnn API takes float32, float16 or bfloat16 tensors (all of one dtype).  The step kernels compute
in fp32; the GEMMs take the call's dtype with fp32 accumulation on the Cube (an fp16 or bf16 call's h
and dgates are rounded to it once, as the GEMMs read them); the fp16 / bf16 tensors the step kernels
read are widened into the workspace, and every output is rounded once on the way out (the converting
copies).
"""
from __future__ import annotations

import functools

from ...schedules.ascend import STEP_KERNELS
from .. import naming
from ..c_dialect import ASCENDC
from . import cube, fixed, gates, kernels, lstm_entry, lstm_plan, persistent
from .host import aclnn_header_text, launch_file

NAME = "lstm"
DTYPE = "float32"
HOST_FILE = "aclnn_lstm.cpp"
HEADERS = ["aclnn_lstm.h", "aclnn_lstm_backward.h"]  # aclnnLSTM's and aclnnLstmBackward's, as CANN names them
# the plan's GEMMs (lstm_host.cpp's launch kinds), fp32 out: kind -> (A K-major, B K-major, bias); one
# kernel per operand dtype: an fp16 or bf16 call's GEMMs take that dtype
GEMMS = {
    "OP_MM": (False, False, False),
    "OP_MM_BIAS": (False, False, True),
    "OP_MM_MK_KN": (False, True, False),
    "OP_MM_KM_KN": (True, True, False),
}
GEMM_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}  # operand dtype -> DT_<suffix>, macros' suffix
ELEMENT = {4: "float32", 2: "float16"}  # element size -> the dtype whose copy and fill kernels move it
STEPS = {"OP_FWD": "lstm_cell_forward", "OP_BWD": "lstm_step_backward"}  # launch kind -> step kernel

# the shapes lstm_host.cpp checks the call's tensors against, in the sizes' symbols (Sizes' members; IN: the
# width the check is given: a layer's input width, a sequence's columns): the states, a saved list's
# tensors, the parameters in params' order (CANN's), and a sequence laid out as the input (time-major,
# batch first, packed with batchSizes)
SHAPES = {"FG_LSTM_STATES": ("L*D", "B", "H"), "FG_LSTM_STEPS": ("T", "B", "H"), "FG_LSTM_W_IH": ("4*H", "IN"),
          "FG_LSTM_W_HH": ("4*H", "H"), "FG_LSTM_B_IH": ("4*H",), "FG_LSTM_B_HH": ("4*H",),
          "FG_LSTM_SEQ": ("T", "B", "IN"), "FG_LSTM_SEQ_BF": ("B", "T", "IN"), "FG_LSTM_PACKED": ("T*B", "IN")}

FORWARD_DOC = (
    "First phase of the full LSTM's forward (CANN's aclnnLSTM; torch_npu's _lstm_npu): check the arguments",
    "and plan every launch.  input [T, B, I] ([B, T, I] with batchFirst; [T*B, I] with batchSizes, a device",
    "int64 [T] of non-increasing batch sizes from B); params: per layer, per direction (forward, then",
    "reverse), w_ih [4H, in], w_hh [4H, H] and with hasBias b_ih, b_hh [4H]; hx: null (zeros) or {h0, c0},",
    "each [L*D, B, H].  Outputs: output [T, B, D*H] (batch first as input; [T, B, D*H] with batchSizes),",
    "hy, cy [L*D, B, H] (each sequence's last step), and with train the lists iOut, jOut (g), fOut, oOut,",
    "hOut, cOut, tanhCOut of L*D tensors [T, B, H] (zeros past a sequence's end).  float32, float16 or",
    "bfloat16, one dtype for all: the GEMMs take that dtype with fp32 accumulation (h rounded to it for",
    "them), the cell computes in fp32, outputs are rounded once; any strides (tensors whose rows the",
    "kernels cannot read in place are gathered into, or scattered from, the workspace); dropout 0.",
    "Returns 161001 for a missing tensor, 161002 for a wrong dtype, shape or flag.",
)
BACKWARD_DOC = (
    "First phase of the full LSTM's backward (CANN's aclnnLstmBackward; torch_npu's _lstm_npu_backward):",
    "the gradients of input, h0, c0 and params from dy (as the forward's output), dh, dc [L*D, B, H] and",
    "the forward's saved lists i, g, f, o, h, c, tanhc (each L*D tensors [T, B, H]).  outputMask (null:",
    "all) chooses among dxOut, dhPrevOut, dcPrevOut and dparamsOut (as params; both bias gradients are",
    "db).  Dtypes (dgates rounded to the call's dtype for the GEMMs; db from the fp32 dgates) and strides",
    "as the forward; train true, dropout 0.  161001 / 161002 as the forward.",
)


def _steps():
    """{op: (rule, variant tag, kernel file text, float slots, input streams, output tiles)}."""
    out = {}
    for rule in STEP_KERNELS:
        (v,) = gates.variants(rule)
        text, sizes = gates.step_kernel_file(rule, DTYPE)
        out[rule.op] = (rule, v.tag, text) + sizes[v.tag]
    return out


# the converting copies: (public dtype, widen or narrow) -> the launch kind
CASTS = {("float16", "widen"): "OP_WIDEN_F16", ("bfloat16", "widen"): "OP_WIDEN_BF16",
         ("float16", "narrow"): "OP_NARROW_F16", ("bfloat16", "narrow"): "OP_NARROW_BF16"}


def _copy_kernels() -> str:
    """The copy and zero-fill kernels of 4- and 2-byte elements (they move bits: fp16's serve bf16 too), the
    float32 add and the converting copies (fp16 / bf16 <-> the fp32 the step kernels compute on)."""
    head = ['#include "kernel_operator.h"', '#include "fg_lstm_cell_backward_tiling.h"  // FgCopyParams', "",
            "using namespace AscendC;", "", kernels.SCALAR_CASTS, ""]
    parts = []
    for dtype in ELEMENT.values():
        parts += [kernels.copy_source(naming.ascend_kernel(NAME, dtype, "copy"), dtype),
                  fixed.render("fill_kernel.cpp.in", NAME=naming.ascend_kernel(NAME, dtype, "fill"), T=ASCENDC.type(dtype))]
    parts.append(fixed.render("add_kernel.cpp.in", NAME=naming.ascend_kernel(NAME, "float32", "add")))
    for dtype, way in CASTS:
        t = ASCENDC.type(dtype)
        src, dst = (t, "float") if way == "widen" else ("float", t)
        parts.append(fixed.render("cast_kernel.cpp.in", NAME=naming.ascend_kernel(NAME, dtype, way), S=src, D=dst,
                                  MODE=ASCENDC.round_mode("none" if way == "widen" else "rint")))
    return "\n".join(head) + "\n".join(parts)


def _kernels(steps) -> list[tuple[str, str | None, str, tuple[str, ...]]]:
    """The package's kernels as the plan launches them: (launch kind, the DT_* or element size picking it
    among the kind's kernels, none where the kind has one; kernel symbol; its arguments)."""
    out = []
    for dtype, suffix in GEMM_DTYPES.items():
        for kind, (akm, bkm, bias) in GEMMS.items():
            out.append((kind, f"DT_{suffix}", cube.kernel_name(dtype, "float32", akm, bkm, bias),
                        ("a", "b") + (("bias",) if bias else ()) + ("c", "tiling")))
    for kind, op in STEPS.items():
        rule, tag, *_ = steps[op]
        out.append((kind, None, naming.ascend_kernel(rule.short, DTYPE, tag), rule.kernel_args))
    for size, dtype in ELEMENT.items():
        out += [("OP_COPY", str(size), naming.ascend_kernel(NAME, dtype, "copy"), ("src", "dst", "params")),
                ("OP_FILL", str(size), naming.ascend_kernel(NAME, dtype, "fill"), ("dst", "params"))]
    out.append(("OP_ADD", None, naming.ascend_kernel(NAME, "float32", "add"), ("a", "b", "dst", "params")))
    for (dtype, way), kind in CASTS.items():
        out.append((kind, None, naming.ascend_kernel(NAME, dtype, way), ("src", "dst", "params")))
    for dtype, suffix in GEMM_DTYPES.items():  # the persistent kernels, by the GEMMs' operand dtype
        out += [("OP_PERSIST", f"DT_{suffix}", persistent.kernel_name(dtype), persistent.ARGS),
                ("OP_PERSIST_BWD", f"DT_{suffix}", persistent.kernel_name_bwd(dtype), persistent.ARGS_BWD)]
    for dtype, suffix in GEMM_DTYPES.items():  # the float16 / bfloat16 backward reading the caller's dy
        if dtype != persistent.CELL_DTYPE:
            out.append(("OP_PERSIST_BWD_DY", f"DT_{suffix}", persistent.kernel_name_bwd(dtype, True), persistent.ARGS_BWD))
    return out


def _dispatcher(kernels) -> str:
    """lstm_launch.cpp.in filled: the launch kinds, the operand dtypes and fg_lstm_launch, a case per kind
    calling its kernels with the plan's arguments (the workspace as ws, the last as par)."""
    part = functools.partial(fixed.section, "lstm_launch.cpp.in")
    kinds = list(dict.fromkeys(k for k, *_ in kernels))
    most = max(len([a for a in args[:-1] if a != "workspace"]) for *_, args in kernels)
    lines = [part("head", KINDS=", ".join(kinds), DTYPES=", ".join(f"DT_{s}" for s in GEMM_DTYPES.values()),
                  ARGS=str(most), TILES=", ".join("{" + ", ".join(f"{n}u" for n in cube.tiles_struct(d)) + "}" for d in GEMM_DTYPES))]
    for kind in kinds:
        lines.append(part("case", KIND=kind))
        for _, dt, name, args in (k for k in kernels if k[0] == kind):
            it = iter(range(len(args)))
            call = ", ".join("ws" if a == "workspace" else "par" if a == args[-1] else f"a[{next(it)}]" for a in args)
            lines.append(part("call", NAME=name, ARGS=call) if dt is None else
                         part("call_if", DT=dt, NAME=name, ARGS=call))
        if any(k[1] is not None for k in kernels if k[0] == kind):
            lines.append(part("break"))
    lines.append(part("tail"))
    return "\n".join(lines)


def _shapes() -> str:
    """lstm_launch.cpp.in's shapes: SHAPES' dims as C expressions of the sizes (``s.L * s.D``, ``in``)."""
    part = functools.partial(fixed.section, "lstm_launch.cpp.in")
    def size(dim: str) -> str:
        return " * ".join(t if t.isdigit() else "in" if t == "IN" else f"s.{t}" for t in dim.split("*"))
    lines = [part("shapes", NAMES=", ".join(SHAPES))]
    for name, dims in SHAPES.items():
        sets = " ".join(part("dim", I=str(i), SIZE=size(d)) for i, d in enumerate(dims))
        lines.append(part("shape", NAME=name, DIMS=sets, N=str(len(dims))))
    lines.append(part("shapes_end"))
    return "\n".join(lines)


def _launch_header(steps) -> str:
    facts = fixed.facts()
    macros = [f"#define FG_LPF_L1_BYTES {facts['l1_kib'] * 1024}u  // an AI Cube core's L1",
              f"#define FG_LPF_L0B_BYTES {facts['l0b_kib'] * 1024}u  // its L0B",
              f"#define FG_LPF_L0C_BYTES {facts['l0c_kib'] * 1024}u  // its L0C",
              f"#define FG_LPF_A_TILES {persistent.A_TILES}u  // A tiles of h L1 keeps room for beside the slice"]
    for op in STEPS.values():
        rule, _, _, slots, streams, outs = steps[op]
        short = rule.short.upper()
        sizes = {"SLOTS": slots, "STREAMS": streams, "OUT_TILES": outs}
        # NARROW_SLOTS (and NARROW_DY_SLOTS: dy narrow too): its cells' in the float16 / bfloat16 persistent kernels
        for dy in (False, True) if op == "lstm_step_backward" else (False,):
            narrow = {persistent.cell_slots(op, d, dy) for d in persistent.DTYPES if d != persistent.CELL_DTYPE}
            if len(narrow) != 1:
                raise ValueError(f"{op}: the float16 and bfloat16 persistent cells' float slots differ: {narrow}")
            sizes["NARROW_DY_SLOTS" if dy else "NARROW_SLOTS"] = narrow.pop()
        macros += [f"#define FG_{short}_{name} {n}u" for name, n in sizes.items()]
    text = launch_file("FG_LSTM_LAUNCH_H", [(n, ", ".join(f"void *{a}" for a in args)) for _, _, n, args in _kernels(steps)])
    body, endif = text.rsplit("#endif", 1)
    return body + "\n// the sizes of the kernels the plan launches (lstm_host.cpp)\n" + "\n".join(macros) + "\n#endif" + endif


def host_source(steps) -> str:
    """op_host/aclnn_lstm.cpp: the start, the common helpers, the launch dispatcher (_dispatcher), the
    tensors' shapes (_shapes), the step kernels' pitch setters, lstm_host.cpp's helpers, the entry points'
    structs of bound tensors (lstm_entry), lstm_host.cpp's passes, and the entry points."""
    facts = fixed.facts()
    start = fixed.render("lstm_preamble.cpp.in", VECTOR_CORES=str(facts["vector_cores"]),
                         CUBE_CORES=str(facts["cube_cores"]), UB_KIB=str(facts["ub_kib"]),
                         UB_RESERVED_KIB=str(facts["ub_reserved_kib"]))
    common = fixed.render("lstm_host_common.cpp.in", HOST_COMMON=fixed.text("host_common.cpp"))
    pitches = [lstm_entry.step_pitches(steps[op][0].short, steps[op][0].kernel_args) for op in STEPS.values()]
    parts = [start + common + _dispatcher(_kernels(steps)), _shapes(), *pitches,
             fixed.section("lstm_host.cpp", "helpers"), *(lstm_entry.struct(e) for e in lstm_entry.ENTRIES),
             fixed.section("lstm_host.cpp", "passes"), *(lstm_entry.functions(e) for e in lstm_entry.ENTRIES)]
    return "\n\n".join(p.strip("\n") for p in parts) + "\n"


def files() -> dict[str, str]:
    """The package's files: {path relative to the package: text}."""
    steps = _steps()
    out = {
        **{f"op_kernel/fg_{NAME}_matmul_{dtype}.cpp": cube.kernel_file(dtype, [("float32",) + g for g in GEMMS.values()])
           for dtype in GEMM_DTYPES},
        f"op_kernel/fg_{NAME}_copy_{DTYPE}.cpp": _copy_kernels(),
        "op_kernel/fg_matmul_tiling.h": cube.TILING,
        "op_kernel/fg_lstm_step_tiling.h": fixed.text("lstm_step_tiling.h"),
        "op_kernel/fg_lstm_cell_backward_tiling.h": kernels.tiling_header("lstm_cell_backward"),
        f"op_host/aclnnop/{HEADERS[0]}": aclnn_header_text("LSTM", "the full LSTM's forward", lstm_entry.FORWARD.decls,
                                                           FORWARD_DOC),
        f"op_host/aclnnop/{HEADERS[1]}": aclnn_header_text("LstmBackward", "the full LSTM's backward",
                                                           lstm_entry.BACKWARD.decls, BACKWARD_DOC),
        f"op_host/{HOST_FILE}": host_source(steps),
        f"op_host/fg_{NAME}_launch.h": _launch_header(steps),
        f"op_host/fg_{NAME}_plan.h": lstm_plan.header(),
    }
    out.update(persistent.files())
    for op, (rule, _, text, *_) in steps.items():
        out[f"op_kernel/fg_{NAME}_{rule.short}_{DTYPE}.cpp"] = f"// generated by fusedgrad from te_defs/{op}.py -- do not edit.\n" + text
    return out
