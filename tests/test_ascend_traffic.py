"""GM traffic of the generated Ascend operators on the twin (benchmarks/ascend_traffic.py): bytes
moved between GM and UB over the compulsory bytes (inputs read once, outputs written once).  The
counts are exact and the same every run, so the bounds below are regression checks of the kernels'
data movement, not of time: a LayerNorm row that fits one UB tile is read once (x, dy) and gamma
once per 8-row group; longer rows are read twice; the LSTM cell reads and writes everything once,
plus the grad_bias partial sums."""
import functools
import shutil
import sys
from pathlib import Path

import pytest

import build_cache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import ascend_traffic  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler (g++) on this machine")


def _cached(cmd, exe):
    """The drivers' g++ builds through build_cache (an unchanged build is a copy)."""
    return build_cache.run(cmd, outputs=[exe])


@pytest.fixture(scope="module")
def exes(ascend_tree, tmp_path_factory):
    out = {}
    for op in ("layer_norm_backward", "lstm_cell_backward"):
        for dtype in ("float32", "float16"):
            out[op, dtype] = ascend_traffic.build(op, dtype, tmp_path_factory.mktemp(f"{op}_{dtype}"), ascend_tree,
                                                  run=_cached)
    return out


@pytest.mark.parametrize("op, dtype, a, b, lo, hi", [
    ("layer_norm_backward", "float32", 40, 1024, 1.0, 1.25),  # one tile per row
    ("layer_norm_backward", "float16", 40, 1024, 1.0, 1.4),
    ("layer_norm_backward", "float32", 16, 5000, 1.0, 2.0),  # two tiles: x and dy read twice
    ("lstm_cell_backward", "float32", 40, 256, 1.0, 1.1),
    ("lstm_cell_backward", "float16", 40, 256, 1.0, 1.2),
])
def test_traffic_stays_near_the_compulsory_bytes(exes, op, dtype, a, b, lo, hi):
    read, written, need = ascend_traffic.measure(exes[op, dtype], op, dtype, a, b)
    assert written >= ascend_traffic.ELEM[dtype] * a * b  # at least the main output, once
    assert lo <= (read + written) / need <= hi, (read, written, need)


def test_the_benchmark_prints_its_table(capsys, monkeypatch):
    monkeypatch.setattr(ascend_traffic, "build", functools.partial(ascend_traffic.build, run=_cached))
    assert ascend_traffic.main(["--op", "layer_norm_backward", "--dtype", "float32", "--shape", "8,64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["op", "dtype", "shape", "read", "MB", "written", "MB", "ratio"]
    row = lines[1].split()
    assert row[:3] == ["layer_norm_backward", "float32", "8x64"] and float(row[-1]) >= 1.0
