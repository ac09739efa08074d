"""The persistent forward's design arithmetic (docs/BENCHMARKS.md, "the persistent design";
benchmarks/ascend_lstm.py --model): the per-step plan's traffic formula, whose terms the persistent
column shares, is what the twin counts for the package (generated/ascend/lstm), byte for byte; and the
core split keeps a block's W_hh slice within L1 and its biases within the BiasTable."""
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

import ascend_lstm

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_ascend_lstm", ROOT / "benchmarks" / "ascend_lstm.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler (g++) on this machine")


@needs_gxx
@pytest.mark.parametrize("T, B, I, H, L, D", [(3, 5, 6, 8, 2, 2), (4, 1, 3, 16, 1, 1), (2, 130, 7, 40, 1, 2)])
def test_the_per_step_formula_is_what_the_twin_counts(ascend_tree, T, B, I, H, L, D):
    """The forward (train, hx = [], biases) moves exactly the formula's bytes: the sequence and per-step
    GEMMs' tiles (A per column of tiles, a one-row A 16 times, more than 128 rows two row tiles), the step
    kernels' streams, the zero states and the copies."""
    ascend_lstm.build(ascend_tree)
    rng = np.random.default_rng(0)
    params = []
    for l in range(L):
        for _ in range(D):
            params += [rng.uniform(-0.5, 0.5, s).astype(np.float32)
                       for s in ((4 * H, I if l == 0 else D * H), (4 * H, H), (4 * H,), (4 * H,))]
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    ascend_lstm.lstm_forward(x, [], params, True, L, 0.0, True, D == 2)
    c = ascend_lstm.COUNTERS["fwd"]
    assert c["gm_read"] + c["gm_write"] == bench.forward_bytes(T, B, I, H, L, D)


def test_the_split_fits_l1_and_the_bias_table():
    """Each block's W_hh slice beside two A tiles fits L1, its 4 * units fp32 biases the BiasTable, the
    blocks cover H on at most the cube cores, and 16 more units per block would not fit or not be needed;
    no split past the largest fitting H."""
    from fusedgrad.lowering.ascend import cube

    bm, _, bk = cube.tiles("float32")
    l1 = cube.FACTS["l1_kib"] * 1024
    fits = lambda u, H: 4 * u * H * 4 + 2 * bm * bk * 4 + 4 * u * 4 <= l1 and 4 * u * 4 <= bench.BIAS_TABLE
    largest = 0
    for H in range(1, 1200):
        split = bench.persistent_split(H)
        if split is None:
            continue
        largest = H
        blocks, units = split
        assert units % 16 == 0 and fits(units, H), (H, split)
        assert blocks <= cube.FACTS["cube_cores"] and (blocks - 1) * units < H <= blocks * units, (H, split)
        assert not fits(units + 16, H) or -(-H // (units + 16)) == blocks, (H, split)
    assert bench.persistent_split(largest + 1) is None
    assert bench.persistent_split(768) == (24, 32) and largest == 768  # fp32, 24 cube cores, 512 KiB of L1

