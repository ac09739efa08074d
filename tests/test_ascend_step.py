"""The full LSTM's step kernels on Ascend's vector cores (schedules/ascend STEP_KERNELS: the step forward,
te_defs/lstm_cell_forward.py, and the step backward, te_defs/lstm_step_backward.py, through the "gates"
pattern of lowering/ascend), compiled with g++ against the CPU twin and run there: against the float64
reference at odd sizes and strided rows, the same bits on any core count, and IEEE through the forward's
formulas (tanh(+-Inf) = +-1, NaN stays NaN)."""
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import build_cache

from fusedgrad import te_defs
from fusedgrad.lowering import naming
from fusedgrad.lowering.ascend import fixed, gates, kernels
from fusedgrad.schedules.ascend import STEP_KERNELS

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
TWIN = Path(__file__).with_name("ascend_twin")
RULES = {r.op: r for r in STEP_KERNELS}

DRIVER = r'''
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "kernel.cpp"

// driver N H PAD MAX_CORES IN OUT: the inputs, in argument order, raw in IN (rows of WIDTH + PAD); the
// outputs, in argument order, to OUT; prints the cores used
int main(int argc, char **argv) {
    if (argc != 7) return 2;
    uint32_t n = atoi(argv[1]), h = atoi(argv[2]), pad = atoi(argv[3]), max_cores = atoi(argv[4]);
    TILING t = TILING_FN(n, h, UB_FN(4u, STREAMS, SLOTS), 192u * 1024u - 8u * 1024u, max_cores);
    const uint32_t width[] = {WIDTHS};
    const bool is_input[] = {INPUTS};
    const int args = sizeof(width) / sizeof(width[0]);
STRIDES
    std::vector<std::vector<float>> buf(args);
    std::vector<float> ws(16);
    FILE *f = fopen(argv[5], "rb");
    for (int a = 0; a < args; ++a) {
        buf[a].assign((size_t)n * (width[a] + pad), 7.0f);
        if (is_input[a] && fread(buf[a].data(), 4, buf[a].size(), f) != buf[a].size()) return 3;
    }
    fclose(f);
    try {
        fg_twin::launch(t.cores, [&] { KERNEL(CALL, (uint8_t *)ws.data(), (uint8_t *)&t); });
    } catch (const fg_twin::Violation &e) {
        fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    f = fopen(argv[6], "wb");
    for (int a = 0; a < args; ++a)
        if (!is_input[a]) fwrite(buf[a].data(), 4, buf[a].size(), f);
    fclose(f);
    printf("%u\n", t.cores);
    return 0;
}
'''


def _args(rule):
    """The kernels' tensor arguments: (GM name, TE name, width in units of H, is an input); an addend
    (the forward's xw, added to gates) is named by its GM argument and has its input's width."""
    spec = te_defs.get(rule.op)
    te = {gm: name for name, gm in rule.gm.items()}
    widths = {s.name: (4 if len(s.kshape) == 3 else 1) for s in spec.inputs + spec.outputs}
    inputs = {s.name for s in spec.inputs}
    for name, more in rule.addends.items():
        for a in more:
            te[a], widths[a] = a, widths[name]
            inputs.add(a)
    return [(gm, te[gm], widths[te[gm]], te[gm] in inputs) for gm in rule.kernel_args[:-2]]


_DRIVERS: dict = {}


def _driver(tmp_path_factory, op):
    if op in _DRIVERS:
        return _DRIVERS[op]
    rule, tmp = RULES[op], tmp_path_factory.mktemp(op)
    (v,) = gates.variants(rule)
    source, sizes = gates.step_kernel_file(rule, "float32")
    (tmp / "kernel.cpp").write_text(source)
    (tmp / f"fg_{rule.tiling_header}.h").write_text(fixed.text(f"{rule.tiling_header}.h"))
    (tmp / "fg_lstm_cell_backward_tiling.h").write_text(kernels.tiling_header("lstm_cell_backward"))
    nfloat, nstreams, outs = sizes[v.tag]
    args = _args(rule)
    short = rule.short
    text = (DRIVER.replace("TILING_FN", f"fg_{short}_tiling").replace("TILING", naming.ascend_tiling(short))
            .replace("UB_FN(4u, STREAMS, SLOTS)", f"fg_step_ub_per_elem(4u, {nstreams}u, {outs}u, {nfloat}u)")
            .replace("WIDTHS", ", ".join(f"{w}u * h" for _, _, w, _ in args))
            .replace("INPUTS", ", ".join("true" if i else "false" for *_, i in args))
            .replace("STRIDES", "\n".join(f"    t.s_{gm} = {w}u * h + pad;" for gm, _, w, _ in args))
            .replace("KERNEL", naming.ascend_kernel(short, "float32", v.tag))
            .replace("CALL", ", ".join(f"(uint8_t *)buf[{k}].data()" for k in range(len(args)))))
    (tmp / "main.cpp").write_text(text)
    exe = tmp / "driver"
    cmd = [CXX, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}", f"-I{tmp}", "-o", str(exe),
           str(tmp / "main.cpp")]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    _DRIVERS[op] = exe
    return exe


def _run(op, exe, tmp: Path, inputs: dict, n: int, h: int, pad: int, cores: int):
    """The kernels' outputs {TE name: [n, width*h]} for float32 ``inputs`` {TE name: [n, width*h]}."""
    args = _args(RULES[op])
    blob = b""
    for _, name, w, is_in in args:
        if is_in:
            a = np.zeros((n, w * h + pad), np.float32)
            a[:, :w * h] = inputs[name]
            blob += a.tobytes()
    (tmp / "in").write_bytes(blob)
    proc = subprocess.run([str(exe), str(n), str(h), str(pad), str(cores), str(tmp / "in"), str(tmp / "out")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw, out, at = np.frombuffer((tmp / "out").read_bytes(), np.float32), {}, 0
    for _, name, w, is_in in args:
        if not is_in:
            a = raw[at:at + n * (w * h + pad)].reshape(n, w * h + pad)
            at += a.size
            assert (a[:, w * h:] == 7).all(), f"{name}: a kernel wrote between the rows"
            out[name] = a[:, :w * h]
    return out, int(proc.stdout)


def _inputs(op, n, h, seed):
    """float32 inputs of ``op`` (the definition's own sample: activations from a real forward)."""
    rng = np.random.default_rng(seed)
    sample = te_defs.get(op).sample({"N": n, "H": h}, rng)
    if op == "lstm_cell_forward":  # the gates as two GEMM results that the kernel adds
        sample["xw"] = rng.standard_normal((n, 4 * h))
        sample["gates"] = sample["gates"].reshape(n, 4 * h) * 3 - sample["xw"]
    return {k: np.asarray(v, np.float32).reshape(n, -1) for k, v in sample.items()}


def _reference(op, ins):
    """float64 outputs of ``op`` for the kernels' float32 inputs (the forward's gates: gates + xw)."""
    f = {k: v.astype(np.float64) for k, v in ins.items()}
    for name, more in RULES[op].addends.items():
        for a in more:
            f[name] = f[name] + f.pop(a)
    return te_defs.get(op).reference(**f)


@pytest.mark.parametrize("op", sorted(RULES))
@pytest.mark.parametrize("n, h, pad", [(1, 1, 0), (3, 5, 2), (17, 37, 1), (70, 300, 0), (9, 4100, 3)])
def test_the_step_kernels_match_float64(tmp_path_factory, tmp_path, op, n, h, pad):
    exe = _driver(tmp_path_factory, op)
    ins = _inputs(op, n, h, n * 1000 + h)
    got, _ = _run(op, exe, tmp_path, ins, n, h, pad, 48)
    want = _reference(op, ins)
    for name, value in got.items():
        w = np.asarray(want[name]).reshape(n, -1)
        assert np.abs(value - w).max() <= 2e-6 * (1 + np.abs(w).max()), name


@pytest.mark.parametrize("op", sorted(RULES))
def test_the_same_bits_on_any_core_count(tmp_path_factory, tmp_path, op):
    exe = _driver(tmp_path_factory, op)
    ins = _inputs(op, 40, 96, 5)
    runs = [_run(op, exe, tmp_path, ins, 40, 96, 0, cores) for cores in (1, 5, 48)]
    assert len({r[1] for r in runs}) == 3
    for name in runs[0][0]:
        assert all(np.array_equal(r[0][name], runs[0][0][name]) for r in runs[1:]), name


def test_inf_and_nan_follow_ieee_in_the_forward(tmp_path_factory, tmp_path):
    """sigmoid(+-Inf) = 1, 0 and tanh(+-Inf) = +-1 exactly; a NaN gate makes its own outputs NaN."""
    exe = _driver(tmp_path_factory, "lstm_cell_forward")
    g = np.zeros((1, 4 * 4), np.float32)
    g[0, 0:4] = [np.inf, -np.inf, np.nan, 0.0]  # i
    g[0, 4:8] = [0.0, 0.0, 0.0, np.inf]  # f
    g[0, 8:12] = [np.inf, np.inf, 0.0, -np.inf]  # g
    g[0, 12:16] = [np.inf, np.inf, np.inf, -np.inf]  # o
    ins = {"gates": g, "xw": np.zeros_like(g), "cx": np.float32([[1.0, 2.0, 3.0, 4.0]])}
    got, _ = _run("lstm_cell_forward", exe, tmp_path, ins, 1, 4, 0, 1)
    assert got["i"][0, 0] == 1 and got["i"][0, 1] == 0 and np.isnan(got["i"][0, 2])
    assert got["g"][0, 0] == 1 and got["g"][0, 3] == -1 and got["f"][0, 3] == 1 and got["o"][0, 3] == 0
    assert got["cy"][0, 0] == 0.5 + 1.0 and np.isnan(got["cy"][0, 2]) and np.isnan(got["hy"][0, 2])


def test_io_gives_tensors_their_own_dtype_and_refuses_what_it_cannot():
    """A float32 kernel with ``io`` (lowering/ascend/gates.py: the persistent kernels' float16 / bfloat16
    cells) reads and writes those GM tensors in their dtype, cast to fp32 in UB on the way in and rounded
    RINT on the way out, every other tensor fp32; io naming no argument, given to a float16 kernel or
    narrowing an input with addends is refused."""
    rule = RULES["lstm_step_backward"]
    (v,) = gates.variants(rule)
    plain = gates.kernel_source(rule, "float32", v)
    text, slots, streams, outs = gates.kernel_source(rule, "float32", v, {"dy": "float16", "dcx": "bfloat16"})
    assert (streams, outs) == plain[2:] and slots == plain[1] + 1  # one cast slot: dy's
    assert "GlobalTensor<half> g_dy;" in text and "GlobalTensor<bfloat16_t> g_dcx;" in text
    assert "GlobalTensor<float> g_dc;" in text and "GlobalTensor<float> g_dgates;" in text
    assert "Cast(f_dy, x_dy, RoundMode::CAST_NONE, n);" in text and "f_dc" not in text
    assert "LocalTensor<bfloat16_t> o = out[" in text and "Cast(o, " in text and "RoundMode::CAST_RINT" in text
    assert "sizeof(half)" in text and "sizeof(bfloat16_t)" in text
    for args, io in (((rule, "float32", v), {"nope": "float16"}), ((rule, "float16", v), {"dy": "float16"}),
                     ((rule, "float32", v), {"dy": "float32"}),
                     ((RULES["lstm_cell_forward"], "float32", gates.variants(RULES["lstm_cell_forward"])[0]),
                      {"xw": "float16"})):
        with pytest.raises(ValueError, match="io"):
            gates.kernel_source(*args, io)
