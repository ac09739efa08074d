"""The full LSTM's step forward on Ascend's vector cores (te_defs/lstm_cell_forward.py through the
"gates" pattern of lowering/ascend; schedules/ascend/lstm_cell_forward.py), compiled with g++ against
the CPU twin and run there: against the float64 reference at odd sizes and strided rows, the same
bits on any core count, and IEEE through the formulas (tanh(+-Inf) = +-1, NaN stays NaN)."""
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fusedgrad import te_defs
from fusedgrad.lowering.ascend import fixed, gates, kernels
from fusedgrad.schedules.ascend import STEP_KERNELS

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
TWIN = Path(__file__).with_name("ascend_twin")
RULE = next(r for r in STEP_KERNELS if r.op == "lstm_cell_forward")
OUTPUTS = ("hy", "cy", "i", "f", "g", "o", "tanhc")

DRIVER = r'''
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "kernel.cpp"

// driver N H PAD MAX_CORES IN OUT: gates [N, 4H + PAD] and cx [N, H + PAD] raw in IN; the 7 outputs
// [N, H + PAD] each to OUT; prints the cores used
int main(int argc, char **argv) {
    if (argc != 7) return 2;
    uint32_t n = atoi(argv[1]), h = atoi(argv[2]), pad = atoi(argv[3]), max_cores = atoi(argv[4]);
    FgLcfTiling t = fg_lcf_tiling(n, h, fg_lcf_ub_per_elem(4u, STREAMS, SLOTS), 192u * 1024u - 8u * 1024u, max_cores);
    t.s_cx = t.s_hy = t.s_cy = t.s_i = t.s_f = t.s_g = t.s_o = t.s_tanhc = h + pad;
    t.s_gates = 4u * h + pad;
    std::vector<float> gates((size_t)n * (4 * h + pad)), cx((size_t)n * (h + pad)), ws(16);
    std::vector<std::vector<float>> out(7, std::vector<float>((size_t)n * (h + pad), 7.0f));
    FILE *f = fopen(argv[5], "rb");
    if (fread(gates.data(), 4, gates.size(), f) != gates.size() || fread(cx.data(), 4, cx.size(), f) != cx.size()) return 3;
    fclose(f);
    try {
        fg_twin::launch(t.cores, [&] {
            KERNEL((uint8_t *)gates.data(), (uint8_t *)cx.data(), (uint8_t *)out[0].data(), (uint8_t *)out[1].data(),
                   (uint8_t *)out[2].data(), (uint8_t *)out[3].data(), (uint8_t *)out[4].data(), (uint8_t *)out[5].data(),
                   (uint8_t *)out[6].data(), (uint8_t *)ws.data(), (uint8_t *)&t);
        });
    } catch (const fg_twin::Violation &e) {
        fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    f = fopen(argv[6], "wb");
    for (auto &o : out) fwrite(o.data(), 4, o.size(), f);
    fclose(f);
    printf("%u\n", t.cores);
    return 0;
}
'''


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("step")
    (v,) = gates.variants(RULE)
    source, sizes = gates.step_kernel_file(RULE, "float32")
    (tmp / "kernel.cpp").write_text(source)
    (tmp / "fg_lstm_cell_forward_tiling.h").write_text(fixed.text("lstm_cell_forward_tiling.h"))
    (tmp / "fg_lstm_cell_backward_tiling.h").write_text(kernels.tiling_header("lstm_cell_backward"))
    nfloat, nstreams = sizes[v.tag]
    from fusedgrad.lowering import naming
    (tmp / "main.cpp").write_text(DRIVER.replace("KERNEL", naming.ascend_kernel(RULE.short, "float32", v.tag))
                                  .replace("STREAMS", f"{nstreams}u").replace("SLOTS", f"{nfloat}u"))
    exe = tmp / "driver"
    cmd = [CXX, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}", f"-I{tmp}", "-o", str(exe),
           str(tmp / "main.cpp")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return exe


def _run(exe, tmp: Path, gates_: np.ndarray, cx: np.ndarray, pad: int, cores: int):
    n, h = cx.shape
    g = np.zeros((n, 4 * h + pad), np.float32)
    g[:, :4 * h] = gates_
    c = np.zeros((n, h + pad), np.float32)
    c[:, :h] = cx
    (tmp / "in").write_bytes(g.tobytes() + c.tobytes())
    proc = subprocess.run([str(exe), str(n), str(h), str(pad), str(cores), str(tmp / "in"), str(tmp / "out")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = np.frombuffer((tmp / "out").read_bytes(), np.float32).reshape(7, n, h + pad)
    assert (raw[:, :, h:] == 7).all(), "a kernel wrote between the rows"
    return {name: raw[k, :, :h] for k, name in enumerate(OUTPUTS)}, int(proc.stdout)


@pytest.mark.parametrize("n, h, pad", [(1, 1, 0), (3, 5, 2), (17, 37, 1), (70, 300, 0), (9, 4100, 3)])
def test_the_step_forward_matches_float64(driver, tmp_path, n, h, pad):
    rng = np.random.default_rng(n * 1000 + h)
    g = (rng.standard_normal((n, 4 * h)) * 3).astype(np.float32)
    cx = rng.standard_normal((n, h)).astype(np.float32)
    got, _ = _run(driver, tmp_path, g, cx, pad, 48)
    want = te_defs.get("lstm_cell_forward").reference(gates=g.astype(np.float64), cx=cx.astype(np.float64))
    for name in OUTPUTS:
        assert np.abs(got[name] - want[name]).max() <= 2e-6 * (1 + np.abs(want[name]).max()), name


def test_the_same_bits_on_any_core_count(driver, tmp_path):
    rng = np.random.default_rng(5)
    g = rng.standard_normal((40, 4 * 96)).astype(np.float32)
    cx = rng.standard_normal((40, 96)).astype(np.float32)
    runs = [_run(driver, tmp_path, g, cx, 0, cores) for cores in (1, 5, 48)]
    assert len({r[1] for r in runs}) == 3
    for name in OUTPUTS:
        assert all(np.array_equal(r[0][name], runs[0][0][name]) for r in runs[1:]), name


def test_inf_and_nan_follow_ieee(driver, tmp_path):
    """sigmoid(+-Inf) = 1, 0 and tanh(+-Inf) = +-1 exactly; a NaN gate makes its own outputs NaN."""
    g = np.zeros((1, 4 * 4), np.float32)
    g[0, 0:4] = [np.inf, -np.inf, np.nan, 0.0]  # i
    g[0, 4:8] = [0.0, 0.0, 0.0, np.inf]  # f
    g[0, 8:12] = [np.inf, np.inf, 0.0, -np.inf]  # g
    g[0, 12:16] = [np.inf, np.inf, np.inf, -np.inf]  # o
    cx = np.float32([[1.0, 2.0, 3.0, 4.0]])
    got, _ = _run(driver, tmp_path, g, cx, 0, 1)
    assert got["i"][0, 0] == 1 and got["i"][0, 1] == 0 and np.isnan(got["i"][0, 2])
    assert got["g"][0, 0] == 1 and got["g"][0, 3] == -1 and got["f"][0, 3] == 1 and got["o"][0, 3] == 0
    assert got["cy"][0, 0] == 0.5 + 1.0 and np.isnan(got["cy"][0, 2]) and np.isnan(got["hy"][0, 2])
