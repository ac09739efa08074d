"""The AscendC LayerNorm backward kernels generated from te_defs/layer_norm_backward.py
(lowering/ascend/), compiled with g++ against the AscendC CPU twin (tests/ascend_twin) and run on
it: against the float64 reference for fp32 and fp16, odd sizes, strided rows, rows longer than a
UB tile, the same bits on any core count, and NaN propagation.
"""
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import build_cache

from fusedgrad import te_defs

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
TWIN = Path(__file__).with_name("ascend_twin")
NP = {"float32": np.float32, "float16": np.float16}
TOL = {"float32": 2e-6, "float16": 4e-3}

DRIVER = r'''
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "kernel_operator.h"
#include "KERNEL_FILE"
#include "fg_layer_norm_backward_sizes.h"

typedef TYPE T;
// driver M D PAD MAX_CORES REDUCE_BLOCKS UB_BYTES IN OUT
int main(int argc, char **argv) {
    if (argc != 9) return 2;
    uint32_t m = atoi(argv[1]), d = atoi(argv[2]), pad = atoi(argv[3]), cores = atoi(argv[4]);
    int64_t reduce_blocks = atoi(argv[5]);
    uint32_t ub = atoi(argv[6]);
    FgLngTiling t = fg_lng_tiling(m, d, PER_ELEM, ub, cores, 1e-5f);
    t.s_x = t.s_dy = t.s_dx = d + pad;
    size_t rows = (size_t)m * (d + pad);
    std::vector<T> x(rows), dy(rows), mean(m), var(m), gamma(d), dx(rows), dg(d), db(d);
    std::vector<float> ws((size_t)t.groups * 2 * d + 1);
    FILE *f = fopen(argv[7], "rb");
    size_t ok = fread(x.data(), sizeof(T), rows, f) == rows;
    ok &= fread(dy.data(), sizeof(T), rows, f) == rows;
    ok &= fread(mean.data(), sizeof(T), m, f) == m;
    ok &= fread(var.data(), sizeof(T), m, f) == m;
    ok &= fread(gamma.data(), sizeof(T), d, f) == d;
    fclose(f);
    if (!ok) return 3;
    try {
        fg_twin::launch(t.cores, [&] { KERNEL((uint8_t *)x.data(), (uint8_t *)dy.data(), (uint8_t *)mean.data(),
                                              (uint8_t *)var.data(), (uint8_t *)gamma.data(), (uint8_t *)dx.data(),
                                              (uint8_t *)ws.data(), (uint8_t *)&t); });
        fg_twin::launch(reduce_blocks, [&] { REDUCE((uint8_t *)ws.data(), (uint8_t *)dg.data(), (uint8_t *)db.data(),
                                                    (uint8_t *)&t); });
    } catch (const fg_twin::Violation &e) {
        fprintf(stderr, "%s\n", e.what());
        return 4;
    }
    f = fopen(argv[8], "wb");
    fwrite(dx.data(), sizeof(T), rows, f);
    fwrite(dg.data(), sizeof(T), d, f);
    fwrite(db.data(), sizeof(T), d, f);
    fclose(f);
    printf("%u %u\n", t.cores, t.tile);
    return 0;
}
'''


@pytest.fixture(scope="module")
def drivers(ascend_tree, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ascend_ln")
    src = ascend_tree / "layer_norm_backward" / "op_kernel"
    out = {}
    for dtype in ("float32", "float16"):
        text = (DRIVER.replace("KERNEL_FILE", f"fg_layer_norm_backward_{dtype}.cpp")
                .replace("TYPE", "float" if dtype == "float32" else "half")
                .replace("PER_ELEM", f"FG_LNG_{dtype.upper()}_PER_ELEM")
                .replace("REDUCE", f"fg_lng_{dtype}_reduce").replace("KERNEL", f"fg_lng_{dtype}"))
        main = tmp / f"ln_{dtype}.cpp"
        main.write_text(text)
        exe = tmp / f"ln_{dtype}"
        proc = build_cache.run([CXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}", f"-I{src}",
                                "-o", str(exe), str(main)], outputs=[exe])
        assert proc.returncode == 0, proc.stderr[-4000:]
        out[dtype] = exe
    return out, tmp


def _run(drivers, dtype, s, pad=0, cores=8, reduce_blocks=3, ub=184 * 1024):
    exes, tmp = drivers
    dt = NP[dtype]
    M, D = s["x"].shape

    def padded(a):
        out = np.zeros((M, D + pad), dt)
        out[:, :D] = a
        return out
    (tmp / "in.bin").write_bytes(padded(s["x"]).tobytes() + padded(s["dy"]).tobytes() +
                                 s["mean"].astype(dt).tobytes() + s["var"].astype(dt).tobytes() +
                                 s["gamma"].astype(dt).tobytes())
    proc = subprocess.run([str(exes[dtype]), str(M), str(D), str(pad), str(cores), str(reduce_blocks), str(ub),
                           str(tmp / "in.bin"), str(tmp / "out.bin")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    raw = np.frombuffer((tmp / "out.bin").read_bytes(), dt)
    dx = raw[:M * (D + pad)].reshape(M, D + pad)[:, :D]
    used, tile = (int(v) for v in proc.stdout.split())
    return dx, raw[M * (D + pad):M * (D + pad) + D], raw[M * (D + pad) + D:], used, tile


def _sample(M, D, dtype, seed=0):
    op = te_defs.get("layer_norm_backward")
    return {k: a.astype(NP[dtype]) for k, a in op.sample({"M": M, "D": D}, np.random.default_rng(seed)).items()}


def _check(s, dx, dg, db, dtype):
    op = te_defs.get("layer_norm_backward")
    ref = op.reference(**{k: a.astype(np.float64) for k, a in s.items()})
    for name, got in (("dx", dx), ("dgamma", dg), ("dbeta", db)):
        want = ref[name]
        err = np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() + 1)
        assert err <= TOL[dtype], (name, err)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("M, D, pad", [(1, 1, 0), (13, 37, 5), (40, 300, 0), (9, 16, 2)])
def test_kernels_match_the_reference(drivers, dtype, M, D, pad):
    s = _sample(M, D, dtype, seed=M + D)
    dx, dg, db, _, _ = _run(drivers, dtype, s, pad=pad)
    _check(s, dx, dg, db, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rows_longer_than_a_tile_and_any_core_count_give_the_same_bits(drivers, dtype):
    s = _sample(37, 1000, dtype, seed=3)
    runs = [_run(drivers, dtype, s, cores=c, reduce_blocks=b, ub=ub)
            for c, b, ub in ((1, 1, 184 * 1024), (3, 2, 184 * 1024), (8, 5, 184 * 1024))]
    assert [r[3] for r in runs] == [1, 3, 5]  # 5 groups of 8 rows
    _check(s, *runs[0][:3], dtype)
    for r in runs[1:]:
        for a, b in zip(runs[0][:3], r[:3]):
            assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    # a small UB: rows in several tiles, the lanes carried across them -- the same bits again
    small = _run(drivers, dtype, s, ub=24 * 1024)
    assert small[4] < 1000
    for a, b in zip(runs[0][:3], small[:3]):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))


def test_nan_stays_in_its_row_and_column(drivers):
    s = _sample(12, 40, "float32", seed=4)
    s["x"][3, 7] = np.nan
    dx, dg, db, _, _ = _run(drivers, "float32", s)
    assert np.isnan(dx[3]).all() and not np.isnan(np.delete(dx, 3, axis=0)).any()
    assert np.isnan(dg[7]) and not np.isnan(np.delete(dg, 7)).any() and not np.isnan(db).any()
