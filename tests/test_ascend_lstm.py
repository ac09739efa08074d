"""The full LSTM's Ascend package (generated/ascend/lstm: aclnnLSTM and aclnnLstmBackward, Cube GEMMs and
vector step kernels) on the CPU twin of CANN, through tests/ascend_lstm.py (fusedgrad.lstm_forward /
lstm_backward's semantics), against torch.nn.LSTM autograd in float64: the cases of test_lstm.py
(layers, directions, batch_first, variable length, missing hx / grad_hy / grad_cy, odd sizes) in
float32, its reduced-precision cases in float16 and bfloat16, strided tensors, and the same bits for
any number of vector and cube cores.  Every launch runs under the twin's
checks (queue events, pipe hazards, Cube buffers and flags, GM races between cores)."""
import shutil

import numpy as np
import pytest

import ascend_lstm
import test_lstm as TL

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler (g++) on this machine")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", autouse=True)
def app(ascend_tree):
    """The LSTM app, built once against the session's Ascend tree: ascend_lstm's calls run it."""
    return ascend_lstm.build(ascend_tree)


def _forward(cfg, a, train=True, **kw):
    return ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **TL.flags(cfg, train), **kw)


def _backward(cfg, a, fwd, **kw):
    i, j, f, o, h, c, tanhc = fwd[3:]
    return ascend_lstm.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"], a["params"],
                                     i, j, f, o, h, c, tanhc, **TL.flags(cfg), **kw)


@pytest.mark.parametrize("cfg", TL.CASES)
def test_float32_matches_torch(cfg):
    data = TL.make_data(cfg)
    ref, gates = TL.references(cfg, data)
    a = TL.api_inputs(cfg, data, "float32")
    fwd = _forward(cfg, a)
    TL.check_forward(cfg, fwd, ref, gates, "float32")
    bwd = _backward(cfg, a, fwd)
    TL.check_backward(cfg, bwd, ref, a, "float32")
    if cfg.lengths is not None:  # padded outputs exactly zero
        pad = ~cfg.active().reshape(-1)
        assert (TL.as_f64(fwd[0])[pad] == 0).all(), "output at padded positions is not zero"


@pytest.mark.parametrize("cfg", TL.LOW_CASES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_matches_torch(dtype, cfg):
    """fp16 / bf16 tensors: widened into the workspace, computed in fp32, rounded once on the way out
    (the saved tensors too, as the backward reads them)."""
    data = TL.rounded_data(TL.make_data(cfg), dtype)
    ref, gates = TL.references(cfg, data)
    a = TL.api_inputs(cfg, data, dtype)
    fwd = _forward(cfg, a)
    TL.check_forward(cfg, fwd, ref, gates, dtype)
    bwd = _backward(cfg, a, fwd)
    TL.check_backward(cfg, bwd, ref, a, dtype)


@pytest.mark.parametrize("cfg", [TL.CASES[0], TL.CASES[1], TL.CASES[10]])
def test_inference_forward(cfg):
    data = TL.make_data(cfg)
    ref, gates = TL.references(cfg, data)
    fwd = _forward(cfg, TL.api_inputs(cfg, data, "float32"), train=False)
    TL.check_forward(cfg, fwd, ref, gates, "float32", train=False)


@pytest.mark.parametrize("cfg", [TL.CASES[1], TL.CASES[10]])
def test_strided_tensors_give_the_same_bits(cfg):
    """Every tensor with rows wider than its last size (NaN in the gaps): gathered into and scattered
    from the workspace, the same bits as dense tensors."""
    data = TL.make_data(cfg)
    a = TL.api_inputs(cfg, data, "float32")
    dense = _forward(cfg, a)
    strided = _forward(cfg, a, pad=3)
    for x, y in zip(dense, strided):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    b_dense, b_strided = _backward(cfg, a, dense), _backward(cfg, a, dense, pad=5)
    assert np.array_equal(np.asarray(b_dense[0]), np.asarray(b_strided[0]))
    for x, y in zip(b_dense[1] + b_dense[2], b_strided[1] + b_strided[2]):
        assert np.array_equal(np.asarray(x), np.asarray(y))


def test_the_same_bits_on_any_core_count():
    """Rows split over the vector cores and GEMM tiles over the cube cores: 48 / 24, 40 / 20 and 3 / 1
    cores give the same bits (each output element has one core and a fixed order)."""
    cfg = TL.Cfg(L=2, D=2, T=4, B=20, I=9, H=24, lengths=None, seed=21)
    data = TL.make_data(cfg)
    a = TL.api_inputs(cfg, data, "float32")
    runs = []
    for cores, cube in ((48, 24), (40, 20), (3, 1)):
        fwd = _forward(cfg, a, cores=cores, cube_cores=cube)
        runs.append((fwd, _backward(cfg, a, fwd, cores=cores, cube_cores=cube)))
    for fwd, bwd in runs[1:]:
        for x, y in zip(runs[0][0], fwd):
            assert np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip([runs[0][1][0]] + runs[0][1][1] + runs[0][1][2], [bwd[0]] + bwd[1] + bwd[2]):
            assert np.array_equal(np.asarray(x), np.asarray(y))


def test_every_misuse_gets_its_documented_code(app):
    """161001 for a missing tensor (or executor), 161002 for a dtype, shape, list length, flag or layout
    that does not fit; a backward with dx not wanted takes a null dxOut."""
    import subprocess

    proc = subprocess.run([str(app), "errors"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = dict(line.rsplit(": ", 1) for line in proc.stdout.splitlines())
    null, bad = "161001", "161002"
    assert got == {
        "fwd null input": null, "fwd null params": null, "fwd null output": null, "fwd null iOut with train": null,
        "fwd null executor": null, "fwd int32 input": bad, "fwd mixed dtypes": bad, "fwd 3 params": bad,
        "fwd w_hh [4H, H+1]": bad, "fwd hx of one tensor": bad, "fwd 0 layers": bad, "fwd dropout 0.5": bad,
        "fwd w_ih [4H, I+1]": bad, "fwd b_hh [4H+1]": bad, "fwd h0 [1, B, H+1]": bad, "fwd iOut [T, B, H+1]": bad,
        "fwd output [T, B, H+1]": bad, "fwd output rows on top of each other": bad,
        "fwd batchSizes increasing": bad, "fwd batchSizes first != B": bad, "fwd batchSizes with a 3-D input": bad,
        "fwd null executor in phase two": null,
        "bwd null dy": null, "bwd null dxOut": null, "bwd train false": bad, "bwd outputMask of 3": bad,
        "bwd dy [T, B, H+1]": bad, "bwd null executor": null, "bwd no dx wanted, dxOut null": "0",
        "bwd null executor in phase two": null,
    }


@pytest.mark.parametrize("cfg", [
    pytest.param(TL.Cfg(L=1, D=2, T=100, B=64, I=16, H=16, seed=30), id="T=100 B=64"),
    pytest.param(TL.Cfg(L=1, D=1, T=2, B=64, I=1024, H=1024, seed=31), id="B=64 H=1024"),
])
def test_the_largest_sizes_keep_every_rule(cfg):
    """The issue's largest sizes, one at a time (T=100, B=64, H=1024 together is in
    benchmarks/ascend_lstm.py: minutes on the twin): UB, L1/L0 and BiasTable capacities, queue events,
    pipe hazards and Cube flags all checked on every launch, and the numbers against torch."""
    data = TL.make_data(cfg)
    ref, gates = TL.references(cfg, data)
    a = TL.api_inputs(cfg, data, "float32")
    fwd = _forward(cfg, a)
    TL.check_forward(cfg, fwd, ref, gates, "float32")
    TL.check_backward(cfg, _backward(cfg, a, fwd), ref, a, "float32")


def test_no_steps_gives_the_initial_states_and_zero_gradients():
    """T = 0: hy, cy are h0, c0; dh0, dc0 are dh, dc; the parameters' gradients are zeros."""
    rng = np.random.default_rng(0)
    B, I, H = 2, 3, 4
    params = [rng.standard_normal(s).astype(np.float32) for s in ((4 * H, I), (4 * H, H), (4 * H,), (4 * H,))]
    x = np.zeros((0, B, I), np.float32)
    h0, c0, dh, dc = (rng.standard_normal((1, B, H)).astype(np.float32) for _ in range(4))
    fwd = ascend_lstm.lstm_forward(x, [h0, c0], params, True, 1, 0.0, True, False)
    assert fwd[0].shape == (0, B, H) and np.array_equal(fwd[1], h0) and np.array_equal(fwd[2], c0)
    dx, (dh0, dc0), dparams = ascend_lstm.lstm_backward(np.zeros((0, B, H), np.float32), dh, dc, x, [h0, c0], params,
                                                        *fwd[3:], True, 1, 0.0, True, False)
    assert dx.shape == (0, B, I) and np.array_equal(dh0, dh) and np.array_equal(dc0, dc)
    assert all(g.shape == p.shape and not g.any() for g, p in zip(dparams, params))


def test_rows_beyond_the_cube_copies_reach():
    """The Cube GEMMs' GM -> L1 copies take a 16-bit row stride: a tensor whose rows are farther apart is
    gathered into dense rows (the same bits), and rows longer than 65535 floats are refused (161002)."""
    cfg = TL.Cfg(L=1, D=1, T=2, B=1, I=3, H=2, seed=40)
    a = TL.api_inputs(cfg, TL.make_data(cfg), "float32")
    dense, wide = _forward(cfg, a), _forward(cfg, a, pad=70000)
    for x, y in zip(dense, wide):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(s).astype(np.float32) for s in ((4, 70000), (4, 1), (4,), (4,))]
    with pytest.raises(ascend_lstm.TwinError, match="aclnnLSTMGetWorkspaceSize: 161002"):
        ascend_lstm.lstm_forward(rng.standard_normal((1, 1, 70000)).astype(np.float32), [], params, True, 1, 0.0,
                                 True, False)


def test_a_16_bit_call_runs_its_gemms_in_its_dtype():
    """The GEMMs of an fp16 / bf16 call take that dtype on the Cube (fp32 accumulation), but db, which is
    summed from the fp32 dgates; an fp32 call's are fp32."""
    import collections

    cfg = TL.Cfg(L=2, D=2, T=3, B=4, I=6, H=8, seed=41)
    for dtype in ("float32", "float16", "bfloat16"):
        data = TL.rounded_data(TL.make_data(cfg), dtype) if dtype != "float32" else TL.make_data(cfg)
        a = TL.api_inputs(cfg, data, dtype)
        _backward(cfg, a, _forward(cfg, a))
        for mode in ("fwd", "bwd"):
            gemms = collections.Counter(k for k in ascend_lstm.LAUNCHES[mode] if k.startswith("fg_matmul_"))
            assert gemms, mode
            own = sum(n for k, n in gemms.items() if k.startswith(f"fg_matmul_{dtype}_to_float32"))
            db = gemms["fg_matmul_float32_to_float32_mk_kn"] if dtype != "float32" and mode == "bwd" else 0
            assert own + db == sum(gemms.values()), (dtype, mode, gemms)
            assert db == (cfg.L * cfg.D if mode == "bwd" and dtype != "float32" else 0), (dtype, mode, gemms)


def _random_case(seed):
    """A random configuration of every argument the API has (sizes, layers, directions, bias,
    batch_first or variable lengths, missing hx / grad_hy / grad_cy, dtype, padded rows)."""
    rng = np.random.default_rng(seed)
    L, D, T, B = (int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 7)), int(rng.integers(1, 6)))
    lengths = None
    if rng.random() < 0.4:
        lengths = sorted((int(v) for v in rng.integers(1, T + 1, B)), reverse=True)
        lengths[0] = T
    cfg = TL.Cfg(L=L, D=D, T=T, B=B, I=int(rng.integers(1, 20)), H=int(rng.integers(1, 20)), bias=bool(rng.random() < 0.7),
                 bf=lengths is None and bool(rng.random() < 0.5), lengths=lengths, empty_hx=bool(rng.random() < 0.3),
                 missing=tuple(m for m in ("grad_hy", "grad_cy") if rng.random() < 0.3), seed=seed)
    return cfg, ("float32", "float16", "bfloat16")[seed % 3], int(rng.integers(0, 3))


@pytest.mark.parametrize("seed", range(6))
def test_random_configurations_match_torch(seed):
    cfg, dtype, pad = _random_case(seed)
    data = TL.make_data(cfg) if dtype == "float32" else TL.rounded_data(TL.make_data(cfg), dtype)
    ref, gates = TL.references(cfg, data)
    a = TL.api_inputs(cfg, data, dtype)
    fwd = _forward(cfg, a, pad=pad)
    TL.check_forward(cfg, fwd, ref, gates, dtype)
    TL.check_backward(cfg, _backward(cfg, a, fwd, pad=pad), ref, a, dtype)


def test_a_second_larger_call_gets_a_staging_block_that_fits():
    """Each call uploads its launches' parameters from a pooled pinned block; the LSTM's uploads differ
    in size from call to call, so a block a smaller call left in the pool must not be reused as it is
    (aclrtMemcpyAsync would read past its aclrtMallocHost allocation: the twin stops that)."""
    cfg = TL.Cfg(L=2, D=2, T=6, B=3, I=5, H=7, seed=50)
    data = TL.make_data(cfg)
    ref, gates = TL.references(cfg, data)
    fwd = _forward(cfg, TL.api_inputs(cfg, data, "float32"), warmup=True)
    TL.check_forward(cfg, fwd, ref, gates, "float32")


def _plan_counts(cfg, pass_):
    """(adds, gemms) of the plan data (fusedgrad/lstm/launches.py) for cfg's pass, and the same counts of
    the launches that only make the parameters' gradients (outputs dw_*, db_*, or the first step's
    dW_hh term, first.*)."""
    from fusedgrad import lstm
    from fusedgrad.lstm import launches

    c = lstm.Config(T=cfg.T, B=cfg.B, I=cfg.I, H=cfg.H, L=cfg.L, D=cfg.D, has_biases=cfg.bias,
                    varlen=cfg.lengths is not None)
    out = {"adds": 0, "gemms": 0, "dw_adds": 0, "dw_gemms": 0}
    for x in launches.build(c, pass_)["launches"]:
        adds = int(x["op"] == "add" or (x["op"] == "gemm" and x["variant"]["has_addend"]))
        gemms = int(x["op"] in ("gemm", "column_sum"))
        dw = any(a["io"] == "out" and a["buffer"].startswith(("dw_", "db_", "first.")) for a in x["args"])
        out["adds"] += adds
        out["gemms"] += gemms
        out["dw_adds"] += adds * dw
        out["dw_gemms"] += gemms * dw
    return out


@pytest.mark.parametrize("cfg", [TL.Cfg(L=2, D=2, T=3, B=2, I=5, H=4, seed=21),
                                 TL.Cfg(L=1, D=2, T=4, B=3, I=3, H=5, lengths=[4, 2, 1], seed=22)])
def test_the_host_runs_the_shared_plan(cfg):
    """aclnnLSTM and aclnnLstmBackward run the layer recurrence's plan data (fusedgrad/lstm/launches.py, as
    op_host/fg_lstm_plan.h holds it): the plan's adds and its GEMMs' addends are the add kernel's launches;
    without the parameters' gradients (outputMask {dx, dh0, dc0}) the launches that only make them are left
    out, one for one, and dx, dh0, dc0 keep their bits."""
    import collections

    data = TL.make_data(cfg)
    a = TL.api_inputs(cfg, data, "float32")
    fwd = _forward(cfg, a)
    kinds = collections.Counter(ascend_lstm.LAUNCHES["fwd"])
    assert kinds["fg_lstm_float32_add"] == _plan_counts(cfg, "forward")["adds"] == cfg.L * cfg.D
    full = _backward(cfg, a, fwd)
    kinds = collections.Counter(ascend_lstm.LAUNCHES["bwd"])
    want = _plan_counts(cfg, "backward")
    assert kinds["fg_lstm_float32_add"] == want["adds"] and want["dw_adds"] == cfg.L * cfg.D
    part = _backward(cfg, a, fwd, no_dparams=True)
    fewer = collections.Counter(ascend_lstm.LAUNCHES["bwd"])
    assert fewer["fg_lstm_float32_add"] == want["adds"] - want["dw_adds"]
    gemms = sum(n for k, n in kinds.items() if k.startswith("fg_matmul_"))
    assert sum(n for k, n in fewer.items() if k.startswith("fg_matmul_")) == gemms - want["dw_gemms"]
    assert np.array_equal(part[0], full[0]) and all(np.array_equal(x, y) for x, y in zip(part[1], full[1]))
