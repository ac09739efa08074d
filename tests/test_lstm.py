"""fusedgrad.lstm_forward / lstm_backward (the full multi-layer LSTM) against torch.nn.LSTM.

Oracles:
- forward outputs (output, hy, cy) and every gradient (dx, dh0, dc0, every dparam) against
  torch.nn.LSTM in float64 with the same weights (autograd for the gradients; variable lengths
  through pack_padded_sequence(enforce_sorted=True) / pad_packed_sequence);
- the saved tensors of train=True (i, j, f, o, h, c, tanhc, each [D*L, T, B, H]) against a
  float64 numpy re-implementation of the recurrence, itself checked against torch's output,
  hy and cy to 1e-10 in every test.

The loss is sum(output * R) + sum(hy * Rh) + sum(cy * Rc) with random R, Rh, Rc, so grad_y,
grad_hy and grad_cy are random (R is random at padded positions too: those outputs are constant
zeros, so what grad_y holds there must not matter).  Padded input positions hold random
garbage (pack_padded_sequence never reads them).

Tolerances (assert_close: |err| <= atol * max(1, max|expected|) + rtol * |expected|):
- float32: rtol 1e-4, atol 1e-5 relative to the output's largest magnitude.  The reference is
  float64; torch's own float32 nn.LSTM uses at most ~2% of these bounds on every case here
  (checked when the suite was written), so a correct float32 kernel has a wide margin.
- float16 / bfloat16: the reference is float64 torch on the inputs *as rounded* to the dtype (at
  least as accurate as the float32 run the spec names).  Stored activations (h between layers,
  gates, c, tanh(c)) and outputs are rounded to the dtype and gradients flow back through T steps
  and L layers of them, so the bounds are relative to the output's largest magnitude:
  float16 atol 5e-3 rtol 5e-3 (eps 2^-11), bfloat16 atol 2e-2 rtol 2e-2 (eps 2^-8).  torch's
  nn.LSTM run *entirely* in float16 / bfloat16 (worse than computing in float32) uses at most
  ~20% / ~35% of these bounds on these cases.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import fusedgrad
from conftest import NP_DTYPES, SESSION_CACHE, as_f64, assert_close, bits, rounded, torch_dtype

torch = pytest.importorskip("torch")  # the oracle is torch.nn.LSTM
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402

FWD_NAMES = ("output", "hy", "cy", "i", "j", "f", "o", "h", "c", "tanhc")
GATE_NAMES = ("i", "j", "f", "o", "h", "c", "tanhc")
TOL = {"float32": (1e-5, 1e-4), "float16": (5e-3, 5e-3), "bfloat16": (2e-2, 2e-2)}


# --------------------------------------------------------------------------- cases


class Cfg:
    """One LSTM configuration.  lengths=None: fixed length (input [T,B,I] / [B,T,I]);
    else the per-sequence lengths (decreasing), passed as batch_sizes of kind ``bs_kind``."""

    def __init__(self, L=1, D=1, T=5, B=3, I=4, H=6, bias=True, bf=False, lengths=None, bs_kind="list",
                 missing=(), empty_hx=False, kind="numpy", seed=0):
        self.L, self.D, self.T, self.B, self.I, self.H = L, D, T, B, I, H
        self.bias, self.bf, self.missing, self.empty_hx, self.kind, self.seed = bias, bf, missing, empty_hx, kind, seed
        self.lengths = None if lengths is None else np.asarray(lengths, dtype=np.int64)
        self.bs_kind = bs_kind
        if self.lengths is not None:
            assert len(self.lengths) == B and self.lengths.max() == T and (np.diff(self.lengths) <= 0).all()
            assert not bf, "variable lengths use the [T*B, I] time-major layout"

    @property
    def batch_sizes(self):
        if self.lengths is None:
            return None
        bs = np.array([(self.lengths > t).sum() for t in range(self.T)], dtype=np.int64)
        return {"list": bs.tolist(), "numpy": bs, "torch": torch.from_numpy(bs)}[self.bs_kind]

    def active(self):
        """[T, B] bool: step t of sequence b is computed."""
        lengths = np.full(self.B, self.T) if self.lengths is None else self.lengths
        return np.arange(self.T)[:, None] < lengths[None, :]


CASES = [
    pytest.param(Cfg(), id="L1 D1"),
    pytest.param(Cfg(L=2, D=2, bf=True, kind="torch", seed=1), id="L2 D2 batch_first torch"),
    pytest.param(Cfg(L=3, D=1, I=7, H=5, bias=False, seed=2), id="L3 D1 no bias I>H"),
    pytest.param(Cfg(L=3, D=2, T=4, B=2, I=3, H=4, bias=False, bf=True, kind="torch", seed=3),
                 id="L3 D2 no bias batch_first torch"),
    pytest.param(Cfg(L=2, D=1, I=3, H=1, seed=4), id="L2 D1 H=1"),
    pytest.param(Cfg(L=1, D=2, T=1, B=1, I=2, H=3, seed=5), id="L1 D2 T=1 B=1"),
    pytest.param(Cfg(L=2, D=2, I=8, H=8, missing=("grad_hy",), kind="torch", seed=6), id="L2 D2 I=H grad_hy None"),
    pytest.param(Cfg(L=1, D=1, T=3, B=4, missing=("grad_cy",), seed=7), id="L1 D1 grad_cy None"),
    pytest.param(Cfg(L=2, D=2, T=3, B=2, missing=("grad_hy", "grad_cy"), empty_hx=True, seed=8),
                 id="L2 D2 both None hx empty"),
    pytest.param(Cfg(L=1, D=1, B=1, H=1, I=1, bf=True, empty_hx=True, kind="torch", seed=9),
                 id="L1 D1 B=1 I=1 H=1 batch_first hx empty"),
    pytest.param(Cfg(L=2, D=2, T=5, B=5, lengths=[5, 4, 4, 2, 1], seed=10), id="varlen L2 D2 with length 1"),
    pytest.param(Cfg(L=1, D=1, T=4, B=3, lengths=[4, 4, 4], bs_kind="numpy", seed=11), id="varlen equal lengths"),
    pytest.param(Cfg(L=3, D=2, T=6, B=3, I=5, H=4, bias=False, lengths=[6, 3, 1], bs_kind="torch", kind="torch",
                     missing=("grad_cy",), seed=12), id="varlen L3 D2 no bias torch"),
    pytest.param(Cfg(L=1, D=2, T=4, B=1, lengths=[4], seed=13), id="varlen B=1"),
    pytest.param(Cfg(L=2, D=1, T=3, B=4, lengths=[3, 2, 1, 1], empty_hx=True, missing=("grad_hy",), seed=14),
                 id="varlen L2 D1 hx empty grad_hy None"),
    pytest.param(Cfg(L=2, D=2, T=9, B=7, I=33, H=37, lengths=[9, 9, 8, 5, 5, 2, 1], seed=15),
                 id="varlen larger H=37 I=33"),
    pytest.param(Cfg(L=2, D=2, T=7, B=6, I=20, H=40, bf=True, kind="torch", seed=16), id="larger H=40 batch_first"),
]


def make_data(cfg: Cfg) -> dict:
    """float64 data, time-major: x [T,B,I], h0/c0 [D*L,B,H], params, R [T,B,D*H], Rh, Rc."""
    rng = np.random.default_rng(1000 + cfg.seed)
    L, D, T, B, I, H = cfg.L, cfg.D, cfg.T, cfg.B, cfg.I, cfg.H
    k = 1.5 / np.sqrt(H)  # a little wider than torch's init: gates well inside the nonlinear range
    params = []
    for layer in range(L):
        in_l = I if layer == 0 else D * H
        for _ in range(D):
            params.append(rng.uniform(-k, k, (4 * H, in_l)))
            params.append(rng.uniform(-k, k, (4 * H, H)))
            if cfg.bias:
                params.append(rng.uniform(-k, k, 4 * H))
                params.append(rng.uniform(-k, k, 4 * H))
    x = rng.standard_normal((T, B, I))
    if cfg.lengths is not None:  # garbage at padded positions: must never be read
        x[~cfg.active()] = 100.0 * rng.standard_normal((int((~cfg.active()).sum()), I))
    zeros = np.zeros((D * L, B, H))
    h0 = zeros if cfg.empty_hx else 0.5 * rng.standard_normal((D * L, B, H))
    c0 = zeros if cfg.empty_hx else rng.standard_normal((D * L, B, H))
    R = rng.standard_normal((T, B, D * H))
    Rh = np.zeros((D * L, B, H)) if "grad_hy" in cfg.missing else rng.standard_normal((D * L, B, H))
    Rc = np.zeros((D * L, B, H)) if "grad_cy" in cfg.missing else rng.standard_normal((D * L, B, H))
    return {"x": x, "h0": h0, "c0": c0, "params": params, "R": R, "Rh": Rh, "Rc": Rc}


def rounded_data(data: dict, dtype: str) -> dict:
    out = {k: rounded(v, dtype) for k, v in data.items() if k != "params"}
    out["params"] = [rounded(p, dtype) for p in data["params"]]
    return out


# --------------------------------------------------------------------------- layouts


def to_api_layout(cfg: Cfg, a_tbx: np.ndarray) -> np.ndarray:
    """time-major [T,B,X] -> the API's layout: [B,T,X] with batch_first, [T*B,X] with lengths."""
    if cfg.lengths is not None:
        return a_tbx.reshape(cfg.T * cfg.B, -1)
    return a_tbx.transpose(1, 0, 2) if cfg.bf else a_tbx


def convert(a64, dtype: str, kind: str):
    if kind == "torch":
        return torch.from_numpy(np.ascontiguousarray(a64, dtype=np.float64)).to(torch_dtype(dtype))
    return np.ascontiguousarray(np.asarray(a64, dtype=np.float64).astype(NP_DTYPES[dtype]))


def api_inputs(cfg: Cfg, data: dict, dtype: str) -> dict:
    kind = cfg.kind
    hx = [] if cfg.empty_hx else [convert(data["h0"], dtype, kind), convert(data["c0"], dtype, kind)]
    return {
        "input": convert(to_api_layout(cfg, data["x"]), dtype, kind),
        "hx": hx,
        "params": [convert(p, dtype, kind) for p in data["params"]],
        "grad_y": convert(to_api_layout(cfg, data["R"]), dtype, kind),
        "grad_hy": None if "grad_hy" in cfg.missing else convert(data["Rh"], dtype, kind),
        "grad_cy": None if "grad_cy" in cfg.missing else convert(data["Rc"], dtype, kind),
    }


def flags(cfg: Cfg, train=True) -> dict:
    return {"has_biases": cfg.bias, "num_layers": cfg.L, "dropout": 0.0, "train": train,
            "bidirectional": cfg.D == 2, "batch_first": cfg.bf, "batch_sizes": cfg.batch_sizes}


def run_forward(cfg: Cfg, a: dict, train=True):
    return fusedgrad.lstm_forward(a["input"], a["hx"], a["params"], **flags(cfg, train))


def run_backward(cfg: Cfg, a: dict, fwd):
    i, j, f, o, h, c, tanhc = fwd[3:]
    return fusedgrad.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"], a["params"],
                                   i, j, f, o, h, c, tanhc, **flags(cfg))


# --------------------------------------------------------------------------- oracles


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def numpy_forward(cfg: Cfg, data: dict) -> dict:
    """float64 recurrence; saved tensors [D*L,T,B,H] (NaN where a step is not computed)."""
    L, D, T, B, H = cfg.L, cfg.D, cfg.T, cfg.B, cfg.H
    active = cfg.active()
    per = 4 if cfg.bias else 2
    saved = {k: np.full((D * L, T, B, H), np.nan) for k in GATE_NAMES}
    hy, cy = np.zeros((D * L, B, H)), np.zeros((D * L, B, H))
    layer_in = data["x"]
    for layer in range(L):
        outs = []
        for d in range(D):
            idx = layer * D + d
            w = data["params"][idx * per:(idx + 1) * per]
            b = w[2] + w[3] if cfg.bias else 0.0
            h, c = data["h0"][idx].copy(), data["c0"][idx].copy()
            out = np.zeros((T, B, H))
            for t in (range(T) if d == 0 else reversed(range(T))):
                z = layer_in[t] @ w[0].T + h @ w[1].T + b
                gi, gf, gg, go = (z[:, q * H:(q + 1) * H] for q in range(4))
                gi, gf, gg, go = _sigmoid(gi), _sigmoid(gf), np.tanh(gg), _sigmoid(go)
                cn = gf * c + gi * gg
                tc = np.tanh(cn)
                hn = go * tc
                m = active[t][:, None]
                c, h = np.where(m, cn, c), np.where(m, hn, h)
                out[t] = np.where(m, hn, 0.0)
                for name, v in zip(GATE_NAMES, (gi, gg, gf, go, hn, cn, tc)):
                    saved[name][idx, t] = np.where(m, v, np.nan)
            hy[idx], cy[idx] = h, c
            outs.append(out)
        layer_in = np.concatenate(outs, axis=-1)
    return {"output": layer_in, "hy": hy, "cy": cy, **saved}


def torch_lstm(cfg: Cfg, params):
    lstm = torch.nn.LSTM(cfg.I, cfg.H, num_layers=cfg.L, bias=cfg.bias, batch_first=cfg.bf, dropout=0.0,
                         bidirectional=cfg.D == 2).double()
    flat = list(lstm.parameters())
    assert [n for n, _ in lstm.named_parameters()] == list(lstm._flat_weights_names)
    assert len(flat) == len(params)
    with torch.no_grad():
        for p, w in zip(flat, params):
            assert tuple(p.shape) == w.shape
            p.copy_(torch.from_numpy(w))
    return lstm, flat


def torch_oracle(cfg: Cfg, data: dict) -> dict:
    """float64 torch.nn.LSTM forward + autograd; everything time-major / API shapes as numpy."""
    lstm, flat = torch_lstm(cfg, data["params"])
    x = torch.from_numpy(data["x"]).requires_grad_(True)
    h0 = torch.from_numpy(data["h0"]).requires_grad_(True)
    c0 = torch.from_numpy(data["c0"]).requires_grad_(True)
    xin = x.transpose(0, 1) if cfg.bf else x  # torch sees the batch_first layout too
    if cfg.lengths is None:
        out, (hy, cy) = lstm(xin, (h0, c0))
    else:
        packed = pack_padded_sequence(xin, torch.from_numpy(cfg.lengths), batch_first=cfg.bf, enforce_sorted=True)
        out_p, (hy, cy) = lstm(packed, (h0, c0))
        out, _ = pad_packed_sequence(out_p, batch_first=cfg.bf, total_length=cfg.T)
    out_tm = out.transpose(0, 1) if cfg.bf else out
    loss = ((out_tm * torch.from_numpy(data["R"])).sum() + (hy * torch.from_numpy(data["Rh"])).sum()
            + (cy * torch.from_numpy(data["Rc"])).sum())
    grads = torch.autograd.grad(loss, [x, h0, c0] + flat)
    return {
        "output": out_tm.detach().numpy(), "hy": hy.detach().numpy(), "cy": cy.detach().numpy(),
        "dx": grads[0].numpy(), "dh0": grads[1].numpy(), "dc0": grads[2].numpy(),
        "dparams": [g.numpy() for g in grads[3:]],
    }


def references(cfg: Cfg, data: dict):
    ref = torch_oracle(cfg, data)
    gates = numpy_forward(cfg, data)
    for k in ("output", "hy", "cy"):  # the numpy recurrence is the same LSTM as torch's
        np.testing.assert_allclose(gates[k], ref[k], rtol=1e-10, atol=1e-10, err_msg=f"numpy oracle {k}")
    return ref, gates


# --------------------------------------------------------------------------- checks


def check_kind(objs, dtype: str, kind: str):
    for o in objs:
        if kind == "torch":
            assert isinstance(o, torch.Tensor), type(o)
            assert o.dtype == torch_dtype(dtype)
        else:
            assert isinstance(o, np.ndarray), type(o)
            assert o.dtype == NP_DTYPES[dtype]


def shape(a):
    return tuple(int(s) for s in a.shape)


def check_forward(cfg: Cfg, fwd, ref, gates, dtype: str, train=True, bounds: str | None = None):
    """``bounds``: whose TOL applies (default: ``dtype``'s; TF32 GEMMs in float32 take float16's)."""
    atol, rtol = TOL[bounds or dtype]
    L, D, T, B, H = cfg.L, cfg.D, cfg.T, cfg.B, cfg.H
    assert len(fwd) == 10
    check_kind(fwd, dtype, cfg.kind)
    output, hy, cy = fwd[:3]
    assert_close(output, to_api_layout(cfg, ref["output"]), atol, rtol, name="output")
    assert_close(hy, ref["hy"], atol, rtol, name="hy")
    assert_close(cy, ref["cy"], atol, rtol, name="cy")
    i, j, f, o, h, c, tanhc = fwd[3:]
    if train:
        act = cfg.active()  # saved tensors are compared where a step is computed
        for name, got in zip(GATE_NAMES, fwd[3:]):
            assert shape(got) == (D * L, T, B, H), f"{name}: shape {shape(got)}"
            assert_close(as_f64(got)[:, act], gates[name][:, act], atol, rtol, name=f"saved {name}")
    else:
        for name, got in zip(("i", "j", "f", "o", "tanhc"), (i, j, f, o, tanhc)):
            assert int(np.prod(shape(got))) == 0, f"train=False: {name} should be empty, has shape {shape(got)}"
        assert_close(h, ref["hy"], atol, rtol, name="train=False h (final)")
        assert_close(c, ref["cy"], atol, rtol, name="train=False c (final)")


def check_backward(cfg: Cfg, bwd, ref, a: dict, dtype: str, bounds: str | None = None):
    atol, rtol = TOL[bounds or dtype]
    assert len(bwd) == 3
    dx, dhc, dparams = bwd
    check_kind([dx], dtype, cfg.kind)
    assert_close(dx, to_api_layout(cfg, ref["dx"]), atol, rtol, name="dx")
    if cfg.lengths is not None:  # padded positions: exactly zero
        pad = ~cfg.active().reshape(-1)
        assert (as_f64(dx)[pad] == 0).all(), "dx at padded positions is not zero"
    dhc = list(dhc)
    assert len(dhc) == 2  # [dh0, dc0], also when hx was empty (the gradient at the zero state)
    check_kind(dhc, dtype, cfg.kind)
    assert_close(dhc[0], ref["dh0"], atol, rtol, name="dh0")
    assert_close(dhc[1], ref["dc0"], atol, rtol, name="dc0")
    dparams = list(dparams)
    assert len(dparams) == len(a["params"])
    check_kind(dparams, dtype, cfg.kind)
    for n, (got, want, p) in enumerate(zip(dparams, ref["dparams"], a["params"])):
        assert shape(got) == shape(p), f"dparams[{n}]: shape {shape(got)} != param {shape(p)}"
        assert_close(got, want, atol, rtol, name=f"dparams[{n}]")


# --------------------------------------------------------------------------- numerics vs torch


@pytest.mark.parametrize("cfg", CASES)
def test_float32_matches_torch(cfg):
    data = make_data(cfg)
    ref, gates = references(cfg, data)
    a = api_inputs(cfg, data, "float32")
    fwd = run_forward(cfg, a, train=True)
    check_forward(cfg, fwd, ref, gates, "float32")
    bwd = run_backward(cfg, a, fwd)
    check_backward(cfg, bwd, ref, a, "float32")
    if cfg.lengths is not None:  # padded outputs exactly zero
        pad = ~cfg.active().reshape(-1)
        assert (as_f64(fwd[0])[pad] == 0).all(), "output at padded positions is not zero"


@pytest.mark.parametrize("cfg", [CASES[0], CASES[2], CASES[10], CASES[13]])
def test_inference_forward(cfg):
    """train=False: same output/hy/cy; empty gate tensors; h, c are the final states."""
    data = make_data(cfg)
    ref, gates = references(cfg, data)
    a = api_inputs(cfg, data, "float32")
    fwd = run_forward(cfg, a, train=False)
    check_forward(cfg, fwd, ref, gates, "float32", train=False)


EMPTY_BATCH_CASES = [
    pytest.param(Cfg(L=1, D=1, T=3, B=0, seed=40), id="L1 D1 numpy"),
    pytest.param(Cfg(L=2, D=2, T=3, B=0, bf=True, kind="torch", seed=41), id="L2 D2 batch_first torch"),
]


@pytest.mark.parametrize("cfg", EMPTY_BATCH_CASES)
def test_batch_of_zero_sequences_matches_torch(cfg):
    """B = 0 with T > 0, as torch.nn.LSTM: empty output, states and saved tensors (train or not), empty
    dx, dh0, dc0, and every parameter gradient zero (no sequence contributes to it)."""
    data = make_data(cfg)
    ref, gates = references(cfg, data)
    a = api_inputs(cfg, data, "float32")
    check_forward(cfg, run_forward(cfg, a, train=False), ref, gates, "float32", train=False)
    fwd = run_forward(cfg, a)
    check_forward(cfg, fwd, ref, gates, "float32")
    check_backward(cfg, run_backward(cfg, a, fwd), ref, a, "float32")


LOW_CASES = [
    pytest.param(Cfg(L=2, D=2, T=5, B=4, I=6, H=9, bf=True, kind="torch", seed=20), id="L2 D2 batch_first torch"),
    pytest.param(Cfg(L=2, D=2, T=5, B=4, I=6, H=9, lengths=[5, 3, 3, 1], seed=21, missing=("grad_cy",)),
                 id="varlen L2 D2 numpy"),
]


@pytest.mark.parametrize("cfg", LOW_CASES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_matches_torch(dtype, cfg):
    data = rounded_data(make_data(cfg), dtype)  # the oracle sees exactly what the kernel sees
    ref, gates = references(cfg, data)
    a = api_inputs(cfg, data, dtype)
    fwd = run_forward(cfg, a)
    check_forward(cfg, fwd, ref, gates, dtype)
    bwd = run_backward(cfg, a, fwd)
    check_backward(cfg, bwd, ref, a, dtype)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_output_kind_follows_input_kind(kind):
    cfg = Cfg(L=2, D=2, T=3, B=2, I=3, H=4, kind=kind, seed=30)
    a = api_inputs(cfg, make_data(cfg), "float32")
    fwd = run_forward(cfg, a)
    dx, (dh0, dc0), dparams = run_backward(cfg, a, fwd)
    check_kind(list(fwd) + [dx, dh0, dc0] + list(dparams), "float32", kind)


def test_torch_requires_grad_inputs():
    cfg = Cfg(L=1, D=2, T=4, B=3, kind="torch", seed=31)
    data = make_data(cfg)
    ref, gates = references(cfg, data)
    a = api_inputs(cfg, data, "float32")
    a["input"].requires_grad_(True)
    for p in a["params"]:
        p.requires_grad_(True)
    fwd = run_forward(cfg, a)
    check_forward(cfg, fwd, ref, gates, "float32")
    check_backward(cfg, run_backward(cfg, a, fwd), ref, a, "float32")


@pytest.mark.parametrize("where", ["input", "grad_y"])
def test_padded_positions_are_never_read(where):
    """NaN at every padded position of input (or of grad_y): results identical to finite padding.

    pack_padded_sequence never reads padded input; padded outputs are constant zeros, so grad_y
    there has no effect on any gradient."""
    cfg = Cfg(L=2, D=2, T=5, B=4, I=3, H=5, lengths=[5, 4, 2, 1], seed=32)
    a = api_inputs(cfg, make_data(cfg), "float32")
    fwd = run_forward(cfg, a)
    bwd = run_backward(cfg, a, fwd)
    pad = ~cfg.active().reshape(-1)
    b = dict(a)
    b[where] = a[where].copy()
    b[where][pad] = np.nan
    fwd2 = run_forward(cfg, b)
    bwd2 = run_backward(cfg, b, fwd2)
    for name, x, y in zip(FWD_NAMES[:3], fwd, fwd2):
        np.testing.assert_array_equal(bits(x), bits(y), err_msg=name)
    act = cfg.active()
    for name, x, y in zip(GATE_NAMES, fwd[3:], fwd2[3:]):
        np.testing.assert_array_equal(as_f64(x)[:, act], as_f64(y)[:, act], err_msg=f"saved {name}")
    for n, (x, y) in enumerate(zip(flat_results(fwd, bwd)[10:], flat_results(fwd2, bwd2)[10:])):
        np.testing.assert_array_equal(bits(x), bits(y), err_msg=f"gradient {n} (0: dx, 1: dh0, 2: dc0, then dparams)")


# --------------------------------------------------------------------------- NaN


@pytest.mark.parametrize("D", [1, 2], ids=["D1", "D2"])
def test_nan_in_input_stays_in_its_sequence(D):
    cfg = Cfg(L=2, D=D, T=6, B=5, I=4, H=7, seed=40)
    data = make_data(cfg)
    t0, b0 = 2, 3
    data["x"][t0, b0, 1] = np.nan
    a = api_inputs(cfg, data, "float32")
    output, hy, cy = (as_f64(v) for v in run_forward(cfg, a, train=False)[:3])
    others = [b for b in range(cfg.B) if b != b0]
    assert np.isfinite(output[:, others]).all(), "NaN leaked into another sequence's output"
    assert np.isfinite(hy[:, others]).all() and np.isfinite(cy[:, others]).all(), "NaN leaked into hy/cy"
    H = cfg.H
    if D == 1:  # steps before t0 finite, from t0 on NaN (W_ih and W_hh have no zero entry)
        assert np.isfinite(output[:t0, b0]).all()
        assert np.isnan(output[t0:, b0]).all()
    else:  # layer 0's reverse direction carries the NaN to every step, so layer 1 sees it everywhere
        assert np.isnan(output[:, b0]).all()
    assert np.isnan(hy[:, b0]).all() and np.isnan(cy[:, b0]).all()
    # and the other sequences still have their NaN-free values
    clean = dict(data)
    clean["x"] = data["x"].copy()
    clean["x"][t0, b0, 1] = 0.0
    ref, _ = references(cfg, clean)
    assert_close(output[:, others], ref["output"][:, others], *TOL["float32"], name="output of other sequences")


# --------------------------------------------------------------------------- determinism


DET_CFG = Cfg(L=2, D=2, T=8, B=16, I=24, H=32, lengths=[8] * 5 + [6] * 6 + [3] * 4 + [1], seed=50)


def flat_results(fwd, bwd):
    dx, dhc, dparams = bwd
    return list(fwd) + [dx] + list(dhc) + list(dparams)


def test_bitwise_deterministic_repeat():
    a = api_inputs(DET_CFG, make_data(DET_CFG), "float32")
    runs = []
    for _ in range(2):
        fwd = run_forward(DET_CFG, a)
        runs.append(flat_results(fwd, run_backward(DET_CFG, a, fwd)))
    assert len(runs[0]) == len(runs[1]) == 10 + 3 + len(a["params"])
    for n, (x, y) in enumerate(zip(*runs)):
        np.testing.assert_array_equal(bits(x), bits(y), err_msg=f"result {n}")


_THREAD_SCRIPT = """
import sys, numpy as np, fusedgrad
d = dict(np.load(sys.argv[1]))
n = int(d.pop("nparams"))
params = [d["p%d" % k] for k in range(n)]
kw = dict(has_biases=True, num_layers={L}, dropout=0.0, train=True, bidirectional={bidi}, batch_first=False,
          batch_sizes=d["batch_sizes"])
fwd = fusedgrad.lstm_forward(d["input"], [d["h0"], d["c0"]], params, **kw)
dx, dhc, dp = fusedgrad.lstm_backward(d["grad_y"], d["grad_hy"], d["grad_cy"], d["input"], [d["h0"], d["c0"]],
                                      params, *fwd[3:], **kw)
res = list(fwd) + [dx] + list(dhc) + list(dp)
from fusedgrad import team
np.savez(sys.argv[2], team=np.array(len(team.last_team())), **{{"r%d" % k: r for k, r in enumerate(res)}})
"""


def test_bitwise_identical_with_1_and_2_threads(tmp_path):
    cfg = DET_CFG
    a = api_inputs(cfg, make_data(cfg), "float32")
    fwd = run_forward(cfg, a)  # also builds every kernel into the session cache
    here = flat_results(fwd, run_backward(cfg, a, fwd))
    args = {"input": a["input"], "h0": a["hx"][0], "c0": a["hx"][1], "grad_y": a["grad_y"],
            "grad_hy": a["grad_hy"], "grad_cy": a["grad_cy"], "batch_sizes": np.asarray(cfg.batch_sizes),
            "nparams": np.array(len(a["params"]))}
    args.update({f"p{k}": p for k, p in enumerate(a["params"])})
    np.savez(tmp_path / "in.npz", **args)
    script = _THREAD_SCRIPT.format(L=cfg.L, bidi=cfg.D == 2)
    got = {}
    for t in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=t, TVM_NUM_THREADS=t, FUSEDGRAD_CACHE=SESSION_CACHE)
        dst = tmp_path / f"out{t}.npz"
        proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "in.npz"), str(dst)],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        with np.load(dst) as z:
            got[t] = [z[f"r{k}"] for k in range(len(here))]
            assert int(z["team"]) == int(t), proc.stderr  # the thread count reached the team
    for n in range(len(here)):
        np.testing.assert_array_equal(bits(got["1"][n]), bits(got["2"][n]), err_msg=f"result {n}: 1 vs 2 threads")
        np.testing.assert_array_equal(bits(got["1"][n]), bits(here[n]), err_msg=f"result {n}: subprocess vs here")
