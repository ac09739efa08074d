"""NaN and Inf through the Ascend packages on the CPU twin of CANN.

CANN documents two floating-point overflow modes (hicann/runtime acl_rt.h :280-284,
docs/zh/api_ref/25-02_Enumerations.md :1376-1395): ACL_RT_OVERFLOW_MODE_INFNAN keeps Inf and NaN as
IEEE 754 does, and is the Ascend910B's (Atlas A2's) default; ACL_RT_OVERFLOW_MODE_SATURATION makes an
Inf result +-MAX and a NaN result 0, the Cube's Mmad included (asc-devkit Mmad.md :317-331).  The twin
models both (tests/ascend_twin/fg_twin_overflow.h, acl/acl.h's aclrtSetDeviceSatMode /
aclrtGetDeviceSatMode); the packages refuse a device in saturation mode (ACLNN_ERR_RUNTIME_ERROR, 361001)
and so give IEEE results.  Checked here: the twin's Mmad in each mode, the mode a stream runs under,
the refusal, and a NaN, an Inf and a -Inf in x, in h0 and in a weight through aclnnLSTM and
aclnnLstmBackward, whose NaN / +Inf / -Inf positions must be torch's (float64 autograd).
"""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import build_cache

import ascend_lstm
import test_ascend_aclnn as TA
import test_ascend_cube as TC
import test_lstm as TL
from fusedgrad.lowering.ascend import cube
from test_ascend_aclnn import app as cell_app  # noqa: F401 (the cell backward's app, a fixture)

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
torch = pytest.importorskip("torch")
TWIN = Path(__file__).with_name("ascend_twin")
FLT_MAX = float(np.finfo(np.float32).max)
RUNTIME_ERROR = "361001"


# --------------------------------------------------------------------------- the twin's Mmad

def _cube_driver(tmp: Path, dtype: str) -> Path:
    """The Cube GEMM kernel (lowering/ascend/cube.py) with test_ascend_cube's driver, which also prints the
    twin's count of NaN inputs Mmad read."""
    (tmp / "kernel.cpp").write_text(cube.kernel(dtype, "float32", False, False))
    (tmp / "fg_matmul_tiling.h").write_text(cube.TILING)
    count = ('    printf("mmad_nan_inputs %llu\\n", (unsigned long long)fg_twin_overflow::mmad_nan_inputs());\n'
             '    return 0;\n}')
    text = (TC.DRIVER.replace("TIN", TC.CTYPE[dtype]).replace("TOUT", "float")
            .replace("KERNEL", cube.kernel_name(dtype, "float32", False, False))
            .replace("BIAS_LEN", "0").replace("BIAS_ARG", "").replace("A_ROWS", "m").replace("B_ROWS", "n"))
    assert text.rstrip().endswith("return 0;\n}")
    text = text.rstrip()[: -len("    return 0;\n}")] + count + "\n"
    (tmp / "main.cpp").write_text(text)
    exe = tmp / "driver"
    proc = build_cache.run([CXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}", f"-I{tmp}", "-o",
                            str(exe), str(tmp / "main.cpp")], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return exe


_DRIVERS: dict = {}


def _gemm(tmp_path_factory, tmp: Path, dtype: str, a: np.ndarray, b: np.ndarray, mode: str | None):
    """C = A . B^T ([m, k] x [n, k]) by the Cube kernel on the twin, the device in ``mode`` (None: the
    default); (C float64, the NaN inputs Mmad read)."""
    if dtype not in _DRIVERS:
        _DRIVERS[dtype] = _cube_driver(tmp_path_factory.mktemp(f"nan-cube-{dtype}"), dtype)
    (m, k), n = a.shape, b.shape[0]
    (tmp / "in").write_bytes(a.astype(TC.NP[dtype]).tobytes() + b.astype(TC.NP[dtype]).tobytes())
    (tmp / "out").write_bytes(np.zeros((m, n), np.float32).tobytes())
    env = {key: v for key, v in os.environ.items() if key != "FG_TWIN_SAT_MODE"}
    if mode:
        env["FG_TWIN_SAT_MODE"] = mode
    proc = subprocess.run([str(_DRIVERS[dtype]), str(m), str(n), str(k), str(k), str(k), str(n), "24", str(tmp / "in"),
                           str(tmp / "out")], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nan_inputs = int(proc.stdout.split("mmad_nan_inputs")[1])
    return np.frombuffer((tmp / "out").read_bytes(), np.float32).reshape(m, n).astype(np.float64), nan_inputs


def _special_operands(dtype: str, k: int):
    """A [5, k], B [7, k] of small random values with a NaN in A's row 1, +Inf in A's row 3 and -Inf in B's
    row 2 (as the dtype holds them), and their IEEE product A . B^T, every product formed and added in
    float64."""
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (5, k)).astype(TC.NP[dtype]).astype(np.float64)
    b = rng.uniform(-1, 1, (7, k)).astype(TC.NP[dtype]).astype(np.float64)
    a[1, 2], a[3, 0], b[2, k - 1] = np.nan, np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        want = (a[:, None, :] * b[None, :, :]).sum(axis=2)
    return a, b, want


def _positions(x):
    x = np.asarray(x, np.float64)
    return np.isnan(x), np.isposinf(x), np.isneginf(x)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_mmad_keeps_nan_and_inf_in_the_default_mode(tmp_path, tmp_path_factory, dtype):
    """INF_NAN, the Ascend910B's default: a NaN input makes its row NaN, an Inf input its row +-Inf (NaN
    where +Inf meets -Inf), as IEEE 754 says; the other elements are the plain products' sums; and the
    twin counts the NaN inputs Mmad read (which CANN says to avoid, Mmad.md :329)."""
    k = 8
    a, b, want = _special_operands(dtype, k)
    got, nan_inputs = _gemm(tmp_path_factory, tmp_path, dtype, a, b, None)
    for g, w, what in zip(_positions(got), _positions(want), ("NaN", "+Inf", "-Inf")):
        assert np.array_equal(g, w), f"{what} at {np.argwhere(g)} instead of {np.argwhere(w)}"
    assert _positions(want)[0].any() and _positions(want)[1].any() and _positions(want)[2].any()
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)
    assert nan_inputs >= 1
    clean = np.nan_to_num(a, nan=0.5, posinf=0.5)
    _, none = _gemm(tmp_path_factory, tmp_path, dtype, clean, np.nan_to_num(b, neginf=0.5), None)
    assert none == 0


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_mmad_saturates_its_results_in_saturation_mode(tmp_path, tmp_path_factory, dtype):
    """ACL_RT_OVERFLOW_MODE_SATURATION: a NaN result is 0, an Inf result +-FLT_MAX (L0C holds float), the
    rest unchanged (K within one Mmad here, so each result is saturated once)."""
    k = 8
    a, b, want = _special_operands(dtype, k)
    got, _ = _gemm(tmp_path_factory, tmp_path, dtype, a, b, "saturation")
    assert np.isfinite(got).all()
    nan, pos, neg = _positions(want)
    assert (got[nan] == 0).all() and (got[pos] == FLT_MAX).all() and (got[neg] == -FLT_MAX).all()
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)


ACL_PROGRAM = r'''
#include <cstdio>
#include "acl/acl.h"

// the mode a stream's work runs under: the device's when the stream was created
int main() {
    aclrtFloatOverflowMode mode = ACL_RT_OVERFLOW_MODE_UNDEF;
    if (aclrtGetDeviceSatMode(&mode) == ACL_SUCCESS) return 2;  // no device set yet
    aclInit(nullptr);
    aclrtSetDevice(0);
    aclrtGetDeviceSatMode(&mode);
    std::printf("default %d\n", (int)mode);
    aclrtStream before = nullptr, after = nullptr;
    aclrtCreateStream(&before);
    std::printf("set saturation %d\n", (int)aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_SATURATION));
    std::printf("set undef %d\n", (int)aclrtSetDeviceSatMode(ACL_RT_OVERFLOW_MODE_UNDEF));
    aclrtGetDeviceSatMode(&mode);
    std::printf("now %d\n", (int)mode);
    aclrtCreateStream(&after);
    int ran_before = -1, ran_after = -1;
    fg_twin_acl::enqueue(before, [&] { ran_before = (int)fg_twin_overflow::current(); });
    fg_twin_acl::enqueue(after, [&] { ran_after = (int)fg_twin_overflow::current(); });
    aclrtSynchronizeStream(before);
    aclrtSynchronizeStream(after);
    std::printf("stream created before %d\nstream created after %d\n", ran_before, ran_after);
    aclrtDestroyStream(before);
    aclrtDestroyStream(after);
    return 0;
}
'''


def test_a_stream_runs_under_the_mode_the_device_had_when_it_was_created(tmp_path):
    """aclrtSetDeviceSatMode applies to the streams created after it, not to those created before
    (04_device_management.md :701); the device starts in INF_NAN (1); UNDEF is no mode to set."""
    (tmp_path / "main.cpp").write_text(ACL_PROGRAM)
    exe = tmp_path / "acl_modes"
    proc = build_cache.run([CXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}", "-o", str(exe),
                            str(tmp_path / "main.cpp")], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    env = {key: v for key, v in os.environ.items() if key != "FG_TWIN_SAT_MODE"}
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = dict(line.rsplit(" ", 1) for line in proc.stdout.splitlines())
    assert got == {"default": "1", "set saturation": "0", "set undef": "100000", "now": "0",
                   "stream created before": "1", "stream created after": "0"}


# --------------------------------------------------------------------------- the packages


def test_a_device_in_saturation_mode_is_refused(monkeypatch, ascend_tree, cell_app):  # noqa: F811
    """aclnnLSTM, aclnnLstmBackward and a single-op package's first phase return ACLNN_ERR_RUNTIME_ERROR
    (361001) on a device in saturation mode, where NaN and Inf would not follow IEEE 754."""
    ascend_lstm.build(ascend_tree)
    cfg = TL.Cfg(L=1, D=1, T=2, B=2, I=3, H=4, seed=60)
    a = TL.api_inputs(cfg, TL.make_data(cfg), "float32")
    fwd = ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **TL.flags(cfg))
    monkeypatch.setenv("FG_TWIN_SAT_MODE", "saturation")
    with pytest.raises(ascend_lstm.TwinError, match=f"aclnnLSTMGetWorkspaceSize: {RUNTIME_ERROR}"):
        ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **TL.flags(cfg))
    with pytest.raises(ascend_lstm.TwinError, match=f"aclnnLstmBackwardGetWorkspaceSize: {RUNTIME_ERROR}"):
        ascend_lstm.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"], a["params"], *fwd[3:],
                                  **TL.flags(cfg))
    rng = np.random.default_rng(0)
    n, h = 3, 4
    s = {"grad_hy": rng.standard_normal((n, h)), "grad_cy": rng.standard_normal((n, h)),
         "cx": rng.standard_normal((n, h)), "cy": rng.standard_normal((n, h)),
         "storage": rng.uniform(0.1, 0.9, (n, 4 * h))}
    with pytest.raises(AssertionError, match=f"GetWorkspaceSize: {RUNTIME_ERROR}"):
        TA._run(cell_app, "fp32", n, h, 0, True, True, True, s)


def _torch_reference(cfg, data):
    """torch.nn.LSTM's forward and autograd in float64 on the data as the float32 call holds it."""
    rounded = TL.rounded_data(data, "float32")
    with np.errstate(invalid="ignore", over="ignore"):
        return TL.torch_oracle(cfg, rounded)


def _check_positions(name, got, want):
    for g, w, what in zip(_positions(got), _positions(want), ("NaN", "+Inf", "-Inf")):
        assert g.shape == w.shape, (name, g.shape, w.shape)
        assert np.array_equal(g, w), (f"{name}: {what} at {np.argwhere(g & ~w).tolist()[:8]} where torch has none, "
                                      f"missing at {np.argwhere(w & ~g).tolist()[:8]}")


SPECIAL = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}
NAN_CFG = TL.Cfg(L=1, D=1, T=4, B=3, I=5, H=6, seed=61)


@pytest.mark.parametrize("value", list(SPECIAL))
@pytest.mark.parametrize("where", ["x", "h0", "w_ih"])
def test_nan_and_inf_reach_the_outputs_where_torch_has_them(where, value, ascend_tree):
    """One NaN, +Inf or -Inf in x, in h0 or in W_ih through aclnnLSTM and aclnnLstmBackward (float32, the
    device in its default INF_NAN mode): every output and gradient has NaN, +Inf and -Inf exactly where
    torch's float64 autograd has them, and the finite elements match."""
    ascend_lstm.build(ascend_tree)
    cfg = NAN_CFG
    data = TL.make_data(cfg)
    if where == "x":
        data["x"][1, 2, 3] = SPECIAL[value]
    elif where == "h0":
        data["h0"][0, 1, 2] = SPECIAL[value]
    else:
        data["params"][0][5, 1] = SPECIAL[value]
    ref = _torch_reference(cfg, data)
    a = TL.api_inputs(cfg, data, "float32")
    fwd = ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **TL.flags(cfg))
    dx, (dh0, dc0), dparams = ascend_lstm.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"],
                                                        a["params"], *fwd[3:], **TL.flags(cfg))
    pairs = [("output", fwd[0], ref["output"]), ("hy", fwd[1], ref["hy"]), ("cy", fwd[2], ref["cy"]),
             ("dx", dx, ref["dx"]), ("dh0", dh0, ref["dh0"]), ("dc0", dc0, ref["dc0"])]
    pairs += [(f"dparams[{k}]", g, w) for k, (g, w) in enumerate(zip(dparams, ref["dparams"]))]
    special = 0
    for name, got, want in pairs:
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        _check_positions(name, got, want)
        special += int((~np.isfinite(want)).sum())
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=2e-4, atol=2e-5, err_msg=name)
    assert special > 0, "the NaN / Inf reached no output"
