"""The generated aclnn operator (generated/ascend/lstm_cell_backward/op_host) end to end, on the CPU
twin of the ACL runtime and of AscendC (tests/ascend_twin, test doubles of CANN).

tests/ascend_app/lstm_cell_backward_app.cpp is written against the documented aclnn API alone
(ACL init, aclrtMalloc/aclrtMemcpy, aclCreateTensor with strides, the two-phase call, results
printed).  With PAD -1 some tensors are column-major and the bias strided: the operator gathers and
scatters them through the workspace.  It is compiled unchanged with the generated header and operator, the generated kernels
and a shim that stands in for the aclrtlaunch_<kernel> functions CANN's AscendC build generates.
"""
import os
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import build_cache

from fusedgrad import te_defs
from ascend_shim import launch_shim

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
HERE = Path(__file__).parent
TWIN = HERE / "ascend_twin"
APP = HERE / "ascend_app" / "lstm_cell_backward_app.cpp"
NP = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
TOL = {"fp32": 5e-7, "fp16": 1.2e-3, "bf16": 1e-2}  # about 4x the largest error seen


@pytest.fixture(scope="module")
def app(ascend_tree, tmp_path_factory):
    """The app linked with the session's generated operator, and the folder it runs in."""
    tmp = tmp_path_factory.mktemp("aclnn")
    root = ascend_tree / "lstm_cell_backward"
    (tmp / "shim.cpp").write_text(launch_shim(root / "op_kernel", root / "op_host", "lstm_cell_backward"))
    exe = tmp / "app"
    inc = [f"-I{TWIN}", f"-I{TWIN / 'aclnn'}", f"-I{root / 'op_kernel'}", f"-I{root / 'op_host'}"]
    cmd = [CXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", *inc, "-o", str(exe), str(APP),
           str(root / "op_host" / "aclnn_thnn_fused_lstm_cell_backward.cpp"), str(tmp / "shim.cpp")]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return exe, tmp


def _run(app, p, n, h, pad, has_hy, has_dc, has_bias, s, cores=None, text=False):
    exe, tmp = app
    dt = NP[p]

    def padded(a, name):
        if pad < 0:  # column-major cx and cy, the rest dense
            return np.ascontiguousarray(a.T) if name in ("cx", "cy") else a
        out = np.zeros((a.shape[0], a.shape[1] + pad), dt)
        out[:, :a.shape[1]] = a
        return out
    names = (["grad_hy"] if has_hy else []) + (["grad_cy"] if has_dc else []) + ["cx", "cy", "storage"]
    (tmp / "in.bin").write_bytes(b"".join(padded(s[k].astype(dt), k).tobytes() for k in names))
    proc = subprocess.run([str(exe), p, str(n), str(h), str(pad), str(int(has_hy)), str(int(has_dc)),
                           str(int(has_bias)), str(tmp / "in.bin")], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, FG_TWIN_VECTOR_CORES=str(cores)) if cores else None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if text:
        return proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("GetWorkspaceSize: 0,") and lines[1] == "ThnnFusedLstmCellBackward: 0"
    out = {}
    for line in lines[2:]:
        name, *vals = line.split()
        out[name] = np.array([float(x) for x in vals])
    return out


@pytest.mark.parametrize("p", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("has_hy, has_dc, has_bias", [(1, 1, 1), (1, 0, 1), (0, 1, 0), (0, 0, 1), (1, 1, 0)])
@pytest.mark.parametrize("n, h, pad", [(1, 1, 0), (7, 13, 3), (50, 40, 0), (9, 21, -1)])
def test_the_documented_two_phase_call_prints_the_right_numbers(app, p, has_hy, has_dc, has_bias, n, h, pad):
    s = _sample(n, h, p)
    _check(_run(app, p, n, h, pad, has_hy, has_dc, has_bias, s), s, p, n, h, has_hy, has_dc, has_bias)


@pytest.mark.parametrize("p", ["fp32", "bf16"])
def test_the_core_count_comes_from_the_device_and_does_not_change_the_bits(app, p):
    """The operator plans for the vector cores the runtime reports (Ascend910B1/B2: 48, B3/B4: 40,
    or as few as 3): the printed outputs are the same to the last digit printed."""
    n, h = 45, 19
    s = _sample(n, h, p)
    runs = {c: _run(app, p, n, h, 0, 1, 1, 1, s, cores=c, text=True) for c in (48, 40, 3)}
    assert runs[48] == runs[40] == runs[3]
    _check(_run(app, p, n, h, 0, 1, 1, 1, s, cores=40), s, p, n, h, 1, 1, 1)


def _sample(n, h, p):
    op = te_defs.get("lstm_cell_backward")
    return {k: a.astype(NP[p]) for k, a in op.sample({"N": n, "H": h}, np.random.default_rng(n + h)).items()}


def _check(out, s, p, n, h, has_hy, has_dc, has_bias):
    """The printed outputs against the float64 reference of the inputs as cast."""
    op = te_defs.get("lstm_cell_backward")
    f = {k: a.astype(np.float64) for k, a in s.items()}
    ref = op.reference(f["grad_hy"] if has_hy else None, f["grad_cy"] if has_dc else None, f["cx"], f["cy"],
                       f["storage"], has_bias=True)
    for name in ("grad_gates", "grad_cx"):
        want = ref[name].reshape(-1)
        err = np.abs(out[name] - want).max() / (np.abs(want).max() + 1)
        assert err <= TOL[p], (name, err)
    if has_bias:
        want = out["grad_gates"].reshape(n, 4 * h).sum(0)  # the sum of the stored gradients
        assert np.abs(out["grad_bias"] - want).max() / (np.abs(want).max() + 1) <= TOL[p]
    else:
        assert "grad_bias" not in out


def test_every_misuse_gets_its_documented_code(app):
    exe, _ = app
    proc = subprocess.run([str(exe), "errors"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = dict(line.rsplit(": ", 1) for line in proc.stdout.splitlines())
    nullptr, invalid = "161001", "161002"
    assert got == {
        "null cx": nullptr, "null storage": nullptr, "null gradGatesOut": nullptr,
        "null gradBiasOut with hasBias": nullptr, "null executor": nullptr,
        "int32 cx": invalid, "mixed dtypes": invalid, "cy [N, H+1]": invalid, "storage [N, H]": invalid,
        "gradBiasOut [5]": invalid, "gradHy [N, H+1]": invalid, "gradCxOut rows on top of each other": invalid,
        "null executor in phase two": nullptr,
    }


def test_no_rows_gives_a_zero_bias(app):
    op = te_defs.get("lstm_cell_backward")
    s = {k: np.zeros((0, a.shape[1]), np.float32) for k, a in op.sample({"N": 1, "H": 5}, np.random.default_rng(0)).items()}
    out = _run(app, "fp32", 0, 5, 0, 1, 1, 1, s)
    assert out["grad_gates"].size == 0 and out["grad_cx"].size == 0
    assert np.array_equal(out["grad_bias"], np.zeros(20))
