"""The Cube GEMM (lowering/ascend/cube.py: C = A . B^T on an AI Cube core) on the CPU twin's Cube side
(tests/ascend_twin/fg_twin_cube.h: L1/L0A/L0B/L0C, Nd2Nz copies, LoadData, Mmad, Fixpipe, the MTE2 /
MTE1 / M / FIX pipes and their flags, which bytes hold data), checked against float64.

fp32, fp16 and bf16 in, fp32 or the input dtype out; shapes with one row (Mmad's GEMV trap), partial
fractals and tiles, row pitches wider than the rows; the same bits for any core count; and each rule
broken on purpose is caught: a flag removed, a misaligned L0 buffer, TPipe's own M_MTE1 IDs reused,
a one-row tile handed to Mmad as m == 1, quantPre left to be inferred.
"""
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import build_cache

from fusedgrad.lowering.ascend import cube

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
TWIN = Path(__file__).with_name("ascend_twin")
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
CTYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}

DRIVER = r'''
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "kernel.cpp"

// driver M N K LDA LDB LDC CORES IN OUT [GROUP]: A [M rows of LDA], B [N rows of LDB] raw in IN; C [M rows of
// LDC] to OUT; GROUP: the most row tiles a unit (default the file's, as the host's)
int main(int argc, char **argv) {
    if (argc != 10 && argc != 11) return 2;
    uint32_t m = atoi(argv[1]), n = atoi(argv[2]), k = atoi(argv[3]), lda = atoi(argv[4]), ldb = atoi(argv[5]);
    uint32_t ldc = atoi(argv[6]), cores = atoi(argv[7]);
    std::vector<TIN> a((size_t)(A_ROWS) * lda), b((size_t)(B_ROWS) * ldb);  // A [M or K rows], B [N or K rows]
    std::vector<TOUT> c((size_t)m * ldc);
    FILE *f = fopen(argv[8], "rb");
    if (fread(a.data(), sizeof(TIN), a.size(), f) != a.size() || fread(b.data(), sizeof(TIN), b.size(), f) != b.size()) return 3;
    std::vector<float> bias(BIAS_LEN);  // with a bias: its n floats follow B
    if (fread(bias.data(), sizeof(float), bias.size(), f) != bias.size()) return 3;
    fclose(f);
    FILE *g = fopen(argv[9], "rb");  // C's initial contents: the padding between rows must stay
    if (fread(c.data(), sizeof(TOUT), c.size(), g) != c.size()) return 3;
    fclose(g);
    const FgMmTiles tl = {FG_MM_BM, FG_MM_BN, FG_MM_BK, argc == 11 ? (uint32_t)atoi(argv[10]) : FG_MM_GROUP,
                          FG_MM_BAND_BYTES, sizeof(TIN)};
    FgMmTiling t = fg_mm_tiling(m, n, k, lda, ldb, ldc, &tl, cores);
    try {
        fg_twin::launch(t.cores, [&] { KERNEL((uint8_t *)a.data(), (uint8_t *)b.data(), BIAS_ARG(uint8_t *)c.data(), (uint8_t *)&t); });
    } catch (const fg_twin::Violation &e) {
        fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    g = fopen(argv[9], "wb");
    fwrite(c.data(), sizeof(TOUT), c.size(), g);
    fclose(g);
    printf("%u %u %llu %llu %llu %llu\n", t.cores, t.group, (unsigned long long)fg_twin::gm_read_bytes(),
           (unsigned long long)fg_twin::gm_write_bytes(), (unsigned long long)fg_twin::cube_macs_useful(),
           (unsigned long long)fg_twin::cube_macs_issued());
    return 0;
}
'''


def _build(tmp: Path, dtype: str, out: str, source: str | None = None, layout=(False, False), bias=False) -> Path:
    (tmp / "kernel.cpp").write_text(source if source is not None else cube.kernel(dtype, out, *layout, bias=bias))
    (tmp / "fg_matmul_tiling.h").write_text(cube.TILING)
    text = (DRIVER.replace("TIN", CTYPE[dtype]).replace("TOUT", CTYPE[out])
            .replace("KERNEL", cube.kernel_name(dtype, out, *layout, bias=bias))
            .replace("BIAS_LEN", "n" if bias else "0").replace("BIAS_ARG", "(uint8_t *)bias.data(), " if bias else "")
            .replace("A_ROWS", "k" if layout[0] else "m").replace("B_ROWS", "k" if layout[1] else "n"))
    (tmp / "main.cpp").write_text(text)
    exe = tmp / "driver"
    cmd = [CXX, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}", f"-I{tmp}", "-o", str(exe), str(tmp / "main.cpp")]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return exe


_BUILT: dict = {}


def _driver(tmp_path_factory, dtype, out, layout=(False, False), bias=False):
    if (dtype, out, layout, bias) not in _BUILT:
        _BUILT[(dtype, out, layout, bias)] = _build(tmp_path_factory.mktemp(f"cube-{dtype}-{out}"), dtype, out,
                                                    layout=layout, bias=bias)
    return _BUILT[(dtype, out, layout, bias)]


def _run(exe, tmp: Path, dtype, out, m, n, k, pad=0, cores=24, seed=0, layout=(False, False), bias=None, group=None):
    """(C as float64 [m, n], A [m, k] and B [n, k] as float64, cores used, GM bytes read, written, row tiles a
    unit); A and B are stored as ``layout`` says (K-major: [k, m], [k, n]); ``bias``: float32 [n] for a bias
    kernel; ``group``: the most row tiles a unit (default the host's)."""
    rng = np.random.default_rng(seed)
    lda = (m if layout[0] else k) + pad
    ldb = (n if layout[1] else k) + 2 * pad
    ldc = n + pad
    a = rng.uniform(-1, 1, ((k if layout[0] else m), lda)).astype(NP[dtype])
    b = rng.uniform(-1, 1, ((k if layout[1] else n), ldb)).astype(NP[dtype])
    c = np.full((m, ldc), 7, NP[out])
    (tmp / "in").write_bytes(a.tobytes() + b.tobytes() + (np.asarray(bias, np.float32).tobytes() if bias is not None else b""))
    (tmp / "out").write_bytes(c.tobytes())
    proc = subprocess.run([str(exe), str(m), str(n), str(k), str(lda), str(ldb), str(ldc), str(cores), str(tmp / "in"),
                           str(tmp / "out")] + ([str(group)] if group else []), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.frombuffer((tmp / "out").read_bytes(), NP[out]).reshape(m, ldc)
    assert (got[:, n:].astype(np.float64) == 7).all(), "Fixpipe wrote past the rows"
    used, rows, read, written, _, _ = (int(v) for v in proc.stdout.split())
    a64 = (a[:, :m].T if layout[0] else a[:, :k]).astype(np.float64)
    b64 = (b[:, :n].T if layout[1] else b[:, :k]).astype(np.float64)
    return got[:, :n].astype(np.float64), a64, b64, used, read, written, rows


SHAPES = [(1, 1, 1), (1, 300, 70), (5, 7, 3), (17, 33, 129), (130, 129, 257), (64, 256, 128), (300, 20, 40)]


@pytest.mark.parametrize("dtype, out", [("float32", "float32"), ("float16", "float32"), ("float16", "float16"),
                                        ("bfloat16", "float32"), ("bfloat16", "bfloat16")])
@pytest.mark.parametrize("m, n, k", SHAPES)
def test_the_cube_gemm_matches_float64(tmp_path, tmp_path_factory, dtype, out, m, n, k):
    """A . B^T from the rounded inputs, within the fp32 accumulation's error (and one rounding of the
    output to fp16/bf16), at every shape, with row pitches wider than the rows; nothing written
    between C's rows."""
    exe = _driver(tmp_path_factory, dtype, out)
    c, a, b, *_ = _run(exe, tmp_path, dtype, out, m, n, k, pad=3)
    want = a @ b.T
    scale = np.abs(a) @ np.abs(b).T + 1e-30
    rel = {"float32": 1e-6 * k ** 0.5 + 2e-7, "float16": 1e-3, "bfloat16": 8e-3}[out]
    err = np.abs(c - want) / scale
    assert err.max() <= rel, (err.max(), rel)


@pytest.mark.parametrize("layout", [(True, False), (False, True), (True, True)], ids=["km-nk", "mk-kn", "km-kn"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("m, n, k", [(1, 300, 70), (5, 7, 3), (17, 33, 129), (130, 129, 257), (40, 24, 20)])
def test_k_major_operands_match_float64(tmp_path, tmp_path_factory, dtype, layout, m, n, k):
    """A given as [K, M] (dgates^T for the weight gradients) and B as [K, N] (dx = dgates . W): each
    fractal transposed by LoadData on its way to L0 (16-bit), or each band's squares by
    LoadDataWithTranspose (fp32, A's K aligned to 16: k = 20 is the case where that differs)."""
    exe = _driver(tmp_path_factory, dtype, "float32", layout)
    c, a, b, *_ = _run(exe, tmp_path, dtype, "float32", m, n, k, pad=3, layout=layout)
    err = np.abs(c - a @ b.T) / (np.abs(a) @ np.abs(b).T + 1e-30)
    assert err.max() <= 1e-6 * k ** 0.5 + 2e-7, err.max()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("m, n, k", [(1, 300, 70), (5, 7, 3), (17, 33, 129), (130, 129, 257), (64, 520, 40)])
def test_a_bias_from_the_bias_table_is_added_once(tmp_path, tmp_path_factory, dtype, m, n, k):
    """C = A . B^T + bias (bias float32 whatever the inputs), the bias the first Mmad's start value (GM ->
    L1 -> BiasTable per output tile): every row gets it once, whatever the tile and however many K steps."""
    exe = _driver(tmp_path_factory, dtype, "float32", bias=True)
    bias = np.random.default_rng(m + n).uniform(-4, 4, n).astype(np.float32)
    c, a, b, *_ = _run(exe, tmp_path, dtype, "float32", m, n, k, pad=3, bias=bias)
    want = a @ b.T + bias.astype(np.float64)
    err = np.abs(c - want) / (np.abs(a) @ np.abs(b).T + np.abs(bias) + 1e-30)
    assert err.max() <= 1e-6 * k ** 0.5 + 2e-7, err.max()


def test_a_bias_mmad_that_zeroes_c_is_caught(tmp_path):
    """cmatrixInitVal true with a BiasTable bias would drop the bias: the twin refuses it."""
    src = cube.kernel("float32", "float32", bias=True)
    old = "MmadParams mp((uint16_t)mm, (uint16_t)cols, (uint16_t)depth, 0, false, false);"
    assert old in src
    exe = _build(tmp_path, "float32", "float32", src.replace(old, old.replace("false, false", "false, true")), bias=True)
    rng = np.random.default_rng(0)
    m, n, k = 20, 30, 40
    (tmp_path / "in").write_bytes(rng.uniform(-1, 1, m * k + n * k + n).astype(np.float32).tobytes())
    (tmp_path / "out").write_bytes(np.zeros(m * n, np.float32).tobytes())
    proc = subprocess.run([str(exe), str(m), str(n), str(k), str(k), str(k), str(n), "2", str(tmp_path / "in"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "cmatrixInitVal must be false" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_same_bits_on_any_core_count(tmp_path, tmp_path_factory, dtype):
    """Each output tile is summed over all of K by one core, in K order: 1, 3 and 24 cores agree."""
    exe = _driver(tmp_path_factory, dtype, "float32")
    results = [_run(exe, tmp_path, dtype, "float32", 300, 260, 300, cores=cores) for cores in (1, 3, 24)]
    assert [r[3] for r in results] == [1, 3, 9]  # 3 x 3 tiles
    for r in results[1:]:
        assert np.array_equal(r[0], results[0][0])


def test_gm_traffic_is_what_the_tiling_implies(tmp_path, tmp_path_factory):
    """One tile a core: A is read once per column of tiles and B once per row of tiles; C is written once."""
    exe = _driver(tmp_path_factory, "float16", "float16")
    m, n, k = 256, 384, 200
    _, _, _, _, read, written, _ = _run(exe, tmp_path, "float16", "float16", m, n, k)
    bm, bn, _ = cube.tiles("float16")
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    assert read == 2 * (m * k * tiles_n + n * k * tiles_m)
    assert written == 2 * m * n


def _read(m, n, k, dtype, cores, bias=False):
    """GM bytes a GEMM reads per the model (benchmarks/ascend_lstm.py's gemm_bytes): A's copies
    (cube.a_loads), B and the bias once per row of units."""
    bm, _, _ = cube.tiles(dtype)
    rows_of_units = -(-(-(-m // bm)) // cube.group(m, n, k, dtype, cores))
    return cube.SIZE[dtype] * (sum(cube.a_loads(m, n, k, dtype, cores)) * k + n * k * rows_of_units) + \
        (4 * n * rows_of_units if bias else 0)


@pytest.mark.parametrize("dtype, m, n, k, cores", [
    ("float16", 256, 384, 200, 2),   # a row of tiles a core: A read once
    ("float16", 260, 384, 200, 4),   # rows split between cores, a 4-row last row of tiles
    ("float32", 129, 260, 300, 1),   # a one-row last row of tiles (16 copies), two row tiles a unit
    ("float32", 100, 300, 2000, 1),  # K too deep for A's band: A once per tile, as before
])
def test_a_row_of_tiles_keeps_its_a_in_l1(tmp_path, tmp_path_factory, dtype, m, n, k, cores):
    """A core walks its consecutive units and keeps a row of units' A (all of K) in L1 while it fits: A's
    bytes are cube.a_loads's (the formula benchmarks/ascend_lstm.py counts with), B's once per row of
    units, and the product is the same bits as on one tile a core."""
    exe = _driver(tmp_path_factory, dtype, "float32")
    c, _, _, _, read, _, group = _run(exe, tmp_path, dtype, "float32", m, n, k, cores=cores)
    bm, bn, _ = cube.tiles(dtype)
    assert group == cube.group(m, n, k, dtype, cores)
    loads = cube.a_loads(m, n, k, dtype, cores)
    assert read == _read(m, n, k, dtype, cores)
    if cube.a_band(k, dtype, group):
        assert len(loads) < -(-m // bm) * -(-n // bn)
    else:
        assert len(loads) == -(-m // bm) * -(-n // bn)
    wide = _run(exe, tmp_path, dtype, "float32", m, n, k, cores=24)[0]
    assert np.array_equal(c, wide)


@pytest.mark.parametrize("dtype, layout, bias, m, n, k, cores", [
    ("float32", (False, False), False, 300, 300, 2000, 2),  # no band: each unit copies both rows' A
    ("float32", (False, False), True, 129, 260, 300, 3),    # a band of two rows, the second one row; a bias
    ("float16", (True, False), False, 250, 140, 200, 1),    # A K-major (the weight gradients'), K's zero tail
    ("float32", (True, True), False, 200, 140, 100, 1),     # fp32 K-major bands, both operands
])
def test_two_row_tiles_a_unit_read_b_once_for_both(tmp_path, tmp_path_factory, dtype, layout, bias, m, n, k, cores):
    """Where fg_mm_tiling takes two row tiles a unit, each chunk of B goes GM -> L1 -> L0B once for both
    (the bytes the model says: B read once per row of units), fewer bytes in all than one row tile a unit,
    and the same bits."""
    exe = _driver(tmp_path_factory, dtype, "float32", layout, bias)
    b = np.random.default_rng(1).uniform(-1, 1, n).astype(np.float32) if bias else None
    two = _run(exe, tmp_path, dtype, "float32", m, n, k, cores=cores, layout=layout, bias=b)
    one = _run(exe, tmp_path, dtype, "float32", m, n, k, cores=cores, layout=layout, bias=b, group=1)
    assert (two[6], one[6]) == (2, 1) and cube.group(m, n, k, dtype, cores) == 2
    assert np.array_equal(two[0], one[0])
    assert two[4] == _read(m, n, k, dtype, cores, bias)
    assert two[4] < one[4]  # fewer bytes in all (B's copies halve; A's, one band a unit, may grow)


def _broken(tmp_path, source: str, expect: str, dtype="float16", out="float32", shape=(40, 40, 300)):
    exe = _build(tmp_path, dtype, out, source)
    m, n, k = shape
    rng = np.random.default_rng(0)
    (tmp_path / "in").write_bytes(rng.uniform(-1, 1, m * k + n * k).astype(NP[dtype]).tobytes())
    (tmp_path / "out").write_bytes(np.zeros(m * n, NP[out]).tobytes())
    proc = subprocess.run([str(exe), str(m), str(n), str(k), str(k), str(k), str(n), "2", str(tmp_path / "in"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and expect in proc.stderr, (proc.returncode, proc.stderr[-2000:])


def _without(text: str, line: str, count: int = 1) -> str:
    assert text.count(line) >= count, line
    return text.replace(line, "", count)


PAIR = "            SetFlag<HardEvent::{e}>({id});\n            WaitFlag<HardEvent::{e}>({id});\n"


@pytest.mark.parametrize("removed, expect", [
    (PAIR.format(e="MTE2_MTE1", id="l1_full"), "LoadData(LoadData2DParams) on PIPE_MTE1 reads L1 [0, 512) that PIPE_MTE2"),
    (PAIR.format(e="MTE1_M", id="l0_full").replace("    S", "        S").replace("    W", "        W"), "Mmad on PIPE_M reads L0A [0, 12288) that PIPE_MTE1"),
    (PAIR.format(e="M_FIX", id="c_full").replace("            ", "        "), "Fixpipe on PIPE_FIX reads L0C [0, 2560) that PIPE_M"),
    ("                WaitFlag<HardEvent::M_MTE1>(l0_free);\n", "SetFlag<M_MTE1>(3) on a flag already set"),
    ("            WaitFlag<HardEvent::MTE1_MTE2>(l1_free);\n", "SetFlag<MTE1_MTE2>(0) on a flag already set"),
    ("        SetFlag<HardEvent::FIX_M>(c_free);\n", "WaitFlag<FIX_M>(0) with no SetFlag before it"),
    ("            PipeBarrier<PIPE_M>();\n", "no PipeBarrier<PIPE_M> between them, while (m/16)*(n/16) = 4 < 10"),
])
def test_a_missing_synchronisation_is_caught(tmp_path, removed, expect):
    """The compiler inserts no synchronisation on the cube: without any one of the kernel's flags or its
    PIPE_M barrier the twin stops it (the hazard it leaves, or a flag set twice or waited unset)."""
    _broken(tmp_path, _without(cube.kernel("float16", "float32"), removed), expect)


def test_tpipes_own_m_mte1_ids_cannot_be_taken(tmp_path):
    """On a cube core TPipe holds M_MTE1 IDs 0-2: a kernel flag on ID 0 is a second SetFlag on a set flag."""
    source = cube.kernel("float16", "float32").replace(
        "TEventID l0_free = pipe.AllocEventID<HardEvent::M_MTE1>(),", "TEventID l0_free = 0,")
    source = source.replace("    pipe.ReleaseEventID<HardEvent::M_MTE1>(l0_free);\n", "")
    _broken(tmp_path, source, "SetFlag<M_MTE1>(0) on a flag already set")


def test_a_one_row_tile_as_m_1_is_caught(tmp_path):
    """Mmad with m == 1 reads L0A as a plain row (GEMV): a one-row tile packed Zz like the others puts
    only its first 16 elements where the GEMV reads them; the rest it reads are bytes nothing wrote."""
    source = cube.kernel("float16", "float32").replace("uint32_t mm = rows == 1u ? 16u : rows;", "uint32_t mm = rows;")
    source = source.replace("if (rows == 1u) {  // the row, 16 times", "if (false) {  // the row, 16 times")
    _broken(tmp_path, source, "with m == 1 Mmad is a GEMV", shape=(1, 40, 300))


def test_quant_pre_is_never_inferred(tmp_path):
    source = cube.kernel("float16", "float16").replace("QuantMode_t::F322F16", "QuantMode_t::NoQuant")
    _broken(tmp_path, source, "quantPre does not match the types", out="float16")


def test_cube_buffers_must_be_aligned_and_fit(tmp_path):
    """An L0A tensor 32 bytes into its buffer breaks LoadData's 512-byte rule; an L0C buffer past 128 KiB
    does not fit."""
    source = cube.kernel("float16", "float32").replace("a2 = l0a.Get<half>()", "a2 = l0a.Get<half>()[16]")
    _broken(tmp_path, source, "not 512-byte aligned")
    source = cube.kernel("float16", "float32").replace("FG_MM_BM * FG_MM_BN * sizeof(float));",
                                                        "FG_MM_BM * FG_MM_BN * sizeof(float) * 3);")
    _broken(tmp_path, source, "L0C overflow")


def test_every_part_of_the_kernel_template_goes_into_some_kernel():
    """cube_parts.cpp.in's sections (``//@ <name>``, the parts by operand layout and bias): every
    line of each, less the fields, is in some dtype's and layout's kernel."""
    from fusedgrad.lowering.ascend import fixed

    kernels = "".join(cube.kernel(dtype, "float32", a_kmajor, b_kmajor, bias) for dtype in cube.DTYPES
                      for a_kmajor in (False, True) for b_kmajor in (False, True) for bias in (False, True))
    sections = fixed.text(cube.PARTS).split("//@ ")[1:]
    assert len(sections) > 10
    for section in sections:
        name, _, body = section.partition("\n")
        for line in body.splitlines():
            assert line.split("@")[0] in kernels, f"{cube.PARTS} {name}: {line!r} in no kernel"


def test_the_tiles_follow_the_cube_cores_buffers():
    """BM = BN = 8 fractals and BK fills half of L0A, from the target's facts; the buffers fit."""
    assert cube.tiles("float16") == (128, 128, 128)
    assert cube.tiles("bfloat16") == (128, 128, 128)
    assert cube.tiles("float32") == (128, 128, 64)


def test_the_gemm_benchmark_reports_traffic_and_mac_use(capsys):
    """benchmarks/ascend_gemm.py on small shapes: one tile reads A and B once (ratio 1); a one-row
    product reads its row 16 times and uses 1/16 of the Cube's multiply-adds (Mmad runs it as 16 rows):
    (16*32*2 + 16*32*2 + 16*4) / (32*2 + 16*32*2 + 16*4) = 1.83."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import ascend_gemm
    finally:
        sys.path.pop(0)
    assert ascend_gemm.main(["--shape", "32,48,64", "--shape", "1,16,32"]) == 0
    rows = [r.strip("|").split("|") for r in capsys.readouterr().out.splitlines() if r.startswith("| 32 ") or r.startswith("| 1 ")]
    assert [c.strip() for c in rows[0][6:8]] == ["1.00", "100.0%"]
    assert [c.strip() for c in rows[1][6:8]] == ["1.83", "6.2%"]


def test_overlapping_transposed_fractals_are_caught(tmp_path):
    """LoadDataWithTranspose's two fractals of a square land dstFracGap + 1 fractals apart: with the gap
    of the Zn layout dropped they overlap the next square's, which CANN forbids."""
    src = cube.kernel("float32", "float32", b_kmajor=True)
    old = "LoadData2dTransposeParams(0, (uint8_t)n1, 1, 0, (uint16_t)(n1 - 1u))"
    assert old in src
    exe = _build(tmp_path, "float32", "float32", src.replace(old, "LoadData2dTransposeParams(0, (uint8_t)n1, 1, 0, 0)"),
                 layout=(False, True))
    rng = np.random.default_rng(0)
    m, n, k = 20, 40, 30
    (tmp_path / "in").write_bytes(rng.uniform(-1, 1, m * k + n * k).astype(np.float32).tobytes())
    (tmp_path / "out").write_bytes(np.zeros(m * n, np.float32).tobytes())
    proc = subprocess.run([str(exe), str(m), str(n), str(k), str(k), str(n), str(n), "2", str(tmp_path / "in"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "transposed fractals overlap" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("operand", ["B", "A"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_k_major_tail_left_unzeroed_is_caught(tmp_path, dtype, operand):
    """The cube reads K to the end of its last C0 block (K-方向对齐约束.md: K=36 reads 40): a K-major
    operand's last rows past K must be zeros in L1, or the padding multiplies whatever L1 held.  Without
    the kernel's Fill of that step the twin stops it."""
    src = cube.kernel(dtype, "float32", True, True)
    indent = " " * (12 if operand == "B" else 16)  # B's chunk zeroed once, each row tile's A in its loop
    start = src.index(indent + "if (depth % FG_MM_C0 != 0u) {")
    end = src.index(indent + "}\n", start) + len(indent + "}\n")
    exe = _build(tmp_path, dtype, "float32", src[:start] + src[end:], layout=(True, True))
    m, n, k = 20, 30, 37
    rng = np.random.default_rng(0)
    (tmp_path / "in").write_bytes(rng.uniform(-1, 1, m * k + n * k).astype(NP[dtype]).tobytes())
    (tmp_path / "out").write_bytes(np.zeros(m * n, np.float32).tobytes())
    proc = subprocess.run([str(exe), str(m), str(n), str(k), str(m), str(n), str(n), "2", str(tmp_path / "in"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "bytes that hold no data" in proc.stderr, proc.stderr[-2000:]


def test_fp32_a_k_major_needs_k_direction_align(tmp_path):
    """LoadDataWithTranspose leaves A's K aligned to 16 in L0A; an Mmad not told (kDirectionAlign false)
    reads A's later rows of fractals 8-aligned, from the wrong places: the product is wrong (k = 20:
    16-aligned 32, 8-aligned 24)."""
    src = cube.kernel("float32", "float32", True, False)
    line = "                mp.kDirectionAlign = true;"
    assert line in src
    exe = _build(tmp_path, "float32", "float32", "\n".join(l for l in src.splitlines() if not l.startswith(line)) + "\n",
                 layout=(True, False))
    c, a, b, *_ = _run(exe, tmp_path, "float32", "float32", 40, 24, 20, layout=(True, False))
    assert (np.abs(c - a @ b.T) / (np.abs(a) @ np.abs(b).T + 1e-30)).max() > 0.1
