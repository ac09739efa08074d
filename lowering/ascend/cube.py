"""GEMMs on the Cube unit of an Ascend AI Cube core: C[M, N] = A[M, K] . B[N, K]^T, printed as AscendC.

The LSTM's GEMMs all take this form: x W_ih^T and h W_hh^T with the weights stored [4H, in] as
PyTorch keeps them, and the weight gradients dgates^T x once dgates is transposed.  The kernel uses
the basic Cube API (CANN's own matmul kernels, catlass and ops-nn, do the same), not the high-level
Matmul API, whose client/server synchronisation is undocumented and could not be held to CANN's
rules by a twin:

    GM A rows   --DataCopy(Nd2NzParams), MTE2-->  L1 (Nz)  --LoadData, MTE1-->  L0A (Zz)
    GM B rows   --DataCopy(Nd2NzParams), MTE2-->  L1 (Nz of B^T = Zn of B)  --one LoadData-->  L0B (Zn)
    Mmad (M): L0C (Nz, fp32) += L0A x L0B, over K in steps of BK
    Fixpipe (FIX): L0C -> GM rows, fp32 kept or rounded to fp16/bf16 (nearest even)

Every ordering is the kernel's own (the compiler inserts none on the cube): MTE2_MTE1, MTE1_M, M_FIX
for each read after a write, MTE1_MTE2, M_MTE1, FIX_M before a buffer is written again, a
PipeBarrier<PIPE_M> after each Mmad; the kernel's event IDs come from TPipe (AllocEventID), which on a
cube core keeps M_MTE1 IDs 0-2 for itself.  Output tiles [BM, BN] go to the cores in units of one or
two row tiles by a column of tiles (``group``), consecutive units (row of units by row of units,
ceil(units / cores) a core), and each tile is summed over all of K by one core, in K order: the same
bits for any core count and either unit.  In a unit of two, each chunk of B goes to L1 and L0B once for
both row tiles (their C tiles fill L0C), so B is read once per row of units: the host takes two where
that reads fewer bytes and the busiest core gets at most a quarter more tiles.  Where a row of units' A,
all of K, fits L1 beside B's tile (``a_band``), a core keeps it there while it walks that row and copies
only B for the next unit, so A is read about once instead of once per column of tiles (``a_loads``
counts it).  A tile of one row is computed as 16 copies of that row: an Mmad with m == 1 is a GEMV that
reads L0A as a plain row, not in the Zz layout the other rows use.

Tile sizes come from the target's facts (targets/ascend): BM = BN = 8 fractals, and BK as much as fits
half of L0A (an A tile and a B tile then take half of L0A and L0B each, and an fp32 C tile half of L0C).

The C++ is targets/ascend's: cube_head.cpp.in (a file's includes and tile macros), cube_kernel.cpp.in
(one kernel) with the parts that depend on the operands' layouts and the bias in cube_parts.cpp.in's
sections, and matmul_tiling.h; this module picks the parts and fills the fields.
"""
from __future__ import annotations

import functools
import textwrap

from ... import targets
from ..c_dialect import ASCENDC
from . import fixed

FACTS = targets.get("ascend").facts
DTYPES = ("float32", "float16", "bfloat16")
QUANT = {"float32": "NoQuant", "float16": "F322F16", "bfloat16": "F322BF16"}
SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}  # bytes an element of each input dtype


def tiles(dtype: str) -> tuple[int, int, int]:
    """(BM, BN, BK) of ``dtype``'s kernel, from the cube core's buffer sizes."""
    frac, size = FACTS["cube_fractal"], SIZE[dtype]
    bm = bn = 8 * frac
    bk = FACTS["l0a_kib"] * 1024 // 2 // (bm * size) // frac * frac
    assert bm * bk * size <= FACTS["l0a_kib"] * 512 and bn * bk * size <= FACTS["l0b_kib"] * 512
    assert bm * bn * 4 <= FACTS["l0c_kib"] * 512 and 2 * (bm + bn) * bk * size <= FACTS["l1_kib"] * 1024
    return bm, bn, bk


TILING = fixed.text("matmul_tiling.h")  # the tiling struct the host and the kernels share
PARTS = "cube_parts.cpp.in"  # the kernel's parts by operand layout and bias, as sections
# the operands' layouts (their sections in PARTS): rows, or K-major (fp32 K-major in bands of 16 rows)
# and the GM extent of each, from the tiling's sizes and row pitches
A_SIZES = {"rows": "(uint64_t)(t.m - 1u) * t.lda + t.k", "kmajor": "(uint64_t)(t.k - 1u) * t.lda + t.m"}
B_SIZES = {"rows": "(uint64_t)(t.n - 1u) * t.ldb + t.k", "kmajor": "(uint64_t)(t.k - 1u) * t.ldb + t.n"}


def kernel_name(dtype: str, out: str, a_kmajor: bool = False, b_kmajor: bool = False, bias: bool = False) -> str:
    layout = "" if not (a_kmajor or b_kmajor) else f"_{'km' if a_kmajor else 'mk'}_{'kn' if b_kmajor else 'nk'}"
    return f"fg_matmul_{dtype}_to_{out}{layout}{'_bias' if bias else ''}"


def kernel(dtype: str, out: str, a_kmajor: bool = False, b_kmajor: bool = False, bias: bool = False) -> str:
    """The AscendC source of the GEMM with ``dtype`` inputs and ``out`` (fp32, or ``dtype``) outputs.

    A is given as [M, K] rows, or with ``a_kmajor`` as [K, M] (the weight gradients' dgates^T); B as
    [N, K] rows (B^T), or with ``b_kmajor`` as [K, N] (dx = dgates . W).  A K-major operand goes to L1
    as the Nz of what is stored and to L0 with each fractal transposed by LoadData, which CANN allows
    for 16-bit types only; fp32 goes to L1 in bands of 16 stored rows, and LoadDataWithTranspose turns
    each band's 16 x 16 squares (two 16 x 8 fractals) into two fractals of L0's layout (for A with K
    aligned to 16 in L0A, which Mmad is told by kDirectionAlign).

    With ``bias`` the kernel takes a float32 row bias[N] (the kernel's third argument; float32 whatever
    the inputs: Atlas A2 moves half or float into the BiasTable, not bfloat16, and the twin models float
    -> float) and computes C = A . B^T + bias: each output tile's slice of it goes GM -> L1 ->
    BiasTable, and the tile's first Mmad starts from it instead of from zero (the Cube's own bias path:
    no pass over C)."""
    return (f"// generated by fusedgrad: C = A . B^T{' + bias' if bias else ''} on the Cube unit ({dtype} in, {out} out); "
            f"lowering/ascend/cube.py\n{head(dtype)}\n{_body(dtype, out, a_kmajor, b_kmajor, bias)}")


def kernel_file(dtype: str, kernels: list[tuple[str, bool, bool, bool]]) -> str:
    """One AscendC file with several GEMMs of ``dtype`` inputs: ``kernels`` lists (out, a_kmajor,
    b_kmajor, bias) of each (the full LSTM's set); its tile macros and helpers once."""
    bodies = [_body(dtype, *k) for k in kernels]
    return (f"// generated by fusedgrad: GEMMs C = A . B^T (+ bias) on the Cube unit ({dtype} in); "
            f"lowering/ascend/cube.py\n{head(dtype)}\n" + "\n".join(bodies))


@functools.lru_cache(maxsize=None)
def part(name: str, **fields: str) -> str:
    """PARTS's section ``name`` with every ``@FIELD@`` replaced by ``fields[FIELD]``."""
    return fixed.section(PARTS, name, **fields)


def part_at(name: str, depth: int, **fields: str) -> str:
    """PARTS's section ``name`` (fields filled) indented ``depth`` levels of 4 spaces, wherever its lines stood."""
    return textwrap.indent(textwrap.dedent(part(name, **fields)), " " * 4 * depth)


def head(dtype: str) -> str:
    """The includes, tile macros and helpers a file of ``dtype`` GEMMs starts with."""
    bm, bn, bk = tiles(dtype)
    c0 = 32 // SIZE[dtype]
    return fixed.render("cube_head.cpp.in", BM=str(bm), BN=str(bn), BK=str(bk), C0=str(c0), GROUP=str(group_most(dtype)),
                        BAND=str(band_bytes(dtype)))


def band_bytes(dtype: str) -> int:
    """L1 bytes a GEMM of ``dtype`` inputs may give A's band (a row of tiles' A, all of K): L1 less B's tile
    and the bias's row (fp32, one tile wide)."""
    _, bn, bk = tiles(dtype)
    return FACTS["l1_kib"] * 1024 - bn * bk * SIZE[dtype] - bn * 4


def group_most(dtype: str) -> int:
    """The most row tiles a unit of ``dtype``'s GEMMs takes: as many fp32 C tiles as L0C holds, at most 2."""
    bm, bn, _ = tiles(dtype)
    return min(2, FACTS["l0c_kib"] * 1024 // (bm * bn * 4))


def tiles_struct(dtype: str) -> tuple[int, ...]:
    """FgMmTiles of ``dtype``'s GEMMs (matmul_tiling.h): bm, bn, bk, the most row tiles a unit, A's band
    bytes, the operand's bytes."""
    return (*tiles(dtype), group_most(dtype), band_bytes(dtype), SIZE[dtype])


def a_band(k: int, dtype: str, group: int = 1) -> bool:
    """Whether a GEMM of ``dtype`` inputs and depth ``k`` keeps the band of ``group`` row tiles' A in L1
    (the kernel's test)."""
    bm, _, bk = tiles(dtype)
    return -(-k // bk) * group * bm * bk * SIZE[dtype] <= band_bytes(dtype)


def _per_core(units: int, cores: int) -> int:
    return -(-units // min(units, cores))


def group(m: int, n: int, k: int, dtype: str, cores: int) -> int:
    """Row tiles a unit of the GEMM takes on at most ``cores`` cube cores (matmul_tiling.h's fg_mm_tiling):
    2 where L0C holds two C tiles, the copies read fewer elements (each chunk of B copied once for two row
    tiles) and the busiest core takes at most a quarter more tiles than with one row tile a unit (the kernel
    does not overlap copies with Mmads)."""
    bm, bn, _ = tiles(dtype)
    tm, tn = -(-m // bm), -(-n // bn)
    one = _per_core(tm * tn, cores)
    if group_most(dtype) < 2 or tm < 2 or 2 * _per_core(-(-tm // 2) * tn, cores) > one + one // 4:
        return 1
    copied = [sum(a_loads(m, n, k, dtype, cores, g)) * k + -(-tm // g) * n * k for g in (1, 2)]
    return 2 if copied[1] < copied[0] else 1


def a_loads(m: int, n: int, k: int, dtype: str, cores: int, rows: int | None = None) -> list[int]:
    """The rows of each copy of A's rows a GEMM makes on at most ``cores`` cube cores (a one-row tile copied
    16 times: 16): each core walks its consecutive units (``rows`` row tiles, default ``group``'s, by a
    column of tiles), copying each row tile's A unless its band holds that row of units already."""
    bm, bn, _ = tiles(dtype)
    g = group(m, n, k, dtype, cores) if rows is None else rows
    tm, tn = -(-m // bm), -(-n // bn)
    count, band = -(-tm // g) * tn, a_band(k, dtype, g)
    per = _per_core(count, cores)
    loads = []
    for unit in range(count):
        top = unit // tn
        if band and unit % per and (unit - 1) // tn == top:
            continue  # the core's band holds this row of units
        for row in range(top * g, min(top * g + g, tm)):
            r = min(bm, m - row * bm)
            loads.append(16 if r == 1 else r)
    return loads


def _body(dtype: str, out: str, a_kmajor: bool, b_kmajor: bool, bias: bool) -> str:
    """The kernel function of one GEMM (after head)."""
    if dtype not in DTYPES or out not in ("float32", dtype):
        raise ValueError(f"Cube GEMM: inputs float32, float16 or bfloat16 and the output float32 or the input "
                         f"dtype, got {dtype} -> {out}")
    elem = ASCENDC.types[dtype]
    fp32 = dtype == "float32"
    one_row = "Mmad runs 16, the 15 others zeros" if a_kmajor else "16 copies of it"
    if fp32 and a_kmajor:  # fp32 K-major: bands of 16 stored rows, the bands' squares transposed
        one_row = "Mmad runs 16: it, zeros, it again, zeros"
    # A^T [K, M]: its Nz, each fractal transposed, is A's Zz (one row: columns zero-padded); fp32 in
    # bands of 16 K rows, each band's 16 x 16 squares transposed two of A's Zz fractals, K aligned to
    # 16 (kDirectionAlign).  B [K, N]: its Nz, fractals transposed and reordered, is Zn; fp32 in bands
    # whose squares transposed are two Zn fractals of B, a K block apart.
    a_layout = "rows" if not a_kmajor else "kmajor_fp32" if fp32 else "kmajor"
    b_layout = "rows" if not b_kmajor else "kmajor_fp32" if fp32 else "kmajor"
    align = a_kmajor and fp32  # A's fractal rows hold K aligned to 16: Mmad must be told
    # the cube reads K to the end of its last C0 block: Nd2Nz zero-pads K when K is along the rows, but a
    # K-major operand's rows past depth would be whatever L1 held, so the last step zeroes its buffer first
    zero = {buffer: "\n" + part_at("zero_tail", depth, FILLS="\n" + part("zero_fill", BUFFER=buffer, SIZE=size, T=elem))
            if on else ""
            for buffer, size, depth, on in (("a1", "FG_MM_BM * FG_MM_BK", 4, a_kmajor),
                                            ("b1", "FG_MM_BN * FG_MM_BK", 3, b_kmajor))}
    return fixed.render(
        "cube_kernel.cpp.in", NAME=kernel_name(dtype, out, a_kmajor, b_kmajor, bias),
        ARGS="GM_ADDR a, GM_ADDR b, " + ("GM_ADDR bias, " if bias else "") + "GM_ADDR c, GM_ADDR tiling",
        T=elem, O=ASCENDC.types[out], A_SIZE=A_SIZES[a_layout.removesuffix("_fp32")],
        B_SIZE=B_SIZES[b_layout.removesuffix("_fp32")], ONE_ROW=one_row,
        K1="(depth + 15u) / 16u * 2u" if align else "(depth + FG_MM_C0 - 1u) / FG_MM_C0",  # fractal columns of K in L0A
        ZERO_TAIL=zero["b1"], ZERO_A=zero["a1"], A_COPY=part_at(f"a_{a_layout}_copy", 4),
        A_LOAD=part_at(f"a_{a_layout}_load", 4), B_COPY=part(f"b_{b_layout}_copy"), B_LOAD=part_at(f"b_{b_layout}_load", 5),
        BIAS_DECL="\n" + part("bias_decl") if bias else "", BIAS_COPY="\n" + part("bias_copy") if bias else "",
        BIAS_LOAD="\n" + part_at("bias_load", 5) if bias else "",
        INIT_C="false" if bias else "k0 == 0", K_ALIGN="\n" + part_at("k_align", 4) if align else "",
        MMAD=part_at("bias_mmad" if bias else "mmad", 4), QUANT=QUANT[out])
