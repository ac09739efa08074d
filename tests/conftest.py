"""Shared fixtures and helpers for the fusedgrad test suite.

The kernels come from the Python API's kernel cache, the one ``fusedgrad generate`` fills
($FUSEDGRAD_CACHE, default ~/.cache/fusedgrad): its keys stand for every input of an artifact's
bytes (definition, schedule and lowering sources, knobs, TVM version, CPU), so what did not change is
loaded, not built again, and the workers of one run (pytest-xdist) and later runs share it; a key
missing is built once under its build lock.  Tests that need a cold or damaged cache make their own
folder.  Compiled C/C++ test programs are cached by :mod:`build_cache`.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from fusedgrad import runtime

# resolved once and exported, so the subprocesses the tests start use the same cache
_SESSION_CACHE = str(runtime.cache_dir())
os.environ["FUSEDGRAD_CACHE"] = _SESSION_CACHE

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import ml_dtypes  # noqa: E402

from fusedgrad.te_defs import layer_norm_backward as ln_def  # noqa: E402
from fusedgrad.te_defs import lstm_cell_backward as lstm_def  # noqa: E402

SESSION_CACHE = _SESSION_CACHE

# (dtype, atol, rtol): atol is relative to the magnitude of the output (see assert_close)
DTYPES = [
    pytest.param(("float32", 1e-5, 1e-5), id="float32"),
    pytest.param(("float16", 1e-2, 1e-2), id="float16"),
    pytest.param(("bfloat16", 5e-2, 5e-2), id="bfloat16"),
]

NP_DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}
BITS = {"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}


@functools.lru_cache(maxsize=None)
def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except Exception:
        return False
    return True


requires_torch = pytest.mark.skipif(not has_torch(), reason="torch is not installed (pip install torch)")

# set by .ci/run, which installs every toolchain the tests use (cross compilers, qemu-user, cmake,
# clang, g++, the ziglang wheel): a missing one is then a failure, not a skip
TOOLCHAINS_REQUIRED_ENV = "FUSEDGRAD_CROSS_REQUIRED"


def toolchain_missing(why: str) -> None:
    """A test cannot run because a toolchain is missing (``why`` names it and how to install it):
    skip it, or fail it where FUSEDGRAD_CROSS_REQUIRED is set."""
    __tracebackhide__ = True  # the report names the test's line, not this one
    if os.environ.get(TOOLCHAINS_REQUIRED_ENV):
        pytest.fail(f"{why} ({TOOLCHAINS_REQUIRED_ENV} is set: every toolchain must be installed)")
    pytest.skip(why)


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


# --------------------------------------------------------------------------- conversions


def to_np(a64: np.ndarray, dtype: str) -> np.ndarray:
    """float64 array -> numpy array of ``dtype`` (round to nearest)."""
    return np.asarray(a64, dtype=np.float64).astype(NP_DTYPES[dtype])


def to_torch(a64: np.ndarray, dtype: str):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a64, dtype=np.float64)).to(torch_dtype(dtype))


def as_f64(a) -> np.ndarray:
    """numpy array or torch tensor of any supported dtype -> float64 numpy."""
    if has_torch():
        import torch

        if isinstance(a, torch.Tensor):
            return a.detach().to(torch.float64).numpy()
    return np.asarray(a).astype(np.float64)


def rounded(a64: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 value of ``a64`` after rounding to ``dtype`` (what the kernel really sees)."""
    return None if a64 is None else to_np(a64, dtype).astype(np.float64)


def bits(a) -> np.ndarray:
    """The raw bit pattern of an output, for bitwise comparisons."""
    if has_torch():
        import torch

        if isinstance(a, torch.Tensor):
            a = a.detach()
            if a.dtype == torch.bfloat16:
                return a.view(torch.int16).numpy().view(np.uint16).copy()
            return bits(a.numpy())
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 2: np.uint16}[a.itemsize]).copy()


# --------------------------------------------------------------------------- comparisons


def assert_ratio_matches_times(ratio: float, num: float, den: float, time_step: float, ratio_step: float = 0.01):
    """A benchmark table's printed ratio agrees with its printed times.

    The times are rounded to `time_step` and the ratio to `ratio_step`, each from the unrounded
    times, so the ratio must lie within what the rounded times allow, widened by its own rounding.
    """
    half = time_step / 2
    low = max(num - half, 0.0) / (den + half)
    high = (num + half) / max(den - half, 1e-12)
    assert low - ratio_step / 2 <= ratio <= high + ratio_step / 2, (ratio, num, den)


def assert_close(actual, expected, atol: float, rtol: float, scale=None, name: str = "", equal_nan: bool = False):
    """|actual - expected| <= atol * scale + rtol * |expected|, elementwise.

    ``scale`` defaults to max(1, max|expected|) so atol is relative to the
    output's magnitude; pass an array (e.g. sum of |terms| of a reduction) to
    scale per element.  With ``equal_nan`` the NaN masks must be identical.
    """
    got = as_f64(actual)
    exp = np.asarray(expected, dtype=np.float64)
    assert got.shape == exp.shape, f"{name}: shape {got.shape} != expected {exp.shape}"
    if equal_nan:
        np.testing.assert_array_equal(np.isnan(got), np.isnan(exp), err_msg=f"{name}: NaN masks differ")
        keep = ~np.isnan(exp)
        got, exp = got[keep], exp[keep]
        if scale is not None and np.ndim(scale):
            scale = np.broadcast_to(scale, keep.shape)[keep]
    else:
        assert not np.isnan(exp).any(), f"{name}: reference has NaN, use equal_nan"
        assert not np.isnan(got).any(), f"{name}: result has NaN where the reference has none"
    # infinities must match exactly
    inf = np.isinf(exp)
    np.testing.assert_array_equal(got[inf], exp[inf], err_msg=f"{name}: infinities differ")
    got, exp = got[~inf], exp[~inf]
    if scale is None:
        scale = max(1.0, float(np.abs(exp).max())) if exp.size else 1.0
    elif np.ndim(scale):
        scale = np.broadcast_to(scale, inf.shape)[~inf]
    bound = atol * scale + rtol * np.abs(exp)
    err = np.abs(got - exp)
    if err.size and not (err <= bound).all():
        k = int(np.argmax(err - bound))
        raise AssertionError(
            f"{name}: {int((err > bound).sum())}/{err.size} elements out of tolerance; worst: "
            f"got {got.flat[k]!r}, expected {exp.flat[k]!r}, |err| {err.flat[k]:.3g} > {np.ravel(bound)[k]:.3g}"
        )


def reduction_scale(terms: np.ndarray, axis: int = 0) -> np.ndarray:
    """Per-output scale for a sum over ``axis``: sum of |terms|, at least 1."""
    return np.maximum(1.0, np.abs(terms).sum(axis=axis))


# --------------------------------------------------------------------------- input makers


def lstm_inputs(N: int, H: int, seed: int = 0) -> dict:
    """float64 LSTM-cell backward inputs from a real forward; also returns x_gates and hy."""
    rng = np.random.default_rng(seed)
    x_gates = rng.standard_normal((N, 4 * H))
    cx = rng.standard_normal((N, H))
    hy, cy, storage = lstm_def.forward_reference(x_gates, cx)
    return {
        "grad_hy": rng.standard_normal((N, H)),
        "grad_cy": rng.standard_normal((N, H)),
        "cx": cx,
        "cy": cy,
        "storage": storage,
        "x_gates": x_gates,
        "hy": hy,
    }


def ln_inputs(lead: tuple, D: int, seed: int = 0, eps: float = 1e-5) -> dict:
    """float64 LayerNorm backward inputs; x has shape lead + (D,), mean/var shape lead."""
    rng = np.random.default_rng(seed)
    x = 0.5 + 2.0 * rng.standard_normal(tuple(lead) + (D,))
    gamma = 1.0 + 0.1 * rng.standard_normal(D)
    beta = 0.1 * rng.standard_normal(D)
    _, mean, var = ln_def.forward_reference(x, gamma, beta, eps)
    return {"x": x, "dy": rng.standard_normal(x.shape), "mean": mean, "var": var, "gamma": gamma, "beta": beta,
            "eps": eps}


LSTM_ARGS = ("grad_hy", "grad_cy", "cx", "cy", "storage")
LN_ARGS = ("x", "dy", "mean", "var", "gamma")


def lstm_reference(inp: dict, dtype: str, has_bias: bool = True, missing=()) -> dict:
    """te_defs reference on the inputs as rounded to ``dtype``."""
    r = {k: (None if k in missing else rounded(inp[k], dtype)) for k in LSTM_ARGS}
    return lstm_def.reference(r["grad_hy"], r["grad_cy"], r["cx"], r["cy"], r["storage"], has_bias=has_bias)


def ln_reference(inp: dict, dtype: str) -> dict:
    """te_defs reference on the inputs as rounded to ``dtype`` (rows flattened)."""
    D = inp["x"].shape[-1]
    r = {k: rounded(inp[k], dtype) for k in LN_ARGS}
    out = ln_def.reference(r["x"].reshape(-1, D), r["dy"].reshape(-1, D), r["mean"].reshape(-1),
                           r["var"].reshape(-1), r["gamma"], inp["eps"])
    out["dx"] = out["dx"].reshape(inp["x"].shape)
    return out


# --------------------------------------------------------------------------- thread-count determinism

_THREAD_SCRIPT = """
import sys, numpy as np, fusedgrad
from fusedgrad import team
d = np.load(sys.argv[1])
out = fusedgrad.{call}
np.savez(sys.argv[2], **dict(zip({names!r}, out)), team=np.array(len(team.last_team())))
"""


def outputs_by_thread_count(tmp_path, call: str, args: dict, names, threads=("1", "2")) -> dict:
    """Run ``fusedgrad.<call>`` (inputs as d["name"]) in one subprocess per thread count (the team's size:
    OMP_NUM_THREADS, and TVM_NUM_THREADS for the loader's pool).

    Returns {threads: {output name: array}}; the subprocesses share the session kernel cache.
    """
    import subprocess
    import sys

    np.savez(tmp_path / "in.npz", **args)
    script = _THREAD_SCRIPT.format(call=call, names=list(names))
    results = {}
    for t in threads:
        env = dict(os.environ, OMP_NUM_THREADS=t, TVM_NUM_THREADS=t, FUSEDGRAD_CACHE=SESSION_CACHE)
        dst = tmp_path / f"out{t}.npz"
        proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "in.npz"), str(dst)],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        results[t] = dict(np.load(dst))
        assert int(results[t].pop("team")) == int(t), proc.stderr  # the thread count reached the team
    return results


# --------------------------------------------------------------------------- generated trees, written once


def _digests(root: Path) -> dict:
    """{path relative to ``root``: sha256} of every file under ``root``."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _shared_tree(tmp_path_factory, name: str, write):
    """A folder ``write`` fills once, handed to every test that asks; at the end of the session it must
    hold what it held at the start (a test that changes a file copies it into its own tmp_path)."""
    root = tmp_path_factory.mktemp(name)
    write(root)
    before = _digests(root)
    yield root
    after = _digests(root)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"tests changed the shared {name} tree (copy into tmp_path instead): {changed[:10]}"


@pytest.fixture(scope="session")
def ascend_tree(tmp_path_factory):
    """Every Ascend package as lowering.ascend.write makes it (no banner), written once per session:
    <op>/op_kernel, <op>/op_host and <op>/CMakeLists.txt for each op and for the full LSTM.  Read only."""
    from fusedgrad.lowering import ascend

    yield from _shared_tree(tmp_path_factory, "ascend", ascend.write)


@pytest.fixture(scope="session")
def dsp_tree(tmp_path_factory):
    """The DSP library as lowering.dsp.write makes it (with the banner generated/dsp has), written once
    per session: one folder per chip.  Read only."""
    from fusedgrad.lowering import dsp, sources

    yield from _shared_tree(tmp_path_factory, "dsp", lambda root: dsp.write(root, banner=sources.banner("dsp", "//")))
