"""The full LSTM's float32 GEMM (matmul_packed: its main and few_rows entries), column_sum
and its layout ops (pack_b, pack_bt).

Kernels are called through ``fusedgrad.api.run``.  Covers every variant at
degenerate, odd (tails in every tiled axis) and one benchmark-size shape,
row-strided views, NaN/Inf confinement, and bitwise determinism across
thread counts; the layout ops must move bits exactly, and the LSTM's
``fusedgrad.lstm.buffers.gemm`` split (whole 32-row blocks / remainder rows) must match the kernels.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import assert_close, bits, outputs_by_thread_count
from fusedgrad.api import run
from fusedgrad.te_defs import column_sum as cs_def
from fusedgrad.te_defs import matmul_packed as mp_def

MM_VARIANTS = [{"has_bias": b, "has_addend": a} for b, a in itertools.product((False, True), repeat=2)]
ATOL = RTOL = 1e-5


def _f32(x):
    return np.asarray(x, dtype=np.float32)


@pytest.mark.parametrize("K,N", [(1, 1), (1, 40), (37, 13), (33, 17), (31, 300), (65, 256)])
def test_column_sum_reference(K, N):
    a = _f32(np.random.default_rng(1).standard_normal((K, N)))
    out = run("column_sum", {"a": a}, {}, {})["s"]
    scale = np.maximum(1.0, np.abs(a.astype(np.float64)).sum(axis=0))
    assert_close(out, cs_def.reference(a.astype(np.float64))["s"], ATOL, RTOL, scale=scale, name="s")


def test_column_sum_bench_size():
    """The LSTM's bias gradient at T·B = 1600, H = 256 (many row blocks)."""
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


@pytest.mark.parametrize("K,N", [(19, 37), (64, 96)])
def test_column_sum_strided_view(K, N):
    a = _f32(np.random.default_rng(3).standard_normal((K, N)))
    np.testing.assert_array_equal(bits(run("column_sum", {"a": _strided(a)}, {}, {})["s"]),
                                  bits(run("column_sum", {"a": a}, {}, {})["s"]))


def test_column_sum_nan_inf_confined():
    """A NaN/Inf in column n of column_sum's input reaches s[n] only."""
    a = _f32(np.random.default_rng(4).standard_normal((70, 40)))
    a[33, 7], a[69, 39] = np.nan, -np.inf
    s = run("column_sum", {"a": a}, {}, {})["s"]
    assert np.isnan(s[7]) and s[39] == -np.inf
    assert np.isfinite(np.delete(s, [7, 39])).all()


def test_column_sum_same_bits_any_thread_count(tmp_path):
    rng = np.random.default_rng(5)
    args = {"cs": _f32(rng.standard_normal((1000, 131)))}  # several row blocks, a column tail
    call = 'api.run("column_sum", {"a": d["cs"]}, {}, {})["s"],'  # a one-tuple
    results = outputs_by_thread_count(tmp_path, call, args, ("cs",))
    here = run("column_sum", {"a": args["cs"]}, {}, {})["s"]
    np.testing.assert_array_equal(bits(results["1"]["cs"]), bits(results["2"]["cs"]))
    np.testing.assert_array_equal(bits(results["1"]["cs"]), bits(here))


# --------------------------------------------------------------------------- B in column panels (full LSTM)

PANEL = mp_def.PANEL
ENTRIES = {"main": False, "few_rows": True}  # matmul_packed's entry points: its few_rows schedule flag
# (M, Nb, K): M = 1, below/at/above one 8-row tile and one 32-row block (13, 31, 33, 45), Nb odd and even,
# K = 1 and K = 300; the few-rows entry gets every shape too (it must be right for any M)
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


def packed_check(entry, ins, variant, out):
    """Compare with the op's float64 reference; the tolerance scales with sum_k |a||b| per element."""
    d = {k: v.astype(np.float64) for k, v in ins.items()}
    ref = mp_def.OP.reference(**d, **variant)["c"]
    b = mp_def.unpack(d["bp"])
    scale = np.maximum(1.0, np.abs(d["a"]) @ np.abs(b) + np.abs(d.get("bias", 0)) + np.abs(d.get("addend", 0)))
    assert_close(out, ref, ATOL, RTOL, scale=scale, name=f"matmul_packed {entry}")


def packed(ins, variant, entry):
    """matmul_packed's c through ``entry`` ("main" or "few_rows")."""
    return run("matmul_packed", ins, {}, dict(variant, few_rows=ENTRIES[entry]))["c"]


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
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_matmul_packed_reference(entry, M, Nb, K, variant):
    ins = packed_inputs(M, Nb, K, variant)
    out = packed(ins, variant, entry)
    assert out.shape == (M, Nb * PANEL) and out.dtype == np.float32
    packed_check(entry, ins, variant, out)


def test_schedule_flag_defaults_to_the_main_entry():
    """A variant that leaves the schedule flag out gets the main entry."""
    v = {"has_bias": True, "has_addend": False}
    ins = packed_inputs(45, 2, 19, v)
    np.testing.assert_array_equal(bits(run("matmul_packed", ins, {}, v)["c"]), bits(packed(ins, v, "main")))


@pytest.mark.parametrize("entry,M", [("main", 64), ("few_rows", 31)])
def test_matmul_packed_bench_size(entry, M):
    """LSTM step size (H = 256: N = 4H = 1024, K = 2H): every panel and row block full for the main entry."""
    v = {"has_bias": True, "has_addend": True}
    ins = packed_inputs(M, 32, 512, v, seed=6)
    packed_check(entry, ins, v, packed(ins, v, entry))


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
    for entry in ENTRIES:
        out = packed(views, v, entry)
        np.testing.assert_array_equal(bits(out), bits(packed(ins, v, entry)), err_msg=entry)
        packed_check(entry, ins, v, out)
    b = _special((K, Nb * PANEL), seed=7)
    np.testing.assert_array_equal(bits(run("pack_b", {"b": _wide(b)}, {}, {})["bp"]), bits(mp_def.pack(b)))
    w = _special((Nb * PANEL, K), seed=8)
    np.testing.assert_array_equal(bits(run("pack_bt", {"w": _wide(w)}, {}, {})["bp"]), bits(mp_def.pack(w.T)))


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_packed_nan_inf_confined(entry):
    """A NaN/Inf in A row m reaches row m of C only (rows in the first and the last, partial, row block)."""
    M, Nb, K = 45, 3, 23
    v = {"has_bias": True, "has_addend": True}
    ins = packed_inputs(M, Nb, K, v)
    clean = packed(ins, v, entry)
    for bad, m in ((np.nan, 4), (np.nan, 40), (np.inf, 33)):
        a = ins["a"].copy()
        a[m, 3] = bad
        out = packed(dict(ins, a=a), v, entry)
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
    v = '{"has_bias": True, "has_addend": True, "few_rows": %s}'
    mm = '{"a": d["a"], "bp": d["bp"], "bias": d["bias"], "addend": d["addend"]}'
    call = (f'api.run("matmul_packed", {mm}, {{}}, {v % False})["c"], '
            f'fusedgrad.api.run("matmul_packed", {mm}, {{}}, {v % True})["c"], '
            'fusedgrad.api.run("pack_b", {"b": d["b"]}, {}, {})["bp"], '
            'fusedgrad.api.run("pack_bt", {"w": d["w"]}, {}, {})["bp"]')
    names = ("mp", "mpr", "pb", "pbt")
    results = outputs_by_thread_count(tmp_path, call, args, names)
    ins = {k: args[k] for k in ("a", "bp", "bias", "addend")}
    here = {
        "mp": packed(ins, MM_VARIANTS[3], "main"),
        "mpr": packed(ins, MM_VARIANTS[3], "few_rows"),
        "pb": run("pack_b", {"b": args["b"]}, {}, {})["bp"],
        "pbt": run("pack_bt", {"w": args["w"]}, {}, {})["bp"],
    }
    for k in names:
        np.testing.assert_array_equal(bits(results["1"][k]), bits(results["2"][k]), err_msg=k)
        np.testing.assert_array_equal(bits(results["1"][k]), bits(here[k]), err_msg=k)


@pytest.mark.parametrize("variant", MM_VARIANTS, ids=lambda v: ",".join(k for k, x in v.items() if x) or "plain")
def test_lstm_gemm_split(variant):
    """fusedgrad.lstm.buffers.gemm at M = 45: rows 0..31 through matmul_packed's main entry, 32..44 through few_rows."""
    from fusedgrad.lstm import buffers

    M, Nb, K = 45, 5, 300
    assert buffers.ROW_BLOCK == 32
    ins = packed_inputs(M, Nb, K, variant, seed=11)
    c = np.full((M, Nb * PANEL), np.nan, dtype=np.float32)
    buffers.gemm(ins["a"], buffers.Operand(K, Nb * PANEL, panels=ins["bp"]), c,
                      bias=ins.get("bias"), addend=ins.get("addend"))
    packed_check("main + few_rows", ins, variant, c)
    head = {k: (x[:32] if x.ndim == 2 and k != "bp" else x) for k, x in ins.items()}
    tail = {k: (x[32:] if x.ndim == 2 and k != "bp" else x) for k, x in ins.items()}
    np.testing.assert_array_equal(bits(c[:32]), bits(packed(head, variant, "main")))
    np.testing.assert_array_equal(bits(c[32:]), bits(packed(tail, variant, "few_rows")))
