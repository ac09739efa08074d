"""The full LSTM's persistent forward on Ascend (lowering/ascend/persistent.py: one mixed AIC + AIV kernel
per layer and direction, W_hh held in L1) on the twin of CANN: the traffic formulas of both plans
(benchmarks/ascend_lstm.py --model, docs/BENCHMARKS.md "the persistent design") are what the twin counts,
byte for byte; the core split keeps a block's W_hh slice within L1 and its gates' tiles within L0B and L0C,
and the host splits as the generator does; the kernel gives the per-step plan's bits for every case of
tests/test_lstm.py (equal lengths and packed), reads W_hh once per call, and the same bits on other cube-core
counts.  Every twin rule is on (mixed-kernel flags and SyncAll, pipes, the GM happens-before check)."""
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

import build_cache

import ascend_lstm
import test_lstm as TL  # its cases and references (torch: the module skips without it)

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_ascend_lstm", ROOT / "benchmarks" / "ascend_lstm.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler (g++) on this machine")
PERSISTENT = {"fwd": ("_persistent",), "bwd": ("_persistent_bwd",)}  # fg_lstm_<dtype><suffix>
STEP = {"fwd": "fg_lcf_", "bwd": "fg_lsb_"}  # the per-step plan's step kernels
PER_STEP = {"cores": 1}  # one vector core: no block has its two, so the same call takes the per-step plan


def _persistent(name, mode):
    return name.startswith("fg_lstm_") and any(name.endswith(tail) for tail in PERSISTENT[mode])


def _launched(mode="fwd"):
    """(persistent launches, step kernel launches) of the last call."""
    names = ascend_lstm.LAUNCHES[mode]
    return sum(_persistent(n, mode) for n in names), sum(n.startswith(STEP[mode]) for n in names)


@needs_gxx
@pytest.mark.parametrize("T, B, I, H, L, D", [(3, 5, 6, 8, 2, 2), (4, 1, 3, 16, 1, 1), (2, 130, 7, 40, 1, 2),
                                              (2, 3, 5, 651, 1, 1)])
def test_the_per_step_formula_is_what_the_twin_counts(ascend_tree, T, B, I, H, L, D):
    """The forward (train, hx = [], biases) on the per-step plan (one vector core: no block has its two)
    moves exactly the formula's bytes: the sequence and per-step GEMMs' tiles (A per column of tiles, a
    one-row A 16 times, more than 128 rows two row tiles), the step kernels' streams, the zero states and
    the copies; and on the persistent kernel exactly its formula's (H = 651: the slice streamed)."""
    ascend_lstm.build(ascend_tree)
    rng = np.random.default_rng(0)
    params = []
    for l in range(L):
        for _ in range(D):
            params += [rng.uniform(-0.5, 0.5, s).astype(np.float32)
                       for s in ((4 * H, I if l == 0 else D * H), (4 * H, H), (4 * H,), (4 * H,))]
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    ascend_lstm.lstm_forward(x, [], params, True, L, 0.0, True, D == 2, cores=1)
    assert _launched() == (0, L * D * T), ascend_lstm.LAUNCHES["fwd"]
    c = ascend_lstm.COUNTERS["fwd"]
    assert c["gm_read"] + c["gm_write"] == bench.forward_bytes(T, B, I, H, L, D)
    from fusedgrad.lowering.ascend import persistent

    ascend_lstm.lstm_forward(x, [], params, True, L, 0.0, True, D == 2, cores=2 * persistent.blocks_at_most())
    assert _launched() == (L * D, 0), ascend_lstm.LAUNCHES["fwd"]
    c = ascend_lstm.COUNTERS["fwd"]
    blocks, _, stream = bench.persistent_split(H)
    assert c["gm_read"] + c["gm_write"] == bench.forward_bytes(T, B, I, H, L, D, blocks=blocks, stream=stream)


def test_the_split_fits_l1_and_l0():
    """Each block's W_hh slice (whole K chunks) beside A's tiles fits L1, its four gates' B tiles L0B and
    their fp32 C tiles L0C, the blocks cover H on at most the cube cores, and 16 more units
    per block would not fit or not be needed; no split past the largest fitting H.  Streamed, the
    STREAM_BUFS chunk buffers (two: ping-pong) and A tiles fit L1: where L1 holds one and a half, nothing
    streams."""
    from fusedgrad.lowering.ascend import cube, fixed, persistent

    bm, _, bk = cube.tiles("float32")
    l1 = cube.FACTS["l1_kib"] * 1024

    def fits(u, H):
        k = -(-H // bk) * bk
        return (4 * u * k * 4 + persistent.A_TILES * bm * bk * 4 <= l1 and 4 * u * bk * 4 <= cube.FACTS["l0b_kib"] * 1024
                and bm * 4 * u * 4 <= cube.FACTS["l0c_kib"] * 1024)

    largest = {}
    for cores in (cube.FACTS["cube_cores"], persistent.blocks_at_most()):
        for H in range(1, 1200):
            split = persistent.split(H, cores=cores)
            if split is None:
                continue
            largest[cores] = H
            blocks, units = split
            assert units % 16 == 0 and fits(units, H), (H, split)
            assert blocks <= cores and (blocks - 1) * units < H <= blocks * units, (H, split)
            assert not fits(units + 16, H) or -(-H // (units + 16)) == blocks, (H, split)
        assert persistent.split(largest[cores] + 1, cores=cores) is None
        most = max(u for u in range(16, 1024, 16) if fits(u, 1))  # streamed: the most units L0B and L0C take
        for H in range(largest[cores] + 1, 1600):
            split = persistent.split(H, cores=cores, stream=True)
            if split is None:
                assert -(-H // most) > cores, H
                continue
            blocks, units = split
            assert units % 16 == 0 and units <= most and blocks == -(-H // most) <= cores, (H, split)
            assert (blocks - 1) * units < H <= blocks * units, (H, split)
            # the kernel's L1: STREAM_BUFS A tiles (of the A_TILES the split keeps) and as many chunk buffers
            assert persistent.STREAM_BUFS <= persistent.A_TILES, persistent.STREAM_BUFS
            assert persistent.A_TILES * bm * bk * 4 + persistent.STREAM_BUFS * 4 * units * bk * 4 <= l1, (H, split)
    # fp32, 512 KiB of L1: 24 blocks (24 cube cores, 48 vector cores) reach H = 768, the target's 40
    # vector cores make it 20 blocks and H = 640
    assert persistent.split(768, cores=24) == (24, 32) and largest[24] == 768
    assert persistent.blocks_at_most() == 20 and persistent.split(640) == (20, 32) and largest[20] == 640
    # an L1 of the A tiles and one and a half chunk buffers streams nothing; of two, it streams
    a_tiles, chunk = persistent.A_TILES * bm * bk * 4, 4 * most * bk * 4
    for halves, want in ((3, None), (4, (16, 64))):
        facts = dict(fixed.facts(), l1_kib=(a_tiles + halves * chunk // 2) // 1024)
        assert persistent.split(1024, stream=True, facts=facts) == want, (halves, facts)
    with pytest.raises(ValueError, match="hidden size h must be >= 1, got 0"):
        persistent.split(0)


@needs_gxx
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_host_splits_as_the_generator_does(ascend_tree, tmp_path, dtype):
    """fg_lpf_split (the host's, in the package's fg_lstm_persistent_tiling.h, with the launch header's
    facts) gives persistent.host_split's (blocks, units, stream) for every H up to past the largest that
    fits, for the GEMMs' operand dtype (its element size and K chunk): the slice in L1 where it fits, else
    streamed; and on an L1 too small for the streamed slice's two chunk buffers (FG_LP_STREAM_BUFS, STREAM_BUFS)
    but not for one, none streamed."""
    import subprocess

    from fusedgrad.lowering.ascend import cube, persistent

    src = tmp_path / "split.cpp"
    src.write_text('#include <stdio.h>\n#include <stdlib.h>\n#include "fg_lstm_persistent_tiling.h"\n'
                   "int main(int argc, char **argv) { const uint32_t l1 = argc > 1 ? (uint32_t)atoi(argv[1]) : FG_L1;\n"
                   "  for (uint32_t h = 1; h < 1600; ++h) { uint32_t b, u, s;\n"
                   "  fg_lpf_split(h, FG_CUBE_CORES, l1, FG_L0B, FG_L0C, FG_BM, FG_BK, FG_AT, FG_ES, &b, &u, &s);\n"
                   "  printf(\"%u %u %u\\n\", b, u, s); } }\n")
    bm, _, bk = cube.tiles(dtype)
    defs = {"FG_CUBE_CORES": cube.FACTS["cube_cores"], "FG_L1": cube.FACTS["l1_kib"] * 1024,
            "FG_L0B": cube.FACTS["l0b_kib"] * 1024, "FG_L0C": cube.FACTS["l0c_kib"] * 1024, "FG_BM": bm, "FG_BK": bk,
            "FG_AT": persistent.A_TILES,            "FG_ES": {"float32": 4, "float16": 2}[dtype]}
    exe = tmp_path / "split"
    proc = build_cache.run([shutil.which("g++"), "-std=c++17", "-Wall", "-Werror",
                            f"-I{ascend_tree / 'lstm' / 'op_kernel'}", *(f"-D{k}={v}u" for k, v in defs.items()),
                            "-o", str(exe), str(src)], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]

    def splits(l1_kib):  # (splits that fit L1, streamed splits), the host's and the generator's alike
        got = subprocess.run([str(exe), str(l1_kib * 1024)], capture_output=True, text=True, check=True).stdout.split("\n")
        facts = dict(cube.FACTS, l1_kib=l1_kib)
        fits = streamed = 0
        for h, line in zip(range(1, 1600), got):
            want = persistent.host_split(h, dtype, cores=cube.FACTS["cube_cores"], facts=facts) or (0, 0, False)
            fits += want[0] > 0 and not want[2]
            streamed += want[2]
            assert tuple(int(v) for v in line.split()) == want[:2] + (int(want[2]),), (h, l1_kib)
        return fits, streamed

    fits, streamed = splits(cube.FACTS["l1_kib"])
    assert persistent.host_split(1599, dtype, cores=cube.FACTS["cube_cores"]) is None and fits > 700 and streamed > 300
    # L1 of the A tiles and 1.5 or 2 of the streamed chunk buffers (the most units L0B takes: its 64 KiB)
    a_tiles, chunk = persistent.A_TILES * bm * bk * defs["FG_ES"], cube.FACTS["l0b_kib"] * 1024
    assert splits((a_tiles + 3 * chunk // 2) // 1024)[1] == 0
    assert splits((a_tiles + 2 * chunk) // 1024)[1] > 300


# ------------------------------------------------------------------ the persistent kernel on the twin

EQUAL_LENGTHS = [c for c in TL.CASES if c.values[0].lengths is None]
PACKED = [c for c in TL.CASES if c.values[0].lengths is not None]  # batchSizes: the kernels read them per step
# more rows than one Cube tile, the batch growing and shrinking across a tile's edge
PACKED.append(pytest.param(TL.Cfg(L=1, D=2, T=4, B=140, I=7, H=40, lengths=[4] * 45 + [3] * 29 + [2] * 39 + [1] * 27,
                                  seed=42), id="B=140 two row tiles"))


def _f32(a):
    """A result as float32 numpy (torch tensors of any dtype, numpy of any float dtype)."""
    a = a.detach().cpu().float().numpy() if hasattr(a, "detach") else np.asarray(a)
    return a.astype(np.float32)


def _assert_same_backward(cfg, bwd, steps):
    """dx, dh0, dc0 and every parameter gradient of two backward calls, bit for bit."""
    assert np.array_equal(_f32(bwd[0]), _f32(steps[0])), "dx"
    for name, g, w in zip(("dh0", "dc0"), bwd[1], steps[1]):
        assert np.array_equal(_f32(g), _f32(w)), name
    for k, (g, w) in enumerate(zip(bwd[2], steps[2])):
        assert np.array_equal(_f32(g), _f32(w)), f"dparams[{k}]"


@needs_gxx
@pytest.mark.parametrize("train", [True, False], ids=["train", "inference"])
@pytest.mark.parametrize("cfg", EQUAL_LENGTHS)
def test_the_persistent_forward_is_the_per_step_plan_bit_for_bit(ascend_tree, cfg, train):
    """Every layer and direction of an equal-length float32 call runs as one persistent launch, within
    fp32 tolerance of torch, and gives the per-step plan's bits (the same call on one vector core, which
    keeps the per-step plan): the same K order on the Cube, the same cell."""
    ascend_lstm.build(ascend_tree)
    data = TL.make_data(cfg)
    ref, gates = TL.references(cfg, data)
    a = TL.api_inputs(cfg, data, "float32")
    flags = TL.flags(cfg, train)
    fwd = ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **flags)
    assert _launched() == (cfg.L * cfg.D, 0), ascend_lstm.LAUNCHES["fwd"]
    TL.check_forward(cfg, fwd, ref, gates, "float32", train=train)
    steps = ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **flags, **PER_STEP)
    assert _launched() == (0, cfg.L * cfg.D * cfg.T), ascend_lstm.LAUNCHES["fwd"]
    for k, (got, want) in enumerate(zip(fwd, steps)):
        assert np.array_equal(_f32(got), _f32(want)), f"output {k}"


@needs_gxx
@pytest.mark.parametrize("cfg", EQUAL_LENGTHS)
def test_the_persistent_backward_is_the_per_step_plan_bit_for_bit(ascend_tree, cfg):
    """Every layer and direction of an equal-length float32 backward runs as one persistent launch, within
    fp32 tolerance of torch, and gives the per-step plan's bits (the same call on one vector core): the
    same K order of dgates . W_hh on the Cube, the same cell."""
    ascend_lstm.build(ascend_tree)
    data = TL.make_data(cfg)
    ref, _ = TL.references(cfg, data)
    a = TL.api_inputs(cfg, data, "float32")
    flags = TL.flags(cfg)
    fwd = ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **flags)
    saved = fwd[3:]
    bwd = ascend_lstm.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"], a["params"],
                                    *saved, **flags)
    assert _launched("bwd") == (cfg.L * cfg.D, 0), ascend_lstm.LAUNCHES["bwd"]
    TL.check_backward(cfg, bwd, ref, a, "float32")
    steps = ascend_lstm.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"], a["params"],
                                      *saved, **flags, **PER_STEP)
    assert _launched("bwd") == (0, cfg.L * cfg.D * cfg.T), ascend_lstm.LAUNCHES["bwd"]
    _assert_same_backward(cfg, bwd, steps)


def _persistent_is_the_per_step_plan(ascend_tree, cfg, dtype, **device):
    """cfg's forward (train) and backward of ``dtype`` on the persistent kernels (on ``device``: the twin's
    core counts) within tolerance of torch, and bit for bit the per-step plan's."""
    ascend_lstm.build(ascend_tree)
    data = TL.make_data(cfg)
    data = TL.rounded_data(data, dtype) if dtype != "float32" else data
    ref, gates = TL.references(cfg, data)
    a = TL.api_inputs(cfg, data, dtype)
    flags = TL.flags(cfg)
    fwd = ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **flags, **device)
    assert _launched() == (cfg.L * cfg.D, 0), ascend_lstm.LAUNCHES["fwd"]
    assert all(dtype in n for n in ascend_lstm.LAUNCHES["fwd"] if "persistent" in n), ascend_lstm.LAUNCHES["fwd"]
    TL.check_forward(cfg, fwd, ref, gates, dtype)
    bwd = ascend_lstm.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"], a["params"],
                                    *fwd[3:], **flags, **device)
    assert _launched("bwd") == (cfg.L * cfg.D, 0), ascend_lstm.LAUNCHES["bwd"]
    TL.check_backward(cfg, bwd, ref, a, dtype)
    steps = ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **flags, **PER_STEP)
    assert _launched() == (0, cfg.L * cfg.D * cfg.T), ascend_lstm.LAUNCHES["fwd"]
    for k, (got, want) in enumerate(zip(fwd, steps)):
        assert np.array_equal(_f32(got), _f32(want), equal_nan=True), f"forward output {k}"
    steps = ascend_lstm.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"], a["params"],
                                      *fwd[3:], **flags, **PER_STEP)
    assert _launched("bwd") == (0, cfg.L * cfg.D * cfg.T), ascend_lstm.LAUNCHES["bwd"]
    _assert_same_backward(cfg, bwd, steps)


@needs_gxx
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cfg", EQUAL_LENGTHS[:4] + TL.LOW_CASES[:1])
def test_reduced_precision_runs_persistent_with_the_per_step_plans_bits(ascend_tree, cfg, dtype):
    """float16 / bfloat16 calls run both passes of every layer and direction as one persistent launch
    (the GEMMs on the call's dtype, each vector core rounding its own columns of h and of dgates into the
    copies the GEMMs read), within the dtype's tolerance of torch, and give the per-step plan's bits
    (the same call on one vector core), forward and backward."""
    _persistent_is_the_per_step_plan(ascend_tree, cfg, dtype)


@needs_gxx
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("cfg", PACKED)
def test_packed_sequences_run_persistent_with_the_per_step_plans_bits(ascend_tree, cfg, dtype):
    """With batchSizes every layer and direction runs as one persistent launch in both passes (each step's
    batch size read inside the kernel: rows past it keep their state and are not written; in reverse a
    sequence starts at its own last step, from h0 and c0), within tolerance of torch, and gives the
    per-step plan's bits (the same call on one vector core), forward and backward."""
    _persistent_is_the_per_step_plan(ascend_tree, cfg, dtype)


@needs_gxx
@pytest.mark.parametrize("dtype,cfg", [
    ("float32", TL.Cfg(L=1, D=2, T=3, B=3, I=5, H=651, lengths=[3, 2, 1], seed=40)),
    ("float16", TL.Cfg(L=1, D=1, T=2, B=2, I=5, H=977, lengths=[2, 1], seed=41)),
], ids=["float32 H=651 D=2", "float16 H=977"])
def test_a_slice_past_l1_is_streamed_with_the_per_step_plans_bits(ascend_tree, dtype, cfg):
    """Where no block's W_hh slice fits L1 (float32 past H = 640, float16 past 960 on the target's 20
    blocks: the twin told of the target's 40 vector cores) the persistent kernels stream it, a K chunk of
    the four gates at a time at every step, instead of falling back to the per-step plan: one launch per
    pass, within tolerance of torch and the per-step plan's bits (H odd: K's tail past H zero from the copy,
    past 4H from the zeroed chunk buffer the backward reuses)."""
    from fusedgrad.lowering.ascend import persistent

    assert persistent.split(cfg.H, dtype) is None and persistent.host_split(cfg.H, dtype)[2]
    _persistent_is_the_per_step_plan(ascend_tree, cfg, dtype, cores=2 * persistent.blocks_at_most())


@needs_gxx
def test_the_streamed_slice_is_double_buffered(ascend_tree):
    """Streamed, each cube core copies chunk k + 1 of the slice and its A tile into the other of two L1
    buffers while MTE1 may still load chunk k: in both passes the twin counts, for each block and step, at
    least one GM -> L1 copy a chunk past the step's first that nothing orders after an earlier load (one
    buffer makes every copy wait for the loads before it); a slice held in L1 (H = 96) counts none."""
    from fusedgrad.lowering.ascend import cube, persistent

    ascend_lstm.build(ascend_tree)
    bk = cube.tiles("float32")[2]
    for H, stream in ((651, True), (96, False)):
        cfg = TL.Cfg(T=2, B=2, I=5, H=H, seed=43)
        a, flags = TL.api_inputs(cfg, TL.make_data(cfg), "float32"), TL.flags(cfg)
        device = {"cores": 2 * persistent.blocks_at_most()}
        fwd = ascend_lstm.lstm_forward(a["input"], a["hx"], a["params"], **flags, **device)
        ascend_lstm.lstm_backward(a["grad_y"], a["grad_hy"], a["grad_cy"], a["input"], a["hx"], a["params"],
                                  *fwd[3:], **flags, **device)
        blocks, _, streamed = persistent.host_split(H)
        assert streamed == stream and _launched() == (1, 0) and _launched("bwd") == (1, 0), H
        for mode, k in (("fwd", H), ("bwd", 4 * H)):
            beside = ascend_lstm.COUNTERS[mode]["l1_copies_beside_mte1"]
            if stream:
                assert beside >= blocks * cfg.T * (-(-k // bk) - 1), (mode, beside)
            else:
                assert beside == 0, (mode, beside)


def _params(rng, H, I, L=1, D=1):
    out = []
    for l in range(L):
        for _ in range(D):
            out += [rng.uniform(-0.3, 0.3, s).astype(np.float32)
                    for s in ((4 * H, I if l == 0 else D * H), (4 * H, H), (4 * H,), (4 * H,))]
    return out


def _with_and_without_train(x, params, bias, L):
    """Bidirectional forwards of L layers without and with train, every layer persistent, the same output,
    hy and cy bits: ({train: GM bytes moved}, the forward with train's results)."""
    moved, outs = {}, {}
    for train in (False, True):
        fwd = ascend_lstm.lstm_forward(x, [], params, bias, L, 0.0, train, True)
        assert _launched() == (L * 2, 0), ascend_lstm.LAUNCHES["fwd"]
        c = ascend_lstm.COUNTERS["fwd"]
        moved[train], outs[train] = c["gm_read"] + c["gm_write"], fwd[:3]
    for k, (got, want) in enumerate(zip(outs[False], outs[True])):
        assert np.array_equal(_f32(got), _f32(want)), f"output {k}"
    return moved, fwd


@needs_gxx
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_cells_take_the_callers_tensors(ascend_tree, dtype):
    """A float16 / bfloat16 call's cells write h and the activations and read c and the activations in
    the call's dtype: the forward rounds only c into the caller's tensors (c's recurrence is fp32), so a
    forward with train moves exactly c's rounding (an fp32 read and a write in the dtype a saved element)
    and the five activations' writes in the dtype more than one without (whose cells keep them in UB), and
    the same output, hy and cy; no widening copy before the backward but of dh
    and dc (the cells read them in fp32; the top layer's cell reads the caller's dy, a lower layer's the
    fp32 GEMM output)."""
    ascend_lstm.build(ascend_tree)
    rng = np.random.default_rng(6)
    T, B, I, H, L, D = 3, 5, 8, 40, 2, 2
    params = [p.astype(dtype) for k, p in enumerate(_params(rng, H, I, L, D)) if k % 4 < 2]  # no biases
    x = rng.standard_normal((T, B, I)).astype(dtype)
    dy = rng.standard_normal((T, B, D * H)).astype(dtype)
    moved, fwd = _with_and_without_train(x, params, False, L)
    rounded = [n for n in ascend_lstm.LAUNCHES["fwd"] if n.endswith("_narrow")]
    assert len(rounded) == L * D + 1, ascend_lstm.LAUNCHES["fwd"]  # each layer and direction's c, and cy
    assert moved[True] - moved[False] == L * D * T * B * H * (4 + 6 * np.dtype(dtype).itemsize), moved
    ascend_lstm.lstm_backward(dy, None, None, x, [], params, *fwd[3:], False, L, 0.0, True, True)
    assert _launched("bwd") == (L * D, 0), ascend_lstm.LAUNCHES["bwd"]
    widened = [n for n in ascend_lstm.LAUNCHES["bwd"] if n.endswith("_widen")]
    assert len(widened) == 2, ascend_lstm.LAUNCHES["bwd"]
    assert sum(n.endswith("_dy_persistent_bwd") for n in ascend_lstm.LAUNCHES["bwd"]) == D, ascend_lstm.LAUNCHES["bwd"]


@needs_gxx
def test_inference_writes_no_activations(ascend_tree):
    """Without train the persistent forward's cells write h and c only: a float32 forward with train moves
    exactly the five activations' writes more than one without (their saved tensors), with the same output,
    hy and cy bits, on both directions of two layers."""
    ascend_lstm.build(ascend_tree)
    rng = np.random.default_rng(8)
    T, B, I, H, L, D = 3, 5, 8, 40, 2, 2
    params = _params(rng, H, I, L, D)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    moved, _ = _with_and_without_train(x, params, True, L)
    assert moved[True] - moved[False] == L * D * 5 * T * B * H * 4, moved


@needs_gxx
def test_w_hh_is_read_once_per_call(ascend_tree):
    """A step more moves less than W_hh's bytes (the per-step plan reads W_hh at every step); and the
    twin's count is the formula's (benchmarks/ascend_lstm.py), W_hh once, c_{t-1} per step."""
    ascend_lstm.build(ascend_tree)
    rng = np.random.default_rng(3)
    T, B, I, H = 4, 2, 8, 96
    params = _params(rng, H, I)
    moved = []
    for steps in (T, 2 * T):
        x = rng.standard_normal((steps, B, I)).astype(np.float32)
        ascend_lstm.lstm_forward(x, [], params, True, 1, 0.0, True, False)
        assert _launched() == (1, 0)
        c = ascend_lstm.COUNTERS["fwd"]
        moved.append(c["gm_read"] + c["gm_write"])
        blocks = bench.persistent_split(H)[0]
        assert moved[-1] == bench.forward_bytes(steps, B, I, H, 1, 1, blocks=blocks)
    assert (moved[1] - moved[0]) / T < 4 * H * H * 4, moved


@needs_gxx
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_both_passes_read_w_hh_once_per_call(ascend_tree, dtype):
    """A step more of the forward or the backward moves less than W_hh's bytes, float32 and float16 (the
    per-step plan reads W_hh at every step, which the same call on one vector core shows)."""
    ascend_lstm.build(ascend_tree)
    rng = np.random.default_rng(5)
    B, I, H = 2, 8, 96
    params = [p.astype(dtype) for p in _params(rng, H, I)]
    moved = {}
    for steps in (4, 8):
        x = rng.standard_normal((steps, B, I)).astype(dtype)
        dy = rng.standard_normal((steps, B, H)).astype(dtype)
        for plan, rows in (("persistent", {}), ("per step", PER_STEP)):
            fwd = ascend_lstm.lstm_forward(x, [], params, True, 1, 0.0, True, False, **rows)
            assert _launched() == ((1, 0) if plan == "persistent" else (0, steps)), ascend_lstm.LAUNCHES["fwd"]
            c = ascend_lstm.COUNTERS["fwd"]
            moved["fwd", plan, steps] = c["gm_read"] + c["gm_write"]
            ascend_lstm.lstm_backward(dy, None, None, x, [], params, *fwd[3:], True, 1, 0.0, True, False, **rows)
            assert _launched("bwd") == ((1, 0) if plan == "persistent" else (0, steps)), ascend_lstm.LAUNCHES["bwd"]
            c = ascend_lstm.COUNTERS["bwd"]
            moved["bwd", plan, steps] = c["gm_read"] + c["gm_write"]
    w_hh = 4 * H * H * np.dtype(dtype).itemsize
    for mode in ("fwd", "bwd"):
        assert (moved[mode, "persistent", 8] - moved[mode, "persistent", 4]) / 4 < w_hh, moved
        assert (moved[mode, "per step", 8] - moved[mode, "per step", 4]) / 4 > w_hh, moved


@needs_gxx
def test_the_same_bits_for_two_cube_core_counts(ascend_tree):
    """On 24 and on 3 cube cores (FG_TWIN_CUBE_CORES: the sequence GEMM's tiles spread otherwise, the
    persistent split is the same) and on 1 (the split needs 2 blocks: the per-step plan), the same bits,
    forward and backward."""
    ascend_lstm.build(ascend_tree)
    rng = np.random.default_rng(4)
    T, B, I, H = 3, 5, 7, 100
    assert bench.persistent_split(H)[0] == 2
    params = _params(rng, H, I, L=2, D=2)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    dy = rng.standard_normal((T, B, 2 * H)).astype(np.float32)
    runs, grads = [], []
    for cores, persistent in ((24, 4), (3, 4), (1, 0)):
        runs.append(ascend_lstm.lstm_forward(x, [], params, True, 2, 0.0, True, True, cube_cores=cores))
        assert _launched()[0] == persistent, (cores, ascend_lstm.LAUNCHES["fwd"])
        dx, (dh0, dc0), dparams = ascend_lstm.lstm_backward(dy, None, None, x, [], params, *runs[-1][3:], True, 2,
                                                            0.0, True, True, cube_cores=cores)
        assert _launched("bwd")[0] == persistent, (cores, ascend_lstm.LAUNCHES["bwd"])
        grads.append([dx, dh0, dc0, *dparams])
    for other in runs[1:]:
        for got, want in zip(other, runs[0]):
            assert np.array_equal(got, want)
    for other in grads[1:]:
        for got, want in zip(other, grads[0]):
            assert np.array_equal(got, want)
