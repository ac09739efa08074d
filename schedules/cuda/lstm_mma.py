"""The recurrent sums of the CUDA layer kernels on the tensor cores (their ``tensor_cores`` entry points).

One ``mma.sync`` multiplies a 16 x K tile of A by a K x 8 tile of B into 16 x 8 float32 accumulators
(m16n8k8 TF32 from float32 storage, m16n8k16 from float16 or bfloat16 storage; PTX ISA, "Matrix Fragments for
mma.m16n8k8" / "mma.m16n8k16").  A sum over H runs as one warp's chain of them, k group after k group,
so a sum never spans warps: the same bits for any grid, every run.  Where each operand element lives
(lane, register) is PTX's layout, with g = lane / 4 (the group) and t = lane % 4:

    A, TF32:     a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4)
    A, 16-bit:   a0 a1 (g, 2t, 2t+1)  a2 a3 (g+8, ..)  a4 a5 (g, 2t+8, 2t+9)  a6 a7 (g+8, ..)
    B, TF32:     b0 (t, g)  b1 (t+4, g)
    B, 16-bit:   b0 b1 (2t, 2t+1; g)  b2 b3 (2t+8, 2t+9; g)
    C:           c0 (g, 2t)  c1 (g, 2t+1)  c2 (g+8, 2t)  c3 (g+8, 2t+1)

The registers a lane holds are the tile's elements over the warp's lanes (``target``'s warp size).
In host emulation (a CPU target) a lane's accumulators are computed by the model the definitions
state (``te_defs._lstm_layer.TENSOR_CORE_SUMS``): per k group the float32 sum of the exact products in
increasing k, added to the running sum; the GPU's order within a group is the hardware's.
"""
from __future__ import annotations

import math

from tvm import DataType, tirx
from tvm.script.ir_builder import tirx as T

from ...te_defs import _lstm_layer as L
from ...te_defs import _tir, matmul
from ...te_defs._tir import loop, store
from ._util import warp_size

M, N = 16, 8  # rows and columns of one mma.sync's tile
K = {"float32": 8, "float16": 16, "bfloat16": 16}  # its k group by storage dtype
PTX = {"float32": ("m16n8k8", "tf32"), "float16": ("m16n8k16", "fp16"), "bfloat16": ("m16n8k16", "bf16")}
G = len(L.GATES)
GROUP = 4  # lanes of a fragment row group (PTX's layouts: lane = GROUP g + t)
HALF = M // 2  # A's and C's rows g and g + HALF; float16's k halves
WORD_BITS = 32  # an operand register of the instruction
# the blocks a SM must hold, ptxas told (__launch_bounds__): without it ptxas kept these kernels at 32
# registers a thread and spilled (the float32 forward, on sm_80 or sm_90 as the code around changed);
# one asks nothing of occupancy that the co-residency check does not (lowering.cuda.persistent_grid)
MIN_BLOCKS = 1


def a_element(dtype: str, lane, reg):
    """(row, k) of A (M x K) in ``reg`` of ``lane``."""
    g, t = lane // GROUP, lane % GROUP
    if dtype == "float32":
        return g + reg % 2 * HALF, t + reg // 2 * GROUP
    return g + reg // 2 % 2 * HALF, 2 * t + reg % 2 + reg // 4 * HALF


def b_element(dtype: str, lane, reg):
    """(k, column) of B (K x N) in ``reg`` of ``lane``."""
    g, t = lane // GROUP, lane % GROUP
    if dtype == "float32":
        return t + reg * GROUP, g
    return 2 * t + reg % 2 + reg // 2 * HALF, g


def c_element(lane, reg):
    """(row, column) of C (M x N) in ``reg`` of ``lane``."""
    g, t = lane // GROUP, lane % GROUP
    return g + reg // 2 * HALF, 2 * t + reg % 2


def registers(target, dtype: str) -> tuple[int, int, int]:
    """Elements of A, B and C a lane holds: each tile spread over the warp's lanes (the layouts above
    are for N groups of GROUP lanes)."""
    warp = warp_size(target)
    if warp != N * GROUP:
        raise ValueError(f"warp size: expected the {N * GROUP} lanes of mma.sync's fragment layouts, got {warp}")
    return M * K[dtype] // warp, K[dtype] * N // warp, M * N // warp


def tf32_word(bits):
    """``te_defs.matmul.tf32_expr``'s rounding on a float32's bits (uint32) as integer arithmetic: a
    NaN (bits above infinity's, sign aside) gets the quiet bit and no rounding increment, any other
    value half a TF32 unit (infinity stays), then the low 13 bits go: a few integer instructions a
    value, no branches, in the loop over k.  The same bits as ``tf32_expr`` for all 2^32 patterns
    (checked once against ``matmul.tf32`` in numpy; the tests check a NaN whose payload TF32 drops)."""
    def u(v):
        return tirx.const(v, "uint32")
    nan = ((bits & u(0x7FFFFFFF)) > u(matmul.EXPONENT)).astype("uint32")
    return ((bits | nan * u(matmul.QUIET)) + (u(1) - nan) * u(matmul.TF32_HALF)) & u(0xFFFFFFFF ^ matmul.TF32_DROPPED)


def operand(dtype: str, value, gpu: bool = False):
    """A stored value as the tensor cores take it: float32 rounded to TF32 (``tf32_word``; the
    instruction itself would drop the low bits), float16 and bfloat16 as they are.  On the GPU the bits are moved with
    CUDA's __float_as_uint / __uint_as_float (registers, not a variable's address cast)."""
    if dtype != "float32":
        return value
    if gpu:
        word = tf32_word(T.call_pure_extern("uint32", "__float_as_uint", value))
        return T.call_pure_extern(dtype, "__uint_as_float", word)
    return tirx.reinterpret(dtype, tf32_word(tirx.reinterpret("uint32", value)))


def product(grid, target, dtype: str, tx, tiles: int, extent, a, b, put, b_taken: bool = False) -> None:
    """The ``tiles`` tile products of a pass (tile i's A[16, extent] · B[extent, 8]), warp w taking
    tiles w, w + warps, ... in turn, each over the k groups in increasing k.  ``a(i, row, k)`` and
    ``b(i, k, column)`` give the stored values in ``dtype`` (k < extent: past it the terms are zeros),
    which go in as ``operand`` (``b_taken``: b's are that already: W_hh's slice holds it rounded);
    ``put(i, row, column, value)`` stores an accumulator."""
    warp = warp_size(target)
    warps = grid.threads // warp
    group = K[dtype]
    regs_a, regs_b, regs_c = registers(target, dtype)
    lane, first = tx % warp, tx // warp
    def padded(value, k):
        held = value(tirx.min(k, extent - 1))  # a bfloat16 slice's element is its bits: zero in its dtype
        return tirx.if_then_else(k < extent, held, tirx.const(0, str(held.ty)))

    for turn in range((tiles + warps - 1) // warps):
        i = first + turn * warps
        with _tir.when(i < tiles):  # the same for every lane of the warp
            if not grid.gpu:
                _emulate(grid, dtype, i, lane, regs_c, extent, group, padded, a, b, put)
                continue
            acc = _tir.local("acc", (regs_c,), L.ACC, scope="local")
            for r in range(regs_c):
                store(acc, (r,), T.float32(0))
            with loop("kg", (extent + group - 1) // group) as kg:
                fa = _fragment("frag_a", dtype, regs_a, lambda r: padded(
                    lambda kk: a(i, a_element(dtype, lane, r)[0], kk), kg * group + a_element(dtype, lane, r)[1]))
                fb = _fragment("frag_b", dtype, regs_b, lambda r: padded(
                    lambda kk: b(i, kk, b_element(dtype, lane, r)[1]), kg * group + b_element(dtype, lane, r)[0]),
                    taken=b_taken)
                shape, kind = PTX[dtype]
                T.evaluate(T.ptx_legacy.mma(shape, "row", "col", kind, kind, "fp32", fa.data, 0, fb.data, 0,
                                            acc.data, 0, False, dtype=L.ACC))
            for r in range(regs_c):
                row, col = c_element(lane, r)
                put(i, row, col, acc[r])


def _fragment(name, dtype, elements, value, taken: bool = False):
    """A lane's operand registers: ``elements`` values (``value(element)``, stored ones, ``operand``s
    where ``taken``) as the 32-bit words the instruction takes (a TF32 value a word, two 16-bit values
    a word, the lower first): the instruction's operands as they are, not ``dtype`` arrays read through a
    pointer cast."""
    per_word = WORD_BITS // DataType(dtype).bits
    words = _tir.local(name, (elements // per_word,), "uint32", scope="local")
    for w in range(elements // per_word):
        if dtype == "float32" and taken:
            store(words, (w,), T.call_pure_extern("uint32", "__float_as_uint", value(w)))
            continue
        if dtype == "float32":  # its bits bound once: the rounding names them twice
            bits = _tir.let("stored", T.call_pure_extern("uint32", "__float_as_uint", value(w)))
            store(words, (w,), tf32_word(bits))
            continue
        halves = [_bits16(value(w * per_word + e)).astype("uint32") for e in range(per_word)]
        store(words, (w,), halves[0] | (halves[1] << tirx.const(DataType(dtype).bits, "uint32")))
    return words


def _bits16(v):
    """A 16-bit stored value's bits: float16's reinterpreted, bfloat16's by ``_tir.bfloat16_bits`` (a
    bfloat16 expression TVM's legalization would widen), a bfloat16 slice's element as it is."""
    ty = str(v.ty)
    if ty == _tir.BFLOAT16_BITS:
        return v
    return _tir.bfloat16_bits(v) if ty == "bfloat16" else tirx.reinterpret("uint16", v)


def _emulate(grid, dtype, i, lane, regs_c, extent, group, padded, a, b, put) -> None:
    """A lane's accumulators of tile ``i`` on the host, in the order the definitions state (loops, not
    unrolled as the GPU's registers are: the host build stays small)."""
    with loop("reg", regs_c) as r:
        row, col = c_element(lane, r)
        acc = grid.scratch("acc", (2,))  # the running sum, the k group's
        xy = grid.scratch("xy", (2,), dtype)
        store(acc, (0,), T.float32(0))
        with loop("kg", (extent + group - 1) // group) as kg:
            store(acc, (1,), T.float32(0))
            with loop("k", group) as k:
                store(xy, (0,), padded(lambda kk: a(i, row, kk), kg * group + k))
                store(xy, (1,), padded(lambda kk: b(i, kk, col), kg * group + k))
                store(acc, (1,), acc[1] + L.wide(operand(dtype, xy[0])) * L.wide(operand(dtype, xy[1])))
            store(acc, (0,), acc[0] + acc[1])
        put(i, row, col, acc[0])


def tile_shape(layer, target) -> tuple[int, int, tuple[int, ...]]:
    """The ``tensor_cores`` entry's passes of ``layer`` (a rule) over a step's rows: (tile products a
    pass, rows a pass, the shared float32 tile its accumulators go to).  A pass's tiles are whole m16n8
    tiles of the block's outputs (forward: 4 gates x UNITS units, gate-major, as the slice; backward:
    per gate block its UNITS columns, padded to 8), one per warp where the warps outnumber one row
    tile's: as many 16-row tiles a pass as that leaves (forward, 4 warps, UNITS 4: 2 row tiles, 32
    rows; backward: 4 gates x 1 tile each, 16 rows).

    Why this tiling: a warp runs each of its tiles' sums over all of H, so no sum is split across
    warps (no reduction, no barrier more, a sum the same whatever the grid), and every warp has a
    tile at B <= 32 (one pass at the full LSTM's B = 32).  The backward's tiles are per gate block,
    so a tile's sum is one block's sum of the definition, the four then added i, f, g, o; with
    UNITS 4 half of each tile's columns are padding (an mma has 8), the price of a block's units.
    The unit loop the CUDA-core entry has per thread becomes the warp's k loop: H / 8 (TF32) or
    H / 16 (float16) instructions a tile a step."""
    U, threads, _ = layer.shape(target)
    if layer.op == "lstm_layer_forward":
        if G * U % N:
            raise ValueError(f"UNITS: expected 4 gates x UNITS a multiple of {N} (the mma's "
                             f"columns), got UNITS={U}")
        per_row_tile, cols = G * U // N, (G * U,)
    else:
        per_row_tile, cols = G * -(-U // N), (-(-U // N) * N,)
    row_tiles = max(1, threads // warp_size(target) // per_row_tile)
    rows = row_tiles * M
    return per_row_tile * row_tiles, rows, ((G,) if layer.op != "lstm_layer_forward" else ()) + (rows,) + cols


def block_tile(grid, layer, target, name):
    """A block's float32 tile of ``tile_shape``'s shape (static shared memory on the GPU, a row per
    block on the host): ``at(bx, *index)`` its element."""
    shape = tile_shape(layer, target)[2]
    size = math.prod(shape)
    tile = _tir.local(name, (size,) if grid.gpu else (grid.blocks * size,), L.ACC,
                      scope="shared" if grid.gpu else "global")

    def at(bx, *index):
        flat = 0
        for extent, i in zip(shape, index):
            flat = flat * extent + i
        return tile, (flat if grid.gpu else bx * size + flat,)
    return at


def forward_passes(layer, ctx, target, tile) -> None:
    """A step's sums on the tensor cores, pass after pass of ``tile_shape``'s rows: each warp's
    tiles into the block's shared ``tile``, a block barrier, the cell of the pass's rows from it,
    a block barrier (the next pass writes the tile again)."""
    a, U, H, B, n, grid, dtype = (ctx[k] for k in ("a", "U", "H", "B", "n", "grid", "dtype"))
    tiles, rows, _ = tile_shape(layer, target)
    per_row_tile = G * U // N
    with loop("pass", (n + rows - 1) // rows) as ps:
        def sums(bx, tx):
            def row_of(i, row):
                return ps * rows + i // per_row_tile * M + row

            def a_value(i, row, r):
                b = row_of(i, row)
                held = layer.h_prev(ctx, tirx.min(b, B - 1), r)
                return tirx.if_then_else(b < n, held, tirx.const(0, dtype))

            def column(i, col):  # (gate, unit) of a tile's column: the slice's gate-major order
                c = i % per_row_tile * N + col
                return c // U, c % U

            def put(i, row, col, value):
                store(*tile(bx, i // per_row_tile * M + row, i % per_row_tile * N + col), value)

            def run(weight, on_chip=False):
                product(grid, target, dtype, tx, tiles, H, a_value, lambda i, r, col: weight(*column(i, col), r), put,
                        on_chip)
            layer.w_hh_sums(ctx["w_slice"], lambda wsh, index: run(lambda k, u, r: wsh[index(bx, k, u, r)], True),
                            lambda: run(lambda k, u, r: a["w_hh"][k, tirx.min(bx * U + u, H - 1), r]))

        def cell(bx, tx):
            u, br = tx % U, tx // U
            j = bx * U + u
            with _tir.when(j < H):
                with layer.rows(tirx.min(n - ps * rows, rows), br, ctx["slots"]) as q:
                    lb = br + q * ctx["slots"]
                    layer.cell(ctx, ps * rows + lb, j, lambda k: _load(tile(bx, lb, k * U + u)))

        grid.phase(sums)
        grid.block_sync()
        grid.phase(cell)
        grid.block_sync()


def backward_passes(layer, ctx, target, tile) -> None:
    """Phase B on the tensor cores, pass after pass of ``tile_shape``'s rows: each gate block's
    dgates[rows, k, :] · W_hh[k, :, the block's units] into the block's shared ``tile``, a block
    barrier, each owned (row, unit)'s blocks added i, f, g, o into dh0, a block barrier."""
    a, U, H, B, n, tt, grid, dtype = (ctx[k] for k in ("a", "U", "H", "B", "n", "tt", "grid", "dtype"))
    tiles, rows, (_, _, width) = tile_shape(layer, target)
    per_gate = width // N
    with loop("pass", (n + rows - 1) // rows) as ps:
        def sums(bx, tx):
            def where(i):  # (row tile, gate, column tile) of tile i
                return i // (G * per_gate), i // per_gate % G, i % per_gate

            def a_value(i, row, j):
                b = ps * rows + where(i)[0] * M + row
                held = a["dgates"][tt, tirx.min(b, B - 1), where(i)[1], j]
                return tirx.if_then_else(b < n, held, tirx.const(0, dtype))

            def put(i, row, col, value):
                mt, k, ct = where(i)
                store(*tile(bx, k, mt * M + row, ct * N + col), value)

            def run(weight, on_chip=False):  # the columns past the block's units are not read: unit clamped
                product(grid, target, dtype, tx, tiles, H, a_value, lambda i, j, col: weight(
                    where(i)[1], tirx.min(where(i)[2] * N + col, U - 1), j), put, on_chip)
            layer.w_hh_sums(ctx["w_slice"], lambda wsh, index: run(lambda k, u, j: wsh[index(bx, k, u, j)], True),
                            lambda: run(lambda k, u, j: a["w_hh"][k, j, tirx.min(bx * U + u, H - 1)]))

        def add(bx, tx):
            u, br = tx % U, tx // U
            with _tir.when(bx * U + u < H):
                with layer.rows(tirx.min(n - ps * rows, rows), br, ctx["slots"]) as q:
                    lb = br + q * ctx["slots"]
                    part = [_load(tile(bx, k, lb, u)) for k in range(G)]
                    store(a["dh0"], (ps * rows + lb, bx * U + u), ((part[0] + part[1]) + part[2]) + part[3])

        grid.phase(sums)
        grid.block_sync()
        grid.phase(add)
        grid.block_sync()


def _load(at):
    buffer, index = at
    return buffer[index]
