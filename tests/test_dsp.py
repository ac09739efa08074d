"""DSP library (generated/dsp): the C compiles strictly, and every entry point matches the reference.

Host builds (gcc, with and without ASan/UBSan); tests/test_dsp_cross.py runs the
committed library on arm-none-eabi, riscv64 and aarch64.
"""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

import build_cache
from conftest import toolchain_missing
from fusedgrad.lowering import dsp

CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (gcc) on this machine")
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]
LOCAL = "-DFG_DSP_HOST_LOCAL_BYTES=786432"  # each host core gets an MT-3000 AM: the kernels' DMA path runs


def _build(dsp_tree, chip, tmp_path, extra=(), name="lib.so"):
    out = tmp_path / name
    cmd = [CC, *STRICT, *extra, "-shared", "-fPIC", "-o", str(out),
           str(dsp_tree / chip / "layernormgrad.c"), str(dsp_tree / chip / "fg_dsp_port_host.c"), "-lm", "-lpthread"]
    # the sources include their headers from their own folder, named on no command line
    proc = build_cache.run(cmd, outputs=[out], inputs=[dsp_tree / chip])
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def libs(dsp_tree, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("built")
    return {chip: ctypes.CDLL(str(_build(dsp_tree, chip, tmp, name=f"{chip}.so"))) for chip in dsp.CHIPS}


def _call(lib, fn, arrays, M, D, mask=None, block_num=None, block_size=None):
    P, I = ctypes.c_void_p, ctypes.c_int
    f = getattr(lib, fn)
    ins, outs = arrays[:5], arrays[5:]
    args = [a.ctypes.data if a is not None else None for a in ins]
    args += [D, M, M if block_num is None else block_num, D if block_size is None else block_size]
    args += [a.ctypes.data if a is not None else None for a in outs]
    f.argtypes = [P] * 5 + [I] * 4 + [P] * 3 + ([I] if mask is not None else [])
    f(*(args + ([mask] if mask is not None else [])))
    status = lib.fg_layernormgrad_status()
    r = getattr(lib, fn + "_r")  # the same call again, its status returned
    r.argtypes, r.restype = f.argtypes, ctypes.c_int
    assert r(*(args + ([mask] if mask is not None else []))) == status
    return status


def _case(M, D, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = 0.5 + 2 * rng.standard_normal((M, D))
    ins = [a.astype(dtype) for a in (x, rng.standard_normal((M, D)), x.var(1), x.mean(1),
                                     1 + 0.1 * rng.standard_normal(D))]
    x64, dy64, var64, mean64, g64 = (a.astype(np.float64) for a in ins)
    rstd = 1 / np.sqrt(var64 + 1e-5)
    xh = (x64 - mean64[:, None]) * rstd[:, None]
    g = dy64 * g64
    ref = [rstd[:, None] * (g - g.mean(1, keepdims=True) - xh * (g * xh).mean(1, keepdims=True)),
           (dy64 * xh).sum(0), dy64.sum(0)]
    return ins, ref


@pytest.mark.parametrize("chip, dtype", [(c, d) for c, ds in dsp.CHIPS.items() for d in ds])
@pytest.mark.parametrize("M, D", [(1, 1), (13, 37), (100, 300), (67, 8)])
def test_entry_points_match_reference_and_each_other(libs, chip, dtype, M, D):
    np_dtype = {"float32": np.float32, "float16": np.float16}[dtype]
    tol = {"float32": 1e-5, "float16": 2e-2}[dtype]
    ins, ref = _case(M, D, np_dtype)
    prefix = dsp.PREFIX[dtype]
    results = []
    for fn, mask in ((f"{prefix}_layernormgrad_p", None), (f"{prefix}_layernormgrad_s", 0b1),
                     (f"{prefix}_layernormgrad_s", 0b110), (f"{prefix}_layernormgrad_s", 0xff)):
        outs = [np.zeros((M, D), np_dtype), np.zeros(D, np_dtype), np.zeros(D, np_dtype)]
        assert _call(libs[chip], fn, ins + outs, M, D, mask) == 0
        for o, r in zip(outs, ref):
            assert np.abs(o.astype(np.float64) - r).max() / (np.abs(r).max() + 1) <= tol, (fn, mask)
        results.append(outs)
    # the partial sums are per fixed row block, not per core: same bits on any core mask
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_ft78ne_has_no_half_entry_points(libs):
    assert not hasattr(libs["ft78ne"], "hp_layernormgrad_s")
    assert hasattr(libs["mt7004"], "hp_layernormgrad_p")


@pytest.mark.parametrize("kwargs, status", [
    ({"M": 0}, 2), ({"D": 0}, 2), ({"block_num": 3}, 2), ({"block_num": 10, "block_size": 2}, 2),
    ({"null": 0}, 1), ({"null": 6}, 1), ({"mask": 0}, 3), ({"mask": 0x100}, 3),
])
def test_bad_input_writes_nothing(libs, kwargs, status):
    M, D = kwargs.pop("M", 4), kwargs.pop("D", 5)
    ins, _ = _case(4, 5, np.float32)
    outs = [np.full((4, 5), 7, np.float32), np.full(5, 7, np.float32), np.full(5, 7, np.float32)]
    arrays = ins + outs
    if "null" in kwargs:
        arrays[kwargs.pop("null")] = None
    mask = kwargs.pop("mask", None)
    fn = "fp_layernormgrad_s" if mask is not None else "fp_layernormgrad_p"
    assert _call(libs["ft78ne"], fn, arrays, M, D, mask, **kwargs) == status
    assert all((o == 7).all() for o in outs)
    # and a good call afterwards reports success again
    assert _call(libs["ft78ne"], "fp_layernormgrad_p", ins + outs, 4, 5) == 0


@pytest.mark.parametrize("out, onto", [(5, 0), (5, 1), (6, 4), (7, 6), (7, 5)])
def test_outputs_overlapping_anything_are_refused(libs, out, onto):
    """The kernels' pointers are restrict: an output sharing memory with an input or another output
    is reported (FG_LNG_ERR_OVERLAP) and nothing is written."""
    M, D = 4, 5
    ins, _ = _case(M, D, np.float32)
    outs = [np.full((M, D), 7, np.float32), np.full(D, 7, np.float32), np.full(D, 7, np.float32)]
    arrays = ins + outs
    before = [a.copy() for a in arrays]
    arrays[out] = arrays[onto]  # the same memory (or its first bytes) twice
    assert _call(libs["ft78ne"], "fp_layernormgrad_p", arrays, M, D) == 5
    assert all(np.array_equal(a, b) for a, b in zip(ins + outs, before))


def test_blocks_other_than_rows_are_accepted(libs):
    ins, ref = _case(4, 5, np.float32)
    outs = [np.zeros((4, 5), np.float32), np.zeros(5, np.float32), np.zeros(5, np.float32)]
    assert _call(libs["ft78ne"], "fp_layernormgrad_p", ins + outs, 4, 5, block_num=2, block_size=10) == 0
    assert np.abs(outs[0] - ref[0]).max() < 1e-5


def test_eps_is_a_compile_time_constant(dsp_tree, tmp_path):
    lib = ctypes.CDLL(str(_build(dsp_tree, "ft78ne", tmp_path, extra=["-DFG_LNG_EPS=0.5f"])))
    ins, _ = _case(6, 9, np.float32)
    outs = [np.zeros((6, 9), np.float32), np.zeros(9, np.float32), np.zeros(9, np.float32)]
    assert _call(lib, "fp_layernormgrad_p", ins + outs, 6, 9) == 0
    rstd = 1 / np.sqrt(ins[2].astype(np.float64) + 0.5)
    xh = (ins[0].astype(np.float64) - ins[3][:, None]) * rstd[:, None]
    assert np.abs(outs[1] - (ins[1] * xh).sum(0)).max() < 1e-5


@pytest.mark.parametrize("local", [[], [LOCAL]], ids=["in-place", "dma-staged"])
def test_sanitizers_find_nothing(dsp_tree, tmp_path, local):
    """An executable built with -fsanitize=address,undefined runs every entry point on odd sizes."""
    main = tmp_path / "main.c"
    main.write_text(r'''
#include <stdio.h>
#include <stdlib.h>
#include "layernormgrad.h"
static float *fill(int n, float base) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; ++i) p[i] = base + (float)((i * 37) % 101) / 50.0f;
    return p;
}
int main(void) {
    int sizes[][2] = {{1, 1}, {13, 37}, {33, 65}, {70, 3}};
    for (int k = 0; k < 4; ++k) {
        int M = sizes[k][0], D = sizes[k][1];
        float *x = fill(M * D, -1.0f), *dy = fill(M * D, -0.5f), *var = fill(M, 0.5f), *mean = fill(M, 0.0f);
        float *g = fill(D, 1.0f), *dx = fill(M * D, 0.0f), *dg = fill(D, 0.0f), *db = fill(D, 0.0f);
        fp_layernormgrad_p(x, dy, var, mean, g, D, M, M, D, dx, dg, db);
        if (fg_layernormgrad_status() != FG_LNG_OK) return 1;
        fp_layernormgrad_s(x, dy, var, mean, g, D, M, M, D, dx, dg, db, 0x7);
        if (fg_layernormgrad_status() != FG_LNG_OK) return 2;
        free(x); free(dy); free(var); free(mean); free(g); free(dx); free(dg); free(db);
    }
    puts("ok");
    return 0;
}
''')
    exe = tmp_path / "main"
    cmd = [CC, *STRICT, *local, "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           f"-I{dsp_tree / 'mt7004'}", "-o", str(exe), str(main),
           str(dsp_tree / "mt7004" / "layernormgrad.c"), str(dsp_tree / "mt7004" / "fg_dsp_port_host.c"),
           "-lm", "-lpthread"]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


# ---------------------------------------------------------------------------- LSTM-cell backward


@pytest.fixture(scope="module")
def cell_libs(dsp_tree, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cell")
    out = {}
    for chip in dsp.CHIPS:
        so = tmp / f"{chip}-cell.so"
        cmd = [CC, *STRICT, "-shared", "-fPIC", "-o", str(so), str(dsp_tree / chip / "lstmcellgrad.c"),
               str(dsp_tree / chip / "fg_dsp_port_host.c"), "-lm", "-lpthread"]
        proc = build_cache.run(cmd, outputs=[so], inputs=[dsp_tree / chip])  # the headers beside the sources
        assert proc.returncode == 0, proc.stderr
        out[chip] = ctypes.CDLL(str(so))
    return out


def _cell_call(lib, fn, dhy, dc, cx, cy, st, n, h, has_bias, outs, mask=None):
    P, I = ctypes.c_void_p, ctypes.c_int
    f = getattr(lib, fn)
    ptr = lambda a: a.ctypes.data if a is not None else None  # noqa: E731
    args = [ptr(dhy), ptr(dc), ptr(cx), ptr(cy), ptr(st), n, h, int(has_bias)] + [ptr(o) for o in outs]
    f.argtypes = [P] * 5 + [I] * 3 + [P] * 3 + ([I] if mask is not None else [])
    f(*(args + ([mask] if mask is not None else [])))
    status = lib.fg_lstmcellgrad_status()
    r = getattr(lib, fn + "_r")  # the same call again, its status returned
    r.argtypes, r.restype = f.argtypes, ctypes.c_int
    assert r(*(args + ([mask] if mask is not None else []))) == status
    return status


@pytest.mark.parametrize("chip, dtype", [(c, d) for c, ds in dsp.CHIPS.items() for d in ds])
@pytest.mark.parametrize("n, h", [(1, 1), (13, 37), (70, 33)])
def test_cell_entry_points_match_reference_and_each_other(cell_libs, chip, dtype, n, h):
    from fusedgrad import te_defs

    op = te_defs.get("lstm_cell_backward")
    np_dtype = {"float32": np.float32, "float16": np.float16}[dtype]
    tol = {"float32": 1e-5, "float16": 2e-2}[dtype]
    sample = {k: v.astype(np_dtype) for k, v in op.sample({"N": n, "H": h}, np.random.default_rng(n)).items()}
    prefix = dsp.PREFIX[dtype]
    for has_hy in (True, False):
        for has_cy in (True, False):
            for has_bias in (True, False):
                dhy = sample["grad_hy"] if has_hy else None
                dc = sample["grad_cy"] if has_cy else None
                ref = op.reference(dhy.astype(np.float64) if has_hy else None,
                                   dc.astype(np.float64) if has_cy else None,
                                   *(sample[k].astype(np.float64) for k in ("cx", "cy", "storage")), has_bias=has_bias)
                results = []
                for fn, mask in ((f"{prefix}_lstmcellgrad_p", None), (f"{prefix}_lstmcellgrad_s", 0b1),
                                 (f"{prefix}_lstmcellgrad_s", 0b1011)):
                    outs = [np.zeros((n, 4 * h), np_dtype), np.zeros((n, h), np_dtype),
                            np.full(4 * h, 7, np_dtype)]
                    assert _cell_call(cell_libs[chip], fn, dhy, dc, sample["cx"], sample["cy"], sample["storage"],
                                      n, h, has_bias, outs, mask) == 0
                    for name, o in zip(("grad_gates", "grad_cx"), outs):
                        r = ref[name]
                        assert np.abs(o.astype(np.float64) - r).max() / (np.abs(r).max() + 1) <= tol, (fn, name)
                    if has_bias:
                        r = ref["grad_bias"]
                        assert np.abs(outs[2].astype(np.float64) - r).max() / (np.abs(r).max() + 1) <= tol
                    else:
                        assert (outs[2] == 7).all()  # db untouched without has_bias
                    results.append(outs)
                for other in results[1:]:
                    for a, b in zip(results[0], other):
                        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("case, status", [("cx", 1), ("db", 1), ("n", 2), ("hidden", 2), ("mask0", 3),
                                          ("mask_big", 3), ("dgates_on_storage", 5), ("dc_prev_on_dhy", 5)])
def test_cell_bad_input_writes_nothing(cell_libs, case, status):
    n, h = 3, 4
    ones = [np.ones((n, h), np.float32) for _ in range(4)] + [np.full((n, 4 * h), 0.5, np.float32)]
    outs = [np.full((n, 4 * h), 7, np.float32), np.full((n, h), 7, np.float32), np.full(4 * h, 7, np.float32)]
    args = dict(dhy=ones[0], dc=ones[1], cx=ones[2], cy=ones[3], st=ones[4], n=n, h=h, has_bias=True)
    mask = None
    if case == "cx":
        args["cx"] = None
    elif case == "db":
        outs[2] = None
    elif case == "n":
        args["n"] = 0
    elif case == "hidden":
        args["h"] = -1
    elif case == "dgates_on_storage":
        outs[0] = args["st"]
    elif case == "dc_prev_on_dhy":
        outs[1] = args["dhy"]
    else:
        mask = 0 if case == "mask0" else 0x100
    fn = "fp_lstmcellgrad_s" if mask is not None else "fp_lstmcellgrad_p"
    got = _cell_call(cell_libs["ft78ne"], fn, args["dhy"], args["dc"], args["cx"], args["cy"], args["st"],
                     args["n"], args["h"], args["has_bias"], outs, mask)
    assert got == status
    assert all((o == 7).all() for o in outs if o is not None and not any(o is i for i in ones))
    assert all((i == (0.5 if k == 4 else 1)).all() for k, i in enumerate(ones))  # inputs untouched


@pytest.mark.parametrize("local", [[], [LOCAL]], ids=["in-place", "dma-staged"])
def test_cell_sanitizers_find_nothing(dsp_tree, tmp_path, local):
    main = tmp_path / "cell_main.c"
    main.write_text(r'''
#include <stdio.h>
#include <stdlib.h>
#include "lstmcellgrad.h"
static half *fill(int n, float base) {
    half *p = malloc(sizeof(half) * (size_t)n);
    for (int i = 0; i < n; ++i) p[i] = fg_half_from_float(base + (float)((i * 37) % 101) / 200.0f);
    return p;
}
int main(void) {
    int sizes[][2] = {{1, 1}, {13, 37}, {40, 9}};
    for (int k = 0; k < 3; ++k) {
        int n = sizes[k][0], h = sizes[k][1];
        half *dhy = fill(n * h, -0.2f), *dc = fill(n * h, 0.1f), *cx = fill(n * h, -0.3f), *cy = fill(n * h, 0.2f);
        half *st = fill(n * 4 * h, 0.25f), *dg = fill(n * 4 * h, 0.0f), *dcp = fill(n * h, 0.0f), *db = fill(4 * h, 0.0f);
        for (int v = 0; v < 8; ++v) {
            half *a = (v & 4) ? dhy : NULL, *b = (v & 2) ? dc : NULL;
            hp_lstmcellgrad_p(a, b, cx, cy, st, n, h, v & 1, dg, dcp, db);
            if (fg_lstmcellgrad_status() != FG_LCG_OK) return 1;
            hp_lstmcellgrad_s(a, b, cx, cy, st, n, h, v & 1, dg, dcp, db, 0x5);
            if (fg_lstmcellgrad_status() != FG_LCG_OK) return 2;
        }
        free(dhy); free(dc); free(cx); free(cy); free(st); free(dg); free(dcp); free(db);
    }
    puts("ok");
    return 0;
}
''')
    exe = tmp_path / "cell_main"
    cmd = [CC, *STRICT, *local, "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           f"-I{dsp_tree / 'mt7004'}", "-o", str(exe), str(main),
           str(dsp_tree / "mt7004" / "lstmcellgrad.c"), str(dsp_tree / "mt7004" / "fg_dsp_port_host.c"),
           "-lm", "-lpthread"]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def test_tanh_of_the_c_kernels(tmp_path):
    """fg_tanhf (TVM's llvm formula over an inline exponential) against float64 tanh: within 3e-7
    absolutely everywhere (like the LLVM kernels' formula, it loses relative precision near 0),
    within 4 ulp from 0.5 up, and IEEE on the specials."""
    src = tmp_path / "tanh.c"
    src.write_text("#define FG_USE_TANHF\n" + dsp.fixed_source("fg_dsp_kernel.h") + r'''
#include <stdio.h>
int main(int argc, char **argv) {
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    float x;
    (void)argc;
    while (fread(&x, 4, 1, in) == 1) {
        float y = fg_tanhf(x);
        fwrite(&y, 4, 1, out);
    }
    fclose(in);
    fclose(out);
    return 0;
}
''')
    exe = tmp_path / "tanh"
    proc = build_cache.run([CC, *STRICT, "-o", str(exe), str(src), "-lm"], outputs=[exe])
    assert proc.returncode == 0, proc.stderr
    rng = np.random.default_rng(1)
    xs = np.concatenate([np.linspace(-12, 12, 200001), rng.standard_normal(100000) * 3,
                         np.float32([1e-30, -1e-30, 1e-8, 50, -50, 1e30, -1e30, 88.7, -103])]).astype(np.float32)
    specials = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0])
    (tmp_path / "in").write_bytes(np.concatenate([xs, specials]).tobytes())
    run = subprocess.run([str(exe), str(tmp_path / "in"), str(tmp_path / "out")], capture_output=True)
    assert run.returncode == 0
    got = np.frombuffer((tmp_path / "out").read_bytes(), np.float32)
    y, sp = got[:xs.size].astype(np.float64), got[xs.size:]
    want = np.tanh(xs.astype(np.float64))
    assert np.abs(y - want).max() <= 3e-7
    big = np.abs(xs) >= 0.5
    ulp = np.spacing(np.abs(want[big]).astype(np.float32)).astype(np.float64)
    assert (np.abs(y[big] - want[big]) / ulp).max() <= 4
    assert np.isnan(sp[0]) and sp[1] == 1 and sp[2] == -1
    assert sp[3] == 0 and not np.signbit(sp[3]) and sp[4] == 0 and np.signbit(sp[4])


@pytest.mark.parametrize("M, D", [(100, 300), (67, 8)])
def test_s_stages_its_inputs_by_dma_and_gets_the_same_bits_without(libs, dsp_tree, tmp_path, M, D):
    """With local memory (FG_DSP_HOST_LOCAL_BYTES, as on a DSP), _s copies each row block's inputs
    into it through fg_dsp_dma_get (counted by the host port); without (the host default) it reads
    them in place.  Both, and _p, give the same bits."""
    ins, _ = _case(M, D, np.float32, seed=3)
    staged = ctypes.CDLL(str(_build(dsp_tree, "ft78ne", tmp_path, extra=[LOCAL], name="staged.so")))
    counter = ctypes.c_ulonglong.in_dll(staged, "fg_dsp_host_dma_bytes")
    results = []
    for lib, fn, mask in ((staged, "fp_layernormgrad_s", 0b11), (staged, "fp_layernormgrad_p", None)):
        outs = [np.zeros((M, D), np.float32), np.zeros(D, np.float32), np.zeros(D, np.float32)]
        before = counter.value
        assert _call(lib, fn, ins + outs, M, D, mask) == 0
        copied = counter.value - before
        if mask is None:
            assert copied == 0  # private storage: nothing to stage
        else:
            assert copied >= 4 * (2 * M * D + 2 * M + D)  # x, dy, mean, var, gamma at least once
        results.append(outs)
    direct = libs["ft78ne"]
    before = ctypes.c_ulonglong.in_dll(direct, "fg_dsp_host_dma_bytes").value
    outs = [np.zeros((M, D), np.float32), np.zeros(D, np.float32), np.zeros(D, np.float32)]
    assert _call(direct, "fp_layernormgrad_s", ins + outs, M, D, 0b11) == 0
    assert ctypes.c_ulonglong.in_dll(direct, "fg_dsp_host_dma_bytes").value == before
    results.append(outs)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("chip, dtype", [(c, d) for c, ds in dsp.CHIPS.items() for d in ds])
def test_the_bits_do_not_depend_on_the_compilers_contraction_default(libs, dsp_tree, tmp_path, chip, dtype):
    """GNU C modes (and many vendor compilers) fuse a*b+c into one rounding unless told not to; the
    sources say so themselves, so a -std=gnu99 build for this CPU (with its FMA) gives the bits of the
    strict -std=c99 one, and D = 1 gives dx = 0 exactly."""
    fused = ctypes.CDLL(str(_build(dsp_tree, chip, tmp_path, extra=["-std=gnu99", "-march=native"])))
    np_dtype = {"float32": np.float32, "float16": np.float16}[dtype]
    fn = f"{dsp.PREFIX[dtype]}_layernormgrad_p"
    for M, D in ((7, 1), (13, 37), (64, 300)):
        ins, _ = _case(M, D, np_dtype, seed=M)
        got = []
        for lib in (libs[chip], fused):
            outs = [np.zeros((M, D), np_dtype), np.zeros(D, np_dtype), np.zeros(D, np_dtype)]
            assert _call(lib, fn, ins + outs, M, D) == 0
            got.append(outs)
        for a, b in zip(*got):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (M, D)
        if D == 1:
            assert not got[1][0].any()


RACE = r'''#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "layernormgrad.h"
/* _p on two threads with good arguments and one with bad ones (param_num = 0), 2000 calls each:
 * every call's status (fg_layernormgrad_status() after the void form, and the _r form's return)
 * must be its own.  Prints the number of wrong statuses. */
enum { M = 16, D = 24, CALLS = 2000 };
static float x[M * D], dy[M * D], var[M], mean[M], gam[D];
static void *run(void *arg) {
    const int good = arg != NULL;
    float *dx = malloc(sizeof(float) * M * D), *dg = malloc(sizeof(float) * D), *db = malloc(sizeof(float) * D);
    const int want = good ? FG_LNG_OK : FG_LNG_ERR_SIZE, num = good ? D : 0;
    long wrong = 0;
    for (int i = 0; i < CALLS; ++i) {
        fp_layernormgrad_p(x, dy, var, mean, gam, num, M, M, D, dx, dg, db);
        wrong += fg_layernormgrad_status() != want;
        wrong += fp_layernormgrad_p_r(x, dy, var, mean, gam, num, M, M, D, dx, dg, db) != want;
    }
    free(dx); free(dg); free(db);
    return (void *)wrong;
}
int main(void) {
    pthread_t t[3];
    long total = 0;
    for (int i = 0; i < M * D; ++i) { x[i] = (float)(i % 7) - 3.0f; dy[i] = (float)(i % 5) * 0.5f; }
    for (int i = 0; i < M; ++i) { var[i] = 1.0f + (float)i; mean[i] = 0.25f; }
    for (int i = 0; i < D; ++i) gam[i] = 1.0f;
    for (int i = 0; i < 3; ++i) pthread_create(&t[i], NULL, run, i < 2 ? (void *)1 : NULL);
    for (int i = 0; i < 3; ++i) { void *w; pthread_join(t[i], &w); total += (long)w; }
    printf("%ld\n", total);
    return 0;
}
'''


def test_each_call_reads_its_own_status_under_threadsanitizer(dsp_tree, tmp_path):
    """The status word is per thread in a hosted build and the _r forms return their call's status:
    ThreadSanitizer sees no race between concurrent good and failing _p calls, and no call reads
    another's status."""
    (tmp_path / "race.c").write_text(RACE)
    exe = tmp_path / "race"
    chip = dsp_tree / "ft78ne"
    cmd = [CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g", "-fsanitize=thread", f"-I{chip}",
           "-o", str(exe), str(tmp_path / "race.c"), str(chip / "layernormgrad.c"), str(chip / "fg_dsp_port_host.c"),
           "-lm", "-lpthread"]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1 exitcode=66"}
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "0", (proc.returncode, proc.stdout, proc.stderr[-3000:])


CXX_MAIN = r'''#include <cstdio>
#include <vector>
#include "layernormgrad.h"
#include "lstmcellgrad.h"
// A C++ caller of the C library: every entry point links with C names; prints what the calls said.
int main() {
    const int M = 4, D = 8, N = 3, H = 5;
    std::vector<float> x(M * D, 1.0f), dy(M * D, 0.5f), var(M, 1.0f), mean(M, 0.0f), g(D, 1.0f);
    std::vector<float> dx(M * D), dg(D), db(D);
    fp_layernormgrad_p(x.data(), dy.data(), var.data(), mean.data(), g.data(), D, M, M, D, dx.data(), dg.data(), db.data());
    int a = fg_layernormgrad_status();
    int b = fp_layernormgrad_s_r(x.data(), dy.data(), var.data(), mean.data(), g.data(), D, M, M, D, dx.data(),
                                 dg.data(), db.data(), 1);
    std::vector<float> h(N * H, 0.5f), st(N * 4 * H, 0.25f), gates(N * 4 * H), dcp(N * H), bias(4 * H);
    int c = fp_lstmcellgrad_p_r(h.data(), h.data(), h.data(), h.data(), st.data(), N, H, 1, gates.data(), dcp.data(),
                                bias.data());
    fp_lstmcellgrad_p(h.data(), h.data(), h.data(), h.data(), st.data(), 0, H, 1, gates.data(), dcp.data(), bias.data());
    std::printf("%d %d %d %d %g\n", a, b, c, fg_lstmcellgrad_status(), (double)db[0]);
    return 0;
}
'''


@pytest.mark.parametrize("chip", sorted(dsp.CHIPS))
def test_the_headers_serve_a_cpp_caller(dsp_tree, tmp_path, chip):
    """The public headers declare C linkage for C++ callers: a C++ program built with g++ links against
    the C objects and its calls report as they should (it failed to link without extern "C")."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++)")
    objs = []
    for src in ("layernormgrad.c", "lstmcellgrad.c", "fg_dsp_port_host.c"):
        obj = tmp_path / (src + ".o")
        # the headers beside the source, named on no command line
        proc = build_cache.run([CC, *STRICT, "-c", "-o", str(obj), str(dsp_tree / chip / src)], outputs=[obj],
                               inputs=[dsp_tree / chip])
        assert proc.returncode == 0, proc.stderr
        objs.append(str(obj))
    (tmp_path / "main.cpp").write_text(CXX_MAIN)
    exe = tmp_path / "main"
    proc = build_cache.run([cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{dsp_tree / chip}", "-o", str(exe),
                            str(tmp_path / "main.cpp"), *objs, "-lm", "-lpthread"], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.split()
    assert out[:4] == ["0", "0", "0", "2"], out  # ok, ok, ok, and n = 0: FG_LCG_ERR_SIZE


# -------------------------------------------------------------------------- the caller's workspace

WORKSPACE_PRELUDE = r'''#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fg_dsp_port.h"
/* the library's allocator and launcher, watched: how often it allocates, how its workspace is aligned */
static int allocs, runs, misaligned;
static void *test_alloc(size_t n);
static int test_run(uint32_t mask, void (*fn)(int, int, fg_dsp_sync_t *, void *), void *arg);
#define fg_dsp_alloc test_alloc
#define fg_dsp_run test_run
#include "@SRC@"
#undef fg_dsp_alloc
#undef fg_dsp_run
static void *test_alloc(size_t n) { ++allocs; return fg_dsp_alloc(n); }
static int test_run(uint32_t mask, void (*fn)(int, int, fg_dsp_sync_t *, void *), void *arg) {
    ++runs;
    misaligned += ((uintptr_t)((struct @TAG@_args *)arg)->ws % 64u) != 0;
    return fg_dsp_run(mask, fn, arg);
}
static @T@ *filled(size_t n, int seed) {
    @T@ *a = (@T@ *)malloc(sizeof(@T@) * n);
    size_t i;
    for (i = 0; i < n; ++i) {
        a[i] = @CONV@((float)((i * 7u + (unsigned)seed * 13u) % 17u) / 8.0f - 1.0f);
    }
    return a;
}
static int fails;
#define CHECK(c) do { if (!(c)) { ++fails; printf("failed: %s (line %d)\n", #c, __LINE__); } } while (0)
'''

LN_WORKSPACE_MAIN = r'''
int main(void) {
    const int M = 70, D = 45;
    @T@ *x = filled((size_t)M * D, 1), *dy = filled((size_t)M * D, 2), *var = filled(M, 3), *mean = filled(M, 4);
    @T@ *g = filled(D, 5), *dx = filled((size_t)M * D, 0), *dg = filled(D, 0), *db = filled(D, 0);
    @T@ *rx = filled((size_t)M * D, 0), *rg = filled(D, 0), *rb = filled(D, 0);
    size_t need = 0;
    int off, i;
    for (i = 0; i < M; ++i) {
        var[i] = @CONV@(0.5f + (float)i / 64.0f);
    }
    CHECK(@E@_workspace(D, M, &need) == 0 && need > 0);
    CHECK(@E@_workspace(D, M, NULL) == FG_LNG_ERR_NULL && @E@_workspace(0, M, &need) == FG_LNG_ERR_SIZE);
    CHECK(@E@_p_r(x, dy, var, mean, g, D, M, M, D, rx, rg, rb) == 0);
    for (off = 0; off < 64; ++off) { /* any alignment; the workspace ends where its memory ends (ASan) */
        char *mem = (char *)malloc(need + (size_t)off);
        int before = allocs;
        CHECK(@E@_p_w(x, dy, var, mean, g, D, M, M, D, dx, dg, db, mem + off, need) == 0);
        CHECK(!memcmp(dx, rx, sizeof(@T@) * (size_t)M * D) && !memcmp(dg, rg, sizeof(@T@) * D) &&
              !memcmp(db, rb, sizeof(@T@) * D));
        memset(dx, 0, sizeof(@T@) * (size_t)M * D);
        CHECK(@E@_s_w(x, dy, var, mean, g, D, M, M, D, dx, dg, db, 0x7, mem + off, need) == 0);
        CHECK(!memcmp(dx, rx, sizeof(@T@) * (size_t)M * D) && !memcmp(dg, rg, sizeof(@T@) * D) &&
              !memcmp(db, rb, sizeof(@T@) * D));
        CHECK(allocs == before); /* the _w forms never allocate */
        memset(dx, 0, sizeof(@T@) * (size_t)M * D);
        CHECK(@E@_p_w(x, dy, var, mean, g, D, M, M, D, dx, dg, db, mem + off, need - 64) == FG_LNG_ERR_WORKSPACE);
        CHECK(@E@_s_w(x, dy, var, mean, g, D, M, M, D, dx, dg, db, 0x3, NULL, need) == FG_LNG_ERR_WORKSPACE);
        for (i = 0; i < M * D; ++i) {
            CHECK(!memcmp(&dx[i], (@T@[1]){@CONV@(0.0f)}, sizeof(@T@))); /* refused: nothing written */
        }
        free(mem);
    }
    runs = misaligned = 0;
    for (i = 0; i < 8; ++i) { /* the library's own workspace starts on 64 bytes too */
        CHECK(@E@_s_r(x, dy, var, mean, g, D, M, M, D, dx, dg, db, 0x3) == 0);
    }
    CHECK(runs == 8 && misaligned == 0);
    printf("fails %d\n", fails);
    return fails != 0;
}
'''

CELL_WORKSPACE_MAIN = r'''
int main(void) {
    const int N = 70, H = 21;
    @T@ *dhy = filled((size_t)N * H, 1), *dc = filled((size_t)N * H, 2), *cx = filled((size_t)N * H, 3);
    @T@ *cy = filled((size_t)N * H, 4), *st = filled((size_t)N * 4 * H, 5);
    @T@ *gates = filled((size_t)N * 4 * H, 0), *dcp = filled((size_t)N * H, 0), *db = filled(4 * (size_t)H, 0);
    @T@ *rgates = filled((size_t)N * 4 * H, 0), *rdcp = filled((size_t)N * H, 0), *rdb = filled(4 * (size_t)H, 0);
    size_t need = 0;
    int off, v, i;
    CHECK(@E@_workspace(N, H, &need) == 0 && need > 0);
    CHECK(@E@_workspace(N, H, NULL) == FG_LCG_ERR_NULL && @E@_workspace(N, 0, &need) == FG_LCG_ERR_SIZE);
    for (v = 0; v < 8; ++v) { /* every variant: NULL dhy / dc, has_bias */
        @T@ *h = (v & 4) ? dhy : NULL, *c = (v & 2) ? dc : NULL;
        int bias = v & 1;
        CHECK(@E@_p_r(h, c, cx, cy, st, N, H, bias, rgates, rdcp, rdb) == 0);
        for (off = 0; off < 64; off += 9) {
            char *mem = (char *)malloc(need + (size_t)off);
            int before = allocs;
            CHECK(@E@_p_w(h, c, cx, cy, st, N, H, bias, gates, dcp, db, mem + off, need) == 0);
            CHECK(!memcmp(gates, rgates, sizeof(@T@) * (size_t)N * 4 * H) && !memcmp(dcp, rdcp, sizeof(@T@) * (size_t)N * H));
            CHECK(!bias || !memcmp(db, rdb, sizeof(@T@) * 4 * (size_t)H));
            memset(gates, 0, sizeof(@T@) * (size_t)N * 4 * H);
            CHECK(@E@_s_w(h, c, cx, cy, st, N, H, bias, gates, dcp, db, 0x7, mem + off, need) == 0);
            CHECK(!memcmp(gates, rgates, sizeof(@T@) * (size_t)N * 4 * H) && !memcmp(dcp, rdcp, sizeof(@T@) * (size_t)N * H));
            CHECK(!bias || !memcmp(db, rdb, sizeof(@T@) * 4 * (size_t)H));
            CHECK(allocs == before); /* the _w forms never allocate, nor do their kernels */
            memset(gates, 0, sizeof(@T@) * (size_t)N * 4 * H);
            CHECK(@E@_s_w(h, c, cx, cy, st, N, H, bias, gates, dcp, db, 0x3, mem + off, 1) == FG_LCG_ERR_WORKSPACE);
            CHECK(@E@_p_w(h, c, cx, cy, st, N, H, bias, gates, dcp, db, NULL, need) == FG_LCG_ERR_WORKSPACE);
            for (i = 0; i < N * 4 * H; ++i) {
                CHECK(!memcmp(&gates[i], (@T@[1]){@CONV@(0.0f)}, sizeof(@T@))); /* refused: nothing written */
            }
            free(mem);
        }
    }
    runs = misaligned = 0;
    for (i = 0; i < 8; ++i) {
        CHECK(@E@_s_r(dhy, dc, cx, cy, st, N, H, 1, gates, dcp, db, 0x3) == 0);
    }
    CHECK(runs == 8 && misaligned == 0);
    printf("fails %d\n", fails);
    return fails != 0;
}
'''


@pytest.mark.parametrize("op", ["layer_norm_backward", "lstm_cell_backward"])
@pytest.mark.parametrize("chip, dtype", [(c, d) for c, ds in dsp.CHIPS.items() for d in ds])
def test_a_caller_owned_workspace_of_the_queried_size_serves_every_call(dsp_tree, tmp_path, op, chip, dtype):
    """The _w entry points run in the caller's workspace, at any alignment, of exactly the bytes the
    _workspace query gives (ASan: nothing beyond it), with the same bits as _p_r, never allocating; a
    workspace too small or NULL is refused with nothing written; the library's own workspace starts
    on a 64-byte boundary."""
    from fusedgrad.lowering import naming
    stem = naming.dsp_file(op)
    main = LN_WORKSPACE_MAIN if op == "layer_norm_backward" else CELL_WORKSPACE_MAIN
    conv = "fg_half_from_float" if dtype == "float16" else ""
    text = (WORKSPACE_PRELUDE + main).replace("@SRC@", f"{stem}.c").replace("@T@", dsp.CTYPE[dtype]).replace(
        "@E@", naming.dsp_entry(op, dtype)).replace("@CONV@", conv).replace(
        "@TAG@", naming.dsp_kernel_symbol(op, dtype, {}) if op == "lstm_cell_backward" else
        dsp._schedules(op, dtype)[0][1])
    src = tmp_path / "ws.c"
    src.write_text(text)
    exe = tmp_path / "ws"
    cmd = [CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all", f"-I{dsp_tree / chip}", "-o", str(exe), str(src),
           str(dsp_tree / chip / "fg_dsp_port_host.c"), "-lm", "-lpthread"]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}  # the program's own arrays live to its end
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0 and "fails 0" in run.stdout, (run.stdout[-3000:], run.stderr[-3000:])


# the uses of the core index that pick a core's share: its slice of a split loop
# (fg_n * fg_core / fg_ncores .. fg_n * (fg_core + 1) / fg_ncores) and its workspace; besides the
# parameter and its (void) cast, any other use (a test of it, however spelt) decides per core
_CORE_SHARE = (r"\bint fg_core\b", r"\(void\)fg_core\b", r"\* fg_core\)", r"\(fg_core \+ 1\)",
               r"\(size_t\)fg_core \*")


def _core_tests(text: str) -> list[str]:
    """The lines of C ``text`` (comments aside) that use ``fg_core`` other than to pick a core's share."""
    import re

    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    return [line.strip() for line in text.splitlines()
            if re.search(r"\bfg_core\b", re.sub("|".join(_CORE_SHARE), "", line))]


def test_no_stage_runs_on_one_core_while_the_others_wait(dsp_tree):
    """Every top-level loop of the spmd kernels is split over the cores: the dgamma/dbeta and grad_bias
    stores too (they ran on core 0 alone, the other cores waiting at a barrier).  The core index
    only picks a core's share; nothing tests it, however the test is spelt."""
    for chip in dsp.CHIPS:
        for name in ("layernormgrad.c", "lstmcellgrad.c"):
            text = (dsp_tree / chip / name).read_text()
            assert "fg_core" in text and _core_tests(text) == [], (chip, name, _core_tests(text))
    tests = ["if (fg_core == 0) {", "if (0 == fg_core) {", "if (!fg_core) {", "if (fg_core < 1) {",
             "if (fg_core) {", "x = fg_core ? a : b;", "switch (fg_core) {", "if (fg_core != 0) return;"]
    assert _core_tests("\n".join(tests)) == tests


# ------------------------------------------------------------------------------------ size limits

LIMITS = r'''#include <stdint.h>
#include <stdio.h>
#include "layernormgrad.h"
#include "lstmcellgrad.h"
/* Sizes past what the kernels' 32-bit indices (or a 32-bit size_t's byte counts) reach, with
 * pointers that hold no memory: every call must be refused before it touches one. */
static float *fake(int k) { return (float *)(uintptr_t)((sizeof(void *) > 4 ? (uintptr_t)1 << 40 : 0x10000000u) +
                                                       (uintptr_t)k * (sizeof(void *) > 4 ? (uintptr_t)1 << 36 : 0x100u)); }
int main(void) {
    const int big = 0x7fffffff - 1;
    int ln[][2] = {{1, big}, {big, 1}, {46340, 46340}, {33000, 33000}}; /* {param_num, param_size} */
    int cell[][2] = {{1, 0x1fffffff}, {0x1fffffff, 1}, {16500, 16500}}; /* {n, hidden} */
    int cases = sizeof(size_t) > 4 ? 3 : 4, i, bad = 0; /* the last: only a 32-bit size_t wraps */
    size_t bytes;
    for (i = 0; i < cases; ++i) {
        int d = ln[i][0], m = ln[i][1];
        int s = fp_layernormgrad_s_r(fake(0), fake(1), fake(2), fake(3), fake(4), d, m, m, d, fake(5), fake(6),
                                     fake(7), 1);
        int p = fp_layernormgrad_p_r(fake(0), fake(1), fake(2), fake(3), fake(4), d, m, m, d, fake(5), fake(6),
                                     fake(7));
        int q = fp_layernormgrad_workspace(d, m, &bytes);
        printf("ln %d x %d: %d %d %d\n", m, d, s, p, q);
        bad += s != FG_LNG_ERR_SIZE || p != FG_LNG_ERR_SIZE || q != FG_LNG_ERR_SIZE;
    }
    for (i = 0; i < cases - 1; ++i) {
        int n = cell[i][0], h = cell[i][1];
        int s = fp_lstmcellgrad_s_r(fake(0), fake(1), fake(2), fake(3), fake(4), n, h, 1, fake(5), fake(6), fake(7), 1);
        int p = fp_lstmcellgrad_p_r(fake(0), fake(1), fake(2), fake(3), fake(4), n, h, 1, fake(5), fake(6), fake(7));
        int q = fp_lstmcellgrad_workspace(n, h, &bytes);
        printf("cell %d x %d: %d %d %d\n", n, h, s, p, q);
        bad += s != FG_LCG_ERR_SIZE || p != FG_LCG_ERR_SIZE || q != FG_LCG_ERR_SIZE;
    }
    printf("bad %d\n", bad);
    return bad != 0;
}
'''


def test_sizes_past_the_32_bit_index_range_are_refused(dsp_tree, tmp_path):
    """M near INT32_MAX (M + 31 overflowed), one huge row (the 32-row DMA window's size overflowed),
    a square just under 2**31 elements: ERR_SIZE before any pointer is touched (they hold no memory
    here: before the check, the kernels ran on them).  tests/test_dsp_cross.py runs it on a 32-bit part."""
    (tmp_path / "limits.c").write_text(LIMITS)
    exe = tmp_path / "limits"
    chip = dsp_tree / "ft78ne"
    proc = build_cache.run([CC, *STRICT, f"-I{chip}", "-o", str(exe), str(tmp_path / "limits.c"),
                            str(chip / "layernormgrad.c"), str(chip / "lstmcellgrad.c"),
                            str(chip / "fg_dsp_port_host.c"), "-lm", "-lpthread"], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "bad 0" in run.stdout, (run.returncode, run.stdout, run.stderr[-2000:])


EDGE = r'''#include <stdio.h>
#include <stdlib.h>
#include "layernormgrad.h"
#include "lstmcellgrad.h"
/* the largest sizes the checks accept, one long side each: run under UBSan (no index overflows) */
static fg_half *zeros(size_t n) { return (fg_half *)calloc(n, sizeof(fg_half)); }
int main(int argc, char **argv) {
    int a = atoi(argv[2]), b = atoi(argv[3]), s;
    size_t n = (size_t)a * (size_t)b;
    if (argv[1][0] == 'l') { /* LayerNorm: a rows of b */
        fg_half *x = zeros(n), *dy = zeros(n), *dx = zeros(n), *var = zeros(a), *mean = zeros(a);
        fg_half *g = zeros(b), *dg = zeros(b), *db = zeros(b);
        s = hp_layernormgrad_s_r(x, dy, var, mean, g, b, a, a, b, dx, dg, db, 0x3);
        printf("%d %d\n", s, hp_layernormgrad_s_r(x, dy, var, mean, g, b + (argv[1][1] == 'c'), a + (argv[1][1] == 'r'),
                                                   a + (argv[1][1] == 'r'), b + (argv[1][1] == 'c'), dx, dg, db, 0x3));
    } else { /* the cell: a rows, hidden b */
        fg_half *h = zeros(n), *c = zeros(n), *cx = zeros(n), *cy = zeros(n), *st = zeros(4 * n);
        fg_half *gates = zeros(4 * n), *dcp = zeros(n), *db = zeros(4 * (size_t)b);
        s = hp_lstmcellgrad_s_r(h, c, cx, cy, st, a, b, 1, gates, dcp, db, 0x3);
        printf("%d %d\n", s, hp_lstmcellgrad_s_r(h, c, cx, cy, st, a + (argv[1][1] == 'r'), b + (argv[1][1] == 'c'), 1,
                                                 gates, dcp, db, 0x3));
    }
    return 0;
}
'''


def _largest(other: int, cols_per_unit: int = 1) -> int:
    """The largest size k the checks accept beside ``other``: (k + 64) * (other + 64) < 2**31, with k
    (or other, per cols_per_unit) counting cols_per_unit columns per unit."""
    return (2**31 - 1) // (other + 64) - 64 if cols_per_unit == 1 else ((2**31 - 1) // (other + 64) - 64) // cols_per_unit


@pytest.mark.parametrize("what", ["lr", "lc", "cr", "cc"])
def test_the_largest_accepted_sizes_run_without_an_index_overflow(dsp_tree, tmp_path, what):
    """At the edge of the size check (one row of the most columns, one column of the most rows, for
    both ops) the fp16 kernels run under UBSan's signed-overflow check, and one more is refused."""
    if what == "lr":
        a, b = _largest(1), 1
    elif what == "lc":
        a, b = 1, _largest(1)
    elif what == "cr":
        a, b = _largest(4), 1
    else:
        a, b = 1, _largest(1, cols_per_unit=4)
    (tmp_path / "edge.c").write_text(EDGE)
    exe = tmp_path / "edge"
    chip = dsp_tree / "mt7004"
    proc = build_cache.run([CC, "-std=c99", "-O1", "-fsanitize=signed-integer-overflow,shift,bounds",
                            "-fno-sanitize-recover=all", f"-I{chip}", "-o", str(exe), str(tmp_path / "edge.c"),
                            str(chip / "layernormgrad.c"), str(chip / "lstmcellgrad.c"),
                            str(chip / "fg_dsp_port_host.c"), "-lm", "-lpthread"], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = subprocess.run([str(exe), what, str(a), str(b)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.split() == ["0", "2"], (a, b, run.stdout, run.stderr[-2000:])


VENDOR_HALF = {  # a vendor SDK header declaring its own `half`, and the flags that build beside it
    "binary16": ("typedef _Float16 half;", ["-DFG_HALF_NO_ALIAS", "-DFG_HALF_TYPE=half"]),
    "struct": ("typedef struct { unsigned short v; } half;", ["-DFG_HALF_NO_ALIAS"]),
}
VENDOR_MAIN = r'''#include <stdio.h>
#include "vendor.h"
#include "layernormgrad.h"
#include "lstmcellgrad.h"
/* a caller of the library that also uses a vendor SDK declaring `half`: the library's type is fg_half */
int main(void) {
    enum { M = 4, D = 8 };
    fg_half x[M * D], dy[M * D], var[M], mean[M], g[D], dx[M * D], dg[D], db[D];
    int i, s;
    for (i = 0; i < M * D; ++i) {
        x[i] = fg_half_from_float((float)(i % 3)); dy[i] = fg_half_from_float(1.0f);
    }
    for (i = 0; i < M; ++i) {
        var[i] = fg_half_from_float(1.0f); mean[i] = fg_half_from_float(1.0f);
    }
    for (i = 0; i < D; ++i) {
        g[i] = fg_half_from_float(1.0f);
    }
    s = hp_layernormgrad_p_r(x, dy, var, mean, g, D, M, M, D, dx, dg, db);
    printf("%d %g\n", s, (double)fg_half_to_float(db[0]));
    return 0;
}
'''


@pytest.mark.parametrize("vendor", sorted(VENDOR_HALF))
def test_the_library_builds_beside_a_vendor_header_that_declares_half(dsp_tree, tmp_path, vendor):
    """A vendor SDK's own `half` (a binary16 type, or a struct): with FG_HALF_NO_ALIAS the library
    declares only fg_half (and -DFG_HALF_TYPE=half makes it the SDK's type), so both compile in one
    program and the calls work (before, fg_half.h's `typedef ... half` clashed with the SDK's)."""
    header, flags = VENDOR_HALF[vendor]
    (tmp_path / "vendor.h").write_text(f"#ifndef VENDOR_H\n#define VENDOR_H\n{header}\n#endif\n")
    (tmp_path / "main.c").write_text(VENDOR_MAIN)
    chip = dsp_tree / "mt7004"
    exe = tmp_path / "main"
    # the library is built as the SDK's users build it: the SDK header first
    cmd = [CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", *flags, "-include", str(tmp_path / "vendor.h"),
           f"-I{tmp_path}", f"-I{chip}", "-o", str(exe), str(tmp_path / "main.c"), str(chip / "layernormgrad.c"),
           str(chip / "lstmcellgrad.c"), str(chip / "fg_dsp_port_host.c"), "-lm", "-lpthread"]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.split()
    assert out == ["0", "4"], out  # ran; db = the sum of dy over the 4 rows


@pytest.mark.parametrize("chip", sorted(dsp.CHIPS))
def test_every_function_compiled_into_a_file_is_called_there(dsp_tree, chip):
    """Each .c of the library, preprocessed as its compiler sees it, defines no static function it never
    calls (fg_floormod, fg_exp_nonpos and fg_tanhf were in every file) and no malloc fallback."""
    import re
    for name in ("layernormgrad.c", "lstmcellgrad.c"):
        proc = subprocess.run([CC, "-std=c99", "-E", "-P", f"-I{dsp_tree / chip}", str(dsp_tree / chip / name)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout
        defined = re.findall(r"^static (?:inline )?[\w ]+?\**\b(\w+)\([^;]*?\)\s*\{", text, re.M | re.S)
        assert "fg_check" in defined or name == "lstmcellgrad.c", defined  # the pattern finds definitions
        unused = [f for f in defined if len(re.findall(rf"\b{f}\(", text)) < 2]
        assert not unused, (chip, name, unused)
        assert "malloc" not in text, (chip, name)


HALF_CONVERSIONS = [  # (compiler, flags, the conversions fg_half.h must choose)
    ("gcc", ["-march=x86-64-v2"], "integer"),  # no F16C: the compiler's own would call libgcc per element
    ("gcc", ["-march=haswell"], "native"),  # F16C
    ("gcc", ["-march=x86-64-v2", "-mf16c"], "native"),
    ("gcc", ["-march=haswell", "-DFG_HALF_INT_CONVERT"], "integer"),
    ("gcc", ["-march=x86-64-v2", "-DFG_HALF_NATIVE_CONVERT"], "native"),
    ("aarch64-linux-gnu-gcc", [], "native"),  # every AArch64 part converts half
    ("arm-none-eabi-gcc", ["-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16",
                           "-mfp16-format=ieee"], "integer"),  # __fp16 storage, __ARM_FP without half
]


@pytest.mark.parametrize("cc, flags, want", HALF_CONVERSIONS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_the_half_conversions_follow_what_the_target_has(tmp_path, cc, flags, want):
    """fg_half.h converts with the compiler's own instructions where the target has them (F16C,
    ARM's half conversions) and with integer code elsewhere; on a Zen 5 host with F16C the integer
    default was 2.5x slower (docs/BENCHMARKS.md).  Both give the same bits (test_dsp_cross.py)."""
    import platform
    if shutil.which(cc) is None:
        package = {"aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu", "arm-none-eabi-gcc": "gcc-arm-none-eabi"}
        toolchain_missing(f"{cc} not installed (Debian: apt-get install {package.get(cc, cc)}; .ci/run installs it)")
    if cc == "gcc" and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86 flags")
    (tmp_path / "h.c").write_text('#include "fg_half.h"\n')
    proc = subprocess.run([cc, "-std=c99", *flags, "-dM", "-E", f"-I{dsp.targets.runtime_source_dir(dsp.INFO)}",
                           str(tmp_path / "h.c")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    native = "#define FG_HALF_NATIVE_CONVERT" in proc.stdout and "FG_HALF_INT_CONVERT" not in proc.stdout
    assert ("native" if native else "integer") == want, proc.stdout[-500:]
