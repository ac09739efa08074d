"""fusedgrad.layer_norm_backward against the float64 reference, torch autograd and aten."""
from __future__ import annotations

import numpy as np
import pytest

import fusedgrad
from fusedgrad.te_defs import layer_norm_backward as ln_def
from conftest import (
    outputs_by_thread_count,
    DTYPES,
    LN_ARGS,
    NP_DTYPES,
    as_f64,
    assert_close,
    bits,
    ln_inputs,
    ln_reference,
    reduction_scale,
    requires_torch,
    rounded,
    to_np,
    to_torch,
    torch_dtype,
)

SHAPES = [
    pytest.param(((1,), 1), id="M=1 D=1"),
    pytest.param(((5,), 1), id="D=1"),
    pytest.param(((3,), 7), id="D=7"),
    pytest.param(((13,), 37), id="prime M=13 D=37"),
    pytest.param(((4,), 17), id="D=17 not a multiple of 16"),
    pytest.param(((33,), 100), id="M=33 D=100 not a multiple of 16"),
    pytest.param(((2, 3), 33), id="3-D x [2,3,33]"),
    pytest.param(((2, 2, 5), 16), id="4-D x [2,2,5,16]"),
]
OUTS = ("dx", "dgamma", "dbeta")


def call_np(inp, dtype, eps=None):
    return fusedgrad.layer_norm_backward(*(to_np(inp[k], dtype) for k in LN_ARGS),
                                         eps=inp["eps"] if eps is None else eps)


def check_against(out, ref, inp, dtype_tol, equal_nan=False):
    dtype, atol, rtol = dtype_tol
    dx, dgamma, dbeta = out
    D = inp["x"].shape[-1]
    x = rounded(inp["x"], dtype).reshape(-1, D)
    dy = rounded(inp["dy"], dtype).reshape(-1, D)
    mean = rounded(inp["mean"], dtype).reshape(-1, 1)
    var = rounded(inp["var"], dtype).reshape(-1, 1)
    gamma = rounded(inp["gamma"], dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        finite = lambda a: np.nan_to_num(a, nan=0, posinf=0, neginf=0)
        rstd = finite(1 / np.sqrt(var + inp["eps"]))
        xhat = finite((x - mean) * rstd)
        dyg = finite(dy * gamma)
        # dx = rstd * (dyg - mean(dyg) - xhat * mean(dyg * xhat)) cancels: its error scales with the terms
        sx = rstd * (np.abs(dyg) + np.abs(dyg).mean(1, keepdims=True)
                     + np.abs(xhat) * np.abs(dyg * xhat).mean(1, keepdims=True))
        sx = np.maximum(1.0, sx).reshape(inp["x"].shape)
        # dgamma/dbeta are sums over the rows: tolerance scales with the sum of |terms|
        sg = reduction_scale(finite(dy) * xhat)
        sb = reduction_scale(finite(dy))
    assert_close(dx, ref["dx"], atol, rtol, scale=sx, name="dx", equal_nan=equal_nan)
    assert_close(dgamma, ref["dgamma"], atol, rtol, scale=sg, name="dgamma", equal_nan=equal_nan)
    assert_close(dbeta, ref["dbeta"], atol, rtol, scale=sb, name="dbeta", equal_nan=equal_nan)


# --------------------------------------------------------------------------- oracle 1: float64 reference


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_reference_numpy(dtype_tol, shape):
    dtype = dtype_tol[0]
    lead, D = shape
    inp = ln_inputs(lead, D, seed=int(np.prod(lead)) * 100 + D)
    out = call_np(inp, dtype)
    for o, want in zip(out, [tuple(lead) + (D,), (D,), (D,)]):
        assert isinstance(o, np.ndarray)
        assert o.dtype == NP_DTYPES[dtype]
        assert o.shape == want
    check_against(out, ln_reference(inp, dtype), inp, dtype_tol)


def test_large_float32():
    inp = ln_inputs((1024,), 1024, seed=5)
    out = call_np(inp, "float32")
    check_against(out, ln_reference(inp, "float32"), inp, ("float32", 1e-5, 1e-5))


@pytest.mark.parametrize("eps", [1e-3, 0.5, 1], ids=["eps=1e-3", "eps=0.5", "eps=1 (int)"])
def test_eps_is_used(eps):
    inp = ln_inputs((9,), 24, seed=6, eps=eps)
    inp["x"] *= 0.05  # small variance, so eps matters
    inp["mean"], inp["var"] = inp["x"].mean(-1), inp["x"].var(-1)
    out = call_np(inp, "float32")
    ref = ln_reference(inp, "float32")
    check_against(out, ref, inp, ("float32", 1e-5, 1e-5))
    # and the default eps would give something else
    other = dict(inp, eps=1e-5)
    assert not np.allclose(ref["dx"], ln_reference(other, "float32")["dx"], rtol=1e-3)


def test_eps_numpy_scalar_accepted():
    """eps is a number: numpy floating scalars (e.g. np.float32(1e-5)) are numbers too."""
    inp = ln_inputs((4,), 8, seed=8)
    out = call_np(inp, "float32", eps=np.float32(1e-5))
    check_against(out, ln_reference(inp, "float32"), inp, ("float32", 1e-5, 1e-5))


# --------------------------------------------------------------------------- oracle 2: torch


@requires_torch
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_torch_autograd(dtype_tol, shape):
    import torch
    import torch.nn.functional as F

    dtype = dtype_tol[0]
    lead, D = shape
    inp = ln_inputs(lead, D, seed=int(np.prod(lead)) * 31 + D)
    # the kernel gets mean/var of the (rounded) x, as a real forward in that dtype would store them
    x_r = rounded(inp["x"], dtype)
    inp["mean"], inp["var"] = x_r.mean(-1), x_r.var(-1)
    args = [to_torch(inp[k], dtype) for k in LN_ARGS]
    out = fusedgrad.layer_norm_backward(*args, eps=inp["eps"])
    for o, want in zip(out, [tuple(lead) + (D,), (D,), (D,)]):
        assert isinstance(o, torch.Tensor)
        assert o.dtype == torch_dtype(dtype)
        assert tuple(o.shape) == want

    x = torch.from_numpy(x_r).requires_grad_(True)
    w = torch.from_numpy(rounded(inp["gamma"], dtype)).requires_grad_(True)
    b = torch.zeros(D, dtype=torch.float64, requires_grad=True)
    y = F.layer_norm(x, (D,), w, b, inp["eps"])
    dx, dw, db = torch.autograd.grad(y, [x, w, b], torch.from_numpy(rounded(inp["dy"], dtype)))
    ref = {"dx": dx.numpy(), "dgamma": dw.numpy(), "dbeta": db.numpy()}
    if dtype != "float32":
        # mean/var rounded to dtype differ from the exact statistics of x: compare at the dtype's precision
        dtype_tol = (dtype, dtype_tol[1] * 2, dtype_tol[2] * 2)
    check_against(out, ref, inp, dtype_tol)


@requires_torch
@pytest.mark.parametrize("shape", SHAPES[2:5])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_aten_native_layer_norm_backward(dtype_tol, shape):
    """aten's backward takes mean and rstd explicitly: feed it the rounded mean and 1/sqrt(var+eps)."""
    import torch

    dtype = dtype_tol[0]
    lead, D = shape
    inp = ln_inputs(lead, D, seed=99 + D)
    out = fusedgrad.layer_norm_backward(*(to_torch(inp[k], dtype) for k in LN_ARGS), eps=inp["eps"])
    r = {k: torch.from_numpy(rounded(inp[k], dtype)) for k in LN_ARGS}
    rstd = 1.0 / torch.sqrt(r["var"] + inp["eps"])
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(
        r["dy"], r["x"], [D], r["mean"].unsqueeze(-1), rstd.unsqueeze(-1), r["gamma"],
        torch.zeros(D, dtype=torch.float64), [True, True, True])
    ref = {"dx": dx.numpy(), "dgamma": dw.numpy(), "dbeta": db.numpy()}
    check_against(out, ref, inp, dtype_tol)


# --------------------------------------------------------------------------- strided inputs


@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_numpy_strided_views(dtype_tol):
    dtype = dtype_tol[0]
    M, D = 13, 37
    inp = ln_inputs((M,), D, seed=41)
    args = {}
    bigs = []
    for k in ("x", "dy"):
        big = np.full((M, D + 9), np.nan, dtype=NP_DTYPES[dtype])
        big[:, 4:4 + D] = to_np(inp[k], dtype)
        bigs.append(big)
        args[k] = big[:, 4:4 + D]
    for k in ("mean", "var", "gamma"):  # 1-D with a non-unit stride: must be copied
        n = inp[k].shape[0]
        big = np.full(2 * n, np.nan, dtype=NP_DTYPES[dtype])
        big[::2] = to_np(inp[k], dtype)
        bigs.append(big)
        args[k] = big[::2]
    before = [bits(b) for b in bigs]
    out = fusedgrad.layer_norm_backward(*(args[k] for k in LN_ARGS), eps=inp["eps"])
    check_against(out, ln_reference(inp, dtype), inp, dtype_tol)
    for b, bb in zip(bigs, before):
        np.testing.assert_array_equal(bits(b), bb)


@requires_torch
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_torch_strided_views(dtype_tol):
    import torch

    dtype = dtype_tol[0]
    lead, D = (2, 3), 21
    inp = ln_inputs(lead, D, seed=42)
    args = {}
    bigs = []
    for k in ("x", "dy"):
        big = torch.full(lead + (D + 8,), float("nan"), dtype=torch_dtype(dtype))
        big[..., 3:3 + D] = to_torch(inp[k], dtype)
        bigs.append(big)
        args[k] = big[..., 3:3 + D]
    assert not args["x"].is_contiguous()
    args["mean"] = to_torch(inp["mean"].T, dtype).t()  # transposed [3,2] -> [2,3] with inner stride 2
    args["var"] = to_torch(inp["var"], dtype)
    g = torch.full((2 * D,), float("nan"), dtype=torch_dtype(dtype))
    g[::2] = to_torch(inp["gamma"], dtype)
    args["gamma"] = g[::2]
    before = [bits(b) for b in bigs]
    out = fusedgrad.layer_norm_backward(*(args[k] for k in LN_ARGS), eps=inp["eps"])
    assert all(isinstance(o, torch.Tensor) for o in out)
    check_against(out, ln_reference(inp, dtype), inp, dtype_tol)
    for b, bb in zip(bigs, before):
        np.testing.assert_array_equal(bits(b), bb)


@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_numpy_transposed_x_is_copied(dtype_tol):
    dtype = dtype_tol[0]
    M, D = 10, 23
    inp = ln_inputs((M,), D, seed=43)
    args = {k: to_np(inp[k], dtype) for k in LN_ARGS}
    args["x"] = np.asfortranarray(args["x"])
    args["dy"] = np.ascontiguousarray(to_np(inp["dy"].T, dtype)).T
    assert args["dy"].strides[-1] != args["dy"].itemsize
    out = fusedgrad.layer_norm_backward(*(args[k] for k in LN_ARGS), eps=inp["eps"])
    check_against(out, ln_reference(inp, dtype), inp, dtype_tol)


# --------------------------------------------------------------------------- NaN / Inf


@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_nan_propagates_to_dependent_outputs_only(dtype_tol):
    dtype = dtype_tol[0]
    M, D = 7, 20
    inp = ln_inputs((M,), D, seed=51)
    inp["x"][1, 3] = np.nan    # dx row 1, dgamma[3]
    inp["var"][4] = np.nan     # dx row 4, all of dgamma
    out = call_np(inp, dtype)
    ref = ln_reference(inp, dtype)
    assert np.isnan(ref["dx"][1]).all() and np.isnan(ref["dx"][4]).all()
    assert not np.isnan(ref["dx"][[0, 2, 3, 5, 6]]).any()
    assert not np.isnan(ref["dbeta"]).any()
    check_against(out, ref, inp, dtype_tol, equal_nan=True)


@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_nan_gamma_poisons_dx_not_dgamma(dtype_tol):
    dtype = dtype_tol[0]
    inp = ln_inputs((5,), 12, seed=52)
    inp["gamma"][7] = np.nan
    out = call_np(inp, dtype)
    ref = ln_reference(inp, dtype)
    assert np.isnan(ref["dx"]).all() and not np.isnan(ref["dgamma"]).any()
    check_against(out, ref, inp, dtype_tol, equal_nan=True)


def test_inf_dy_gives_ieee_results():
    inp = ln_inputs((4,), 9, seed=53)
    inp["dy"][2, 5] = np.inf
    out = call_np(inp, "float32")
    with np.errstate(invalid="ignore"):
        ref = ln_reference(inp, "float32")
    assert np.isinf(ref["dbeta"][5]) and np.isinf(ref["dgamma"][5])
    check_against(out, ref, inp, ("float32", 1e-5, 1e-5), equal_nan=True)


# --------------------------------------------------------------------------- empty


@pytest.mark.parametrize("lead", [(0,), (2, 0)], ids=["M=0", "x [2,0,D]"])
@pytest.mark.parametrize("kind", ["numpy", pytest.param("torch", marks=requires_torch)])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_empty_rows(dtype_tol, kind, lead):
    dtype = dtype_tol[0]
    D = 6
    inp = {"x": np.zeros(lead + (D,)), "dy": np.zeros(lead + (D,)), "mean": np.zeros(lead), "var": np.ones(lead),
           "gamma": np.ones(D)}
    conv = to_np if kind == "numpy" else to_torch
    dx, dgamma, dbeta = fusedgrad.layer_norm_backward(*(conv(inp[k], dtype) for k in LN_ARGS))
    assert tuple(dx.shape) == lead + (D,)
    np.testing.assert_array_equal(as_f64(dgamma), np.zeros(D))
    np.testing.assert_array_equal(as_f64(dbeta), np.zeros(D))


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_bitwise_deterministic_repeat(dtype_tol):
    dtype = dtype_tol[0]
    inp = ln_inputs((1000,), 515, seed=61)
    first = call_np(inp, dtype)
    second = call_np(inp, dtype)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(bits(a), bits(b))


def test_bitwise_identical_with_1_and_2_threads(tmp_path):
    inp = ln_inputs((1000,), 515, seed=62)
    args = {k: to_np(inp[k], "float32") for k in LN_ARGS}
    here = dict(zip(OUTS, fusedgrad.layer_norm_backward(*args.values(), eps=1e-5)))  # builds into the cache
    results = outputs_by_thread_count(
        tmp_path, 'layer_norm_backward(d["x"], d["dy"], d["mean"], d["var"], d["gamma"], eps=1e-5)', args, OUTS)
    for k in OUTS:
        np.testing.assert_array_equal(bits(results["1"][k]), bits(results["2"][k]), err_msg=k)
        np.testing.assert_array_equal(bits(results["1"][k]), bits(here[k]), err_msg=k)


@pytest.mark.parametrize("kind", ["numpy", pytest.param("torch", marks=requires_torch)])
def test_large_output_on_huge_pages(kind):
    """dx of 32 MiB takes the huge-page allocation path: still a normal, writeable, correct array."""
    from fusedgrad import api

    M, D = 2048, 4096
    assert M * D * 4 >= api.HUGE_OUTPUT_BYTES
    rng = np.random.default_rng(5)
    x = rng.standard_normal((M, D), dtype=np.float32)
    dy = rng.standard_normal((M, D), dtype=np.float32)
    gamma = rng.standard_normal(D, dtype=np.float32)
    mean, var = x.mean(1), x.var(1)
    args = (x, dy, mean, var, gamma)
    if kind == "torch":
        import torch

        args = tuple(torch.from_numpy(a) for a in args)
    dx, dgamma, dbeta = fusedgrad.layer_norm_backward(*args)
    dxn = dx.numpy() if kind == "torch" else dx
    assert dxn.shape == (M, D) and dxn.flags.writeable
    ref = ln_def.reference(*(a.astype(np.float64) for a in (x, dy, mean, var, gamma)))
    np.testing.assert_allclose(dxn, ref["dx"], rtol=1e-4, atol=1e-5)
    dx[0, 0] = 7.0  # writeable, owns its memory for as long as it lives
    assert float(dx[0, 0]) == 7.0
