"""float32 GEMMs (matmul, matmul_tn) and column_sum against the float64 reference.

Kernels are called through ``fusedgrad.api.run``.  Covers every variant at
degenerate, odd (tails in every tiled axis) and one benchmark-size shape,
row-strided views, NaN/Inf confinement, and bitwise determinism across
thread counts.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import assert_close, bits, outputs_by_thread_count, requires_torch
from fusedgrad.api import run
from fusedgrad.te_defs import column_sum as cs_def
from fusedgrad.te_defs import matmul as mm_def
from fusedgrad.te_defs import matmul_tn as tn_def

MM_VARIANTS = [{"has_bias": b, "has_addend": a} for b, a in itertools.product((False, True), repeat=2)]
TN_VARIANTS = [{"has_addend": False}, {"has_addend": True}]
# (M, K, N): 1x1x1, single row/column/term, primes, tails of every tile size, one row tile exactly
SHAPES = [(1, 1, 1), (1, 7, 33), (9, 1, 5), (13, 19, 37), (8, 32, 32), (17, 65, 70), (33, 3, 129)]
ATOL = RTOL = 1e-5


def _f32(x):
    return np.asarray(x, dtype=np.float32)


def mm_inputs(M, K, N, variant, seed=0, tn=False):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((K, M) if tn else (M, K))
    out = {"a": _f32(a), "b": _f32(rng.standard_normal((K, N)))}
    if variant.get("has_bias"):
        out["bias"] = _f32(rng.standard_normal(N))
    if variant.get("has_addend"):
        out["addend"] = _f32(rng.standard_normal((M, N)))
    return out


def mm_check(op_name, ins, variant, out):
    """Compare with the float64 reference; the tolerance scales with sum_k |a||b| per element."""
    d = {k: v.astype(np.float64) for k, v in ins.items()}
    ref = (tn_def if op_name == "matmul_tn" else mm_def).reference(**d, **variant)["c"]
    a = d["a"].T if op_name == "matmul_tn" else d["a"]
    scale = np.maximum(1.0, np.abs(a) @ np.abs(d["b"]) + np.abs(d.get("bias", 0)) + np.abs(d.get("addend", 0)))
    assert_close(out, ref, ATOL, RTOL, scale=scale, name=op_name)


@pytest.mark.parametrize("variant", MM_VARIANTS, ids=lambda v: ",".join(k for k, x in v.items() if x) or "plain")
@pytest.mark.parametrize("M,K,N", SHAPES)
def test_matmul_reference(M, K, N, variant):
    ins = mm_inputs(M, K, N, variant)
    out = run("matmul", ins, {}, variant)["c"]
    assert out.shape == (M, N) and out.dtype == np.float32
    mm_check("matmul", ins, variant, out)


@pytest.mark.parametrize("variant", TN_VARIANTS, ids=["plain", "addend"])
@pytest.mark.parametrize("M,K,N", SHAPES)
def test_matmul_tn_reference(M, K, N, variant):
    ins = mm_inputs(M, K, N, variant, tn=True)
    out = run("matmul_tn", ins, {}, variant)["c"]
    assert out.shape == (M, N)
    mm_check("matmul_tn", ins, variant, out)


@pytest.mark.parametrize("K,N", [(1, 1), (1, 40), (37, 13), (33, 17), (31, 300), (65, 256)])
def test_column_sum_reference(K, N):
    a = _f32(np.random.default_rng(1).standard_normal((K, N)))
    out = run("column_sum", {"a": a}, {}, {})["s"]
    scale = np.maximum(1.0, np.abs(a.astype(np.float64)).sum(axis=0))
    assert_close(out, cs_def.reference(a.astype(np.float64))["s"], ATOL, RTOL, scale=scale, name="s")


def test_bench_size():
    """One shape of the full LSTM per op (every tile full, many row blocks)."""
    v = {"has_bias": True, "has_addend": False}
    ins = mm_inputs(1600, 256, 1024, v)
    mm_check("matmul", ins, v, run("matmul", ins, {}, v)["c"])
    v = {"has_addend": True}
    ins = mm_inputs(1024, 1600, 256, v, tn=True)
    mm_check("matmul_tn", ins, v, run("matmul_tn", ins, {}, v)["c"])
    a = _f32(np.random.default_rng(2).standard_normal((1600, 1024)))
    scale = np.maximum(1.0, np.abs(a.astype(np.float64)).sum(axis=0))
    assert_close(run("column_sum", {"a": a}, {}, {})["s"], a.astype(np.float64).sum(axis=0), ATOL, RTOL,
                 scale=scale, name="s")


def _strided(x, pad=5):
    """The same values as a view with row stride > columns (unit inner stride)."""
    if x.ndim < 2:
        return x
    big = np.full((x.shape[0], x.shape[1] + pad), np.nan, dtype=x.dtype)
    big[:, : x.shape[1]] = x
    return big[:, : x.shape[1]]


@pytest.mark.parametrize("M,K,N", [(13, 19, 37), (40, 64, 96)])
def test_strided_views_numpy(M, K, N):
    v = {"has_bias": True, "has_addend": True}
    ins = mm_inputs(M, K, N, v)
    views = {k: _strided(x) for k, x in ins.items()}
    assert not views["a"].flags.c_contiguous
    out = run("matmul", views, {}, v)["c"]
    np.testing.assert_array_equal(bits(out), bits(run("matmul", ins, {}, v)["c"]))
    mm_check("matmul", ins, v, out)
    v = {"has_addend": True}
    ins = mm_inputs(M, K, N, v, tn=True)
    out = run("matmul_tn", {k: _strided(x) for k, x in ins.items()}, {}, v)["c"]
    np.testing.assert_array_equal(bits(out), bits(run("matmul_tn", ins, {}, v)["c"]))
    a = _f32(np.random.default_rng(3).standard_normal((K, N)))
    np.testing.assert_array_equal(bits(run("column_sum", {"a": _strided(a)}, {}, {})["s"]),
                                  bits(run("column_sum", {"a": a}, {}, {})["s"]))


@requires_torch
def test_strided_views_torch():
    import torch

    M, K, N = 21, 35, 50
    v = {"has_bias": False, "has_addend": True}
    ins = mm_inputs(M, K, N, v)
    t = {k: torch.from_numpy(np.ascontiguousarray(x)) for k, x in ins.items()}
    big = {k: torch.nn.functional.pad(x, (0, 7)) for k, x in t.items()}  # row stride = columns + 7
    views = {k: x[:, : t[k].shape[1]] for k, x in big.items()}
    assert not views["a"].is_contiguous()
    out = run("matmul", views, {}, v)["c"]
    assert isinstance(out, torch.Tensor)
    mm_check("matmul", ins, v, out)
    # a transposed view has a non-unit inner stride: copied, still correct
    at = torch.from_numpy(ins["a"].T.copy()).t()
    mm_check("matmul", ins, v, run("matmul", dict(t, a=at), {}, v)["c"])


def test_nan_inf_confined():
    """A NaN/Inf in A row m reaches row m of C only; in column n of column_sum's input, s[n] only."""
    M, K, N = 19, 23, 45
    v = {"has_bias": True, "has_addend": True}
    ins = mm_inputs(M, K, N, v)
    clean = run("matmul", ins, {}, v)["c"]
    for bad, m in ((np.nan, 4), (np.inf, 17)):
        a = ins["a"].copy()
        a[m, 3] = bad
        out = run("matmul", dict(ins, a=a), {}, v)["c"]
        assert not np.isfinite(out[m]).any(), bad
        rest = np.arange(M) != m
        np.testing.assert_array_equal(bits(out[rest]), bits(clean[rest]))
    v = {"has_addend": False}
    ins = mm_inputs(M, K, N, v, tn=True)
    clean = run("matmul_tn", ins, {}, v)["c"]
    a = ins["a"].copy()
    a[5, 8] = np.nan  # a is [K, M]: row 8 of C
    out = run("matmul_tn", dict(ins, a=a), {}, v)["c"]
    assert np.isnan(out[8]).all()
    rest = np.arange(M) != 8
    np.testing.assert_array_equal(bits(out[rest]), bits(clean[rest]))
    a = _f32(np.random.default_rng(4).standard_normal((70, 40)))
    a[33, 7], a[69, 39] = np.nan, -np.inf
    s = run("column_sum", {"a": a}, {}, {})["s"]
    assert np.isnan(s[7]) and s[39] == -np.inf
    assert np.isfinite(np.delete(s, [7, 39])).all()


def test_same_bits_any_thread_count(tmp_path):
    M, K, N = 67, 301, 131  # tails everywhere, several column_sum row blocks
    rng = np.random.default_rng(5)
    args = {
        "a": _f32(rng.standard_normal((M, K))), "b": _f32(rng.standard_normal((K, N))),
        "bias": _f32(rng.standard_normal(N)), "addend": _f32(rng.standard_normal((M, N))),
        "at": _f32(rng.standard_normal((K, M))), "cs": _f32(rng.standard_normal((1000, N))),
    }
    call = ('api.run("matmul", {"a": d["a"], "b": d["b"], "bias": d["bias"], "addend": d["addend"]}, {}, '
            '{"has_bias": True, "has_addend": True})["c"], '
            'fusedgrad.api.run("matmul_tn", {"a": d["at"], "b": d["b"], "addend": d["addend"]}, {}, {"has_addend": True})["c"], '
            'fusedgrad.api.run("column_sum", {"a": d["cs"]}, {}, {})["s"]')
    names = ("mm", "tn", "cs")
    results = outputs_by_thread_count(tmp_path, call, args, names)
    here = {
        "mm": run("matmul", {k: args[k] for k in ("a", "b", "bias", "addend")}, {}, MM_VARIANTS[3])["c"],
        "tn": run("matmul_tn", {"a": args["at"], "b": args["b"], "addend": args["addend"]}, {}, TN_VARIANTS[1])["c"],
        "cs": run("column_sum", {"a": args["cs"]}, {}, {})["s"],
    }
    for k in names:
        np.testing.assert_array_equal(bits(results["1"][k]), bits(results["2"][k]), err_msg=k)
        np.testing.assert_array_equal(bits(results["1"][k]), bits(here[k]), err_msg=k)
