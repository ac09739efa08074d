"""float32 GEMMs (matmul, matmul_tn, matmul_packed, matmul_packed_rows), column_sum
and the layout ops of the full LSTM (pack_b, pack_bt, transpose).

Kernels are called through ``fusedgrad.api.run``.  Covers every variant at
degenerate, odd (tails in every tiled axis) and one benchmark-size shape,
row-strided views, NaN/Inf confinement, and bitwise determinism across
thread counts; the layout ops must move bits exactly, and the LSTM's
``_gemm`` split (whole 32-row blocks / remainder rows) must match the kernels.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import assert_close, bits, outputs_by_thread_count, requires_torch
from fusedgrad.api import run
from fusedgrad.te_defs import column_sum as cs_def
from fusedgrad.te_defs import matmul as mm_def
from fusedgrad.te_defs import matmul_packed as mp_def
from fusedgrad.te_defs import matmul_packed_rows as mpr_def
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


# --------------------------------------------------------------------------- B in column panels (full LSTM)

PANEL = mp_def.PANEL
PACKED_OPS = {"matmul_packed": mp_def, "matmul_packed_rows": mpr_def}
# (M, Nb, K): M = 1, below/at/above one 8-row tile and one 32-row block (13, 31, 33, 45), Nb odd and even,
# K = 1 and K = 300; the few-rows kernel gets every shape too (it must be right for any M)
PACKED_SHAPES = [(1, 1, 1), (1, 2, 300), (13, 1, 19), (8, 2, 32), (31, 5, 1), (32, 1, 64), (33, 2, 47),
                 (45, 5, 300), (70, 3, 9)]


def packed_inputs(M, Nb, K, variant, seed=0):
    """Inputs of matmul_packed: B [K, 32·Nb] drawn row-major, passed as panels."""
    rng = np.random.default_rng(seed)
    N = Nb * PANEL
    out = {"a": _f32(rng.standard_normal((M, K))), "bp": mp_def.pack(_f32(rng.standard_normal((K, N))))}
    if variant.get("has_bias"):
        out["bias"] = _f32(rng.standard_normal(N))
    if variant.get("has_addend"):
        out["addend"] = _f32(rng.standard_normal((M, N)))
    return out


def packed_check(op_name, ins, variant, out):
    """Compare with the op's float64 reference; tolerance per element as in mm_check."""
    d = {k: v.astype(np.float64) for k, v in ins.items()}
    ref = PACKED_OPS[op_name].OP.reference(**d, **variant)["c"]
    b = mp_def.unpack(d["bp"])
    scale = np.maximum(1.0, np.abs(d["a"]) @ np.abs(b) + np.abs(d.get("bias", 0)) + np.abs(d.get("addend", 0)))
    assert_close(out, ref, ATOL, RTOL, scale=scale, name=op_name)


def _panel_index(Nb, K):
    """(p, k, j) index grids of a [Nb, K, 32] panel array: bp[p, k, j] = B[k, 32p + j]."""
    return np.indices((Nb, K, PANEL))


def _special(shape, seed):
    """float32 values with a NaN (non-canonical payload), ±Inf, -0.0 and a subnormal mixed in:
    data movement must keep every bit."""
    x = _f32(np.random.default_rng(seed).standard_normal(shape))
    flat = x.reshape(-1)
    specials = np.array([0x7FC01234, 0xFF800000, 0x7F800000, 0x80000000, 0x00000001], dtype=np.uint32).view(np.float32)
    flat[: min(flat.size, specials.size)] = specials[: flat.size]
    return x


@pytest.mark.parametrize("variant", MM_VARIANTS, ids=lambda v: ",".join(k for k, x in v.items() if x) or "plain")
@pytest.mark.parametrize("M,Nb,K", PACKED_SHAPES)
@pytest.mark.parametrize("op_name", list(PACKED_OPS))
def test_matmul_packed_reference(op_name, M, Nb, K, variant):
    ins = packed_inputs(M, Nb, K, variant)
    out = run(op_name, ins, {}, variant)["c"]
    assert out.shape == (M, Nb * PANEL) and out.dtype == np.float32
    packed_check(op_name, ins, variant, out)


@pytest.mark.parametrize("op_name,M", [("matmul_packed", 64), ("matmul_packed_rows", 31)])
def test_matmul_packed_bench_size(op_name, M):
    """LSTM step size (H = 256: N = 4H = 1024, K = 2H): every panel and row block full for the main kernel."""
    v = {"has_bias": True, "has_addend": True}
    ins = packed_inputs(M, 32, 512, v, seed=6)
    packed_check(op_name, ins, v, run(op_name, ins, {}, v)["c"])


@pytest.mark.parametrize("K,Nb", [(1, 1), (37, 3), (16, 1), (17, 5), (300, 2)])
def test_pack_b_exact(K, Nb):
    b = _special((K, Nb * PANEL), seed=K)
    bp = run("pack_b", {"b": b}, {}, {})["bp"]
    assert bp.shape == (Nb, K, PANEL) and bp.dtype == np.float32
    p, k, j = _panel_index(Nb, K)
    np.testing.assert_array_equal(bits(bp), bits(b[k, PANEL * p + j]))
    np.testing.assert_array_equal(bits(mp_def.unpack(bp)), bits(b))


@pytest.mark.parametrize("K,Nb", [(1, 1), (37, 3), (16, 1), (17, 5), (300, 2)])
def test_pack_bt_exact(K, Nb):
    w = _special((Nb * PANEL, K), seed=K + 1)
    bp = run("pack_bt", {"w": w}, {}, {})["bp"]
    assert bp.shape == (Nb, K, PANEL) and bp.dtype == np.float32
    p, k, j = _panel_index(Nb, K)
    np.testing.assert_array_equal(bits(bp), bits(w[PANEL * p + j, k]))


@pytest.mark.parametrize("M,N", [(1, 1), (37, 13), (16, 16), (17, 33), (1, 40), (40, 1), (33, 17), (48, 32)])
def test_transpose_exact(M, N):
    a = _special((M, N), seed=M * 100 + N)
    b = run("transpose", {"a": a}, {}, {})["b"]
    assert b.shape == (N, M) and b.dtype == np.float32
    np.testing.assert_array_equal(bits(b), bits(a.T))


def _wide(x, lead=3, pad=5, seed=9):
    """The same values as a view into a larger array: offset by ``lead`` rows and columns, row stride
    > columns, unit inner stride (for 3-D: the middle axis sliced, so the outer stride is not K·32)."""
    rng = np.random.default_rng(seed)
    if x.ndim == 1:
        big = _f32(rng.standard_normal(x.shape[0] + lead + pad))
        big[lead: lead + x.shape[0]] = x
        return big[lead: lead + x.shape[0]]
    if x.ndim == 3:
        big = _f32(rng.standard_normal((x.shape[0] + 1, x.shape[1] + lead + pad, x.shape[2])))
        big[1:, lead: lead + x.shape[1]] = x
        return big[1:, lead: lead + x.shape[1]]
    big = _f32(rng.standard_normal((x.shape[0] + lead + pad, x.shape[1] + lead + pad)))
    big[lead: lead + x.shape[0], lead: lead + x.shape[1]] = x
    return big[lead: lead + x.shape[0], lead: lead + x.shape[1]]


@pytest.mark.parametrize("M,Nb,K", [(13, 2, 19), (45, 5, 300)])
def test_packed_strided_views(M, Nb, K):
    v = {"has_bias": True, "has_addend": True}
    ins = packed_inputs(M, Nb, K, v)
    views = {k: _wide(x) for k, x in ins.items()}
    assert not views["a"].flags.c_contiguous and not views["bp"].flags.c_contiguous
    for op_name in PACKED_OPS:
        out = run(op_name, views, {}, v)["c"]
        np.testing.assert_array_equal(bits(out), bits(run(op_name, ins, {}, v)["c"]), err_msg=op_name)
        packed_check(op_name, ins, v, out)
    b = _special((K, Nb * PANEL), seed=7)
    np.testing.assert_array_equal(bits(run("pack_b", {"b": _wide(b)}, {}, {})["bp"]), bits(mp_def.pack(b)))
    w = _special((Nb * PANEL, K), seed=8)
    np.testing.assert_array_equal(bits(run("pack_bt", {"w": _wide(w)}, {}, {})["bp"]), bits(mp_def.pack(w.T)))
    a = _special((M, K), seed=9)
    np.testing.assert_array_equal(bits(run("transpose", {"a": _wide(a)}, {}, {})["b"]), bits(a.T))


@pytest.mark.parametrize("op_name", list(PACKED_OPS))
def test_packed_nan_inf_confined(op_name):
    """A NaN/Inf in A row m reaches row m of C only (rows in the first and the last, partial, row block)."""
    M, Nb, K = 45, 3, 23
    v = {"has_bias": True, "has_addend": True}
    ins = packed_inputs(M, Nb, K, v)
    clean = run(op_name, ins, {}, v)["c"]
    for bad, m in ((np.nan, 4), (np.nan, 40), (np.inf, 33)):
        a = ins["a"].copy()
        a[m, 3] = bad
        out = run(op_name, dict(ins, a=a), {}, v)["c"]
        assert not np.isfinite(out[m]).any(), (bad, m)
        rest = np.arange(M) != m
        np.testing.assert_array_equal(bits(out[rest]), bits(clean[rest]), err_msg=f"{bad} in row {m}")


def test_packed_same_bits_any_thread_count(tmp_path):
    M, Nb, K = 67, 5, 301  # tails in every row axis (67 = 2·32 + 3 = 8·8 + 3), odd panel count
    rng = np.random.default_rng(10)
    N = Nb * PANEL
    args = {
        "a": _f32(rng.standard_normal((M, K))), "bp": mp_def.pack(_f32(rng.standard_normal((K, N)))),
        "bias": _f32(rng.standard_normal(N)), "addend": _f32(rng.standard_normal((M, N))),
        "b": _f32(rng.standard_normal((K, N))), "w": _f32(rng.standard_normal((N, K))),
    }
    v = '{"has_bias": True, "has_addend": True}'
    mm = '{"a": d["a"], "bp": d["bp"], "bias": d["bias"], "addend": d["addend"]}'
    call = (f'api.run("matmul_packed", {mm}, {{}}, {v})["c"], '
            f'fusedgrad.api.run("matmul_packed_rows", {mm}, {{}}, {v})["c"], '
            'fusedgrad.api.run("pack_b", {"b": d["b"]}, {}, {})["bp"], '
            'fusedgrad.api.run("pack_bt", {"w": d["w"]}, {}, {})["bp"], '
            'fusedgrad.api.run("transpose", {"a": d["w"]}, {}, {})["b"]')
    names = ("mp", "mpr", "pb", "pbt", "t")
    results = outputs_by_thread_count(tmp_path, call, args, names)
    ins = {k: args[k] for k in ("a", "bp", "bias", "addend")}
    here = {
        "mp": run("matmul_packed", ins, {}, MM_VARIANTS[3])["c"],
        "mpr": run("matmul_packed_rows", ins, {}, MM_VARIANTS[3])["c"],
        "pb": run("pack_b", {"b": args["b"]}, {}, {})["bp"],
        "pbt": run("pack_bt", {"w": args["w"]}, {}, {})["bp"],
        "t": run("transpose", {"a": args["w"]}, {}, {})["b"],
    }
    for k in names:
        np.testing.assert_array_equal(bits(results["1"][k]), bits(results["2"][k]), err_msg=k)
        np.testing.assert_array_equal(bits(results["1"][k]), bits(here[k]), err_msg=k)


@pytest.mark.parametrize("variant", MM_VARIANTS, ids=lambda v: ",".join(k for k, x in v.items() if x) or "plain")
def test_lstm_gemm_split(variant):
    """fusedgrad.lstm._gemm at M = 45: rows 0..31 through matmul_packed, 32..44 through matmul_packed_rows."""
    from fusedgrad import lstm

    M, Nb, K = 45, 5, 300
    assert lstm.ROW_BLOCK == 32
    ins = packed_inputs(M, Nb, K, variant, seed=11)
    c = np.full((M, Nb * PANEL), np.nan, dtype=np.float32)
    lstm._gemm(ins["a"], lstm.Operand(K, Nb * PANEL, panels=ins["bp"]), c,
               bias=ins.get("bias"), addend=ins.get("addend"))
    packed_check("matmul_packed", ins, variant, c)
    head = {k: (x[:32] if x.ndim == 2 and k != "bp" else x) for k, x in ins.items()}
    tail = {k: (x[32:] if x.ndim == 2 and k != "bp" else x) for k, x in ins.items()}
    np.testing.assert_array_equal(bits(c[:32]), bits(run("matmul_packed", head, {}, variant)["c"]))
    np.testing.assert_array_equal(bits(c[32:]), bits(run("matmul_packed_rows", tail, {}, variant)["c"]))
