"""fusedgrad.lstm_cell_backward against the float64 reference and torch autograd."""
from __future__ import annotations


import numpy as np
import pytest

import fusedgrad
from conftest import (
    outputs_by_thread_count,
    DTYPES,
    LSTM_ARGS,
    NP_DTYPES,
    as_f64,
    assert_close,
    bits,
    lstm_inputs,
    lstm_reference,
    reduction_scale,
    requires_torch,
    rounded,
    to_np,
    to_torch,
    torch_dtype,
)

SHAPES = [
    pytest.param((1, 1), id="N=1 H=1"),
    pytest.param((6, 1), id="H=1"),
    pytest.param((3, 7), id="H=7"),
    pytest.param((13, 37), id="prime N=13 H=37"),
    pytest.param((5, 17), id="H=17 not a multiple of 16"),
    pytest.param((31, 50), id="N=31 H=50 not a multiple of 16"),
    pytest.param((8, 64), id="N=8 H=64 multiple of 16"),
]
MISSING = [
    pytest.param((), id="all grads"),
    pytest.param(("grad_hy",), id="grad_hy None"),
    pytest.param(("grad_cy",), id="grad_cy None"),
    pytest.param(("grad_hy", "grad_cy"), id="both None"),
]
OUTS = ("grad_gates", "grad_cx", "grad_bias")


def call_np(inp, dtype, missing=(), has_bias=True):
    args = [None if k in missing else to_np(inp[k], dtype) for k in LSTM_ARGS]
    return fusedgrad.lstm_cell_backward(*args, has_bias=has_bias)


def check_against(out, ref, dtype_tol, N, H, has_bias, equal_nan=False):
    dtype, atol, rtol = dtype_tol
    grad_gates, grad_cx, grad_bias = out
    assert_close(grad_gates, ref["grad_gates"], atol, rtol, name="grad_gates", equal_nan=equal_nan)
    assert_close(grad_cx, ref["grad_cx"], atol, rtol, name="grad_cx", equal_nan=equal_nan)
    if has_bias:
        scale = reduction_scale(np.nan_to_num(ref["grad_gates"]))
        assert_close(grad_bias, ref["grad_bias"], atol, rtol, scale=scale, name="grad_bias", equal_nan=equal_nan)
    else:
        assert grad_bias is None


def structural_reference(inp64, missing=(), has_bias=True):
    """float64 reference in which an absent gradient is a structural zero:
    every term it multiplies vanishes, whatever the other inputs hold (NaN, Inf)."""
    ghy = None if "grad_hy" in missing else inp64["grad_hy"]
    gcy = None if "grad_cy" in missing else inp64["grad_cy"]
    cx, cy, storage = inp64["cx"], inp64["cy"], inp64["storage"]
    N, H = cx.shape
    i, f, g, o = (storage[:, k * H:(k + 1) * H] for k in range(4))
    zero = np.zeros((N, H))
    with np.errstate(invalid="ignore", over="ignore"):
        t = np.tanh(cy)
        parts = ([ghy * o * (1 - t * t)] if ghy is not None else []) + ([gcy] if gcy is not None else [])
        if parts:
            gc = sum(parts)
            d_i, d_f, d_g, gcx = gc * g * i * (1 - i), gc * cx * f * (1 - f), gc * i * (1 - g * g), gc * f
        else:
            d_i = d_f = d_g = gcx = zero
        d_o = ghy * t * o * (1 - o) if ghy is not None else zero
        gates = np.concatenate([d_i, d_f, d_g, d_o], axis=1)
        out = {"grad_gates": gates, "grad_cx": gcx}
        if has_bias:
            out["grad_bias"] = gates.sum(axis=0)
    return out


# --------------------------------------------------------------------------- oracle 1: float64 reference


@pytest.mark.parametrize("missing", MISSING)
@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_reference_numpy(dtype_tol, shape, has_bias, missing):
    dtype = dtype_tol[0]
    N, H = shape
    inp = lstm_inputs(N, H, seed=N * 1000 + H)
    out = call_np(inp, dtype, missing, has_bias)
    for o, want in zip(out, [(N, 4 * H), (N, H), (4 * H,)]):
        if o is None:
            continue
        assert isinstance(o, np.ndarray)
        assert o.dtype == NP_DTYPES[dtype]
        assert o.shape == want
    ref = lstm_reference(inp, dtype, has_bias, missing)
    check_against(out, ref, dtype_tol, N, H, has_bias)


def test_large_float32():
    N = H = 1024
    inp = lstm_inputs(N, H, seed=7)
    out = call_np(inp, "float32")
    check_against(out, lstm_reference(inp, "float32"), ("float32", 1e-5, 1e-5), N, H, True)


# --------------------------------------------------------------------------- oracle 2: torch autograd


def autograd_oracle(inp, missing=()):
    """Backprop grad_hy/grad_cy through the cell forward in float64 torch."""
    import torch

    xg = torch.from_numpy(inp["x_gates"]).requires_grad_(True)
    cx = torch.from_numpy(inp["cx"]).requires_grad_(True)
    i, f, g, o = xg.chunk(4, dim=1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    cy = f * cx + i * g
    hy = o * torch.tanh(cy)
    ghy = torch.zeros_like(hy) if "grad_hy" in missing else torch.from_numpy(inp["grad_hy"])
    gcy = torch.zeros_like(cy) if "grad_cy" in missing else torch.from_numpy(inp["grad_cy"])
    d_xg, d_cx = torch.autograd.grad([hy, cy], [xg, cx], [ghy, gcy])
    # sanity: the forward the kernel inputs come from is the same forward
    np.testing.assert_allclose(cy.detach().numpy(), inp["cy"], rtol=1e-12, atol=1e-12)
    return {"grad_gates": d_xg.numpy(), "grad_cx": d_cx.numpy(), "grad_bias": d_xg.numpy().sum(axis=0)}


@requires_torch
@pytest.mark.parametrize("missing", MISSING)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_matches_torch_autograd(dtype_tol, shape, missing):
    import torch

    dtype = dtype_tol[0]
    N, H = shape
    inp = lstm_inputs(N, H, seed=N * 7 + H)
    args = [None if k in missing else to_torch(inp[k], dtype) for k in LSTM_ARGS]
    out = fusedgrad.lstm_cell_backward(*args, has_bias=True)
    for o, want in zip(out, [(N, 4 * H), (N, H), (4 * H,)]):
        assert isinstance(o, torch.Tensor)
        assert o.dtype == torch_dtype(dtype)
        assert tuple(o.shape) == want
        assert o.device.type == "cpu"
    ref = autograd_oracle(inp, missing)
    check_against(out, ref, dtype_tol, N, H, True)


@requires_torch
@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no bias"])
def test_torch_requires_grad_inputs_and_no_bias(has_bias):
    import torch

    N, H = 9, 20
    inp = lstm_inputs(N, H, seed=3)
    args = [to_torch(inp[k], "float32").requires_grad_(True) for k in LSTM_ARGS]
    grad_gates, grad_cx, grad_bias = fusedgrad.lstm_cell_backward(*args, has_bias=has_bias)
    assert not grad_gates.requires_grad and not grad_cx.requires_grad
    ref = lstm_reference(inp, "float32", has_bias)
    check_against((grad_gates, grad_cx, grad_bias), ref, ("float32", 1e-5, 1e-5), N, H, has_bias)
    if has_bias:
        assert isinstance(grad_bias, torch.Tensor) and grad_bias.shape == (4 * H,)


# --------------------------------------------------------------------------- strided inputs


def np_row_view(a, dtype, pad_left=3, pad_right=5):
    """a as a view with row stride > row length inside a NaN-padded buffer."""
    N, W = a.shape
    big = np.full((N, pad_left + W + pad_right), np.nan, dtype=NP_DTYPES[dtype])
    big[:, pad_left:pad_left + W] = to_np(a, dtype)
    return big, big[:, pad_left:pad_left + W]


def torch_row_view(a, dtype, pad_left=3, pad_right=5):
    import torch

    N, W = a.shape
    big = torch.full((N, pad_left + W + pad_right), float("nan"), dtype=torch_dtype(dtype))
    big[:, pad_left:pad_left + W] = to_torch(a, dtype)
    return big, big[:, pad_left:pad_left + W]


@pytest.mark.parametrize("shape", [pytest.param((13, 37), id="N=13 H=37"), pytest.param((4, 16), id="N=4 H=16")])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_numpy_row_strided_views(dtype_tol, shape):
    dtype = dtype_tol[0]
    N, H = shape
    inp = lstm_inputs(N, H, seed=11)
    bigs, views = zip(*(np_row_view(inp[k], dtype) for k in LSTM_ARGS))
    assert all(not v.flags.c_contiguous for v in views)
    before = [bits(b) for b in bigs]
    out = fusedgrad.lstm_cell_backward(*views)
    check_against(out, lstm_reference(inp, dtype), dtype_tol, N, H, True)
    for b, bb in zip(bigs, before):  # inputs (and their padding) untouched
        np.testing.assert_array_equal(bits(b), bb)


@requires_torch
@pytest.mark.parametrize("shape", [pytest.param((13, 37), id="N=13 H=37"), pytest.param((4, 16), id="N=4 H=16")])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_torch_row_strided_views(dtype_tol, shape):
    dtype = dtype_tol[0]
    N, H = shape
    inp = lstm_inputs(N, H, seed=12)
    bigs, views = zip(*(torch_row_view(inp[k], dtype) for k in LSTM_ARGS))
    assert views[2].stride() == (H + 8, 1) and views[4].stride() == (4 * H + 8, 1)
    before = [bits(b) for b in bigs]
    out = fusedgrad.lstm_cell_backward(*views)
    check_against(out, lstm_reference(inp, dtype), dtype_tol, N, H, True)
    for b, bb in zip(bigs, before):
        np.testing.assert_array_equal(bits(b), bb)


@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_numpy_non_unit_inner_stride_is_copied(dtype_tol):
    """Fortran-order arrays and column-stepped views must be copied by the API and still be right."""
    dtype = dtype_tol[0]
    N, H = 11, 19
    inp = lstm_inputs(N, H, seed=13)
    args = []
    for k in LSTM_ARGS:
        a = to_np(inp[k], dtype)
        if k in ("cx", "storage"):
            a = np.asfortranarray(a)
        elif k == "cy":
            wide = np.zeros((N, 2 * H), dtype=a.dtype)
            wide[:, ::2] = a
            a = wide[:, ::2]
        args.append(a)
    assert args[2].strides[-1] != args[2].itemsize and args[3].strides[-1] != args[3].itemsize
    out = fusedgrad.lstm_cell_backward(*args)
    check_against(out, lstm_reference(inp, dtype), dtype_tol, N, H, True)


@pytest.mark.parametrize("kind", ["numpy", pytest.param("torch", marks=requires_torch)])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_size_one_axes_take_any_stride(dtype_tol, kind):
    """[N, 1] columns of wider arrays (stride 2 along the axis of size 1) and a [1, 4] row with a
    row stride of 0: valid views, read as they are."""
    dtype = dtype_tol[0]
    for N, H in ((3, 1), (1, 4)):
        inp = lstm_inputs(N, H, seed=15)
        args = []
        for k in LSTM_ARGS:
            if kind == "torch":
                a = to_torch(inp[k], dtype)
                if H == 1:  # every other column of a wider tensor
                    wide = a.new_zeros((N, 2 * a.shape[1]))
                    wide[:, ::2] = a
                    a = wide[:, ::2]
                else:  # one row with a row stride of 0
                    a = a.as_strided(a.shape, (0, 1))
                strides = a.stride()
            else:
                a = to_np(inp[k], dtype)
                if H == 1:
                    wide = np.zeros((N, 2 * a.shape[1]), dtype=a.dtype)
                    wide[:, ::2] = a
                    a = wide[:, ::2]
                else:
                    a = np.lib.stride_tricks.as_strided(a, shape=a.shape, strides=(0, a.strides[1]))
                strides = tuple(st // a.itemsize for st in a.strides)
            assert strides[-1] == 2 if H == 1 else strides[0] == 0
            args.append(a)
        out = fusedgrad.lstm_cell_backward(*args)
        check_against(out, lstm_reference(inp, dtype), dtype_tol, N, H, True)


@requires_torch
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_torch_transposed_and_expanded_inputs(dtype_tol):
    import torch

    dtype = dtype_tol[0]
    N, H = 11, 19
    inp = lstm_inputs(N, H, seed=14)
    # grad_hy: every row the same (expand gives row stride 0)
    inp["grad_hy"] = np.broadcast_to(inp["grad_hy"][:1], (N, H)).copy()
    args = {k: to_torch(inp[k], dtype) for k in LSTM_ARGS}
    args["cx"] = to_torch(inp["cx"].T, dtype).t()  # inner stride N
    args["storage"] = to_torch(inp["storage"].T, dtype).t()
    args["grad_hy"] = to_torch(inp["grad_hy"][:1], dtype).expand(N, H)
    assert args["cx"].stride() == (1, N) and args["grad_hy"].stride() == (0, 1)
    out = fusedgrad.lstm_cell_backward(*(args[k] for k in LSTM_ARGS))
    assert all(isinstance(o, torch.Tensor) for o in out)
    check_against(out, lstm_reference(inp, dtype), dtype_tol, N, H, True)


def test_numpy_read_only_inputs():
    """Inputs are only read: read-only numpy arrays (np.frombuffer, flags.writeable=False) must work."""
    N, H = 5, 9
    inp = lstm_inputs(N, H, seed=15)
    args = []
    for k in LSTM_ARGS:
        a = to_np(inp[k], "float32")
        a.flags.writeable = False
        args.append(a)
    out = fusedgrad.lstm_cell_backward(*args)
    check_against(out, lstm_reference(inp, "float32"), ("float32", 1e-5, 1e-5), N, H, True)


# --------------------------------------------------------------------------- NaN / Inf


@pytest.mark.parametrize("missing", MISSING)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_nan_propagates_to_dependent_outputs_only(dtype_tol, missing):
    dtype = dtype_tol[0]
    N, H = 6, 21
    inp = lstm_inputs(N, H, seed=21)
    inp["cy"][1, 2] = np.nan                  # tanh(cy): via grad_hy only
    inp["storage"][2, 0 * H + 3] = np.nan      # i: d_i, d_g
    inp["storage"][3, 1 * H + 4] = np.nan      # f: d_f, grad_cx
    inp["storage"][4, 2 * H + 5] = np.nan      # g: d_i, d_g
    inp["storage"][5, 3 * H + 6] = np.nan      # o: grad_c via grad_hy, d_o
    out = call_np(inp, dtype, missing)
    ref = structural_reference({k: rounded(inp[k], dtype) for k in LSTM_ARGS}, missing)
    if not missing:  # with every gradient present the te_defs reference agrees
        ref_td = lstm_reference(inp, dtype, True)
        for k in OUTS:
            np.testing.assert_array_equal(np.isnan(ref[k]), np.isnan(ref_td[k]))
    assert np.isnan(ref["grad_gates"]).any() or missing == ("grad_hy", "grad_cy")
    check_against(out, ref, dtype_tol, N, H, True, equal_nan=True)


def test_missing_grads_are_structural_zeros_with_nan_storage():
    """grad_hy = grad_cy = None: every output is exactly 0, even where storage is NaN."""
    N, H = 2, 3
    inp = lstm_inputs(N, H, seed=22)
    inp["storage"][0, 0] = np.nan  # gate i
    inp["storage"][1, 2 * H + 1] = np.nan  # gate g
    grad_gates, grad_cx, grad_bias = call_np(inp, "float32", ("grad_hy", "grad_cy"))
    np.testing.assert_array_equal(grad_gates, np.zeros((N, 4 * H), np.float32))
    np.testing.assert_array_equal(grad_cx, np.zeros((N, H), np.float32))
    np.testing.assert_array_equal(grad_bias, np.zeros(4 * H, np.float32))


@pytest.mark.parametrize("missing", MISSING[:3])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_inf_cy_gives_ieee_results(dtype_tol, missing):
    """tanh(+-inf) = +-1, so 1 - t^2 = 0: results stay finite and match the reference."""
    dtype = dtype_tol[0]
    N, H = 4, 18
    inp = lstm_inputs(N, H, seed=23)
    inp["cy"][0, :] = np.inf
    inp["cy"][1, ::2] = -np.inf
    inp["cy"][2, 5] = 40.0   # beyond any tanh clamp, still finite
    out = call_np(inp, dtype, missing)
    ref = lstm_reference(inp, dtype, True, missing)
    for k in OUTS:
        assert np.isfinite(ref[k]).all()
    for o in out:
        assert np.isfinite(as_f64(o)).all()
    check_against(out, ref, dtype_tol, N, H, True)
    if "grad_hy" not in missing:
        # d_o = grad_hy * tanh(cy) * o * (1 - o) with tanh(inf) = 1 exactly
        o = rounded(inp["storage"], dtype)[0, 3 * H:]
        want = rounded(inp["grad_hy"], dtype)[0] * o * (1 - o)
        assert_close(out[0][0, 3 * H:], want, dtype_tol[1], dtype_tol[2], name="d_o at cy=inf")


# --------------------------------------------------------------------------- empty


@pytest.mark.parametrize("kind", ["numpy", pytest.param("torch", marks=requires_torch)])
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_empty_batch(dtype_tol, kind):
    dtype = dtype_tol[0]
    H = 5
    inp = {k: np.zeros((0, 4 * H if k == "storage" else H)) for k in LSTM_ARGS}
    conv = to_np if kind == "numpy" else to_torch
    grad_gates, grad_cx, grad_bias = fusedgrad.lstm_cell_backward(*(conv(inp[k], dtype) for k in LSTM_ARGS))
    assert tuple(grad_gates.shape) == (0, 4 * H)
    assert tuple(grad_cx.shape) == (0, H)
    assert tuple(grad_bias.shape) == (4 * H,)
    np.testing.assert_array_equal(as_f64(grad_bias), np.zeros(4 * H))


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_bitwise_deterministic_repeat(dtype_tol):
    dtype = dtype_tol[0]
    N, H = 257, 300
    inp = lstm_inputs(N, H, seed=31)
    first = call_np(inp, dtype)
    second = call_np(inp, dtype)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(bits(a), bits(b))


def test_bitwise_identical_with_1_and_2_threads(tmp_path):
    N, H = 257, 300
    inp = lstm_inputs(N, H, seed=32)
    args = {k: to_np(inp[k], "float32") for k in LSTM_ARGS}
    here = dict(zip(OUTS, fusedgrad.lstm_cell_backward(*args.values())))  # also builds into the session cache
    results = outputs_by_thread_count(
        tmp_path, 'lstm_cell_backward(d["grad_hy"], d["grad_cy"], d["cx"], d["cy"], d["storage"])', args, OUTS)
    for k in OUTS:
        np.testing.assert_array_equal(bits(results["1"][k]), bits(results["2"][k]), err_msg=k)
        np.testing.assert_array_equal(bits(results["1"][k]), bits(here[k]), err_msg=k)
