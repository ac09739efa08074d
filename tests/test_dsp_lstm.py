"""The DSP library's LSTM layer (fp_/hp_lstm_*, fp_/hp_lstmgrad_*): the whole recurrence in one call.

Host builds of a freshly generated library (gcc, strict; with and without ASan/UBSan, with and
without the DMA path): every entry point against the float64 references of the definitions, the
same bits for every core mask, bad input refused with its status and nothing written.  The half
entry points (MT7004 only) take half inputs and are checked against the float64 references on
those same inputs.
tests/test_dsp_cross.py runs the committed library's LSTM under qemu.
"""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import build_cache
from fusedgrad import te_defs
from fusedgrad.lowering import dsp

CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (gcc) on this machine")
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]
LOCAL = "-DFG_DSP_HOST_LOCAL_BYTES=786432"  # each host core gets an MT-3000 AM: the kernels' DMA path runs
FWD, BWD = te_defs.get("lstm_layer_forward"), te_defs.get("lstm_layer_backward")
SAVED = ("c", "i", "f", "g", "o", "tanhc")
MASKS = (None, 0b1, 0b1011, 0xff)  # None: _p
SHAPES = [(1, 1, 1), (7, 5, 37), (9, 3, 70)]  # (T, B, H): one unit, no vector multiple, several chunks


def _lib(dsp_tree, chip, stem, tmp, extra=()):
    so = tmp / f"{chip}-{stem}-{len(extra)}.so"
    cmd = [CC, *STRICT, *extra, "-shared", "-fPIC", "-o", str(so), str(dsp_tree / chip / f"{stem}.c"),
           str(dsp_tree / chip / "fg_dsp_port_host.c"), "-lm", "-lpthread"]
    proc = build_cache.run(cmd, outputs=[so], inputs=[dsp_tree / chip])  # the headers beside the sources
    assert proc.returncode == 0, proc.stderr
    return ctypes.CDLL(str(so))


@pytest.fixture(scope="module")
def libs(dsp_tree, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("built")
    return {(chip, stem, dma): _lib(dsp_tree, chip, stem, tmp, [LOCAL] if dma else [])
            for chip in dsp.CHIPS for stem in ("lstm", "lstmgrad") for dma in (False, True)}


def _ptr(a):
    return None if a is None else a.ctypes.data


def _fwd(lib, ins, T, B, H, reverse, outs, mask, p="fp"):
    """<p>_lstm_p / _s with ``outs`` (h, c, i, f, g, o, tanhc, hy, cy; the saved six may be None);
    checks the _r form returns what the status word says; returns the status."""
    P, I = ctypes.c_void_p, ctypes.c_int
    args = [_ptr(ins[k]) for k in ("xw", "w_hh", "h0", "c0", "batch_sizes")] + [T, B, H, int(reverse)]
    args += [_ptr(o) for o in outs]
    types = [P] * 5 + [I] * 4 + [P] * 9
    return _call(lib, f"{p}_lstm", args, types, mask, "fg_lstm_status")


def _bwd(lib, ins, T, B, H, reverse, outs, mask, p="fp"):
    P, I = ctypes.c_void_p, ctypes.c_int
    names = ("dy", "w_hh", "c", "c0", "i", "f", "g", "o", "tanhc", "grad_hy", "grad_cy", "batch_sizes")
    args = [_ptr(ins[k]) for k in names] + [T, B, H, int(reverse)] + [_ptr(o) for o in outs]
    types = [P] * 12 + [I] * 4 + [P] * 4
    return _call(lib, f"{p}_lstmgrad", args, types, mask, "fg_lstmgrad_status")


def _call(lib, entry, args, types, mask, status_fn):
    fn = getattr(lib, entry + ("_p" if mask is None else "_s"))
    fn.argtypes = types + ([] if mask is None else [ctypes.c_int])
    full = args + ([] if mask is None else [mask])
    fn(*full)
    status = getattr(lib, status_fn)()
    r = getattr(lib, entry + ("_p_r" if mask is None else "_s_r"))
    r.argtypes, r.restype = fn.argtypes, ctypes.c_int
    assert r(*full) == status
    return status


def _inputs(T, B, H, seed):
    rng = np.random.default_rng(seed)
    fs = FWD.sample({"T": T, "B": B, "H": H}, rng)
    ins = {k: (v.astype(np.int32) if k == "batch_sizes" else np.ascontiguousarray(v, np.float32))
           for k, v in fs.items()}
    return ins


def _close(got, ref, what, tol=2e-5):
    err = np.abs(got.astype(np.float64) - ref).max() / (np.abs(ref).max() + 1)
    assert err <= tol, f"{what}: relative error {err:.3g}"


def _fwd_outs(T, B, H, train):
    outs = [np.full((T, B, H), 7, np.float32)]
    outs += [np.full((T, B, H), 7, np.float32) if train else None for _ in SAVED]
    return outs + [np.full((B, H), 7, np.float32), np.full((B, H), 7, np.float32)]


@pytest.mark.parametrize("chip", list(dsp.CHIPS))
@pytest.mark.parametrize("dma", [False, True], ids=["in-place", "dma"])
@pytest.mark.parametrize("T, B, H", SHAPES)
def test_forward_matches_the_definition_on_every_core_mask(libs, chip, dma, T, B, H):
    lib = libs[(chip, "lstm", dma)]
    ins = _inputs(T, B, H, seed=T * 100 + H)
    for reverse in (False, True):
        ref = FWD.reference(**{k: v.astype(np.float64) if k != "batch_sizes" else v for k, v in ins.items()},
                            train=True, reverse=reverse)
        for train in (True, False):
            results = []
            for mask in MASKS:
                outs = _fwd_outs(T, B, H, train)
                assert _fwd(lib, ins, T, B, H, reverse, outs, mask) == 0, (mask, reverse, train)
                names = ("h",) + SAVED + ("hy", "cy")
                for name, o in zip(names, outs):
                    if o is not None:
                        _close(o, ref[name], f"{name} reverse={reverse} train={train} mask={mask}")
                results.append(outs)
            for other in results[1:]:  # the same bits for every core mask
                for a, b in zip(results[0], other):
                    if a is not None:
                        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("chip", list(dsp.CHIPS))
@pytest.mark.parametrize("dma", [False, True], ids=["in-place", "dma"])
@pytest.mark.parametrize("T, B, H", SHAPES)
def test_backward_matches_the_definition_on_every_core_mask(libs, chip, dma, T, B, H):
    lib = libs[(chip, "lstmgrad", dma)]
    rng = np.random.default_rng(T + B + H)
    for reverse in (False, True):
        raw = BWD.sample({"T": T, "B": B, "H": H}, rng)
        ins = {k: (v.astype(np.int32) if k == "batch_sizes" else np.ascontiguousarray(v, np.float32))
               for k, v in raw.items()}
        ref = BWD.reference(**{k: v.astype(np.float64) if k != "batch_sizes" else v for k, v in ins.items()},
                            reverse=reverse)
        results = []
        for mask in MASKS:
            outs = [np.full((T, B, 4 * H), 7, np.float32), np.full((4 * H, T, B), 7, np.float32),
                    np.full((B, H), 7, np.float32), np.full((B, H), 7, np.float32)]
            assert _bwd(lib, ins, T, B, H, reverse, outs, mask) == 0
            for name, o in zip(("dgates", "dgates_t", "dh0", "dc0"), outs):
                _close(o, ref[name], f"{name} reverse={reverse} mask={mask}", tol=5e-5)
            results.append(outs)
        for other in results[1:]:
            for a, b in zip(results[0], other):
                assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_the_forward_and_backward_chain_like_the_cpu_kernels(libs):
    """The DSP's saved values feed its backward: dgates against the float64 chain forward -> backward."""
    T, B, H = 6, 4, 33
    ins = _inputs(T, B, H, seed=3)
    outs = _fwd_outs(T, B, H, True)
    assert _fwd(libs[("ft78ne", "lstm", False)], ins, T, B, H, False, outs, 0b11) == 0
    saved = dict(zip(("h",) + SAVED + ("hy", "cy"), outs))
    rng = np.random.default_rng(1)
    bin_ = {"dy": rng.standard_normal((T, B, H)).astype(np.float32), "w_hh": ins["w_hh"], "c0": ins["c0"],
            "grad_hy": rng.standard_normal((B, H)).astype(np.float32),
            "grad_cy": rng.standard_normal((B, H)).astype(np.float32), "batch_sizes": ins["batch_sizes"],
            **{k: saved[k] for k in SAVED}}
    g = [np.zeros((T, B, 4 * H), np.float32), np.zeros((4 * H, T, B), np.float32), np.zeros((B, H), np.float32),
         np.zeros((B, H), np.float32)]
    assert _bwd(libs[("ft78ne", "lstmgrad", False)], bin_, T, B, H, False, g, 0b11) == 0
    f64 = {k: v.astype(np.float64) if k != "batch_sizes" else v for k, v in ins.items()}
    fr = FWD.reference(**f64, train=True, reverse=False)
    ref = BWD.reference(dy=bin_["dy"].astype(np.float64), w_hh=f64["w_hh"], c0=f64["c0"],
                        grad_hy=bin_["grad_hy"].astype(np.float64), grad_cy=bin_["grad_cy"].astype(np.float64),
                        batch_sizes=ins["batch_sizes"], reverse=False, **{k: fr[k] for k in SAVED})
    _close(g[0], ref["dgates"], "dgates", tol=1e-4)
    _close(g[2], ref["dh0"], "dh0", tol=1e-4)


# each case: what is wrong, and the status the call must give (lstm_status.h)
BAD = [("xw NULL", 1), ("half of train", 1), ("T 0", 2), ("hidden -1", 2), ("mask 0", 3), ("mask 512", 3),
       ("h on xw", 5), ("cy on hy", 5), ("batch_sizes above B", 7), ("batch_sizes growing", 7),
       ("batch_sizes negative", 7)]


@pytest.mark.parametrize("case, status", BAD)
def test_forward_bad_input_writes_nothing(libs, case, status):
    T, B, H = 4, 3, 5
    lib = libs[("ft78ne", "lstm", False)]
    ins = _inputs(T, B, H, seed=9)
    before = {k: v.copy() for k, v in ins.items()}
    outs = _fwd_outs(T, B, H, True)
    sizes = {"T": T, "B": B, "H": H}
    mask = 0b11
    if case == "xw NULL":
        ins["xw"] = None
    elif case == "half of train":
        outs[3] = None
    elif case == "T 0":
        sizes["T"] = 0
    elif case == "hidden -1":
        sizes["H"] = -1
    elif case == "mask 0":
        mask = 0
    elif case == "mask 512":
        mask = 512
    elif case == "h on xw":
        outs[0] = np.lib.stride_tricks.as_strided(ins["xw"], (T, B, H), (B * H * 4, H * 4, 4))
    elif case == "cy on hy":
        outs[8] = outs[7]
    elif case.startswith("batch_sizes"):
        bs = ins["batch_sizes"].copy()
        bs[{"batch_sizes above B": 0, "batch_sizes growing": 2, "batch_sizes negative": 3}[case]] = \
            {"batch_sizes above B": B + 1, "batch_sizes growing": B, "batch_sizes negative": -1}[case]
        if case == "batch_sizes growing":
            bs[1] = 1
        ins["batch_sizes"] = bs
    snapshot = [None if o is None else o.copy() for o in outs]
    got = _fwd(lib, ins, sizes["T"], sizes["B"], sizes["H"], False, outs, mask)
    assert got == status
    for o, s in zip(outs, snapshot):
        if o is not None and not np.shares_memory(o, ins["xw"]):
            assert np.array_equal(o, s), case  # nothing written
    for k, v in before.items():
        if ins[k] is not None and k != "batch_sizes":
            assert np.array_equal(ins[k], v), k  # inputs untouched


@pytest.mark.parametrize("case, status", [("dgates NULL", 1), ("B 0", 2), ("dh0 on dy", 5),
                                          ("batch_sizes above B", 7)])
def test_backward_bad_input_writes_nothing(libs, case, status):
    T, B, H = 4, 3, 5
    lib = libs[("ft78ne", "lstmgrad", False)]
    raw = BWD.sample({"T": T, "B": B, "H": H}, np.random.default_rng(2))
    ins = {k: (v.astype(np.int32) if k == "batch_sizes" else np.ascontiguousarray(v, np.float32))
           for k, v in raw.items()}
    outs = [np.full((T, B, 4 * H), 7, np.float32), np.full((4 * H, T, B), 7, np.float32),
            np.full((B, H), 7, np.float32), np.full((B, H), 7, np.float32)]
    sizes = [T, B, H]
    if case == "dgates NULL":
        outs[0] = None
    elif case == "B 0":
        sizes[1] = 0
    elif case == "dh0 on dy":
        outs[2] = ins["dy"][0]
    else:
        ins["batch_sizes"] = ins["batch_sizes"].copy()
        ins["batch_sizes"][0] = B + 1
    dy = ins["dy"].copy()
    assert _bwd(lib, ins, *sizes, False, outs, 0b1) == status
    assert np.array_equal(ins["dy"], dy)
    for o in outs:
        if o is not None and not np.shares_memory(o, ins["dy"]):
            assert (o == 7).all()


SANITIZE_MAIN = r'''
#include <stdio.h>
#include <stdlib.h>
#include "lstm.h"
#include "lstmgrad.h"
static float *fill(size_t n, float base) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; ++i) p[i] = base + (float)((i * 37) % 101) / 400.0f;
    return p;
}
int main(void) {
    int sizes[][3] = {{1, 1, 1}, {5, 3, 37}, {4, 2, 70}};
    for (int k = 0; k < 3; ++k) {
        int T = sizes[k][0], B = sizes[k][1], H = sizes[k][2];
        size_t tbh = (size_t)T * B * H, bh = (size_t)B * H;
        int32_t *bs = malloc(sizeof(int32_t) * (size_t)T);
        for (int t = 0; t < T; ++t) bs[t] = B - (t * B) / (T + 1);
        float *xw = fill(4 * tbh, -0.1f), *w = fill(4 * (size_t)H * H, -0.12f), *h0 = fill(bh, 0.1f), *c0 = fill(bh, -0.2f);
        float *h = fill(tbh, 0), *s[6], *hy = fill(bh, 0), *cy = fill(bh, 0);
        for (int j = 0; j < 6; ++j) s[j] = fill(tbh, 0);
        float *dy = fill(tbh, 0.3f), *ghy = fill(bh, 0.1f), *gcy = fill(bh, -0.1f);
        float *dg = fill(4 * tbh, 0), *dgt = fill(4 * tbh, 0), *dh0 = fill(bh, 0), *dc0 = fill(bh, 0);
        for (int rev = 0; rev < 2; ++rev) {
            fp_lstm_s(xw, w, h0, c0, bs, T, B, H, rev, h, s[0], s[1], s[2], s[3], s[4], s[5], hy, cy, 0x5);
            if (fg_lstm_status() != FG_LSTM_OK) return 1;
            fp_lstm_p(xw, w, h0, c0, bs, T, B, H, rev, h, NULL, NULL, NULL, NULL, NULL, NULL, hy, cy);
            if (fg_lstm_status() != FG_LSTM_OK) return 2;
            fp_lstmgrad_s(dy, w, s[0], c0, s[1], s[2], s[3], s[4], s[5], ghy, gcy, bs, T, B, H, rev, dg, dgt, dh0, dc0, 0x7);
            if (fg_lstmgrad_status() != FG_LSTMG_OK) return 3;
            fp_lstmgrad_p(dy, w, s[0], c0, s[1], s[2], s[3], s[4], s[5], ghy, gcy, bs, T, B, H, rev, dg, dgt, dh0, dc0);
            if (fg_lstmgrad_status() != FG_LSTMG_OK) return 4;
        }
        free(bs); free(xw); free(w); free(h0); free(c0); free(h); free(hy); free(cy);
        for (int j = 0; j < 6; ++j) free(s[j]);
        free(dy); free(ghy); free(gcy); free(dg); free(dgt); free(dh0); free(dc0);
    }
    puts("ok");
    return 0;
}
'''


@pytest.mark.parametrize("local", [[], [LOCAL]], ids=["in-place", "dma-staged"])
def test_sanitizers_find_nothing(dsp_tree, tmp_path, local):
    main = tmp_path / "main.c"
    main.write_text(SANITIZE_MAIN)
    exe = tmp_path / "main"
    src = dsp_tree / "ft78ne"
    # -O1: the sanitizers see the same accesses, and gcc builds the large kernels in half the time
    cmd = [CC, *STRICT[:-1], "-O1", *local, "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{src}",
           "-o", str(exe), str(main), str(src / "lstm.c"), str(src / "lstmgrad.c"), str(src / "fg_dsp_port_host.c"),
           "-lm", "-lpthread"]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def test_a_caller_workspace_of_the_queried_size_serves_every_core_mask(libs):
    """fp_lstm_workspace's bytes serve _p_w and _s_w on the most cores; one byte less is refused."""
    T, B, H = 3, 2, 40
    lib = libs[("ft78ne", "lstm", False)]
    ins = _inputs(T, B, H, seed=5)
    need = ctypes.c_size_t(0)
    lib.fp_lstm_workspace.argtypes = [ctypes.c_int] * 3 + [ctypes.POINTER(ctypes.c_size_t)]
    assert lib.fp_lstm_workspace(T, B, H, ctypes.byref(need)) == 0
    assert need.value >= 4 * H * H * 4  # at least W_hh's panel
    P, I = ctypes.c_void_p, ctypes.c_int
    ref = _fwd_outs(T, B, H, False)
    assert _fwd(lib, ins, T, B, H, False, ref, None) == 0
    for fn, mask in (("fp_lstm_p_w", None), ("fp_lstm_s_w", 0xff)):
        for size, status in ((need.value, 0), (need.value - 1, 6)):
            ws = np.zeros(size + 1, np.uint8)
            outs = _fwd_outs(T, B, H, False)
            f = getattr(lib, fn)
            f.argtypes = [P] * 5 + [I] * 4 + [P] * 9 + ([I] if mask else []) + [P, ctypes.c_size_t]
            f.restype = ctypes.c_int
            args = [_ptr(ins[k]) for k in ("xw", "w_hh", "h0", "c0", "batch_sizes")] + [T, B, H, 0]
            args += [_ptr(o) for o in outs] + ([mask] if mask else []) + [ws[1:].ctypes.data, size]
            assert f(*args) == status, (fn, size)
            for a, b in zip(outs, ref):
                if a is not None:
                    assert np.array_equal(a, b) if status == 0 else (a == 7).all()


# ---- the half entry points (hp_lstm_*, hp_lstmgrad_*: MT7004)

# half storage, float computation, the state read back from the half outputs.  The error, measured as
# the other half ops' tests do (err / (max|ref| + 1) against the float64 reference on the same half
# inputs), is at most 2.7e-4 over HALF_SHAPES (every variant, output, core mask, with and without
# DMA) and 3.7e-4 in the chain (whose backward reference starts from the float64 forward's saved
# values); HP_TOL leaves 8x of it
HP_TOL = 3e-3
HALF_SHAPES = SHAPES + [(30, 4, 64)]  # and a longer sequence, where rounding the state could add up


def _half(arrays):
    return {k: v if v is None or k == "batch_sizes" else np.ascontiguousarray(v, np.float16)
            for k, v in arrays.items()}


def _exact(arrays):
    return {k: v if k == "batch_sizes" else v.astype(np.float64) for k, v in arrays.items()}


def _same_bits(results):
    for other in results[1:]:
        for a, b in zip(results[0], other):
            if a is not None:
                assert np.array_equal(a.view(np.uint16), b.view(np.uint16))


@pytest.mark.parametrize("dma", [False, True], ids=["in-place", "dma"])
@pytest.mark.parametrize("T, B, H", HALF_SHAPES)
def test_half_forward_matches_the_definition_on_every_core_mask(libs, dma, T, B, H):
    lib = libs[("mt7004", "lstm", dma)]
    ins = _half(_inputs(T, B, H, seed=T * 100 + H))
    for reverse in (False, True):
        ref = FWD.reference(**_exact(ins), train=True, reverse=reverse)
        for train in (True, False):
            results = []
            for mask in MASKS:
                outs = [None if o is None else o.astype(np.float16) for o in _fwd_outs(T, B, H, train)]
                assert _fwd(lib, ins, T, B, H, reverse, outs, mask, "hp") == 0, (mask, reverse, train)
                for name, o in zip(("h",) + SAVED + ("hy", "cy"), outs):
                    if o is not None:
                        _close(o, ref[name], f"hp {name} reverse={reverse} train={train} mask={mask}", HP_TOL)
                results.append(outs)
            _same_bits(results)


@pytest.mark.parametrize("dma", [False, True], ids=["in-place", "dma"])
@pytest.mark.parametrize("T, B, H", HALF_SHAPES)
def test_half_backward_matches_the_definition_on_every_core_mask(libs, dma, T, B, H):
    lib = libs[("mt7004", "lstmgrad", dma)]
    rng = np.random.default_rng(T + B + H)
    for reverse in (False, True):
        ins = _half(BWD.sample({"T": T, "B": B, "H": H}, rng))
        ref = BWD.reference(**_exact(ins), reverse=reverse)
        results = []
        for mask in MASKS:
            outs = [np.full((T, B, 4 * H), 7, np.float16), np.full((4 * H, T, B), 7, np.float16),
                    np.full((B, H), 7, np.float16), np.full((B, H), 7, np.float16)]
            assert _bwd(lib, ins, T, B, H, reverse, outs, mask, "hp") == 0
            for name, o in zip(("dgates", "dgates_t", "dh0", "dc0"), outs):
                _close(o, ref[name], f"hp {name} reverse={reverse} mask={mask}", HP_TOL)
            results.append(outs)
        _same_bits(results)


@pytest.mark.parametrize("reverse", [False, True])
def test_the_half_forward_and_backward_chain(libs, reverse):
    """hp_lstm's saved values feed hp_lstmgrad: dgates, dh0, dc0 against the float64 chain forward ->
    backward from the same half inputs."""
    T, B, H = 6, 4, 33
    ins = _half(_inputs(T, B, H, seed=3))
    outs = [o.astype(np.float16) for o in _fwd_outs(T, B, H, True)]
    assert _fwd(libs[("mt7004", "lstm", False)], ins, T, B, H, reverse, outs, 0b11, "hp") == 0
    saved = dict(zip(("h",) + SAVED + ("hy", "cy"), outs))
    rng = np.random.default_rng(1)
    bin_ = _half({"dy": rng.standard_normal((T, B, H)), "grad_hy": rng.standard_normal((B, H)),
                  "grad_cy": rng.standard_normal((B, H))})
    bin_.update(w_hh=ins["w_hh"], c0=ins["c0"], batch_sizes=ins["batch_sizes"], **{k: saved[k] for k in SAVED})
    g = [np.zeros((T, B, 4 * H), np.float16), np.zeros((4 * H, T, B), np.float16), np.zeros((B, H), np.float16),
         np.zeros((B, H), np.float16)]
    assert _bwd(libs[("mt7004", "lstmgrad", False)], bin_, T, B, H, reverse, g, 0b11, "hp") == 0
    fr = FWD.reference(**_exact(ins), train=True, reverse=reverse)
    b64 = _exact({k: bin_[k] for k in ("dy", "grad_hy", "grad_cy", "w_hh", "c0", "batch_sizes")})
    ref = BWD.reference(**b64, reverse=reverse, **{k: fr[k] for k in SAVED})
    for name, got in zip(("dgates", "dgates_t", "dh0", "dc0"), g):
        _close(got, ref[name], f"hp chain {name}", HP_TOL)


@pytest.mark.parametrize("case, status", [("xw NULL", 1), ("hidden 0", 2), ("mask 512", 3), ("cy on hy", 5),
                                          ("batch_sizes growing", 7)])
def test_half_forward_bad_input_writes_nothing(libs, case, status):
    T, B, H = 4, 3, 5
    lib = libs[("mt7004", "lstm", False)]
    ins = _half(_inputs(T, B, H, seed=9))
    outs = [o.astype(np.float16) for o in _fwd_outs(T, B, H, True)]
    sizes, mask = [T, B, H], 0b11
    if case == "xw NULL":
        ins["xw"] = None
    elif case == "hidden 0":
        sizes[2] = 0
    elif case == "mask 512":
        mask = 512
    elif case == "cy on hy":
        outs[8] = outs[7]
    else:
        ins["batch_sizes"] = np.array([B, 1, B, 1], np.int32)
    before = {k: None if v is None else v.copy() for k, v in ins.items()}
    assert _fwd(lib, ins, *sizes, False, outs, mask, "hp") == status
    assert all((o == 7).all() for o in outs)  # nothing written
    assert all(v is None or np.array_equal(ins[k], v) for k, v in before.items())


@pytest.mark.parametrize("case, status", [("dgates NULL", 1), ("dh0 on dy", 5), ("batch_sizes above B", 7)])
def test_half_backward_bad_input_writes_nothing(libs, case, status):
    T, B, H = 4, 3, 5
    lib = libs[("mt7004", "lstmgrad", False)]
    ins = _half(BWD.sample({"T": T, "B": B, "H": H}, np.random.default_rng(2)))
    outs = [np.full((T, B, 4 * H), 7, np.float16), np.full((4 * H, T, B), 7, np.float16),
            np.full((B, H), 7, np.float16), np.full((B, H), 7, np.float16)]
    if case == "dgates NULL":
        outs[0] = None
    elif case == "dh0 on dy":
        outs[2] = ins["dy"][0]
    else:
        ins["batch_sizes"] = ins["batch_sizes"].copy()
        ins["batch_sizes"][0] = B + 1
    dy = ins["dy"].copy()
    assert _bwd(lib, ins, T, B, H, False, outs, 0b1, "hp") == status
    assert np.array_equal(ins["dy"], dy)
    for o in outs:
        if o is not None and not np.shares_memory(o, ins["dy"]):
            assert (o == 7).all()


@pytest.mark.parametrize("stem", ["lstm", "lstmgrad"])
def test_a_half_caller_workspace_of_the_queried_size_serves_every_core_mask(libs, stem):
    """hp_lstm_workspace / hp_lstmgrad_workspace: the bytes serve _p_w and _s_w on the most cores
    (W_hh's panel is held widened to float: at least 4·H·H floats); one byte less is refused."""
    T, B, H = 3, 2, 40
    lib = libs[("mt7004", stem, False)]
    need = ctypes.c_size_t(0)
    query = getattr(lib, f"hp_{stem}_workspace")
    query.argtypes = [ctypes.c_int] * 3 + [ctypes.POINTER(ctypes.c_size_t)]
    assert query(T, B, H, ctypes.byref(need)) == 0
    assert need.value >= 4 * H * H * 4
    P, I = ctypes.c_void_p, ctypes.c_int
    if stem == "lstm":
        ins = _half(_inputs(T, B, H, seed=5))
        make = lambda: ([np.full((T, B, H), 7, np.float16)] + [None] * 6  # noqa: E731
                        + [np.full((B, H), 7, np.float16), np.full((B, H), 7, np.float16)])
        ptrs = [_ptr(ins[k]) for k in ("xw", "w_hh", "h0", "c0", "batch_sizes")]
        types = [P] * 5 + [I] * 4 + [P] * 9
        ref = make()
        assert _fwd(lib, ins, T, B, H, False, ref, None, "hp") == 0
    else:
        ins = _half(BWD.sample({"T": T, "B": B, "H": H}, np.random.default_rng(6)))
        make = lambda: [np.full((T, B, 4 * H), 7, np.float16), np.full((4 * H, T, B), 7, np.float16),  # noqa: E731
                        np.full((B, H), 7, np.float16), np.full((B, H), 7, np.float16)]
        ptrs = [_ptr(ins[k]) for k in ("dy", "w_hh", "c", "c0", "i", "f", "g", "o", "tanhc", "grad_hy", "grad_cy",
                                        "batch_sizes")]
        types = [P] * 12 + [I] * 4 + [P] * 4
        ref = make()
        assert _bwd(lib, ins, T, B, H, False, ref, None, "hp") == 0
    for fn, mask in ((f"hp_{stem}_p_w", None), (f"hp_{stem}_s_w", 0xff)):
        for size, status in ((need.value, 0), (need.value - 1, 6)):
            ws = np.zeros(size + 1, np.uint8)
            outs = make()
            f = getattr(lib, fn)
            f.argtypes = types + ([I] if mask else []) + [P, ctypes.c_size_t]
            f.restype = ctypes.c_int
            args = ptrs + [T, B, H, 0] + [_ptr(o) for o in outs] + ([mask] if mask else []) + [ws[1:].ctypes.data, size]
            assert f(*args) == status, (fn, size)
            for a, b in zip(outs, ref):
                if a is not None:
                    assert np.array_equal(a, b) if status == 0 else (a == 7).all()


def test_only_the_half_chip_has_half_layer_entry_points(libs):
    for stem in ("lstm", "lstmgrad"):
        for dma in (False, True):
            assert not hasattr(libs[("ft78ne", stem, dma)], f"hp_{stem}_s")
            assert all(hasattr(libs[("mt7004", stem, dma)], f"hp_{stem}{suffix}")
                       for suffix in ("_s", "_p", "_s_r", "_p_r", "_s_w", "_p_w", "_workspace"))
