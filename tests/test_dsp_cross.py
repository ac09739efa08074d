"""The committed DSP library (generated/dsp) on foreign toolchains.

- arm-none-eabi-gcc: every source compiles strictly as a freestanding object for a Cortex-M4F
  (hardware fp16 storage and software half), and the objects need nothing but the porting
  functions and a few libm/libgcc routines.
- arm32 (arm-linux-gnueabihf, under qemu-arm): a 32-bit size_t, where the size checks must refuse
  arrays whose byte counts wrap (tests/test_dsp.py LIMITS).
- riscv64 and aarch64: tests/dsp_harness.c and the library are cross-compiled (static) and run
  under qemu-user with the same checks as on the host: the reference, the same bits on every
  core mask, and, for the LayerNorm backward, the same bits as the host build.  riscv64's gcc 12
  has no half type, so it runs fg_half.h's 16-bit struct; the host builds that too
  (-DFG_HALF_SOFT) and the compiler's own conversions (-DFG_HALF_NATIVE_CONVERT): same bits.
  host-dma and riscv64 give each core local memory, so _s stages its inputs by DMA: same bits.

.ci/run installs the Debian packages (gcc-arm-none-eabi, gcc-riscv64-linux-gnu,
gcc-aarch64-linux-gnu, gcc-arm-linux-gnueabihf, qemu-user) and sets FUSEDGRAD_CROSS_REQUIRED=1: then a missing tool is a
failure.  Elsewhere a missing tool skips its tests and names the package.
"""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import build_cache
from fusedgrad import te_defs
from conftest import assert_ratio_matches_times
from test_dsp import LIMITS
from test_dsp import _case as ln_case  # the LayerNorm inputs and float64 reference of the host tests

ROOT = Path(__file__).resolve().parents[1]
DSP = ROOT / "generated" / "dsp"
HARNESS = Path(__file__).with_name("dsp_harness.c")
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]
LOCAL = "-DFG_DSP_HOST_LOCAL_BYTES=786432"  # an MT-3000 AM per core: the kernels' DMA path runs
# platform: (compiler, extra flags, emulator, Debian packages)
PLATFORMS = {
    "host": ("gcc", [], None, "gcc"),
    "host-dma": ("gcc", [LOCAL], None, "gcc"),
    "host-softhalf": ("gcc", ["-DFG_HALF_SOFT"], None, "gcc"),
    "host-nativeconvert": ("gcc", ["-DFG_HALF_NATIVE_CONVERT"], None, "gcc"),
    "riscv64": ("riscv64-linux-gnu-gcc", ["-static", LOCAL], "qemu-riscv64", "gcc-riscv64-linux-gnu qemu-user"),
    "aarch64": ("aarch64-linux-gnu-gcc", ["-static"], "qemu-aarch64", "gcc-aarch64-linux-gnu qemu-user"),
    "arm32": ("arm-linux-gnueabihf-gcc", ["-static"], "qemu-arm", "gcc-arm-linux-gnueabihf qemu-user"),
}
CHIP_DTYPES = {"ft78ne": ("fp",), "mt7004": ("fp", "hp")}
NP = {"fp": np.float32, "hp": np.float16}
TOL = {"fp": 1e-5, "hp": 2e-2}


def _need(*tools, package):
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        why = f"{', '.join(missing)} not installed (Debian: apt-get install {package}; .ci/run installs it)"
        if os.environ.get("FUSEDGRAD_CROSS_REQUIRED"):
            pytest.fail(why)
        pytest.skip(why)


_built: dict = {}


def harness(platform: str, chip: str, tmp: Path) -> list[str]:
    """The command prefix running the harness built for ``platform`` and ``chip``."""
    cc, extra, emulator, package = PLATFORMS[platform]
    _need(*(t for t in (cc, emulator) if t), package=package)
    key = (platform, chip)
    if key not in _built:
        exe = tmp / f"harness-{platform}-{chip}"
        src = DSP / chip
        half = ["-DHARNESS_HALF"] if "hp" in CHIP_DTYPES[chip] else []
        cmd = [cc, *STRICT, *extra, *half, f"-I{src}", "-o", str(exe), str(HARNESS), str(src / "layernormgrad.c"),
               str(src / "lstmcellgrad.c"), str(src / "lstm.c"), str(src / "lstmgrad.c"), str(src / "fg_dsp_port_host.c"),
               "-lm", "-lpthread"]
        proc = build_cache.run(cmd, outputs=[exe])
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
        _built[key] = ([emulator] if emulator else []) + [str(exe)]
    return _built[key]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("cross")


def _run(cmd: list[str], args: list, inputs: list, out_count: int, dtype, tmp: Path):
    src, dst = tmp / f"in-{os.getpid()}.bin", tmp / f"out-{os.getpid()}.bin"
    src.write_bytes(b"".join(np.ascontiguousarray(a, dtype).tobytes() for a in inputs))
    proc = subprocess.run(cmd + [str(a) for a in args] + [str(src), str(dst)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = np.frombuffer(dst.read_bytes(), dtype)
    assert out.size == out_count
    return int(proc.stdout.strip()), out


def _close(got, ref, tol, what):
    err = np.abs(got.astype(np.float64) - ref).max() / (np.abs(ref).max() + 1)
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol}"


MASKS = (0, 0b1, 0b110, 0xff)
_ln_bits: dict = {}


@pytest.mark.parametrize("platform", list(PLATFORMS))
@pytest.mark.parametrize("chip, p", [(c, p) for c, ps in CHIP_DTYPES.items() for p in ps])
@pytest.mark.parametrize("M, D", [(1, 1), (13, 37), (67, 8), (40, 300)])
def test_layernormgrad_runs_the_same_everywhere(platform, chip, p, M, D, tmp):
    dtype = NP[p]
    ins, ref = ln_case(M, D, dtype)
    cmd = harness(platform, chip, tmp)
    results = []
    for mask in MASKS:
        status, out = _run(cmd, ["ln", p, M, D, mask], ins, M * D + 2 * D, dtype, tmp)
        assert status == 0, (platform, mask)
        dx, dg, db = out[:M * D].reshape(M, D), out[M * D:M * D + D], out[M * D + D:]
        for name, got, r in (("dx", dx, ref[0]), ("dg", dg, ref[1]), ("db", db, ref[2])):
            _close(got, r, TOL[p], f"{platform} {p}_layernormgrad mask {mask:#x} {name}")
        results.append(out)
    for other in results[1:]:  # the partial sums are per fixed row block: same bits on any mask
        assert np.array_equal(results[0].view(np.uint16), other.view(np.uint16))
    # sqrtf is correctly rounded and -std=c99 contracts no a*b+c: every platform gives the same bits
    key = (chip, p, M, D)
    if key in _ln_bits:
        assert np.array_equal(_ln_bits[key][1].view(np.uint16), results[0].view(np.uint16)), \
            f"{platform} differs from {_ln_bits[key][0]}"
    else:
        _ln_bits[key] = (platform, results[0])


def _cell_inputs(n, h, dtype, has_dhy, has_dc, seed):
    op = te_defs.get("lstm_cell_backward")
    s = {k: v.astype(dtype) for k, v in op.sample({"N": n, "H": h}, np.random.default_rng(seed)).items()}
    ins = ([s["grad_hy"]] if has_dhy else []) + ([s["grad_cy"]] if has_dc else []) + [s["cx"], s["cy"], s["storage"]]
    ref = op.reference(s["grad_hy"].astype(np.float64) if has_dhy else None,
                       s["grad_cy"].astype(np.float64) if has_dc else None,
                       *(s[k].astype(np.float64) for k in ("cx", "cy", "storage")))
    return ins, ref


@pytest.mark.parametrize("platform", list(PLATFORMS))
@pytest.mark.parametrize("chip, p", [(c, p) for c, ps in CHIP_DTYPES.items() for p in ps])
@pytest.mark.parametrize("bias, has_dhy, has_dc", [(1, 1, 1), (0, 1, 0), (1, 0, 1), (1, 0, 0)])
def test_lstmcellgrad_runs_everywhere(platform, chip, p, bias, has_dhy, has_dc, tmp):
    n, h = 45, 19  # more rows than one 32-row block, and a hidden size that is no vector multiple
    dtype = NP[p]
    ins, ref = _cell_inputs(n, h, dtype, has_dhy, has_dc, seed=n + 4 * has_dhy + 2 * has_dc)
    cmd = harness(platform, chip, tmp)
    results = []
    for mask in (0, 0b1, 0b1011):
        status, out = _run(cmd, ["cell", p, n, h, bias, has_dhy, has_dc, mask], ins, 5 * n * h + 4 * h, dtype, tmp)
        assert status == 0, (platform, mask)
        gates, dcx, db = out[:4 * n * h].reshape(n, 4 * h), out[4 * n * h:5 * n * h].reshape(n, h), out[5 * n * h:]
        _close(gates, ref["grad_gates"], TOL[p], f"{platform} {p} mask {mask:#x} dgates")
        _close(dcx, ref["grad_cx"], TOL[p], f"{platform} {p} mask {mask:#x} dc_prev")
        if bias:
            _close(db, ref["grad_bias"], TOL[p], f"{platform} {p} mask {mask:#x} db")
        else:
            assert not db.any()  # the harness zeroes it; has_bias 0 leaves it alone
        results.append(out)
    for other in results[1:]:
        assert np.array_equal(results[0].view(np.uint16), other.view(np.uint16))


# (forward, backward) tolerances of the layer: float32 as tests/test_dsp_lstm.py; half as its HP_TOL
# (half storage, the state read back from the half outputs: measured at most 3.7e-4 there)
LAYER_TOL = {"fp": (2e-5, 5e-5), "hp": (3e-3, 3e-3)}
_layer_bits: dict = {}


def _layer_case(T, B, H, reverse, seed, dtype):
    """(forward input arrays, backward input arrays, their float64 references on those very inputs),
    batch sizes first."""
    fwd, bwd = te_defs.get("lstm_layer_forward"), te_defs.get("lstm_layer_backward")
    rng = np.random.default_rng(seed)
    fs = {k: (v if k == "batch_sizes" else v.astype(dtype)) for k, v in fwd.sample({"T": T, "B": B, "H": H}, rng).items()}
    bs = {k: (v if k == "batch_sizes" else v.astype(dtype)) for k, v in bwd.sample({"T": T, "B": B, "H": H}, rng).items()}
    f64 = lambda d: {k: (v if k == "batch_sizes" else v.astype(np.float64)) for k, v in d.items()}  # noqa: E731
    return (fs, bs, fwd.reference(**f64(fs), train=True, reverse=reverse), bwd.reference(**f64(bs), reverse=reverse))


def _run_layer(cmd, args, bs, floats, out_count, dtype, tmp):
    src, dst = tmp / f"lin-{os.getpid()}.bin", tmp / f"lout-{os.getpid()}.bin"
    src.write_bytes(np.ascontiguousarray(bs, np.int32).tobytes()
                    + b"".join(np.ascontiguousarray(a, dtype).tobytes() for a in floats))
    proc = subprocess.run(cmd + [str(a) for a in args] + [str(src), str(dst)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = np.frombuffer(dst.read_bytes(), dtype)
    assert out.size == out_count
    return int(proc.stdout.strip()), out


@pytest.mark.parametrize("platform", list(PLATFORMS))
@pytest.mark.parametrize("chip, p", [(c, p) for c, ps in CHIP_DTYPES.items() for p in ps])
@pytest.mark.parametrize("reverse", [0, 1])
def test_lstm_layer_runs_the_same_everywhere(platform, chip, p, reverse, tmp):
    """fp_/hp_lstm (training and inference) and fp_/hp_lstmgrad: the float64 reference on every
    platform, the same bits on every core mask and on every platform (fg_tanhf is basic arithmetic,
    no libm; half converts as IEEE 754 on every platform, fg_half.h)."""
    T, B, H = 6, 5, 37  # varied lengths, a hidden size that is no chunk multiple
    dtype, (ftol, btol) = NP[p], LAYER_TOL[p]
    fs, bs, fref, bref = _layer_case(T, B, H, reverse, seed=11 + reverse, dtype=dtype)
    cmd = harness(platform, chip, tmp)
    tbh, bh = T * B * H, B * H
    names = ("h", "c", "i", "f", "g", "o", "tanhc", "hy", "cy")
    results = []
    for mask in MASKS:
        for train in (1, 0):
            count = (7 if train else 1) * tbh + 2 * bh
            floats = [fs[k] for k in ("xw", "w_hh", "h0", "c0")]
            status, out = _run_layer(cmd, ["lstm", p, T, B, H, reverse, train, mask], fs["batch_sizes"], floats,
                                     count, dtype, tmp)
            assert status == 0, (platform, mask, train)
            parts = np.split(out, np.cumsum([tbh] * (7 if train else 1) + [bh])[:])
            for name, got in zip([n for n in names if train or n in ("h", "hy", "cy")], parts):
                _close(got, fref[name].ravel(), ftol, f"{platform} {p}_lstm mask {mask:#x} train {train} {name}")
            results.append(out)
        floats = [bs[k] for k in ("dy", "w_hh", "c", "c0", "i", "f", "g", "o", "tanhc", "grad_hy", "grad_cy")]
        status, out = _run_layer(cmd, ["lstmgrad", p, T, B, H, reverse, mask], bs["batch_sizes"], floats,
                                 8 * tbh + 2 * bh, dtype, tmp)
        assert status == 0, (platform, mask)
        for name, got in zip(("dgates", "dgates_t", "dh0", "dc0"), np.split(out, [4 * tbh, 8 * tbh, 8 * tbh + bh])):
            _close(got, bref[name].ravel(), btol, f"{platform} {p}_lstmgrad mask {mask:#x} {name}")
        results.append(out)
    per_mask = len(results) // len(MASKS)
    for k in range(per_mask, len(results)):
        assert results[k % per_mask].tobytes() == results[k].tobytes(), k
    key = (chip, p, reverse)
    if key in _layer_bits:
        for a, b in zip(_layer_bits[key][1], results[:per_mask]):
            assert a.tobytes() == b.tobytes(), f"{platform} differs from {_layer_bits[key][0]}"
    else:
        _layer_bits[key] = (platform, results[:per_mask])


def test_soft_half_converts_like_ieee(tmp):
    """fg_half.h's software conversions against numpy: every binary16 value to float and back, and
    floats around every rounding boundary (ties, subnormals, overflow, NaN) to binary16."""
    _need("gcc", package="gcc")
    main = tmp / "half_main.c"
    main.write_text(r'''
#include <stdio.h>
#include <string.h>
#include "fg_half.h"
int main(int argc, char **argv) {
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    unsigned n = 0;
    float f;
    (void)argc;
    for (unsigned b = 0; b < 65536u; ++b) {  /* binary16 -> float */
        half h;
        h.bits = (uint16_t)b;
        f = fg_half_to_float(h);
        fwrite(&f, 4, 1, out);
    }
    while (fread(&f, 4, 1, in) == 1) {  /* float -> binary16 */
        half h = fg_half_from_float(f);
        fwrite(&h.bits, 2, 1, out);
        ++n;
    }
    fclose(in);
    fclose(out);
    printf("%u\n", n);
    return 0;
}
''')
    exe = tmp / "half_main"
    proc = build_cache.run(["gcc", *STRICT, "-DFG_HALF_SOFT", f"-I{DSP / 'mt7004'}", "-o", str(exe), str(main)],
                           outputs=[exe])
    assert proc.returncode == 0, proc.stderr
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    # every half, the midpoints between neighbours (ties) and their float neighbours, random floats
    wide = halves.astype(np.float32)
    finite = np.sort(wide[np.isfinite(wide)])
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    probes = np.concatenate([wide, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                             np.float32([65504, 65519.996, 65520, 1e30, -1e30, np.inf, -np.inf, 2.0**-25,
                                         2.0**-25 * 1.0000001, 2.0**-26, 0.0, -0.0]),
                             np.random.default_rng(0).standard_normal(10000).astype(np.float32) * 1000])
    src, dst = tmp / "half_in.bin", tmp / "half_out.bin"
    src.write_bytes(probes.astype(np.float32).tobytes())
    run = subprocess.run([str(exe), str(src), str(dst)], capture_output=True, text=True)
    assert run.returncode == 0 and int(run.stdout) == probes.size
    data = dst.read_bytes()
    to_float = np.frombuffer(data[:65536 * 4], np.float32)
    to_half = np.frombuffer(data[65536 * 4:], np.uint16)
    want = halves.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(to_float[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(to_float[nan]).all()
    with np.errstate(over="ignore"):
        expect = probes.astype(np.float16)
    nan = np.isnan(expect)
    assert np.array_equal(to_half[~nan], expect[~nan].view(np.uint16))
    assert np.isnan(to_half[nan].view(np.float16)).all()


ARM = ["arm-none-eabi-gcc", *STRICT, "-ffreestanding", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard",
       "-mfpu=fpv4-sp-d16", "-c"]
# what a freestanding object may still need: the porting functions, the libm routines the kernels
# call, and libgcc/newlib helpers the compiler itself emits
ALLOWED = {"fg_dsp_core_count", "fg_dsp_run", "fg_dsp_barrier", "fg_dsp_alloc", "fg_dsp_free", "fg_dsp_local_bytes",
           "fg_dsp_local_alloc", "fg_dsp_local_free", "fg_dsp_dma_get", "fg_dsp_dma_wait", "sqrtf", "memset", "memcpy"}


@pytest.mark.parametrize("chip", list(CHIP_DTYPES))
@pytest.mark.parametrize("half", ["fp16-storage", "soft"])
@pytest.mark.parametrize("source", ["layernormgrad.c", "lstmcellgrad.c", "lstm.c", "lstmgrad.c"])
def test_arm_none_eabi_freestanding_objects(chip, half, source, tmp):
    _need("arm-none-eabi-gcc", "arm-none-eabi-nm", package="gcc-arm-none-eabi")
    obj = tmp / f"{chip}-{half}-{source}.o"
    flags = ["-mfp16-format=ieee"] if half == "fp16-storage" else ["-DFG_HALF_SOFT"]
    proc = build_cache.run([*ARM, *flags, f"-I{DSP / chip}", "-o", str(obj), str(DSP / chip / source)], outputs=[obj])
    assert proc.returncode == 0, proc.stderr
    nm = subprocess.run(["arm-none-eabi-nm", "-u", str(obj)], capture_output=True, text=True, check=True)
    undefined = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    extra = {s for s in undefined - ALLOWED if not s.startswith("__aeabi_")}
    assert not extra, f"{source} for {chip} needs {sorted(extra)}"
    assert {"fg_dsp_run", "fg_dsp_alloc", "fg_dsp_dma_get"} <= undefined  # the port is reached, not bypassed
    defined = subprocess.run(["arm-none-eabi-nm", "--defined-only", "-g", str(obj)], capture_output=True,
                             text=True, check=True).stdout
    stem = source.split(".")[0]
    for p in CHIP_DTYPES[chip]:
        assert f"{p}_{stem}_s" in defined and f"{p}_{stem}_p" in defined
    if chip == "ft78ne":
        assert f"hp_{stem}_s" not in defined


def test_dsp_bench_tiny_run_reports_both_sides_and_the_ratio(capsys, monkeypatch):
    """benchmarks/dsp_bench.py on tiny shapes: it checks the C against the LLVM kernel, then times both."""
    import sys
    _need("gcc", package="gcc")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import dsp_bench
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(dsp_bench, "SETTLE_S", 0.0)
    assert dsp_bench.main(["--op", "layer_norm_backward", "--shape", "M=40,D=33", "--min-time", "0.01",
                           "--cflags=-O1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| layer_norm_backward")]
    assert [r.split("|")[3].strip() for r in rows] == ["float32", "float16"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        llvm, c_s, ratio, c_p = float(cells[3]), float(cells[4]), float(cells[5].rstrip("x")), float(cells[6])
        assert llvm > 0 and c_s > 0 and c_p > 0
        assert_ratio_matches_times(ratio, c_s, llvm, time_step=0.001)  # ms to 3 decimals
    with pytest.raises(SystemExit):
        dsp_bench.main(["--op", "layer_norm_backward", "--shape", "N=4,H=4"])


@pytest.fixture
def dsp_bench(monkeypatch):
    """benchmarks/dsp_bench.py as a module, without the wait for TVM's workers."""
    import sys
    _need("gcc", package="gcc")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import dsp_bench
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(dsp_bench, "SETTLE_S", 0.0)
    return dsp_bench


LAYER_BENCH = ["--op", "lstm_layer_backward", "--shape", "T=5,B=3,H=20", "--min-time", "0.01", "--cflags=-O1"]


def test_dsp_bench_times_the_lstm_layer_entry_points_in_float32(dsp_bench, capsys):
    """fp_lstmgrad (all T steps in one call) against the LLVM layer kernel: float32 only; asking for
    float16 is refused before anything is built."""
    assert dsp_bench.main(LAYER_BENCH) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| lstm_layer_backward")]
    assert [r.split("|")[2:4] for r in rows] == [[" T=5,B=3,H=20    ", " float32  "]]
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    llvm, c_s, ratio, c_p = float(cells[3]), float(cells[4]), float(cells[5].rstrip("x")), float(cells[6])
    assert llvm > 0 and c_s > 0 and c_p > 0
    assert_ratio_matches_times(ratio, c_s, llvm, time_step=0.001)
    with pytest.raises(SystemExit) as e:
        dsp_bench.main(["--op", "lstm_layer_backward", "--dtype", "float16"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--dtype: lstm_layer_backward is float32 only, got float16" in err


def test_dsp_bench_exits_on_an_lstm_layer_result_that_differs(dsp_bench, monkeypatch):
    """The layer's C outputs are checked against the LLVM kernel's: one element off in the LLVM
    dh0 stops the run before any timing."""
    real = dsp_bench.api.run

    def off_by_one(op_name, *args, **kw):
        out = dict(real(op_name, *args, **kw))
        out["dh0"] = out["dh0"].copy()
        out["dh0"][0, 0] += 1
        return out

    monkeypatch.setattr(dsp_bench.api, "run", off_by_one)
    monkeypatch.setattr(dsp_bench.bench, "median_times", lambda *a, **k: pytest.fail("timed a wrong result"))
    with pytest.raises(SystemExit) as e:
        dsp_bench.main(LAYER_BENCH)
    assert "lstm_layer_backward float32" in str(e.value) and "dh0 differs from LLVM" in str(e.value)


def test_a_32_bit_part_refuses_sizes_whose_byte_counts_wrap(tmp):
    """On arm32 (size_t of 32 bits) the size checks also refuse 33000 x 33000 floats, whose byte count
    wraps (tests/test_dsp.py LIMITS; before, the wrapped sizes passed and the kernel ran)."""
    cc, extra, emulator, package = PLATFORMS["arm32"]
    _need(cc, emulator, package=package)
    (tmp / "limits.c").write_text(LIMITS)
    exe = tmp / "limits-arm32"
    src = DSP / "ft78ne"
    proc = build_cache.run([cc, *STRICT, *extra, f"-I{src}", "-o", str(exe), str(tmp / "limits.c"),
                            str(src / "layernormgrad.c"), str(src / "lstmcellgrad.c"), str(src / "fg_dsp_port_host.c"),
                            "-lm", "-lpthread"], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = subprocess.run([emulator, str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "bad 0" in run.stdout and "ln 33000 x 33000" in run.stdout, (run.stdout,
                                                                                              run.stderr[-2000:])
