"""The full LSTM's pointwise kernels: lstm_cell_forward and lstm_step_backward (float32)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_close, bits
from fusedgrad import api
from fusedgrad.te_defs import get

OPS = ("lstm_cell_forward", "lstm_step_backward")


def _inputs(op_name, dims, seed=0):
    op = get(op_name)
    s = op.sample(dims, np.random.default_rng(seed))
    return op, s, {t.name: s[t.name].astype(np.float32) for t in op.inputs}


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("dims", [{"N": 1, "H": 1}, {"N": 13, "H": 37}, {"N": 32, "H": 256}, {"N": 5, "H": 1000}],
                         ids=lambda d: f"N{d['N']}H{d['H']}")
def test_matches_float64_reference(op_name, dims):
    op, s, ins = _inputs(op_name, dims)
    got = api.run(op_name, ins, {}, {})
    ref = op.reference(**{k: v.astype(np.float64) for k, v in ins.items()})
    for name, expected in ref.items():
        # 1e-6 relative: the rational tanh is good to 2.6e-7 absolute
        assert_close(got[name], expected, atol=1e-6, rtol=1e-6, name=name)


def test_cell_forward_saturates_exactly_and_keeps_nan():
    inf, nan = np.inf, np.nan
    # H = 2; gates [1, 4H] = i | f | g | o
    gates = np.array([[inf, -inf, -inf, inf, inf, -inf, nan, 0.0]], np.float32)
    cx = np.array([[1.0, 2.0]], np.float32)
    out = api.run("lstm_cell_forward", {"gates": gates, "cx": cx}, {}, {})
    # column 0: i = sigmoid(inf) = 1, f = sigmoid(-inf) = 0, g = tanh(inf) = 1, o = sigmoid(nan) = nan
    assert (out["i"][0, 0], out["f"][0, 0], out["g"][0, 0]) == (1.0, 0.0, 1.0)
    assert out["cy"][0, 0] == 1.0  # f*cx + i*g = 0*1 + 1*1
    assert np.isnan(out["o"][0, 0]) and np.isnan(out["hy"][0, 0])
    # column 1: i = 0, f = 1, g = tanh(-inf) = -1, o = sigmoid(0) = 0.5
    assert (out["i"][0, 1], out["f"][0, 1], out["g"][0, 1], out["o"][0, 1]) == (0.0, 1.0, -1.0, 0.5)
    assert out["cy"][0, 1] == 2.0  # 1*2 + 0*(-1)
    assert abs(out["tanhc"][0, 1] - np.tanh(2.0)) < 2e-7 and abs(out["hy"][0, 1] - 0.5 * np.tanh(2.0)) < 2e-7


def test_step_backward_nan_stays_in_its_row():
    op, s, ins = _inputs("lstm_step_backward", {"N": 4, "H": 8})
    ins["dy"][2, 3] = np.nan
    out = api.run("lstm_step_backward", ins, {}, {})
    assert np.isnan(out["dgates"][2]).any() and np.isnan(out["dcx"][2, 3])
    rows = [0, 1, 3]
    assert np.isfinite(out["dgates"][rows]).all() and np.isfinite(out["dcx"][rows]).all()


@pytest.mark.parametrize("op_name", OPS)
def test_row_strided_inputs_are_used_in_place(op_name):
    op, s, ins = _inputs(op_name, {"N": 9, "H": 24}, seed=1)
    base = api.run(op_name, ins, {}, {})
    wide = {}
    for k, v in ins.items():  # the same values inside wider rows
        w = np.full((v.shape[0], v.shape[1] + 7), np.nan, np.float32)
        w[:, 3:3 + v.shape[1]] = v
        wide[k] = w[:, 3:3 + v.shape[1]]
    got = api.run(op_name, wide, {}, {})
    for name in base:
        np.testing.assert_array_equal(bits(got[name]), bits(base[name]), err_msg=name)


def test_step_backward_writes_dgates_t_into_a_wider_view():
    """dgates_t goes into columns of a caller's [4H, T·B] buffer: exactly those columns, nothing else."""
    from fusedgrad import runtime

    op, s, ins = _inputs("lstm_step_backward", {"N": 5, "H": 24}, seed=3)
    N, H = 5, 24
    kernel = runtime.artifact("lstm_step_backward", "float32").kernel({})
    dgates = np.empty((N, 4 * H), np.float32)
    dcx = np.empty((N, H), np.float32)
    wide = np.full((4 * H, 3 * N), np.nan, np.float32)  # three steps' columns; this one is the middle step
    view = wide.reshape(4, H, 3 * N)[:, :, N:2 * N]
    kernel(*(ins[n] for n in ("dh", "dy", "dc", "cx", "i", "f", "g", "o", "tanhc")),
           dgates.reshape(N, 4, H), dcx, view)
    np.testing.assert_array_equal(wide[:, N:2 * N], dgates.T)
    assert np.isnan(wide[:, :N]).all() and np.isnan(wide[:, 2 * N:]).all()


def test_tanh_stays_within_one_and_its_error_bound():
    """tanh(c) through the cell forward (i = 0, f = 1, so cy = cx exactly) on a fine grid of c: never
    outside [-1, 1] (the rational fit overshot 1 by 2.4e-7 for c in 8.3-8.8, and 1 - tanh^2 went
    negative there), and within the documented 2.6e-7 of float64 tanh."""
    c = np.linspace(-12.0, 12.0, 240001, dtype=np.float32)[None, :]
    H = c.shape[1]
    gates = np.zeros((1, 4 * H), np.float32)
    gates[:, :H], gates[:, H:2 * H] = -np.inf, np.inf  # i = 0, f = 1
    out = api.run("lstm_cell_forward", {"gates": gates, "cx": c}, {}, {})
    assert np.array_equal(out["cy"], c)
    t = out["tanhc"]
    assert np.abs(t).max() <= 1.0, float(np.abs(t).max() - 1.0)
    assert np.abs(t.astype(np.float64) - np.tanh(c.astype(np.float64))).max() <= 2.6e-7
