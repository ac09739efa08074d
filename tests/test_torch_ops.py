"""fusedgrad.torch._ops: the fusedgrad:: custom ops, thnn_fused_lstm_cell_backward and layer_norm.

Oracles:
- torch.library.opcheck (schema, autograd registration, fake tensor, AOT dispatch with dynamic
  shapes) on every op and variant;
- thnn_fused_lstm_cell_backward: the te_defs float64 reference on the inputs as rounded to the
  dtype, and torch autograd through the composite LSTM cell in float64 (PyTorch has no CPU kernel
  for _thnn_fused_lstm_cell_backward_impl to compare with);
- layer_norm: gradients of torch.nn.functional.layer_norm by autograd in float64 on the same
  (rounded) inputs.  Tolerances: float32 atol 1e-5 rtol 1e-5 (atol relative to the output's largest
  magnitude, per element sum of |terms| for dgamma/dbeta); float16 1e-2/1e-2, bfloat16 5e-2/5e-2
  (conftest.DTYPES);
- the LSTM ops: torch.nn.LSTM in float64 (forward and autograd), and fusedgrad.lstm_forward /
  lstm_backward bit for bit;
- torch.compile(fullgraph=True) and torch.export: the graphs hold the fusedgrad ops and give the
  eager results;
- zero-copy: the kernel is wrapped to record the data pointers it is called with.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import fusedgrad  # noqa: E402
from fusedgrad import runtime  # noqa: E402
from fusedgrad.torch import _ops  # noqa: E402
from conftest import (  # noqa: E402
    DTYPES,
    LSTM_ARGS,
    assert_close,
    bits,
    lstm_inputs,
    lstm_reference,
    reduction_scale,
    to_torch,
    torch_dtype,
)

MISSING = [
    pytest.param((), id="all grads"),
    pytest.param(("grad_hy",), id="grad_hy None"),
    pytest.param(("grad_cy",), id="grad_cy None"),
]


def cell_args(N, H, dtype="float32", missing=(), seed=0):
    inp = lstm_inputs(N, H, seed)
    args = [None if k in missing else to_torch(inp[k], dtype) for k in LSTM_ARGS]
    return inp, args


def ln_args(lead, D, dtype="float32", seed=0, eps=1e-5):
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(0.5 + 2.0 * rng.standard_normal(tuple(lead) + (D,))).to(torch_dtype(dtype))
    dy = torch.from_numpy(rng.standard_normal(x.shape)).to(x.dtype)
    var, mean = torch.var_mean(x.double(), dim=-1, correction=0)
    gamma = torch.from_numpy(1.0 + 0.1 * rng.standard_normal(D)).to(x.dtype)
    return x, dy, mean.to(x.dtype), var.to(x.dtype), gamma, eps


def lstm_case(L=1, bidirectional=False, bias=True, batch_first=False, T=4, B=3, I=5, H=4, lengths=None,
              with_hx=True, dtype="float32", seed=0):
    """(op args for fusedgrad::lstm_forward, float64 torch.nn.LSTM with the same weights, float64 input)."""
    torch.manual_seed(seed)
    D = 2 if bidirectional else 1
    ref = torch.nn.LSTM(I, H, num_layers=L, bias=bias, batch_first=batch_first, bidirectional=bidirectional)
    ref = ref.double()
    params = [p.detach().to(torch_dtype(dtype)) for p in ref._flat_weights]
    with torch.no_grad():  # the reference sees the weights as rounded to dtype
        for p, q in zip(ref._flat_weights, params):
            p.copy_(q.double())
    shape = (B, T, I) if batch_first else (T, B, I)
    x = torch.randn(shape, dtype=torch.float64).to(torch_dtype(dtype))
    hx = [torch.randn(L * D, B, H, dtype=torch.float64).to(torch_dtype(dtype)) for _ in range(2)] if with_hx else []
    bs = None
    if lengths is not None:
        lengths = np.asarray(lengths)
        bs = torch.tensor([(lengths > t).sum() for t in range(T)], dtype=torch.int64)
        x = x.reshape(T * B, I)
    return (x, hx, params, bias, L, bidirectional, batch_first, bs), ref


def backward_args(fargs, outs, with_grad_hy=True, seed=1):
    x, hx, params, bias, L, bidir, bf, bs = fargs
    g = torch.Generator().manual_seed(seed)
    grad_y = torch.randn(outs[0].shape, generator=g, dtype=torch.float64).to(x.dtype)
    grad_hy = torch.randn(outs[1].shape, generator=g, dtype=torch.float64).to(x.dtype) if with_grad_hy else None
    grad_cy = torch.randn(outs[2].shape, generator=g, dtype=torch.float64).to(x.dtype)
    return (grad_y, grad_hy, grad_cy, x, hx, params, *outs[3:], bias, L, bidir, bf, bs)


# --------------------------------------------------------------------------- opcheck


@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("missing", MISSING + [pytest.param(("grad_hy", "grad_cy"), id="both None")])
def test_opcheck_lstm_cell_backward(missing, has_bias):
    _, args = cell_args(3, 5, missing=missing)
    torch.library.opcheck(_ops.lstm_cell_backward_op, (*args, has_bias))


@pytest.mark.parametrize("lead", [(), (4,), (2, 3)], ids=["x [D]", "x [N, D]", "x [2, 3, D]"])
def test_opcheck_layer_norm_backward(lead):
    torch.library.opcheck(_ops.layer_norm_backward_op, ln_args(lead, 7))


LSTM_CASES = [
    pytest.param(dict(), id="1 layer"),
    pytest.param(dict(L=2, bidirectional=True, batch_first=True), id="2 layers bidirectional batch_first"),
    pytest.param(dict(bias=False, with_hx=False), id="no biases, hx []"),
    pytest.param(dict(bidirectional=True, lengths=[4, 3, 1]), id="bidirectional batch_sizes"),
]


@pytest.mark.parametrize("case", LSTM_CASES)
def test_opcheck_lstm_forward_backward(case):
    fargs, _ = lstm_case(**case)
    torch.library.opcheck(_ops.lstm_forward_op, fargs)
    outs = _ops.lstm_forward_op(*fargs)
    torch.library.opcheck(_ops.lstm_backward_op, backward_args(fargs, outs, with_grad_hy=not case.get("bias", True)))


def test_lstm_op_outputs_are_fresh():
    """No output shares memory with an input or another output (custom ops must not alias)."""
    fargs, _ = lstm_case(L=2, bidirectional=True)
    outs = _ops.lstm_forward_op(*fargs)
    bargs = backward_args(fargs, outs)
    bouts = _ops.lstm_backward_op(*bargs)
    tensors = lambda seq: [t for v in seq for t in (v if isinstance(v, (list, tuple)) else [v])  # noqa: E731
                           if isinstance(t, torch.Tensor)]
    for ins, res in ((tensors(fargs), list(outs)), (tensors(bargs), tensors(bouts))):
        spans = [(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) for t in ins + res]
        for k, t in enumerate(res):
            a, n = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
            for m, (b, nb) in enumerate(spans):
                if m != len(ins) + k:
                    assert not (a < b + nb and b < a + n), f"output {k} overlaps tensor {m}"


# --------------------------------------------------------------------------- thnn_fused_lstm_cell_backward


def torch_cell_autograd(inp, missing=(), has_bias=True):
    """grad_gates, grad_cx by autograd through the composite cell in float64: gates are pre-activation."""
    xg = torch.from_numpy(inp["x_gates"]).requires_grad_()
    cx = torch.from_numpy(inp["cx"]).requires_grad_()
    i, f, g, o = xg.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    loss = 0
    if "grad_hy" not in missing:
        loss = loss + (hy * torch.from_numpy(inp["grad_hy"])).sum()
    if "grad_cy" not in missing:
        loss = loss + (cy * torch.from_numpy(inp["grad_cy"])).sum()
    gg, gcx = torch.autograd.grad(loss, (xg, cx))
    return gg.numpy(), gcx.numpy(), (gg.sum(0).numpy() if has_bias else None)


@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("missing", MISSING)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_thnn_fused_lstm_cell_backward(dtype_tol, missing, has_bias):
    dtype, atol, rtol = dtype_tol
    N, H = 13, 37
    inp, args = cell_args(N, H, dtype, missing)
    out = _ops.thnn_fused_lstm_cell_backward(*args, has_bias)
    assert all(t.dtype == torch_dtype(dtype) for t in out if t is not None)
    ref = lstm_reference(inp, dtype, has_bias, missing)
    assert_close(out[0], ref["grad_gates"], atol, rtol, name="grad_gates")
    assert_close(out[1], ref["grad_cx"], atol, rtol, name="grad_cx")
    if has_bias:
        scale = reduction_scale(ref["grad_gates"])
        assert_close(out[2], ref["grad_bias"], atol, rtol, scale=scale, name="grad_bias")
    else:
        assert out[2] is None  # like torch's kernels: an undefined tensor
    if dtype == "float32":  # semantics independent of te_defs: autograd through the composite cell
        gg, gcx, gb = torch_cell_autograd(inp, missing, has_bias)
        assert_close(out[0], gg, 1e-5, 1e-5, name="grad_gates vs autograd")
        assert_close(out[1], gcx, 1e-5, 1e-5, name="grad_cx vs autograd")
        if has_bias:
            assert_close(out[2], gb, 1e-5, 1e-5, scale=reduction_scale(gg), name="grad_bias vs autograd")


def test_thnn_fused_lstm_cell_backward_no_grads():
    """torch returns three undefined tensors when neither gradient is defined; the op computes zeros."""
    _, args = cell_args(3, 4, missing=("grad_hy", "grad_cy"))
    assert _ops.thnn_fused_lstm_cell_backward(*args, True) == (None, None, None)
    gg, gcx, gb = _ops.lstm_cell_backward_op(*args, True)
    assert gg.shape == (3, 16) and gcx.shape == (3, 4) and gb.shape == (16,)
    assert not gg.any() and not gcx.any() and not gb.any()
    gg, gcx, gb = _ops.lstm_cell_backward_op(*args, False)
    assert gb.shape == (0,)


# --------------------------------------------------------------------------- layer_norm


def ln_grads_ref(x, normalized_shape, w, b, dy, eps):
    """float64 autograd of F.layer_norm on the same values."""
    x64 = x.detach().double().requires_grad_()
    w64 = None if w is None else w.detach().double().requires_grad_()
    b64 = None if b is None else b.detach().double().requires_grad_()
    y = F.layer_norm(x64, normalized_shape, w64, b64, eps)
    leaves = [t for t in (x64, w64, b64) if t is not None]
    grads = torch.autograd.grad(y, leaves, dy.double())
    return y.detach(), dict(zip([n for n, t in (("x", x64), ("w", w64), ("b", b64)) if t is not None], grads))


LN_CASES = [
    pytest.param(((4, 6), (6,), True, True), id="[4,6] over (6,)"),
    pytest.param(((2, 3, 4, 5), (4, 5), True, True), id="[2,3,4,5] over (4,5)"),
    pytest.param(((3, 33), (33,), False, False), id="no weight no bias"),
    pytest.param(((2, 5, 8), (8,), True, False), id="weight only"),
    pytest.param(((2, 5, 8), (5, 8), False, True), id="bias only over (5,8)"),
    # variance ~ eps: what the kernel gets as var must be the variance itself, eps not in it
    pytest.param(((6, 16), (16,), True, True, 0.0, 3e-3), id="variance ~ eps"),
]


@pytest.mark.parametrize("case", LN_CASES)
@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_layer_norm_matches_torch(dtype_tol, case):
    dtype, atol, rtol = dtype_tol
    shape, ns, has_w, has_b, loc, scale = case + (0.5, 2.0)[len(case) - 4:]
    g = torch.Generator().manual_seed(0)
    td = torch_dtype(dtype)
    x = (loc + scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(td).requires_grad_()
    w = (1.0 + 0.1 * torch.randn(ns, generator=g, dtype=torch.float64)).to(td).requires_grad_() if has_w else None
    b = (0.1 * torch.randn(ns, generator=g, dtype=torch.float64)).to(td).requires_grad_() if has_b else None
    dy = torch.randn(shape, generator=g, dtype=torch.float64).to(td)
    eps = 1e-5
    y = _ops.layer_norm(x, ns, w, b, eps)
    assert y.dtype == td and y.shape == x.shape
    # the forward is torch's own
    torch.testing.assert_close(y, F.layer_norm(x, ns, w, b, eps), rtol=0, atol=0)
    y.backward(dy)
    y_ref, ref = ln_grads_ref(x, ns, w, b, dy, eps)
    assert_close(x.grad, ref["x"].numpy(), atol, rtol, name="dx")
    rows = lambda t: t.reshape(-1, *ns).numpy()  # noqa: E731
    xhat = ((y_ref - (b.detach().double() if has_b else 0)) / (w.detach().double() if has_w else 1)).detach()
    if has_w:
        assert w.grad.shape == w.shape and w.grad.dtype == td
        scale = reduction_scale(rows(dy.double() * xhat))
        assert_close(w.grad, ref["w"].numpy(), atol, rtol, scale=scale, name="dweight")
    if has_b:
        assert b.grad.shape == b.shape and b.grad.dtype == td
        assert_close(b.grad, ref["b"].numpy(), atol, rtol, scale=reduction_scale(rows(dy.double())), name="dbias")


def test_layer_norm_non_contiguous_input():
    """A transposed x (inner stride != 1) gives torch's gradients; so does a transposed dy."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(16, 5, generator=g)
    x = base.t().requires_grad_()  # [5, 16], strides (1, 5)
    w = torch.randn(16, generator=g).requires_grad_()
    dy = torch.randn(16, 5, generator=g).t()
    _ops.layer_norm(x, (16,), w, None).backward(dy)
    _, ref = ln_grads_ref(x, (16,), w, None, dy, 1e-5)
    assert_close(x.grad, ref["x"].numpy(), 1e-5, 1e-5, name="dx")
    assert_close(w.grad, ref["w"].numpy(), 1e-5, 1e-5, scale=16.0, name="dweight")


def test_layer_norm_backward_runs_the_kernel(kernel_calls):
    """The backward is fusedgrad's layer_norm_backward kernel, called once, on the saved x in place."""
    x = torch.randn(3, 8, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    y = _ops.layer_norm(x, 8, w)
    assert kernel_calls == []
    y.sum().backward()
    assert [(op, ptrs[0]) for op, ptrs in kernel_calls] == [("layer_norm_backward", x.data_ptr())]


def test_layer_norm_rejects_bad_shape():
    with pytest.raises(ValueError, match="normalized_shape"):
        _ops.layer_norm(torch.randn(3, 4), (5,))
    with pytest.raises(ValueError, match="weight"):
        _ops.layer_norm(torch.randn(3, 4), (4,), torch.ones(3))


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32], ids=["float64", "int32"])
def test_layer_norm_refuses_a_dtype_the_backward_cannot_take_in_the_forward(dtype):
    """The forward raises the backward kernel's own error, before torch's forward runs."""
    x = torch.ones(3, 4, dtype=dtype)
    with pytest.raises(TypeError) as in_forward:
        _ops.layer_norm(x, 4)
    with pytest.raises(TypeError) as in_backward:
        _ops.layer_norm_backward_op(x, x, x[:, 0], x[:, 0], x[0], 1e-5)
    assert str(in_forward.value) == str(in_backward.value)
    assert str(in_forward.value).startswith("x: expected dtype float32, float16 or bfloat16")


def test_layer_norm_refuses_a_weight_of_another_dtype_in_the_forward():
    x = torch.randn(3, 4, dtype=torch.float16, requires_grad=True)
    with pytest.raises(TypeError, match=r"^weight: expected dtype float16 \(the dtype of x\), got float32$"):
        _ops.layer_norm(x, 4, weight=torch.ones(4, requires_grad=True))
    b = torch.zeros(4, requires_grad=True)  # the bias never reaches the kernel: any dtype torch takes
    _ops.layer_norm(x, 4, bias=b).float().sum().backward()
    assert b.grad.dtype == torch.float32 and bool((b.grad == x.shape[0]).all())  # dbeta = Σ_rows dy


# --------------------------------------------------------------------------- full LSTM ops


def torch_lstm_ref(fargs, ref, grads):
    """float64 nn.LSTM forward + autograd for the op's arguments (fixed-length cases)."""
    x, hx, params, bias, L, bidir, bf, bs = fargs
    x64 = x.double().requires_grad_()
    h0 = [h.double().requires_grad_() for h in hx] if hx else None
    out, (hy, cy) = ref(x64, tuple(h0) if h0 else None)
    grad_y, grad_hy, grad_cy = (None if t is None else t.double() for t in grads)
    loss = (out * grad_y).sum() + (cy * grad_cy).sum() + ((hy * grad_hy).sum() if grad_hy is not None else 0)
    leaves = [x64] + (h0 or []) + list(ref._flat_weights)
    g = torch.autograd.grad(loss, leaves)
    return (out, hy, cy), g


@pytest.mark.parametrize("dtype,tol", [("float32", (1e-5, 1e-4)), ("float16", (5e-3, 5e-3)),
                                       ("bfloat16", (2e-2, 2e-2))])
def test_lstm_ops_match_torch(dtype, tol):
    atol, rtol = tol
    fargs, ref = lstm_case(L=2, bidirectional=True, batch_first=True, dtype=dtype)
    outs = _ops.lstm_forward_op(*fargs)
    bargs = backward_args(fargs, outs)
    dx, dh0, dc0, dparams = _ops.lstm_backward_op(*bargs)
    (out, hy, cy), g = torch_lstm_ref(fargs, ref, bargs[:3])
    for name, got, exp in (("output", outs[0], out), ("hy", outs[1], hy), ("cy", outs[2], cy)):
        assert got.dtype == torch_dtype(dtype)
        assert_close(got, exp.detach().numpy(), atol, rtol, name=name)
    for name, got, exp in zip(["dx", "dh0", "dc0"] + [f"dparams[{k}]" for k in range(len(dparams))],
                              [dx, dh0, dc0, *dparams], g):
        assert got.dtype == torch_dtype(dtype) and got.shape == exp.shape, name
        assert_close(got, exp.numpy(), atol, rtol, name=name)


@pytest.mark.parametrize("case", LSTM_CASES)
def test_lstm_ops_equal_api(case):
    """The ops are fusedgrad.lstm_forward / lstm_backward, bit for bit (batch_sizes as a tensor)."""
    fargs, _ = lstm_case(**case)
    x, hx, params, bias, L, bidir, bf, bs = fargs
    outs = _ops.lstm_forward_op(*fargs)
    api = fusedgrad.lstm_forward(x, hx, params, bias, L, 0.0, True, bidir, bf, None if bs is None else bs.tolist())
    for a, b in zip(outs, api):
        np.testing.assert_array_equal(bits(a), bits(b))
    bargs = backward_args(fargs, outs)
    got = _ops.lstm_backward_op(*bargs)
    exp = fusedgrad.lstm_backward(*bargs[:13], bias, L, 0.0, True, bidir, bf, None if bs is None else bs.tolist())
    for a, b in zip([got[0], got[1], got[2], *got[3]], [exp[0], *exp[1], *exp[2]]):
        np.testing.assert_array_equal(bits(a), bits(b))


# --------------------------------------------------------------------------- torch.compile / torch.export


def fusedgrad_ops_in(gm) -> set[str]:
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "fusedgrad" in str(n.target)}


# the recording backend's compiled functions take unboxed arguments; torch warns about it, harmlessly
@pytest.mark.filterwarnings("ignore:Your compiler for AOTAutograd is returning a function")
def test_compile_fullgraph():
    from torch._dynamo.testing import AotEagerAndRecordGraphs

    torch._dynamo.reset()
    backend = AotEagerAndRecordGraphs()

    def step(grad_hy, cx, cy, ws, x, w, b):
        gg, gcx, gb = _ops.thnn_fused_lstm_cell_backward(grad_hy, None, cx, cy, ws, True)
        y = _ops.layer_norm(x, (x.shape[-1],), w, b)
        return gg * 2, gcx, gb, y

    compiled = torch.compile(step, backend=backend, fullgraph=True)
    _, args = cell_args(5, 6)
    x = torch.randn(4, 10, requires_grad=True)
    w = torch.randn(10, requires_grad=True)
    b = torch.randn(10, requires_grad=True)
    got = compiled(args[0], *args[2:], x, w, b)
    exp = step(args[0], *args[2:], x.detach(), w.detach(), b.detach())
    for a, e in zip(got, exp):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    got[3].backward(torch.ones_like(got[3]))
    assert {"fusedgrad.lstm_cell_backward.default"} <= fusedgrad_ops_in(backend.fw_graphs[0])
    assert "fusedgrad.layer_norm_backward.default" in set().union(*map(fusedgrad_ops_in, backend.bw_graphs))
    xr = x.detach().requires_grad_()
    wr, br = w.detach().requires_grad_(), b.detach().requires_grad_()
    F.layer_norm(xr, (10,), wr, br).backward(torch.ones(4, 10))
    for a, e in ((x.grad, xr.grad), (w.grad, wr.grad), (b.grad, br.grad)):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_compile_lstm_ops_fullgraph():
    torch._dynamo.reset()
    fargs, _ = lstm_case(L=2, bidirectional=True)

    def fwd_bwd(x, h0, c0, params):
        outs = _ops.lstm_forward_op(x, [h0, c0], params, True, 2, True, False, None)
        grad_y = torch.ones_like(outs[0])
        return outs[0], _ops.lstm_backward_op(grad_y, None, None, x, [h0, c0], params, *outs[3:], True, 2, True,
                                               False, None)

    compiled = torch.compile(fwd_bwd, backend="aot_eager", fullgraph=True)
    x, hx, params = fargs[:3]
    got = compiled(x, *hx, params)
    exp = fwd_bwd(x, *hx, params)
    torch.testing.assert_close(got[0], exp[0], rtol=0, atol=0)
    for a, e in zip([*got[1][:3], *got[1][3]], [*exp[1][:3], *exp[1][3]]):
        torch.testing.assert_close(a, e, rtol=0, atol=0)


class _Fused(torch.nn.Module):
    def forward(self, grad_hy, grad_cy, cx, cy, ws, x, dy, mean, var, gamma, inp, h0, c0, w_ih, w_hh):
        gg, gcx, gb = torch.ops.fusedgrad.lstm_cell_backward(grad_hy, grad_cy, cx, cy, ws, True)
        dx, dgamma, dbeta = torch.ops.fusedgrad.layer_norm_backward(x, dy, mean, var, gamma, 1e-5)
        outs = torch.ops.fusedgrad.lstm_forward(inp, [h0, c0], [w_ih, w_hh], False, 1, False, False, None)
        return gg, gcx, gb, dx, dgamma, dbeta, outs[0], outs[1]


def test_export():
    _, cargs = cell_args(4, 3)
    largs = ln_args((2, 3), 5)[:5]
    fargs, _ = lstm_case(bias=False)
    args = (*cargs, *largs, fargs[0], *fargs[1], *fargs[2])
    ep = torch.export.export(_Fused(), args)
    assert fusedgrad_ops_in(ep.graph_module) == {"fusedgrad.lstm_cell_backward.default",
                                                 "fusedgrad.layer_norm_backward.default",
                                                 "fusedgrad.lstm_forward.default"}
    for a, e in zip(ep.module()(*args), _Fused()(*args)):
        torch.testing.assert_close(a, e, rtol=0, atol=0)


# --------------------------------------------------------------------------- zero-copy, devices


@pytest.fixture
def kernel_calls(monkeypatch):
    """Records, for every kernel call, (op name, data pointers of its tensor arguments)."""
    calls = []
    real_artifact = runtime.artifact

    class Spy:
        def __init__(self, art):
            self.art = art

        def kernel(self, variant):
            k, op = self.art.kernel(variant), self.op

            def call(*args):
                calls.append((op, [a.data_ptr() for a in args if isinstance(a, torch.Tensor)]))
                return k(*args)

            return call

    def artifact(op_name, *a, **kw):
        spy = Spy(real_artifact(op_name, *a, **kw))
        spy.op = op_name
        return spy

    monkeypatch.setattr(runtime, "artifact", artifact)
    return calls


def test_zero_copy_contiguous_float32(kernel_calls):
    """What reaches the kernel is the caller's memory: same data pointers, through the custom op."""
    x, dy, mean, var, gamma, eps = ln_args((6,), 16)
    dx, dgamma, dbeta = torch.ops.fusedgrad.layer_norm_backward(x, dy, mean, var, gamma, eps)
    assert len(kernel_calls) == 1
    op, ptrs = kernel_calls[0]
    assert op == "layer_norm_backward"
    for t in (x, dy, mean, var, gamma):
        assert t.data_ptr() in ptrs
    assert ptrs[:5] == [t.data_ptr() for t in (x, dy, mean, var, gamma)]
    assert ptrs[5:] == [t.data_ptr() for t in (dx, dgamma, dbeta)]  # outputs written in place
    kernel_calls.clear()
    _, args = cell_args(5, 8)
    out = _ops.thnn_fused_lstm_cell_backward(*args, True)
    assert kernel_calls == [("lstm_cell_backward", [a.data_ptr() for a in args] + [o.data_ptr() for o in out])]


def test_row_strided_views_zero_copy_and_correct(kernel_calls):
    """Views with a row stride (slices of wider tensors) are read in place and give correct results."""
    inp, _ = cell_args(7, 6)
    wide = {k: to_torch(np.concatenate([inp[k], np.full_like(inp[k], np.nan)], axis=1), "float32")
            for k in LSTM_ARGS}
    args = [wide[k][:, :inp[k].shape[1]] for k in LSTM_ARGS]
    assert not args[0].is_contiguous()
    out = _ops.thnn_fused_lstm_cell_backward(*args, True)
    assert kernel_calls[0][1][:5] == [a.data_ptr() for a in args]
    ref = lstm_reference(inp, "float32")
    assert_close(out[0], ref["grad_gates"], 1e-5, 1e-5, name="grad_gates")
    assert_close(out[1], ref["grad_cx"], 1e-5, 1e-5, name="grad_cx")
    assert_close(out[2], ref["grad_bias"], 1e-5, 1e-5, scale=reduction_scale(ref["grad_gates"]), name="grad_bias")


@pytest.mark.parametrize("dtype_tol", DTYPES)
def test_transposed_inputs_correct(dtype_tol):
    """Inputs whose inner stride is not 1 are copied first; the results are the same as contiguous."""
    dtype, atol, rtol = dtype_tol
    inp, args = cell_args(6, 5, dtype)
    tr = [a.t().contiguous().t() for a in args]
    assert tr[0].stride() == (1, 6)
    out = _ops.thnn_fused_lstm_cell_backward(*tr, True)
    exp = _ops.thnn_fused_lstm_cell_backward(*args, True)
    for a, e in zip(out, exp):
        np.testing.assert_array_equal(bits(a), bits(e))
    x, dy, mean, var, gamma, eps = ln_args((9,), 12, dtype)
    xt, dyt = x.t().contiguous().t(), dy.t().contiguous().t()
    for a, e in zip(_ops.layer_norm_backward_op(xt, dyt, mean, var, gamma, eps),
                    _ops.layer_norm_backward_op(x, dy, mean, var, gamma, eps)):
        np.testing.assert_array_equal(bits(a), bits(e))


def test_device_checks():
    """Every op takes CPU or CUDA tensors (one device; the LSTM's batch_sizes may stay on the CPU).
    The real kernels and the fake implementations (tracing) name the argument."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    _, args = cell_args(3, 4)
    meta = [a.to("meta") for a in args]
    with pytest.raises(ValueError, match=r"grad_hy: expected a CPU or CUDA tensor, got a tensor on device meta"):
        _ops._lstm_cell_backward_impl(*meta, True)
    with pytest.raises(ValueError, match=r"gamma: expected a CPU or CUDA tensor"):
        _ops._layer_norm_backward_impl(*ln_args((2,), 4)[:4], torch.ones(4, device="meta"), 1e-5)
    # meta tensors go to the fake implementation: shapes only
    gg, gcx, gb = _ops.lstm_cell_backward_op(*meta, False)
    assert gg.device.type == "meta" and gg.shape == (3, 16) and gcx.shape == (3, 4) and gb.shape == (0,)
    fargs, _ = lstm_case()
    with FakeTensorMode(allow_non_fake_inputs=True):
        cuda = [torch.empty(a.shape, device="cuda") for a in args]
        # a CUDA program traces: outputs on the inputs' device
        gg, gcx, gb = _ops.lstm_cell_backward_op(*cuda, True)
        assert gg.device.type == "cuda" and gg.shape == (3, 16) and gb.shape == (16,)
        x, dy, mean, var, gamma, eps = ln_args((2,), 4)
        dx, _, _ = _ops.layer_norm_backward_op(*(torch.empty(t.shape, device="cuda") for t in
                                                 (x, dy, mean, var, gamma)), eps)
        assert dx.device.type == "cuda"
        with pytest.raises(ValueError, match=r"cx: expected a tensor on cpu \(the device of grad_hy\), got cuda"):
            _ops.thnn_fused_lstm_cell_backward(args[0], args[1], cuda[2], args[3], args[4], True)
        with pytest.raises(ValueError, match=r"params\[1\]: expected a tensor on cpu \(the device of input\), "
                                             r"got cuda"):
            params = list(fargs[2])
            params[1] = torch.empty(params[1].shape, device="cuda")
            _ops.lstm_forward_op(fargs[0], fargs[1], params, *fargs[3:])
        # the full LSTM on CUDA traces, batch_sizes staying on the CPU as a PackedSequence keeps it
        on = [torch.empty(a.shape, device="cuda") for a in fargs[2]]
        x = torch.empty((fargs[0].shape[0] * fargs[0].shape[1], fargs[0].shape[2]), device="cuda")
        bs = torch.full((fargs[0].shape[0],), fargs[0].shape[1], dtype=torch.int64)
        outs = _ops.lstm_forward_op(x, [], on, *fargs[3:-1], bs)
        assert all(o.device.type == "cuda" for o in outs)
        back = _ops.lstm_backward_op(torch.empty(outs[0].shape, device="cuda"), None, None, x, [], on, *outs[3:],
                                     *fargs[3:-1], bs)
        assert back[0].device.type == "cuda" and all(p.device.type == "cuda" for p in back[3])


def test_requires_grad_inputs_to_the_ops():
    """The backward ops take tensors that require grad (as autograd's saved tensors may)."""
    inp, args = cell_args(3, 4)
    out = _ops.thnn_fused_lstm_cell_backward(*[a.requires_grad_() for a in args], True)
    assert_close(out[0].detach(), lstm_reference(inp, "float32")["grad_gates"], 1e-5, 1e-5, name="grad_gates")
