"""fusedgrad.torch.lstm.LSTM against torch.nn.LSTM with the same state_dict.

Oracle: torch.nn.LSTM (float32, CPU) loaded with the same weights.  Loss is
sum(output * R) + sum(h_n * Rh) + sum(c_n * Rc) with random R, Rh, Rc, so every output
carries a random gradient; compared: output, h_n, c_n and the gradients of the input,
h_0, c_0 and every parameter.

Tolerances (|err| <= atol * max(1, max|expected|) + rtol * |expected|):
- float32: rtol 1e-4, atol 1e-5 (both sides compute in float32 with different summation
  orders; differences here are ~1e-6).
- float16 / bfloat16: fusedgrad computes in float32 and rounds once on the way out; the
  oracle is nn.LSTM in float32 on the *rounded* weights and inputs, its results rounded
  to the dtype.  Bounds: float16 atol = rtol = 5e-3 (eps 2^-11), bfloat16 2e-2 (eps 2^-8),
  i.e. a few units of the dtype's last place.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402

from fusedgrad.torch.lstm import LSTM  # noqa: E402

TOL = {torch.float32: (1e-5, 1e-4), torch.float16: (5e-3, 5e-3), torch.bfloat16: (2e-2, 2e-2)}
I, H, T, B = 5, 7, 6, 4


def assert_close(got, want, dtype, what):
    atol, rtol = TOL[dtype]
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    g, w = got.detach().double(), want.detach().double()
    bound = atol * max(1.0, w.abs().max().item() if w.numel() else 0.0) + rtol * w.abs()
    err = (g - w).abs()
    assert bool((err <= bound).all()), f"{what}: max err {err.max().item():.3g} (bound {bound.max().item():.3g})"


def pair(seed=0, dtype=torch.float32, **kw):
    """(fusedgrad LSTM, nn.LSTM) with the same weights (those of the fusedgrad module)."""
    torch.manual_seed(seed)
    ours = LSTM(I, H, **kw)
    ref = nn.LSTM(I, H, **kw)
    ref.load_state_dict(ours.state_dict())
    return ours.to(dtype), ref.to(dtype)


def run(module, x, hx, weights):
    """Forward + backward of the random-projection loss; returns outputs and every gradient."""
    x = x.detach().clone().requires_grad_(True)
    hx = None if hx is None else tuple(t.detach().clone().requires_grad_(True) for t in hx)
    for p in module.parameters():
        p.grad = None
    out, (hn, cn) = module(x, hx)
    Ry, Rh, Rc = weights
    loss = (out.float() * Ry).sum() + (hn.float() * Rh).sum() + (cn.float() * Rc).sum()
    loss.backward()
    res = {"output": out, "h_n": hn, "c_n": cn, "d_input": x.grad}
    if hx is not None:
        res["d_h0"], res["d_c0"] = hx[0].grad, hx[1].grad
    for name, p in module.named_parameters():
        res["d_" + name] = p.grad
    return res


def compare(ours, ref, x, hx, dtype=torch.float32, seed=1):
    torch.manual_seed(seed)
    with torch.no_grad():
        out, (hn, cn) = ref(x, hx)
    weights = (torch.randn(out.shape), torch.randn(hn.shape), torch.randn(cn.shape))
    got, want = run(ours, x, hx, weights), run(ref, x, hx, weights)
    assert got.keys() == want.keys()
    assert len([k for k in got if k.startswith("d_weight")]) == len(list(ref.parameters())) // (2 if ref.bias else 1)
    for k in want:
        assert got[k] is not None, f"{k}: no gradient"
        assert_close(got[k], want[k], dtype, k)
    return got


CASES = [
    dict(num_layers=1),
    dict(num_layers=2),
    dict(num_layers=1, bidirectional=True),
    dict(num_layers=2, bidirectional=True),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(num_layers=1, batch_first=True),
    dict(num_layers=2, bias=False),
    dict(num_layers=1, bidirectional=True, bias=False, batch_first=True),
]


@pytest.mark.parametrize("with_hx", [False, True], ids=["hx=None", "hx"])
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_matches_nn_lstm(kw, with_hx):
    ours, ref = pair(**kw)
    D, L = (2 if kw.get("bidirectional") else 1), kw["num_layers"]
    torch.manual_seed(2)
    x = torch.randn((B, T, I) if kw.get("batch_first") else (T, B, I))
    hx = (torch.randn(D * L, B, H), torch.randn(D * L, B, H)) if with_hx else None
    compare(ours, ref, x, hx)


@pytest.mark.parametrize("with_hx", [False, True], ids=["hx=None", "hx"])
@pytest.mark.parametrize("kw", [dict(num_layers=1), dict(num_layers=2, bidirectional=True, batch_first=True)],
                         ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_batch_of_zero_sequences(kw, with_hx):
    """B = 0: empty output and states, zero parameter gradients, as nn.LSTM; without grad too."""
    ours, ref = pair(**kw)
    D, L = (2 if kw.get("bidirectional") else 1), kw["num_layers"]
    x = torch.zeros((0, T, I) if kw.get("batch_first") else (T, 0, I))
    hx = (torch.zeros(D * L, 0, H), torch.zeros(D * L, 0, H)) if with_hx else None
    got = compare(ours, ref, x, hx)
    assert got["output"].shape == x.shape[:2] + (D * H,) and got["h_n"].shape == (D * L, 0, H)
    with torch.no_grad():
        out, (hn, cn) = ours(x, hx)
        want, (hn_want, cn_want) = ref(x, hx)
    assert out.shape == want.shape and hn.shape == hn_want.shape and cn.shape == cn_want.shape


@pytest.mark.parametrize("with_hx", [False, True], ids=["hx=None", "hx"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_unbatched(batch_first, with_hx):
    ours, ref = pair(num_layers=2, bidirectional=True, batch_first=batch_first)
    torch.manual_seed(3)
    x = torch.randn(T, I)
    hx = (torch.randn(4, H), torch.randn(4, H)) if with_hx else None
    got = compare(ours, ref, x, hx)
    assert got["output"].shape == (T, 2 * H) and got["h_n"].shape == (4, H)


def run_packed(module, x, lengths, enforce_sorted, hx, weights):
    x = x.detach().clone().requires_grad_(True)
    hx = None if hx is None else tuple(t.detach().clone().requires_grad_(True) for t in hx)
    for p in module.parameters():
        p.grad = None
    packed = pack_padded_sequence(x, lengths, enforce_sorted=enforce_sorted)
    out, (hn, cn) = module(packed, hx)
    assert type(out) is type(packed)
    padded, out_lengths = pad_packed_sequence(out, total_length=x.shape[0])
    assert out_lengths.tolist() == list(lengths)
    Ry, Rh, Rc = weights
    loss = (padded * Ry).sum() + (hn * Rh).sum() + (cn * Rc).sum()
    loss.backward()
    res = {"packed_data": out.data, "output": padded, "h_n": hn, "c_n": cn, "d_input": x.grad}
    if hx is not None:
        res["d_h0"], res["d_c0"] = hx[0].grad, hx[1].grad
    for name, p in module.named_parameters():
        res["d_" + name] = p.grad
    return res, out


@pytest.mark.parametrize("with_hx", [False, True], ids=["hx=None", "hx"])
@pytest.mark.parametrize("enforce_sorted", [True, False], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_packed_sequence(bidirectional, enforce_sorted, with_hx):
    ours, ref = pair(num_layers=2, bidirectional=bidirectional)
    D = 2 if bidirectional else 1
    lengths = [6, 4, 4, 1] if enforce_sorted else [4, 6, 1, 4]
    torch.manual_seed(4)
    x = torch.randn(T, B, I)
    hx = (torch.randn(2 * D, B, H), torch.randn(2 * D, B, H)) if with_hx else None
    weights = (torch.randn(T, B, D * H), torch.randn(2 * D, B, H), torch.randn(2 * D, B, H))
    got, got_packed = run_packed(ours, x, lengths, enforce_sorted, hx, weights)
    want, want_packed = run_packed(ref, x, lengths, enforce_sorted, hx, weights)
    assert torch.equal(got_packed.batch_sizes, want_packed.batch_sizes)
    for a, b in ((got_packed.sorted_indices, want_packed.sorted_indices),
                 (got_packed.unsorted_indices, want_packed.unsorted_indices)):
        assert (a is None and b is None) or torch.equal(a, b)
    for k in want:
        assert got[k] is not None, f"{k}: no gradient"
        assert_close(got[k], want[k], torch.float32, k)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_dtypes(dtype):
    ours, _ = pair(num_layers=2, bidirectional=True, dtype=dtype)
    ref = nn.LSTM(I, H, num_layers=2, bidirectional=True)
    ref.load_state_dict({k: v.float() for k, v in ours.state_dict().items()})  # float32 on the rounded weights
    torch.manual_seed(5)
    x = torch.randn(T, B, I).to(dtype)
    hx = (torch.randn(4, B, H).to(dtype), torch.randn(4, B, H).to(dtype))
    weights = (torch.randn(T, B, 2 * H), torch.randn(4, B, H), torch.randn(4, B, H))
    got = run(ours, x, hx, weights)
    want = run(ref, x.float(), tuple(t.float() for t in hx), weights)
    for k in want:
        assert got[k].dtype == dtype, k
        assert_close(got[k], want[k].to(dtype), dtype, k)


def test_no_grad_and_inference_paths():
    ours, ref = pair(num_layers=2, bidirectional=True)
    x = torch.randn(T, B, I)
    with torch.no_grad():
        a, (ah, ac) = ours(x)
        b, (bh, bc) = ref(x)
    assert not a.requires_grad and a.grad_fn is None
    for g, w, k in ((a, b, "output"), (ah, bh, "h_n"), (ac, bc, "c_n")):
        assert_close(g, w, torch.float32, k)
    # grad enabled, but only the input needs it: parameters frozen
    for p in ours.parameters():
        p.requires_grad_(False)
    xg = x.clone().requires_grad_(True)
    out, _ = ours(xg)
    out.sum().backward()
    xr = x.clone().requires_grad_(True)
    ref(xr)[0].sum().backward()
    assert_close(xg.grad, xr.grad, torch.float32, "d_input")
    # only h_n used: the output's gradient is None inside the Function (treated as zeros)
    for p in ours.parameters():
        p.requires_grad_(True)
    xg = x.clone().requires_grad_(True)
    ours(xg)[1][0].sum().backward()
    xr = x.clone().requires_grad_(True)
    ref(xr)[1][0].sum().backward()
    assert_close(xg.grad, xr.grad, torch.float32, "d_input (h_n only)")


def test_same_init_and_state_dict_both_ways():
    kw = dict(num_layers=2, bidirectional=True)
    torch.manual_seed(7)
    ours = LSTM(I, H, **kw)
    torch.manual_seed(7)
    ref = nn.LSTM(I, H, **kw)
    sd_o, sd_r = ours.state_dict(), ref.state_dict()
    assert list(sd_o) == list(sd_r)  # same names in the same order
    for k in sd_r:
        assert sd_o[k].shape == sd_r[k].shape and torch.equal(sd_o[k], sd_r[k]), k
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    # nn.LSTM -> ours and ours -> nn.LSTM, strict
    torch.manual_seed(8)
    other = nn.LSTM(I, H, **kw)
    ours.load_state_dict(other.state_dict())
    assert all(torch.equal(ours.state_dict()[k], v) for k, v in other.state_dict().items())
    torch.manual_seed(9)
    mine = LSTM(I, H, **kw)
    other.load_state_dict(mine.state_dict())
    assert all(torch.equal(other.state_dict()[k], v) for k, v in mine.state_dict().items())
    assert repr(ours) == repr(ref)


def test_constructor_errors():
    with pytest.raises(ValueError, match="dropout"):
        LSTM(I, H, num_layers=2, dropout=0.5)
    with pytest.raises(ValueError, match="proj_size"):
        LSTM(I, H, proj_size=3)
    with pytest.raises(ValueError, match=r"device: expected a CPU or CUDA device, got 'meta'"):
        LSTM(I, H, device="meta")
    with pytest.raises(ValueError, match="dtype"):
        LSTM(I, H, dtype=torch.float64)
    with pytest.raises(ValueError, match="hidden_size"):
        LSTM(I, 0)
    LSTM(I, H, dropout=0.0, proj_size=0, device="cpu", dtype=torch.float32)  # the defaults, spelled out


def test_forward_errors():
    m = LSTM(I, H)
    with pytest.raises(RuntimeError, match="input_size"):
        m(torch.randn(T, B, I + 1))
    with pytest.raises(RuntimeError, match="h_0"):
        m(torch.randn(T, B, I), (torch.randn(1, B + 1, H), torch.randn(1, B + 1, H)))
    with pytest.raises(TypeError, match="dtype"):
        m(torch.randn(T, B, I, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="input: expected a CPU or CUDA tensor, got a tensor on meta"):
        m(torch.randn(T, B, I, device="meta"))
    with pytest.raises(RuntimeError, match=r"hx: expected a tensor on cpu \(the input's device\), got meta"):
        m(torch.randn(T, B, I), (torch.randn(1, B, H), torch.randn(1, B, H, device="meta")))
    with pytest.raises(RuntimeError, match=r"weight_ih_l0: expected a tensor on cpu \(the input's device\), got meta"):
        LSTM(I, H).to("meta")(torch.randn(T, B, I))


def test_example_training_curves_agree(monkeypatch):
    """The example's fusedgrad curve comes from fusedgrad's LSTM (one forward and one backward through
    its kernels per step, the input gradient included: the embedding learns) and agrees with nn.LSTM's."""
    import importlib.util
    from pathlib import Path

    import fusedgrad.lstm as core

    path = Path(__file__).resolve().parent.parent / "examples" / "train_lstm.py"
    spec = importlib.util.spec_from_file_location("train_lstm_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    main = example.main

    calls = []
    real_forward, real_backward = core.lstm_forward, core.backward
    monkeypatch.setattr(core, "lstm_forward", lambda *a, **k: calls.append("forward") or real_forward(*a, **k))
    monkeypatch.setattr(core, "backward",
                        lambda *a, **k: calls.append(("backward", k.get("need_dx"))) or real_backward(*a, **k))
    ours, ref = main(steps=6, verbose=False)
    assert calls == ["forward", ("backward", True)] * 6
    assert len(ours) == len(ref) == 6
    assert ours[-1] < ours[0]  # it trains
    for a, b in zip(ours, ref):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(b))


def test_compiles_without_graph_breaks_and_matches_eager():
    """The module's recurrence is one custom op each way: torch.compile(fullgraph=True) traces it whole."""
    torch.manual_seed(0)
    model = LSTM(5, 8, num_layers=2, bidirectional=True)
    x = torch.randn(4, 3, 5, requires_grad=True)
    r = torch.randn(4, 3, 16)

    def loss_of(m, inp):
        out, (h, c) = m(inp)
        return (out * r).sum() + h.sum() + c.sum()

    eager = loss_of(model, x)
    g_eager = torch.autograd.grad(eager, [x, *model.parameters()])
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = loss_of(compiled, x)
    g_got = torch.autograd.grad(got, [x, *model.parameters()])
    torch.testing.assert_close(got, eager, rtol=0, atol=0)
    for a, b in zip(g_got, g_eager):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_input_without_grad_skips_dx_and_keeps_parameter_gradients(monkeypatch):
    """Training (input needs no gradient): dx is not computed, every parameter gradient still matches."""
    import fusedgrad.lstm as core

    torch.manual_seed(1)
    ref = nn.LSTM(6, 32, num_layers=2, bidirectional=True)
    ours = LSTM(6, 32, num_layers=2, bidirectional=True)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(5, 3, 6)  # requires_grad False
    r = torch.randn(5, 3, 64)
    asked = []
    real = core.backward
    monkeypatch.setattr(core, "backward", lambda *a, **k: asked.append(k.get("need_dx", True)) or real(*a, **k))
    for m in (ref, ours):
        out, _ = m(x)
        (out * r).sum().backward()
    assert asked == [False]
    for (name, a), (_, b) in zip(ours.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_backward_without_dx_gives_the_same_parameter_bits():
    import fusedgrad
    import fusedgrad.lstm as core

    torch.manual_seed(2)
    ref = nn.LSTM(4, 32, num_layers=2)
    params = [p.detach() for p in ref._flat_weights]
    x, gy = torch.randn(6, 3, 4), torch.randn(6, 3, 32)
    out = fusedgrad.lstm_forward(x, [], params, True, 2, 0.0, True, False)
    full = core.backward(gy, None, None, x, [], params, *out[3:], True, 2, 0.0, True, False)
    part = core.backward(gy, None, None, x, [], params, *out[3:], True, 2, 0.0, True, False, need_dx=False)
    assert part[0] is None and full[0].shape == x.shape
    for a, b in zip(full[2], part[2]):
        assert torch.equal(a, b)
