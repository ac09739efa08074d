"""The generated aclnn LayerNorm backward (generated/ascend/layer_norm_backward/op_host: CANN's
aclnnLayerNormBackward) end to end, on the CPU twin of the ACL runtime and of AscendC
(tests/ascend_twin, test doubles of CANN).

tests/ascend_app/layer_norm_backward_app.cpp is written against the documented aclnn API alone (ACL
init, aclrtMalloc/aclrtMemcpy, aclCreateTensor with strides, aclIntArray normalizedShape, aclBoolArray
outputMask, the two-phase call, results printed).  It is compiled unchanged with the generated header
and operator, the generated kernels and a shim that stands in for the aclrtlaunch_<kernel> functions
CANN's AscendC build generates (read from the generated launch header).

Checked against a float64 reference computed here from rstd (not the variance), the weight or ones:
fp32, fp16 and bf16 inputs with stats in the input's dtype or in fp32; inputs of rank 1 to 4 with 1 to 3
normalized dims (also with no leading dims); with and without weight; every output or only some
(outputMask: an output whose bit is 0 is passed as NULL and must not be printed);
dense, padded (rows D + 3 elements apart) and strided (first two dims swapped in memory; stats, weight
and the weight-shaped outputs every other element) layouts, where the storage outside the input views
is NaN and that outside the output views must come back untouched ("gaps intact"); no input buffer
written ("inputs intact"); no rows (grad_weight and grad_bias exact zeros) and empty rows; every
misuse's status code (161001 for a NULL that is required, 161002 for the rest); the same bits twice,
from another layout and with the work planned for 3 cores instead of 40 (the reductions' order fixed).
"""
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import build_cache

from ascend_shim import launch_shim

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
HERE = Path(__file__).parent
TWIN = HERE / "ascend_twin"
APP = HERE / "ascend_app" / "layer_norm_backward_app.cpp"
NP = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
TOL = {"fp32": 5e-7, "fp16": 1.2e-3, "bf16": 8e-3}  # about 4x the largest error seen over the cases
EPS = 1e-5
OUTPUTS = (("grad_input", "dx"), ("grad_weight", "dgamma"), ("grad_bias", "dbeta"))  # in outputMask order
NULLPTR, INVALID = "161001", "161002"


def _build(tree, tmp):
    """The app (built in tmp) against the generated operator in ``tree``, and the vector cores the
    twin's device reports to it (None: the twin's default, 48)."""
    root = tree / "layer_norm_backward"
    op_kernel, op_host = root / "op_kernel", root / "op_host"
    (tmp / "shim.cpp").write_text(launch_shim(op_kernel, op_host, "layer_norm_backward"))
    exe = tmp / "app"
    cmd = [CXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}", f"-I{TWIN / 'aclnn'}", f"-I{op_kernel}",
           f"-I{op_host}", "-o", str(exe), str(APP), str(op_host / "aclnn_layer_norm_backward.cpp"), str(tmp / "shim.cpp")]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return exe, tmp, None


@pytest.fixture(scope="module")
def app(ascend_tree, tmp_path_factory):
    return _build(ascend_tree, tmp_path_factory.mktemp("ln_aclnn"))


@pytest.fixture(scope="module")
def app_3_cores(app):
    """The operator on a device that reports 3 vector cores instead of 48: other row blocks per core."""
    exe, tmp, _ = app
    return exe, tmp, 3


def _sample(shape, j, p, stats, seed):
    """Inputs from a real forward, as [M, D] rows, cast to their dtypes: x ~ 0.5 + 2 N(0, 1), mean and
    rstd = 1 / sqrt(var + eps) of x's rows, dy ~ N(0, 1), weight ~ 1 + 0.1 N(0, 1)."""
    rng = np.random.default_rng(seed)
    M, D = math.prod(shape[:len(shape) - j]), math.prod(shape[len(shape) - j:])
    x = 0.5 + 2.0 * rng.standard_normal((M, D))
    mean = x.mean(axis=1) if D else np.zeros(M)
    var = x.var(axis=1) if D else np.zeros(M)
    dt, st = NP[p], NP["fp32" if stats == "fp32" else p]
    return {"dy": rng.standard_normal((M, D)).astype(dt), "x": x.astype(dt), "mean": mean.astype(st),
            "rstd": (1.0 / np.sqrt(var + EPS)).astype(st), "weight": (1.0 + 0.1 * rng.standard_normal(D)).astype(dt)}


def _reference(s, has_weight):
    """float64, from the values as cast: xhat = (x - mean) rstd, g = dy w,
    dx = rstd (g - mean_D(g) - xhat mean_D(g xhat)), dgamma = sum_M(dy xhat), dbeta = sum_M(dy)."""
    f = {k: a.astype(np.float64) for k, a in s.items()}
    M, D = f["x"].shape
    w = f["weight"] if has_weight else np.ones(D)
    rstd = f["rstd"][:, None]
    xhat = (f["x"] - f["mean"][:, None]) * rstd
    g = f["dy"] * w
    if D:
        dx = rstd * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).mean(axis=1, keepdims=True))
    else:
        dx = np.zeros((M, 0))
    return {"dx": dx, "dgamma": (f["dy"] * xhat).sum(axis=0), "dbeta": f["dy"].sum(axis=0)}


def _run(app, p, stats, shape, j, has_weight, mask, layout, s):
    """Run the app; {output name: values as printed (strings)}, with "inputs" and "gaps" the words
    after them.  The lines must be the asked-for outputs in order, then inputs, then (padded,
    strided) gaps."""
    exe, tmp, cores = app
    blob = b"".join(s[k].tobytes() for k in ("dy", "x", "mean", "rstd")) + (s["weight"].tobytes() if has_weight else b"")
    (tmp / "in.bin").write_bytes(blob)
    proc = subprocess.run([str(exe), p, stats, ",".join(map(str, shape)), str(j), str(has_weight), mask, layout,
                           str(tmp / "in.bin")], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, FG_TWIN_VECTOR_CORES=str(cores)) if cores else None)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"GetWorkspaceSize: 0, workspace \d+ bytes", lines[0]), lines[0]
    assert lines[1] == "LayerNormBackward: 0", lines[1]
    out = {}
    for line in lines[2:]:
        name, *vals = line.split(" ")
        out[name] = vals
    wanted = [name for bit, (name, _) in zip(mask, OUTPUTS) if bit == "1"]
    assert list(out) == wanted + ["inputs"] + (["gaps"] if layout != "dense" else []), list(out)
    assert out["inputs"] == ["intact"]
    if layout != "dense":
        assert out["gaps"] == ["intact"]
    return out


def _check(out, s, p, has_weight, mask):
    ref = _reference(s, has_weight)
    for bit, (name, key) in zip(mask, OUTPUTS):
        if bit != "1":
            continue
        got, want = np.array([float(v) for v in out[name]]), ref[key].reshape(-1)
        assert got.shape == want.shape, (name, got.shape, want.shape)
        if want.size:
            err = np.abs(got - want).max() / (np.abs(want).max() + 1)
            assert err <= TOL[p], (name, err)  # NaN fails too


DTYPES = [("fp32", "same"), ("fp16", "same"), ("fp16", "fp32"), ("bf16", "same"), ("bf16", "fp32")]
# shape, NORM_NDIM, HAS_WEIGHT, MASK, LAYOUT
CASES = [
    ((1, 1), 1, 1, "111", "dense"),
    ((13, 37), 1, 1, "111", "padded"),
    ((13, 37), 1, 0, "100", "strided"),
    ((4, 300), 1, 1, "010", "dense"),
    ((2, 3, 5, 7), 2, 1, "111", "strided"),
    ((2, 3, 5, 7), 2, 0, "011", "padded"),
    ((2, 3, 5, 7), 3, 1, "111", "dense"),
    ((6, 5), 2, 1, "011", "strided"),  # no leading dims: one row, the two normalized dims swapped
    ((37,), 1, 1, "111", "strided"),  # rank 1: everything every other element
]


@pytest.mark.parametrize("p, stats", DTYPES)
@pytest.mark.parametrize("shape, j, has_weight, mask, layout", CASES)
def test_the_documented_two_phase_call_prints_the_right_numbers(app, p, stats, shape, j, has_weight, mask, layout):
    s = _sample(shape, j, p, stats, seed=math.prod(shape) + j)
    out = _run(app, p, stats, shape, j, has_weight, mask, layout, s)
    _check(out, s, p, has_weight, mask)


@pytest.mark.parametrize("shape, j, p, stats, layout", [
    ((0, 5), 1, "fp32", "same", "dense"),
    ((2, 0, 3), 1, "fp16", "fp32", "strided"),
    ((3, 0), 1, "fp32", "same", "padded"),
])
def test_no_rows_gives_zero_weight_and_bias_gradients_and_empty_rows_nothing(app, shape, j, p, stats, layout):
    s = _sample(shape, j, p, stats, seed=1)
    out = _run(app, p, stats, shape, j, 1, "111", layout, s)
    M, D = s["x"].shape
    assert M * D == 0 and out["grad_input"] == []
    assert np.array_equal(np.array([float(v) for v in out["grad_weight"]]), np.zeros(D))
    assert np.array_equal(np.array([float(v) for v in out["grad_bias"]]), np.zeros(D))


@pytest.mark.parametrize("p, stats", [("fp32", "same"), ("fp16", "fp32"), ("bf16", "same")])
def test_the_same_inputs_give_the_same_bits_twice_from_another_layout_and_core_count(app, app_3_cores, p, stats):
    shape, j = (3, 40, 64), 1  # 120 rows: the reductions over rows span several row groups
    s = _sample(shape, j, p, stats, seed=7)
    runs = [_run(app, p, stats, shape, j, 1, "111", layout, s) for layout in ("dense", "dense", "strided")]
    runs.append(_run(app_3_cores, p, stats, shape, j, 1, "111", "dense", s))
    _check(runs[0], s, p, 1, "111")
    for r in runs[1:]:
        for name, _ in OUTPUTS:
            assert r[name] == runs[0][name], name  # %.9g: the printed digits are the bits


def test_every_misuse_gets_its_documented_code(app):
    exe = app[0]
    proc = subprocess.run([str(exe), "errors"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    got = dict(line.rsplit(": ", 1) for line in lines)
    assert len(got) == len(lines), lines
    assert got == {
        # right calls (both phases), so that the misuses below fail for their own reason
        "base case": "0",
        "fp16 input with fp32 mean and rstd": "0",
        "bf16 input with fp32 mean and rstd": "0",
        "mean and rstd [2,3]": "0",
        "mask {1,0,0} with null gradWeightOut and gradBiasOut": "0",
        "null gradOut": NULLPTR,
        "null input": NULLPTR,
        "null normalizedShape": NULLPTR,
        "null mean": NULLPTR,
        "null rstd": NULLPTR,
        "null outputMask": NULLPTR,
        "null gradInputOut with mask[0]": NULLPTR,
        "null gradWeightOut with mask[1]": NULLPTR,
        "null gradBiasOut with mask[2]": NULLPTR,
        "null workspaceSize": NULLPTR,
        "null executor": NULLPTR,
        "int32 input": INVALID,
        "double input": INVALID,
        "fp16 mean and rstd with bf16 input": INVALID,
        "fp16 gradOut with fp32 input": INVALID,
        "fp16 mean with fp32 input": INVALID,
        "fp16 rstd with fp32 mean": INVALID,
        "normalizedShape longer than input": INVALID,
        "empty normalizedShape": INVALID,
        "normalizedShape not the trailing dims": INVALID,
        "outputMask of 2": INVALID,
        "gradOut [2,3,5]": INVALID,
        "mean [3,2,1]": INVALID,
        "weight [5]": INVALID,
        "gradInputOut [2,3,5]": INVALID,
        "gradWeightOut fp16": INVALID,
        "gradInputOut elements overlap": INVALID,
        "null executor in phase two": NULLPTR,
        "workspace too small in phase two": INVALID,
    }
