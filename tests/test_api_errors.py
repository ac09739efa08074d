"""Bad input raises TypeError/ValueError naming the offending argument."""
from __future__ import annotations

import numpy as np
import pytest

import fusedgrad
from conftest import LN_ARGS, LSTM_ARGS, requires_torch

N, H = 3, 4
M, D = 3, 5


def lstm_np(dtype=np.float32):
    rng = np.random.default_rng(0)
    return {k: rng.random((N, 4 * H if k == "storage" else H)).astype(dtype) for k in LSTM_ARGS}


def ln_np(dtype=np.float32):
    rng = np.random.default_rng(0)
    shapes = {"x": (M, D), "dy": (M, D), "mean": (M,), "var": (M,), "gamma": (D,)}
    return {k: (rng.random(s) + 0.5).astype(dtype) for k, s in shapes.items()}


def call_lstm(args, **kw):
    return fusedgrad.lstm_cell_backward(*(args[k] for k in LSTM_ARGS), **kw)


def call_ln(args, **kw):
    return fusedgrad.layer_norm_backward(*(args[k] for k in LN_ARGS), **kw)


def test_valid_inputs_pass():
    """The baseline every error test perturbs is itself valid."""
    gg, gcx, gb = call_lstm(lstm_np())
    assert gg.shape == (N, 4 * H) and np.isfinite(gg).all()
    dx, dg, db = call_ln(ln_np())
    assert dx.shape == (M, D) and np.isfinite(dx).all()


# --------------------------------------------------------------------------- None


@pytest.mark.parametrize("name", ["cx", "cy", "storage"])
def test_lstm_required_none(name):
    args = lstm_np()
    args[name] = None
    with pytest.raises(TypeError, match=rf"\b{name}\b"):
        call_lstm(args)


@pytest.mark.parametrize("name", LN_ARGS)
def test_ln_required_none(name):
    args = ln_np()
    args[name] = None
    with pytest.raises(TypeError, match=rf"\b{name}\b"):
        call_ln(args)


@pytest.mark.parametrize("value", [[[1.0] * H] * N, 3.0, "x"], ids=["list", "float", "str"])
def test_lstm_not_a_tensor(value):
    args = lstm_np()
    args["cy"] = value
    with pytest.raises(TypeError, match=r"\bcy\b"):
        call_lstm(args)


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("bad", [np.float64, np.int32, np.int64], ids=["float64", "int32", "int64"])
@pytest.mark.parametrize("name", LSTM_ARGS)
def test_lstm_unsupported_dtype(name, bad):
    args = lstm_np()
    args[name] = args[name].astype(bad)
    with pytest.raises(TypeError, match=rf"\b{name}\b.*{np.dtype(bad).name}"):
        call_lstm(args)


@pytest.mark.parametrize("bad", [np.float64, np.int32], ids=["float64", "int32"])
@pytest.mark.parametrize("name", LN_ARGS)
def test_ln_unsupported_dtype(name, bad):
    args = ln_np()
    args[name] = args[name].astype(bad)
    with pytest.raises(TypeError, match=rf"\b{name}\b.*{np.dtype(bad).name}"):
        call_ln(args)


@pytest.mark.parametrize("bad", [np.float64, np.int32], ids=["float64", "int32"])
def test_all_inputs_unsupported_dtype(bad):
    with pytest.raises(TypeError, match=r"\bgrad_hy\b"):
        call_lstm(lstm_np(bad))
    with pytest.raises(TypeError, match=r"\bx\b"):
        call_ln(ln_np(bad))


@pytest.mark.parametrize("name", ["grad_cy", "cx", "storage"])
def test_lstm_mixed_dtypes(name):
    args = lstm_np()
    args[name] = args[name].astype(np.float16)
    with pytest.raises(TypeError, match=rf"\b{name}\b.*float16"):
        call_lstm(args)


@pytest.mark.parametrize("name", ["dy", "var", "gamma"])
def test_ln_mixed_dtypes(name):
    import ml_dtypes

    args = ln_np()
    args[name] = args[name].astype(ml_dtypes.bfloat16)
    with pytest.raises(TypeError, match=rf"\b{name}\b.*bfloat16"):
        call_ln(args)


@requires_torch
@pytest.mark.parametrize("name", ["grad_hy", "cy"])
def test_lstm_torch_unsupported_dtype(name):
    import torch

    args = {k: torch.from_numpy(v) for k, v in lstm_np().items()}
    args[name] = args[name].to(torch.float64)
    with pytest.raises(TypeError, match=rf"\b{name}\b.*float64"):
        call_lstm(args)
    args[name] = args[name].to(torch.int32)
    with pytest.raises(TypeError, match=rf"\b{name}\b.*int32"):
        call_lstm(args)


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("name", LSTM_ARGS)
def test_lstm_wrong_rank(name):
    args = lstm_np()
    args[name] = args[name][None]
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call_lstm(args)
    args[name] = args[name][0, 0]
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call_lstm(args)


@pytest.mark.parametrize("name", ["grad_cy", "cx", "cy", "storage"])
def test_lstm_mismatched_n(name):
    args = lstm_np()
    args[name] = args[name][:-1]
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call_lstm(args)


@pytest.mark.parametrize("name", ["grad_cy", "cx", "cy"])
def test_lstm_mismatched_h(name):
    args = lstm_np()
    args[name] = np.zeros((N, H + 1), np.float32)
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call_lstm(args)


@pytest.mark.parametrize("width", [4 * H - 1, 4 * H + 4, H, 4 * H + 2], ids=["4H-1", "4H+4", "H", "4H+2"])
def test_lstm_storage_not_4h(width):
    args = lstm_np()
    args["storage"] = np.zeros((N, width), np.float32)
    with pytest.raises(ValueError, match=r"\bstorage\b"):
        call_lstm(args)


def test_a_mismatch_names_both_arguments():
    """grad_hy with one extra row binds N first: the message names grad_hy as the source of N, not
    only grad_cy."""
    args = lstm_np()
    args["grad_hy"] = np.zeros((N + 1, H), np.float32)
    with pytest.raises(ValueError, match=rf"grad_cy: .* \(N = {N + 1} from grad_hy\), got \[{N}, {H}\]"):
        call_lstm(args)


def test_lstm_mismatch_detected_with_missing_grads():
    args = lstm_np()
    args["grad_hy"] = args["grad_cy"] = None
    args["cy"] = np.zeros((N + 1, H), np.float32)
    with pytest.raises(ValueError, match=r"\bcy\b"):
        call_lstm(args)


@pytest.mark.parametrize(
    "name,shape",
    [("dy", (M, D + 1)), ("dy", (M + 1, D)), ("dy", (M, D, 1)), ("mean", (M + 1,)), ("mean", (M, 1)),
     ("var", (M - 1,)), ("var", ()), ("gamma", (D + 1,)), ("gamma", (1, D)), ("gamma", ())],
    ids=lambda v: str(v),
)
def test_ln_wrong_shape(name, shape):
    args = ln_np()
    args[name] = np.ones(shape, np.float32)
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call_ln(args)


def test_ln_zero_dim_x():
    args = ln_np()
    args["x"] = np.ones((), np.float32)
    with pytest.raises(ValueError, match=r"\bx\b"):
        call_ln(args)


# --------------------------------------------------------------------------- kinds and devices


@requires_torch
@pytest.mark.parametrize("name", ["grad_hy", "cx", "storage"])
def test_lstm_numpy_torch_mixed(name):
    import torch

    args = lstm_np()
    args[name] = torch.from_numpy(args[name])
    with pytest.raises(TypeError, match=r"numpy.*torch|torch.*numpy"):
        call_lstm(args)


@requires_torch
def test_ln_numpy_torch_mixed():
    import torch

    args = {k: torch.from_numpy(v) for k, v in ln_np().items()}
    args["gamma"] = args["gamma"].numpy()
    with pytest.raises(TypeError, match=r"numpy.*torch|torch.*numpy"):
        call_ln(args)


@requires_torch
@pytest.mark.parametrize("name", LSTM_ARGS)
def test_lstm_meta_device(name):
    import torch

    args = {k: torch.from_numpy(v) for k, v in lstm_np().items()}
    args[name] = torch.empty(args[name].shape, device="meta")
    with pytest.raises(ValueError, match=rf"\b{name}\b.*meta"):
        call_lstm(args)


@requires_torch
@pytest.mark.parametrize("name", LN_ARGS)
def test_ln_meta_device(name):
    import torch

    args = {k: torch.from_numpy(v) for k, v in ln_np().items()}
    args[name] = torch.empty(args[name].shape, device="meta")
    with pytest.raises(ValueError, match=rf"\b{name}\b.*meta"):
        call_ln(args)


# --------------------------------------------------------------------------- scalars


@pytest.mark.parametrize("value", [1, 0, None, "yes", 1.0], ids=repr)
def test_has_bias_not_bool(value):
    with pytest.raises(TypeError, match=r"has_bias"):
        call_lstm(lstm_np(), has_bias=value)


@pytest.mark.parametrize("value", ["1e-5", None, [1e-5], object()], ids=["str", "None", "list", "object"])
def test_eps_not_a_number(value):
    with pytest.raises(TypeError, match=r"\beps\b"):
        call_ln(ln_np(), eps=value)


def test_eps_beyond_a_double_is_a_value_error():
    with pytest.raises(ValueError, match=r"eps: expected a real number within the range of a double"):
        call_ln(ln_np(), eps=10**400)


def test_has_bias_takes_numpy_bools():
    """lstm_forward takes np.bool_ flags; so does lstm_cell_backward (np.True_ was refused as "expected
    a bool, got bool")."""
    with_bias = call_lstm(lstm_np(), has_bias=np.True_)
    without = call_lstm(lstm_np(), has_bias=np.False_)
    assert with_bias[2] is not None and without[2] is None
    assert np.array_equal(with_bias[0], call_lstm(lstm_np(), has_bias=True)[0])


def test_outputs_untouched_inputs_on_error():
    """A rejected call writes nothing: inputs are unchanged."""
    args = lstm_np()
    before = {k: v.copy() for k, v in args.items()}
    args["storage"] = np.zeros((N, 4 * H + 4), np.float32)
    before["storage"] = args["storage"].copy()
    with pytest.raises(ValueError):
        call_lstm(args)
    for k in LSTM_ARGS:
        np.testing.assert_array_equal(args[k], before[k])


def test_numpy_bfloat16_without_torch(tmp_path):
    """Without torch, numpy bfloat16 goes through a TVM tensor copy and still gives the right answer."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # import torch now raises ImportError
        import numpy as np, ml_dtypes, fusedgrad
        from fusedgrad.te_defs import layer_norm_backward as L
        s = L.sample({"M": 5, "D": 33}, np.random.default_rng(0))
        a = {k: v.astype(ml_dtypes.bfloat16) for k, v in s.items()}
        dx, dg, db = fusedgrad.layer_norm_backward(**a)
        assert isinstance(dx, np.ndarray) and dx.dtype == ml_dtypes.bfloat16
        r = L.reference(**{k: v.astype(np.float64) for k, v in a.items()})
        for got, name in ((dx, "dx"), (dg, "dgamma"), (db, "dbeta")):
            err = np.abs(got.astype(np.float64) - r[name]).max() / (np.abs(r[name]).max() + 1)
            assert err < 2e-2, (name, err)
        print("ok")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def _peak_bytes(fn, refused: tuple[type[Exception], str] | None = None) -> int:
    """The peak of Python-tracked allocations (numpy's included) while fn() runs.  With ``refused``
    (an exception type and a pattern of its message), fn() must raise that (pytest.raises)."""
    import tracemalloc

    tracemalloc.start()
    try:
        if refused is None:
            fn()
        else:
            with pytest.raises(refused[0], match=refused[1]):
                fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


def test_read_only_inputs_are_copied_once_and_only_after_the_checks():
    """A read-only input is copied for the kernel (DLPack takes no read-only arrays), but not before
    the checks (a refused call allocates nothing of its size), and once: a valid LayerNorm backward
    of a read-only 8 MiB x peaks at its one copy plus dx, not at two copies plus dx."""
    rows, d = 512, 4096
    rng = np.random.default_rng(0)
    x = rng.random((rows, d)).astype(np.float32)
    dy = rng.random((rows, d)).astype(np.float32)
    mean, var, gamma = np.zeros(rows, np.float32), np.ones(rows, np.float32), np.ones(d, np.float32)
    x.flags.writeable = False
    call_ln({"x": x, "dy": dy, "mean": mean, "var": var, "gamma": gamma})  # the kernel built, outside the count
    bad = x.astype(np.float64)
    bad.flags.writeable = False
    refused = (TypeError, "x: expected dtype float32, float16 or bfloat16, got float64")
    assert _peak_bytes(lambda: call_ln({"x": bad, "dy": dy, "mean": mean, "var": var, "gamma": gamma}),
                       refused) < x.nbytes / 8
    peak = _peak_bytes(lambda: call_ln({"x": x, "dy": dy, "mean": mean, "var": var, "gamma": gamma}))
    assert peak < 2.25 * x.nbytes, peak / x.nbytes  # x's copy and dx
    big = {k: np.zeros((64, 1024), np.float32) for k in LSTM_ARGS}
    big["storage"] = np.zeros((64, 4096), np.float32)
    for a in big.values():
        a.flags.writeable = False
    big["cx"] = np.zeros((65, 1024), np.float32)  # one row too many: refused
    refused = (ValueError, r"cx: expected shape \[N, H\] = \[64, 1024\] .*got \[65, 1024\]")
    assert _peak_bytes(lambda: call_lstm(big), refused) < big["storage"].nbytes / 8


_FAR = r'''
import sys, numpy as np, fusedgrad
path, op = sys.argv[1], sys.argv[2]
cols = 2**32 + 16  # a row stride of 2**32 + 16 elements: beyond 32-bit indexing
big = np.memmap(path, np.float32, "w+", shape=(2, cols))  # sparse: only two pages are written
rng = np.random.default_rng(0)
if op == "layer_norm_backward":
    big[:, :16] = rng.standard_normal((2, 16)).astype(np.float32)
    view = big[:, :16]
    rest = (rng.standard_normal((2, 16)).astype(np.float32), np.zeros(2, np.float32), np.ones(2, np.float32),
            np.ones(16, np.float32))
    far = fusedgrad.layer_norm_backward(view, *rest)
    near = fusedgrad.layer_norm_backward(np.ascontiguousarray(view), *rest)
else:
    big[:, :4] = rng.standard_normal((2, 4)).astype(np.float32)
    view = big[:, :4]
    g = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(3)]
    st = rng.random((2, 16)).astype(np.float32)
    far = fusedgrad.lstm_cell_backward(g[0], g[1], view, g[2], st)
    near = fusedgrad.lstm_cell_backward(g[0], g[1], np.ascontiguousarray(view), g[2], st)
print(all(np.array_equal(a, b) for a, b in zip(far, near) if a is not None))
'''


@pytest.mark.parametrize("op", ["layer_norm_backward", "lstm_cell_backward"])
def test_row_strides_beyond_32_bits_are_copied(tmp_path, op):
    """A view whose rows lie 2**32 + 16 elements apart (in a sparse file) gives what its contiguous copy
    gives (it segfaulted or returned wrong values when the stride went to the kernel in 32 bits).  In a
    child process, so that a fault would not take the test run down."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _FAR, str(tmp_path / "sparse.bin"), op], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", (proc.returncode, proc.stdout, proc.stderr[-2000:])


def test_more_elements_than_32_bit_indexing_is_refused_by_name():
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(2**16, 2**15 + 1), strides=(0, 0))
    with pytest.raises(ValueError, match=r"^x: expected at most 2\*\*31 - 1 elements"):
        call_ln({"x": x, "dy": x, "mean": np.zeros(2**16, np.float32), "var": np.ones(2**16, np.float32),
                 "gamma": np.ones(2**15 + 1, np.float32)})


def test_a_tensor_whose_dtype_the_definition_fixes_is_checked_against_it():
    """matmul's bias and addend are float32 whatever a and b are (TensorSpec.dtype): a float16 bias is
    refused by name; with the right dtypes the call gets as far as the target (the CPU has no matmul)."""
    from fusedgrad import api

    a, b = np.ones((3, 4), np.float16), np.ones((4, 5), np.float16)
    variant = {"has_bias": True, "has_addend": False}
    with pytest.raises(TypeError, match=r"^bias: expected dtype float32 \(fixed by the op's definition\), "
                                        r"got float16"):
        api.run("matmul", {"a": a, "b": b, "bias": np.ones(5, np.float16)}, {}, variant)
    with pytest.raises(TypeError, match=r"^b: expected dtype float16 \(the dtype of a\), got float32"):
        api.run("matmul", {"a": a, "b": b.astype(np.float32), "bias": np.ones(5, np.float32)}, {}, variant)
    with pytest.raises(ValueError, match=r"\('matmul', 'llvm', 'float16'\) is not supported"):
        api.run("matmul", {"a": a, "b": b, "bias": np.ones(5, np.float32)}, {}, variant)
