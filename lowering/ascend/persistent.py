"""The full LSTM's persistent forward and backward on Ascend: the recurrence of one layer and direction as
one mixed kernel (CANN's KERNEL_TYPE_MIX_AIC_1_2: each block one AI Cube core and two vector cores),
W_hh held in the cube cores' L1 across all steps instead of read from GM at every step.

Block b owns ``units`` hidden units (the last block fewer).  Its cube core keeps the W_hh rows of those
units (4 gate rows a unit, all H columns) in L1; per step it reads h_{t-1} from GM, computes its
columns of h . W_hh^T into L0C (b_hh is in xw, the sequence GEMM's addend, as in the per-step plan) with the Cube GEMM's parts
(cube_parts.cpp.in's sections, K in the GEMM's chunks and order: the per-step plan's bits), writes them
to the gates workspace and sets a mode-2 flag (CrossCoreSetFlag) for its two vector cores; each runs
the generated cell (the step-forward class gates.py prints from te_defs/lstm_cell_forward.py) on half
of the block's units; then every core meets (SyncAll<false>) before the next step reads h_t.  The
kernel and the design: targets/ascend/persistent_kernel.cpp.in, docs/BENCHMARKS.md ("the persistent
design").  Equal lengths, or packed sequences (batchSizes: each step's batch size after the tiling).

The GEMMs' operands are of the call's dtype (float32, float16 or bfloat16; one file of kernels each), as
in the per-step plan.  The cells compute in fp32; a float16 / bfloat16 kernel's cells read and write the
caller's tensors in its dtype (``NARROW``: cast to fp32 in UB on the way in, rounded RINT on the way out,
the per-step plan's widening and narrowing copies' Casts, so the bits stay its own): the forward's h (then
the copy the next step's GEMM reads) and activations, the backward's saved activations and c_{t-1}, and dy
where it is the caller's (the top layer's; a lower layer's is a GEMM's fp32 output: a second backward kernel,
``dy=True``, reads it in the call's dtype).  What stays fp32: the gates the Cube writes, xw, c's recurrence
in the forward, dh, dc and dgates; each vector core of the backward, after its cell, rounds its own columns
of dgates_t into the copy the Cube reads (persistent_narrow.cpp.in: the narrowing copy's Cast).

The backward through time (targets/ascend/persistent_bwd_kernel.cpp.in) takes the same split: block b's
cube core keeps the W_hh columns of its units, all 4H rows, in L1 (K-major, as the per-step plan's
dgates . W_hh reads them); per step, in the backward's order, its vector cores run the generated cell
backward (te_defs/lstm_step_backward.py's class) on their halves, every core meets (SyncAll<false>), and
the cube core computes its units' columns of dh_{t-1} = dgates_t . W_hh (K = 4H in the per-step GEMM's
chunks and order: its bits) and flags its vector cores.  The weight gradients stay GEMMs over all steps.

The split (``split``): ``units`` a multiple of 16 (each vector core's half whole 32-byte blocks of
fp32), its slice (in the operands' dtype) in L1 beside A's tiles, the four gates' B tiles in L0B and C tiles
in L0C at once (the forward's Mmads), and the fewest blocks (each
block's cube core reads all of h every step), at most the cube cores and half the vector cores.  Where no
slice fits L1 on that many blocks the slice is streamed: every step each cube core reads its units' W_hh
from GM a K chunk (four gates' tiles) at a time beside A's tiles, with the most units L0B and L0C take,
double-buffered (STREAM_BUFS chunk buffers and A tiles in turn, each its own event IDs: chunk k + 1's
copies run beside chunk k's loads and Mmads, the same K order);
None where that needs more blocks too (the host keeps the per-step plan for that layer).
"""
from __future__ import annotations

import functools
import re

from ...schedules.ascend import STEP_KERNELS
from .. import naming
from ..c_dialect import ASCENDC
from . import cube, fixed, gates

CELL_DTYPE = "float32"  # the cells compute in fp32, whatever the GEMMs read
DTYPES = ("float32", "float16", "bfloat16")  # the GEMMs' operands: the call's dtype
TEMPLATE = "persistent_kernel.cpp.in"
TEMPLATE_BWD = "persistent_bwd_kernel.cpp.in"
TILING = fixed.text("persistent_tiling.h")  # the tiling struct the host and the kernel share
A_TILES = 2  # A's tiles of h that L1 keeps room for beside the slice
# L1 buffers a streamed slice takes in turn, an A tile (of the A_TILES) and a K chunk of the four gates each:
# persistent_tiling.h's FG_LP_STREAM_BUFS, the kernels' and the host's (read from it: one number for all)
STREAM_BUFS = int(re.search(r"FG_LP_STREAM_BUFS (\d+)u", TILING).group(1))
# the kernel's GM arguments, in order (its tiling after them)
ARGS = ("h0", "w", "xw", "c0", "hy", "hg", "cy", "i", "f", "g", "o", "tanhc", "gates", "tiling")
# the backward kernel's: W_hh, the dh workspace, dy, the two dc workspaces, c0, the forward's c and
# activations, dgates, and dgates as the GEMM reads them
ARGS_BWD = ("w", "dhr", "dy", "dca", "dcb", "c0", "c", "i", "f", "g", "o", "tanhc", "dgates", "dgg", "tiling")


def _cd(a: int, b: int) -> int:
    return -(-a // b)


def blocks_at_most(facts: dict | None = None) -> int:
    """Blocks a launch may have: one cube core and two vector cores each (the target's facts; the host
    takes the runtime's counts the same way)."""
    facts = facts or fixed.facts()
    return min(facts["cube_cores"], facts["vector_cores"] // 2)


def split(h: int, dtype: str = CELL_DTYPE, cores: int | None = None, stream: bool = False,
          facts: dict | None = None) -> tuple[int, int] | None:
    """(blocks, units) for hidden size ``h`` on at most ``cores`` blocks (default ``blocks_at_most()``),
    or None where no split fits L1, L0B and L0C (``facts``' sizes, default the target's).  ``stream``: the
    split whose slice is read from GM every step, a K chunk of the four gates at a time into STREAM_BUFS
    buffers beside A's tiles in L1 (the most units L0B and L0C take)."""
    if h < 1:
        raise ValueError(f"persistent split: hidden size h must be >= 1, got {h}")
    size = cube.SIZE[dtype]
    bm, _, bk = cube.tiles(dtype)
    facts = facts or fixed.facts()
    cores = blocks_at_most(facts) if cores is None else cores
    k = _cd(h, bk) * bk  # the slice holds whole K chunks
    room = facts["l1_kib"] * 1024 - A_TILES * bm * bk * size
    l0 = min(facts["l0b_kib"] * 1024 // (4 * bk * size), facts["l0c_kib"] * 1024 // (4 * bm * 4)) // 16 * 16  # 4 gates' tiles
    most = (l0 if STREAM_BUFS * 4 * l0 * bk * size <= room else 0) if stream else min(room // (4 * k * size), l0) // 16 * 16
    if most < 16:
        return None
    units = 16 * _cd(_cd(h, _cd(h, most)), 16)
    blocks = _cd(h, units)
    return (blocks, units) if blocks <= cores else None


def host_split(h: int, dtype: str = CELL_DTYPE, cores: int | None = None,
               facts: dict | None = None) -> tuple[int, int, bool] | None:
    """The split the host takes (fg_lpf_split): the slice in L1 where it fits, else streamed; None: the
    per-step plan."""
    for stream in (False, True):
        got = split(h, dtype, cores, stream, facts)
        if got:
            return got + (stream,)
    return None


def kernel_name(dtype: str = CELL_DTYPE) -> str:
    return naming.ascend_kernel("lstm", dtype, "persistent")


def kernel_name_bwd(dtype: str = CELL_DTYPE, dy: bool = False) -> str:
    return naming.ascend_kernel("lstm", dtype, "dy_persistent_bwd" if dy else "persistent_bwd")


# the step kernels' classes under this file's own names (a twin's shim includes every file of the package)
CELL_CLASS = {"lstm_cell_forward": "FgLpfCell", "lstm_step_backward": "FgLpbCell"}
# the cells' tensors a float16 / bfloat16 kernel reads or writes in its dtype (the step kernels' arguments)
NARROW = {"lstm_cell_forward": ("hy", "i", "f", "g", "o", "tanhc"),
          "lstm_step_backward": ("cx", "i", "f", "g", "o", "tanhc")}
KEPT_INFER = ("hy", "cy")  # what the forward's cell writes without train (the activations: nothing reads them)


def cell_class(op: str, dtype: str = CELL_DTYPE, dy: bool = False, infer: bool = False) -> str:
    """The C++ class of ``op``'s cell in the persistent kernels of ``dtype`` GEMMs (``dy``: the backward's
    cell reading dy in that dtype too; ``infer``: the forward's cell without train, writing only h and c)."""
    return CELL_CLASS[op] + ("" if dtype == CELL_DTYPE else dtype.capitalize()) + ("Dy" if dy else "") + \
        ("Infer" if infer else "")


@functools.lru_cache(maxsize=None)
def _cell_source(op: str, dtype: str, dy: bool = False, infer: bool = False):
    """(``op``'s step rule, the generated kernel of its cell in the ``dtype`` persistent kernels, its float
    temp slots); ``dy``: dy read in ``dtype`` too (a float16 / bfloat16 backward's); ``infer``: the forward's
    cell writing only h and c (KEPT_INFER), its activations computed in UB."""
    (rule,) = [r for r in STEP_KERNELS if r.op == op]
    (v,) = gates.variants(rule)
    if dy and (dtype == CELL_DTYPE or op != "lstm_step_backward"):
        raise ValueError(f"{op}: only a float16 / bfloat16 backward's cell reads dy narrow, got dtype {dtype}")
    if infer and op != "lstm_cell_forward":
        raise ValueError(f"{op}: only the forward's cell has an inference form")
    io = {a: dtype for a in NARROW[op] + (("dy",) if dy else ())} if dtype != CELL_DTYPE else None
    text, slots, _, _ = gates.kernel_source(rule, CELL_DTYPE, v, io, KEPT_INFER if infer else None)
    return rule, v, text, slots


def cell_slots(op: str, dtype: str, dy: bool = False) -> int:
    """The float temp slots of ``op``'s cell in the ``dtype`` persistent kernels (the host's tiling: its
    input streams and output tiles are the fp32 step kernel's, each fp32-sized)."""
    return _cell_source(op, dtype, dy)[3]


def _cell(op: str = "lstm_cell_forward", dtype: str = CELL_DTYPE, dy: bool = False, infer: bool = False):
    """(``op``'s step rule, its class's C++ without its entry, named cell_class(op, dtype, dy, infer))."""
    rule, v, text, _ = _cell_source(op, dtype, dy, infer)
    entry = '\nextern "C" __global__ __aicore__ void '
    if text.count(entry) != 1:
        raise ValueError(f"{rule.op}'s kernel source: expected one entry after its class, found {text.count(entry)}")
    cls, body = naming.ascend_class(rule.short, CELL_DTYPE, v.tag), text[:text.index(entry)].rstrip()
    head = f"class {cls} {{"
    if body.count(cls) != 1 or head not in body:
        raise ValueError(f"{rule.op}'s kernel source: expected its class {cls} named once, in its head")
    return rule, _with_bind(body.replace(head, f"class {cell_class(op, dtype, dy, infer)} {{")) + "\n"


def _with_bind(cls: str) -> str:
    """The class with a method Bind(...): Init's arguments, Init less its buffers (the pipe's InitBuffer
    calls), so that one object, its pipe and queues made once, runs every step on that step's tensors."""
    start = cls.index("    __aicore__ inline void Init(")
    end = cls.index("\n    }\n", start) + len("\n    }\n")
    init = cls[start:end]
    kept = [line for line in init.splitlines() if "InitBuffer(" not in line]
    if len(kept) == len(init.splitlines()):
        raise ValueError("the cell's Init makes no buffers: no Bind to derive from it")
    bind = "\n".join(kept).replace("inline void Init(", "inline void Bind(", 1) + "\n"
    return cls[:end] + "\n" + bind + cls[end:]


def _narrow(dtype: str, step: str, dy: bool = False) -> dict[str, str]:
    """The fields of the ``step`` kernel (forward, backward) of ``dtype`` that its cell's dtypes decide: CELL_CLASS,
    ROW and the backward's DY_ROW (FgLpRow's element type of the NARROW tensors and of dy: fp32 unless given),
    and NARROW_*, persistent_narrow_steps.cpp.in's sections (the vector core's UB for the rounding, taken from
    the cell's pipe once the cell has made its buffers, and the rounding of its own columns of dgates): the
    backward's only (the forward's cell writes h in the call's dtype), empty for float32, whose GEMM reads the
    fp32 rows."""
    op = "lstm_cell_forward" if step == "forward" else "lstm_step_backward"
    row = "" if dtype == CELL_DTYPE else f"<{ASCENDC.types[dtype]}>"
    fields = {"CELL_CLASS": cell_class(op, dtype, dy), "ROW": row}
    if step == "backward":
        fields["DY_ROW"] = row if dy else ""
    if step == "forward":
        return fields
    if dtype == CELL_DTYPE:
        return {**fields, **{k: "" for k in ("NARROW_DECL", "NARROW_INIT", "NARROW")}}
    name, t = "persistent_narrow_steps.cpp.in", ASCENDC.types[dtype]
    return {**fields, "NARROW_DECL": "\n" + fixed.section(name, "decl"),
            "NARROW_INIT": "\n" + fixed.section(name, "init"), "NARROW": "\n" + fixed.section(name, step, T=t)}


def _zero_a(t: str) -> str:
    """The zero fill of the kernel's A tiles (``bufs`` of them), of element type ``t``."""
    return cube.part_at("zero_fill", 2, BUFFER="a1_all", SIZE="bufs * FG_MM_BM * FG_MM_BK", T=t)


def kernel(dtype: str = CELL_DTYPE) -> str:
    """The persistent forward kernel of ``dtype`` GEMM operands."""
    rule, _ = _cell()
    part = cube.part
    t = ASCENDC.types[dtype]
    return fixed.render(
        TEMPLATE, NAME=kernel_name(dtype),
        CELL_TILING=naming.ascend_tiling(rule.short), T=t,
        A_COPY=part("a_rows_copy"), A_LOAD=part("a_rows_load"), B_COPY=part("b_rows_copy"), B_LOAD=part("b_rows_load"),
        B_COPY_STEP=cube.part_at("b_rows_copy", 7),
        ZERO_A=_zero_a(t), MMAD=part("mmad"),
        **_narrow(dtype, "forward"))


def kernel_bwd(dtype: str = CELL_DTYPE, dy: bool = False) -> str:
    """The persistent backward kernel of ``dtype`` GEMM operands (dh_{t-1} = dgates_t . W_hh: B is W_hh
    K-major, no bias); ``dy``: its cell reads dy in ``dtype`` (float16, bfloat16: the caller's dy)."""
    rule, _ = _cell("lstm_step_backward")
    t = ASCENDC.types[dtype]
    b = "b_kmajor_fp32" if dtype == "float32" else "b_kmajor"  # fp32: bands of 16 K rows (cube.py)
    return fixed.render(
        TEMPLATE_BWD, NAME=kernel_name_bwd(dtype, dy),
        CELL_TILING=naming.ascend_tiling(rule.short), T=t,
        A_COPY=cube.part_at("a_rows_copy", 6), A_LOAD=cube.part_at("a_rows_load", 5), B_COPY=cube.part_at(f"{b}_copy", 3),
        B_COPY_STEP=cube.part_at(f"{b}_copy", 6), ZERO_B_STEP=cube.part_at("zero_fill", 7, BUFFER="b1", SIZE="u16 * FG_MM_BK", T=t),
        B_LOAD=cube.part_at(f"{b}_load", 5), MMAD=cube.part_at("mmad", 5),
        ZERO_A=_zero_a(t),
        ZERO_B=cube.part_at("zero_fill", 3, BUFFER="b1", SIZE="u16 * FG_MM_BK", T=t), **_narrow(dtype, "backward", dy))


def kernel_file(dtype: str = CELL_DTYPE) -> str:
    """op_kernel/fg_lstm_persistent_<dtype>.cpp: the Cube GEMM's head of ``dtype``, the fp32 cells' classes and
    the rounding helper (each once in a translation unit), the cells of ``dtype``'s (float16, bfloat16), the
    forward's kernel and the backward's (float16, bfloat16: and the backward reading dy in ``dtype``); each
    forward cell with its inference form."""
    (fwd, fwd_cls), (bwd, bwd_cls) = _cell("lstm_cell_forward"), _cell("lstm_step_backward")
    infer = _cell("lstm_cell_forward", infer=True)[1]
    low = dtype != CELL_DTYPE
    own = [_cell(op, dtype)[1] for op in NARROW] + [_cell("lstm_cell_forward", dtype, infer=True)[1],
                                                   _cell("lstm_step_backward", dtype, True)[1]] if low else []
    tilings = dict.fromkeys((fwd.tiling_header, bwd.tiling_header))
    narrow = fixed.render("persistent_narrow.cpp.in", MODE=ASCENDC.round_mode("rint"))
    head = [f"// generated by fusedgrad: the persistent LSTM forward and backward, {dtype} GEMMs (lowering/ascend/"
            f"persistent.py; the cells from te_defs/{fwd.op}.py and te_defs/{bwd.op}.py) -- do not edit.",
            cube.head(dtype).rstrip("\n"), *(f'#include "fg_{t}.h"' for t in tilings),
            '#include "fg_lstm_persistent_tiling.h"', "", gates.SCALAR_CASTS,
            "#ifndef FG_LP_CELLS  // the cells' classes, once in a translation unit of several of these files",
            "#define FG_LP_CELLS", fwd_cls, infer, bwd_cls + "#endif", narrow, *own]
    return "\n".join(head) + "\n" + kernel(dtype) + "\n" + kernel_bwd(dtype) + ("\n" + kernel_bwd(dtype, True) if low else "")


def files() -> dict[str, str]:
    """The persistent kernels' files in the full LSTM's package (op_kernel/)."""
    return {**{f"op_kernel/fg_lstm_persistent_{dtype}.cpp": kernel_file(dtype) for dtype in DTYPES},
            "op_kernel/fg_lstm_persistent_tiling.h": TILING}
