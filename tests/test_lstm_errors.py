"""lstm_forward / lstm_backward: bad input raises TypeError/ValueError naming the argument,
before anything is written (the caller's tensors are left bit-for-bit as they were).

The baseline is a valid 2-layer bidirectional LSTM with biases (T=3, B=2, I=3, H=4); each test
perturbs one thing.  Where the spec allows more than one argument to be blamed (an input whose
feature size disagrees with w_ih could name either), the pattern accepts each of them.
"""
from __future__ import annotations

import numpy as np
import pytest

import fusedgrad
from conftest import requires_torch

T, B, I, H, L, D = 3, 2, 3, 4, 2, 2
PER = 4  # tensors per layer and direction with biases


def make_params(L=L, D=D, I=I, H=H, bias=True, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for layer in range(L):
        for _ in range(D):
            out.append(rng.uniform(-0.5, 0.5, (4 * H, I if layer == 0 else D * H)).astype(dtype))
            out.append(rng.uniform(-0.5, 0.5, (4 * H, H)).astype(dtype))
            if bias:
                out.append(rng.uniform(-0.5, 0.5, 4 * H).astype(dtype))
                out.append(rng.uniform(-0.5, 0.5, 4 * H).astype(dtype))
    return out


def base(dtype=np.float32):
    rng = np.random.default_rng(1)
    return {
        "input": rng.standard_normal((T, B, I)).astype(dtype),
        "hx": [rng.standard_normal((D * L, B, H)).astype(dtype), rng.standard_normal((D * L, B, H)).astype(dtype)],
        "params": make_params(dtype=dtype),
        "kw": {"has_biases": True, "num_layers": L, "dropout": 0.0, "train": True, "bidirectional": True,
               "batch_first": False, "batch_sizes": None},
    }


def varlen(a, batch_sizes, rows=None):
    """Switch ``a`` to the [T*B, I] variable-length layout."""
    rows = len(batch_sizes) * B if rows is None else rows
    a["input"] = np.random.default_rng(2).standard_normal((rows, I)).astype(np.float32)
    a["kw"]["batch_sizes"] = batch_sizes
    return a


def forward(a):
    return fusedgrad.lstm_forward(a["input"], a["hx"], a["params"], **a["kw"])


def saved_and_grads(a):
    """A valid forward of ``a`` and valid gradients for it (numpy float32)."""
    fwd = forward(a)
    rng = np.random.default_rng(3)
    out = {"grad_y": rng.standard_normal(fwd[0].shape).astype(np.float32),
           "grad_hy": rng.standard_normal(fwd[1].shape).astype(np.float32),
           "grad_cy": rng.standard_normal(fwd[2].shape).astype(np.float32)}
    out.update(zip(("i", "j", "f", "o", "h", "c", "tanhc"), fwd[3:]))
    return out


def backward(a, g):
    return fusedgrad.lstm_backward(g["grad_y"], g["grad_hy"], g["grad_cy"], a["input"], a["hx"], a["params"],
                                   g["i"], g["j"], g["f"], g["o"], g["h"], g["c"], g["tanhc"], **a["kw"])


def tensors(*dicts):
    out = []
    for d in dicts:
        for v in d.values():
            if isinstance(v, list):
                out += [x for x in v if hasattr(x, "shape")]
            elif hasattr(v, "shape"):
                out.append(v)
    return out


def snapshot(t) -> bytes:
    """The raw bytes of a numpy array or torch tensor (any dtype)."""
    if not isinstance(t, np.ndarray):
        import torch

        t = t.detach().contiguous().view(torch.uint8).numpy()
    return np.ascontiguousarray(t).tobytes()


def raises(exc, pattern, fn, *dicts):
    """fn() raises ``exc`` matching ``pattern``, and leaves every tensor in ``dicts`` unchanged."""
    before = [snapshot(t) for t in tensors(*dicts)]
    with pytest.raises(exc, match=pattern):
        fn()
    after = [snapshot(t) for t in tensors(*dicts)]
    assert len(before) == len(after)
    for x, y in zip(before, after):
        assert x == y, "an input was written before the error"


def test_baselines_are_valid():
    """Every error test perturbs one of these; unperturbed they must run."""
    a = base()
    g = saved_and_grads(a)
    dx, (dh0, dc0), dparams = backward(a, g)
    assert dx.shape == (T, B, I) and np.isfinite(dx).all() and len(dparams) == len(a["params"])
    v = varlen(base(), [2, 2, 1])
    gv = saved_and_grads(v)
    dx, _, _ = backward(v, gv)
    assert dx.shape == (3 * B, I) and np.isfinite(dx).all()
    nb = base()
    nb["params"], nb["kw"]["has_biases"] = make_params(bias=False), False
    assert forward(nb)[0].shape == (T, B, D * H)


# --------------------------------------------------------------------------- dropout


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("p", [0.5, 0.1, 1.0])
def test_forward_dropout_not_zero(p, train):
    a = base()
    a["kw"].update(dropout=p, train=train)
    raises(ValueError, r"\bdropout\b", lambda: forward(a), a)


def test_backward_dropout_not_zero():
    a = base()
    g = saved_and_grads(a)
    a["kw"]["dropout"] = 0.25
    raises(ValueError, r"\bdropout\b", lambda: backward(a, g), a, g)


# --------------------------------------------------------------------------- params count


def _params_count_cases():
    yield "one missing", lambda a: a["params"].pop()
    yield "one extra", lambda a: a["params"].append(a["params"][-1].copy())
    yield "has_biases=False with biases", lambda a: a["kw"].update(has_biases=False)
    yield "has_biases=True without biases", lambda a: a.update(params=make_params(bias=False))
    yield "num_layers=3 with 2 layers", lambda a: a["kw"].update(num_layers=3)
    yield "num_layers=1 with 2 layers", lambda a: a["kw"].update(num_layers=1)
    yield "unidirectional with 2 directions", lambda a: a["kw"].update(bidirectional=False)
    yield "empty", lambda a: a.update(params=[])


PARAMS_COUNT = [pytest.param(f, id=name) for name, f in _params_count_cases()]


@pytest.mark.parametrize("perturb", PARAMS_COUNT)
def test_params_count(perturb):
    a = base()
    perturb(a)
    raises(ValueError, r"\bparams\b", lambda: forward(a), a)


@pytest.mark.parametrize("perturb", PARAMS_COUNT[:3])
def test_backward_params_count(perturb):
    a = base()
    g = saved_and_grads(a)
    perturb(a)
    raises(ValueError, r"\bparams\b", lambda: backward(a, g), a, g)


# --------------------------------------------------------------------------- params shapes

# (index into params, the tensor's name, its bad shape); index = (layer * D + direction) * 4 + k
PARAM_SHAPES = [
    pytest.param(0, "w_ih", (4 * H, I + 1), id="layer 0 w_ih in-features"),
    pytest.param(8, "w_ih", (4 * H, H), id="layer 1 w_ih in-features H, not D*H"),
    pytest.param(4, "w_ih", (4 * H + 4, I), id="layer 0 reverse w_ih rows"),
    pytest.param(5, "w_hh", (4 * H, H + 1), id="layer 0 reverse w_hh"),
    pytest.param(13, "w_hh", (4 * (H - 1), H - 1), id="layer 1 reverse w_hh other H"),
    pytest.param(9, "w_hh", (4 * H,), id="layer 1 w_hh 1-D"),
    pytest.param(2, "b_ih", (4 * H + 1,), id="layer 0 b_ih"),
    pytest.param(11, "b_hh", (H,), id="layer 1 b_hh"),
    pytest.param(14, "b_ih", (1, 4 * H), id="layer 1 reverse b_ih 2-D"),
]


@pytest.mark.parametrize("k, name, bad", PARAM_SHAPES)
def test_param_shape(k, name, bad):
    a = base()
    a["params"][k] = np.zeros(bad, np.float32)
    raises(ValueError, rf"params\[{k}\]|\b{name}\b", lambda: forward(a), a)


def test_param_none():
    a = base()
    a["params"][6] = None
    raises(TypeError, r"\bparams\b", lambda: forward(a), a)


# --------------------------------------------------------------------------- input


def test_input_feature_size_disagrees_with_w_ih():
    a = base()
    a["input"] = np.zeros((T, B, I + 2), np.float32)
    raises(ValueError, r"\binput\b|params\[0\]|\bw_ih\b", lambda: forward(a), a)


@pytest.mark.parametrize("bad", [(T * B, I), (1, T, B, I), (I,)], ids=["2-D without batch_sizes", "4-D", "1-D"])
def test_input_rank(bad):
    a = base()
    a["input"] = np.zeros(bad, np.float32)
    raises(ValueError, r"\binput\b", lambda: forward(a), a)


def test_input_3d_with_batch_sizes():
    a = base()
    a["kw"]["batch_sizes"] = [2, 2, 2]
    raises(ValueError, r"\binput\b", lambda: forward(a), a)


def test_input_none():
    a = base()
    a["input"] = None
    raises(TypeError, r"\binput\b", lambda: forward(a), a)


def test_batch_first_swaps_the_batch_axis():
    """With batch_first, input [T, B, I] = [3, 2, 3] reads as B=3: hx (B=2) no longer fits."""
    a = base()
    a["kw"]["batch_first"] = True
    raises(ValueError, r"\bhx\b|\bh0\b|\bc0\b|\binput\b", lambda: forward(a), a)


# --------------------------------------------------------------------------- hx


@pytest.mark.parametrize("k", [0, 1], ids=["h0", "c0"])
@pytest.mark.parametrize("bad", [(L, B, H), (D * L, B + 1, H), (D * L, B, H + 1), (B, H)],
                         ids=["L rows, not D*L", "B+1", "H+1", "2-D"])
def test_hx_shape(bad, k):
    a = base()
    a["hx"][k] = np.zeros(bad, np.float32)
    raises(ValueError, rf"\bhx\b|\b{['h0', 'c0'][k]}\b", lambda: forward(a), a)


def test_hx_one_tensor():
    a = base()
    a["hx"] = a["hx"][:1]
    raises((TypeError, ValueError), r"\bhx\b", lambda: forward(a), a)


def test_hx_three_tensors():
    a = base()
    a["hx"] = a["hx"] + [a["hx"][0]]
    raises((TypeError, ValueError), r"\bhx\b", lambda: forward(a), a)


# --------------------------------------------------------------------------- batch_sizes


@pytest.mark.parametrize("bs", [[2, 1, 2], [1, 2, 2]], ids=["rises later", "rises at once"])
def test_batch_sizes_not_non_increasing(bs):
    a = varlen(base(), bs, rows=len(bs) * max(bs))
    raises(ValueError, r"\bbatch_sizes\b", lambda: forward(a), a)


@pytest.mark.parametrize("bs", [[2, 1, 0], [2, 0, 0]], ids=["last zero", "two zeros"])
def test_batch_sizes_zero(bs):
    a = varlen(base(), bs)
    raises(ValueError, r"\bbatch_sizes\b", lambda: forward(a), a)


@pytest.mark.parametrize("kind", ["list", "numpy", pytest.param("torch", marks=requires_torch)])
def test_batch_sizes_wrong_length(kind):
    """3 steps of B=2 in input (6 rows), but batch_sizes lists 2 or 4 steps."""
    for bs in ([2, 1], [2, 2, 1, 1]):
        a = varlen(base(), bs, rows=3 * B)
        if kind == "numpy":
            a["kw"]["batch_sizes"] = np.array(bs)
        elif kind == "torch":
            import torch

            a["kw"]["batch_sizes"] = torch.tensor(bs)
        raises(ValueError, r"\bbatch_sizes\b|\binput\b", lambda: forward(a), a)


@pytest.mark.parametrize("bs", [[1, 1, 1], [3, 2, 1]], ids=["first 1", "first 3"])
def test_batch_sizes_first_is_not_b(bs):
    """hx says B=2; input rows agree with batch_sizes, so only batch_sizes[0] vs hx can catch it."""
    a = varlen(base(), bs, rows=len(bs) * bs[0])
    raises(ValueError, r"\bbatch_sizes\b|\bhx\b|\bh0\b|\bc0\b", lambda: forward(a), a)


@pytest.mark.parametrize("bs", [np.array([[2, 2, 1]]), [2.0, 2.0, 1.0], np.array([2.0, 2.0, 1.0])],
                         ids=["2-D", "float list", "float array"])
def test_batch_sizes_not_1d_integers(bs):
    a = varlen(base(), [2, 2, 1])
    a["kw"]["batch_sizes"] = bs
    raises((TypeError, ValueError), r"\bbatch_sizes\b", lambda: forward(a), a)


TORCH_SIZES = {  # batch_sizes tensors whose values cannot be read as integers: (error, message)
    "meta": (lambda t: t.to("meta"), ValueError, r"^batch_sizes: expected a tensor on device cpu or cuda "
             r"\(its values are read\), got meta$"),
    "meta, empty": (lambda t: t[:0].to("meta"), ValueError, r"^batch_sizes: .* got meta$"),
    "sparse": (lambda t: t.to_sparse(), TypeError, r"^batch_sizes: expected a dense \(strided\) tensor, "
               r"got layout sparse_coo$"),
    "bfloat16": (lambda t: t.bfloat16(), TypeError, r"^batch_sizes: expected integers, got dtype bfloat16$"),
}


@requires_torch
@pytest.mark.parametrize("call", ["forward", "backward"])
@pytest.mark.parametrize("form", list(TORCH_SIZES))
def test_batch_sizes_tensor_without_readable_sizes(form, call):
    """Refused by name like every other bad batch_sizes (before, meta raised torch's NotImplementedError
    "Cannot copy out of meta tensor", sparse and bfloat16 numpy's conversion errors)."""
    import torch

    make, exc, pattern = TORCH_SIZES[form]
    a = varlen(base(), [2, 2, 1])
    g = saved_and_grads(a) if call == "backward" else {}
    a["kw"]["batch_sizes"] = make(torch.tensor([2, 2, 1]))
    raises(exc, pattern, lambda: forward(a) if call == "forward" else backward(a, g), a, g)


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("where", ["input", "hx", "params"])
@pytest.mark.parametrize("other", [np.float16, "bfloat16"], ids=["float16", "bfloat16"])
def test_mixed_dtypes(other, where):
    import ml_dtypes

    dt = ml_dtypes.bfloat16 if other == "bfloat16" else other
    a = base()
    if where == "input":
        a["input"] = a["input"].astype(dt)
        pattern = r"\binput\b|\bparams\b|\bhx\b|dtype"
    elif where == "hx":
        a["hx"][1] = a["hx"][1].astype(dt)
        pattern = r"\bhx\b|\bc0\b"
    else:
        a["params"][10] = a["params"][10].astype(dt)
        pattern = r"params\[10\]|\bb_ih\b"
    raises((TypeError, ValueError), pattern, lambda: forward(a), a)


@pytest.mark.parametrize("bad", [np.float64, np.int32], ids=["float64", "int32"])
def test_unsupported_dtype_everywhere(bad):
    a = base(dtype=bad)
    raises(TypeError, np.dtype(bad).name, lambda: forward(a), a)


@requires_torch
def test_mixed_dtypes_torch():
    import torch

    a = base()
    a["input"] = torch.from_numpy(a["input"])
    a["hx"] = [torch.from_numpy(h) for h in a["hx"]]
    a["params"] = [torch.from_numpy(p) for p in a["params"]]
    a["params"][3] = a["params"][3].to(torch.bfloat16)
    raises((TypeError, ValueError), r"params\[3\]|\bb_hh\b", lambda: forward(a), a)


def test_backward_grad_y_dtype():
    a = base()
    g = saved_and_grads(a)
    g["grad_y"] = g["grad_y"].astype(np.float16)
    raises((TypeError, ValueError), r"\bgrad_y\b", lambda: backward(a, g), a, g)


# --------------------------------------------------------------------------- backward shapes


@pytest.mark.parametrize("name, bad", [
    ("grad_y", (T, B, H)),            # D*H expected
    ("grad_y", (T + 1, B, D * H)),
    ("grad_y", (B, T, D * H)),        # batch_first layout, but batch_first=False
    ("grad_hy", (L, B, H)),
    ("grad_cy", (D * L, B, H + 1)),
    ("i", (D * L, T - 1, B, H)),
    ("f", (D * L, T, B + 1, H)),
    ("c", (D * L, B, H)),             # final-state shape where train=True saves every step
    ("tanhc", (L, T, B, H)),
], ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v)))
def test_backward_shape(name, bad):
    a = base()
    g = saved_and_grads(a)
    g[name] = np.zeros(bad, np.float32)
    raises(ValueError, rf"\b{name}\b", lambda: backward(a, g), a, g)


def test_backward_grad_y_none():
    a = base()
    g = saved_and_grads(a)
    g["grad_y"] = None
    raises(TypeError, r"\bgrad_y\b", lambda: backward(a, g), a, g)


@pytest.mark.parametrize("name", ["i", "j", "f", "o", "h", "c", "tanhc"])
def test_backward_saved_activation_none(name):
    """A saved activation left out is named (it was an AttributeError on None.shape)."""
    a = base()
    g = saved_and_grads(a)
    g[name] = None
    raises(TypeError, rf"^{name}: expected a tensor", lambda: backward(a, g), a, g)


def test_hidden_size_zero():
    """H = 0 is refused by name, as torch.nn.LSTM refuses it (it reached a kernel's argument check)."""
    a = base()
    a["params"] = make_params(H=0)
    a["hx"] = [np.zeros((D * L, B, 0), np.float32)] * 2
    raises(ValueError, r"^params\[1\] \(layer 0 w_hh\): expected a hidden size H > 0", lambda: forward(a), a)


def test_batch_sizes_beyond_int64():
    """A uint64 entry of 2**63 or more is reported as it is, not wrapped to a negative number."""
    a = varlen(base(), np.array([2**63 + 1, 2, 2], np.uint64), rows=3 * B)
    raises(ValueError, r"batch_sizes: expected entries below 2\*\*63, got \[9223372036854775809, 2, 2\]",
           lambda: forward(a), a)


def test_input_width_mismatch_names_the_input():
    """A wrong input width is reported against layer 0's w_ih with where I came from."""
    a = base()
    a["input"] = np.zeros((T, B, I + 1), np.float32)
    raises(ValueError, rf"params\[0\] \(layer 0 w_ih\): expected shape \[{4 * H}, {I + 1}\] "
           rf"\(I = {I + 1} from input, H = {H} from params\[1\]\), got \[{4 * H}, {I}\]", lambda: forward(a), a)


def test_backward_varlen_grad_y_rows():
    a = varlen(base(), [2, 2, 1])
    g = saved_and_grads(a)
    g["grad_y"] = np.zeros((3 * B - 1, D * H), np.float32)
    raises(ValueError, r"\bgrad_y\b", lambda: backward(a, g), a, g)


def test_backward_input_shape():
    a = base()
    g = saved_and_grads(a)
    a["input"] = np.zeros((T, B, I + 1), np.float32)
    raises(ValueError, r"\binput\b|params\[0\]|\bw_ih\b", lambda: backward(a, g), a, g)


@pytest.mark.parametrize("call", ["forward", "backward"])
def test_buffers_past_the_32_bit_indices_are_refused_before_anything_is_allocated(call):
    """T=B=1024 and H=512 make the gate buffer [T*B, 4H] 2**31 elements, one more than the kernels'
    32-bit indices reach: a ValueError naming the sizes, raised while validating (before, the call
    set out to allocate 8 GiB of gates and ran the kernels on them)."""
    T_, B_, H_ = 1024, 1024, 512
    rng = np.random.default_rng(0)
    x = np.zeros((T_, B_, 1), np.float32)
    params = [rng.uniform(-0.1, 0.1, s).astype(np.float32) for s in ((4 * H_, 1), (4 * H_, H_), (4 * H_,), (4 * H_,))]
    kw = {"has_biases": True, "num_layers": 1, "dropout": 0.0, "train": True, "bidirectional": False,
          "batch_first": False, "batch_sizes": None}
    with pytest.raises(ValueError, match=r"the gates \[T\*B, 4H\] would hold 2147483648 elements.*2147483647"):
        if call == "forward":
            fusedgrad.lstm_forward(x, [], params, **kw)
        else:
            y, saved = np.zeros((T_, B_, H_), np.float32), np.zeros(1, np.float32)  # parse comes first
            fusedgrad.lstm_backward(y, None, None, x, [], params, *[saved] * 7, **kw)
