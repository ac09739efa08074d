"""The AscendC kernels generated from te_defs/lstm_cell_backward.py (lowering/ascend/), compiled
with g++ against the CPU twin of the AscendC API (tests/ascend_twin, a test double of CANN's
kernel_operator.h that enforces the UB capacity, the 32-byte rules, CANN's queue-event budget and
the synchronisation of its asynchronous pipes) and run on it.

Checked against the float64 reference: fp32, fp16 and bf16, every variant, odd shapes, rows with a
stride (padding), several core counts (grad_bias has the same bits for any), NaN propagation, and
that the UB budget of the host tiling holds for a large hidden size, and H split over the cores
when the rows are fewer than the cores; and that the kernel with one synchronisation removed is
caught.
"""
import re
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import build_cache

from fusedgrad import te_defs
from fusedgrad.lowering import ascend

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
TWIN = Path(__file__).with_name("ascend_twin")
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TOL = {"float32": 5e-7, "float16": 1.2e-3, "bfloat16": 1e-2}  # about 4x the largest error seen
CTYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}

DRIVER = r'''
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "KERNEL_FILE"
#include "fg_lstm_cell_backward_sizes.h"

TYPEDEF
// driver TAG N H PAD MAX_CORES REDUCE_BLOCKS IN OUT: inputs/outputs as raw element data with rows of
// stride H + PAD ([N, 4H] tensors: 4H + PAD); prints the cores used and the UB bytes per element
int main(int argc, char **argv) {
    if (argc != 9) return 2;
    std::string tag = argv[1];
    uint32_t n = atoi(argv[2]), h = atoi(argv[3]), pad = atoi(argv[4]), max_cores = atoi(argv[5]);
    int64_t reduce_blocks = atoi(argv[6]);
    bool hy = tag.find("hy") != std::string::npos, cy = tag.find("cy") != std::string::npos;
    bool bias = tag.find("bias") != std::string::npos;
    uint32_t slots = 0, streams = 0;
SIZES
    uint32_t per = fg_lcg_ub_per_elem(sizeof(T), streams, slots, bias);
    FgLcgTiling t = fg_lcg_tiling(n, h, per, 192u * 1024u - 8u * 1024u, max_cores);
    t.s_dhy = t.s_dc = t.s_cx = t.s_cy = t.s_dcx = h + pad;
    t.s_storage = t.s_dgates = 4 * h + pad;
    size_t rows = (size_t)n * (h + pad), rows4 = (size_t)n * (4 * h + pad);
    std::vector<T> dhy(hy ? rows : 0), dc(cy ? rows : 0), cx(rows), cyv(rows), st(rows4);
    std::vector<T> dgates(rows4), dcx(rows), db(4 * h);
    std::vector<float> ws((size_t)t.groups * 4 * h);
    FILE *f = fopen(argv[7], "rb");
    size_t ok = 1;
    if (hy) ok &= fread(dhy.data(), sizeof(T), rows, f) == rows;
    if (cy) ok &= fread(dc.data(), sizeof(T), rows, f) == rows;
    ok &= fread(cx.data(), sizeof(T), rows, f) == rows;
    ok &= fread(cyv.data(), sizeof(T), rows, f) == rows;
    ok &= fread(st.data(), sizeof(T), rows4, f) == rows4;
    fclose(f);
    if (!ok) return 3;
    auto P = [](auto &v) { return v.empty() ? (uint8_t *)nullptr : (uint8_t *)v.data(); };
    try {
KERNELS
        if (bias) {
            fg_twin::launch(reduce_blocks, [&] { REDUCE_KERNEL((uint8_t *)ws.data(), P(db), (uint8_t *)&t); });
        }
    } catch (const fg_twin::Violation &e) {
        fprintf(stderr, "%s\n", e.what());
        return 4;
    }
    f = fopen(argv[8], "wb");
    fwrite(dgates.data(), sizeof(T), rows4, f);
    fwrite(dcx.data(), sizeof(T), rows, f);
    fwrite(db.data(), sizeof(T), 4 * h, f);
    fclose(f);
    printf("%u %u %u\n", t.cores, t.tile, per);
    return 0;
}
'''


@pytest.fixture(scope="module")
def drivers(ascend_tree, tmp_path_factory):
    """{dtype: driver executable} for the kernels of the session's Ascend tree, and the drivers' folder."""
    tmp = tmp_path_factory.mktemp("ascend")
    src = ascend_tree / "lstm_cell_backward" / "op_kernel"
    out = {}
    for dtype in ascend.DTYPES:
        sizes = "\n".join(
            f'    if (tag == "{v.tag}") {{ slots = FG_LCG_{dtype.upper()}_{v.tag.upper()}_SLOTS; '
            f'streams = FG_LCG_{dtype.upper()}_{v.tag.upper()}_STREAMS; }}' for v in ascend.VARIANTS)
        kernels = "\n".join(
            f'        if (tag == "{v.tag}") fg_twin::launch(t.cores, [&] {{ fg_lcg_{dtype}_{v.tag}(P(dhy), P(dc), '
            f'P(cx), P(cyv), P(st), P(dgates), P(dcx), P(db), (uint8_t *)ws.data(), (uint8_t *)&t); }});'
            for v in ascend.VARIANTS)
        text = (DRIVER.replace("KERNEL_FILE", f"fg_lstm_cell_backward_{dtype}.cpp").replace("SIZES", sizes)
                .replace("KERNELS", kernels).replace("REDUCE_KERNEL", f"fg_lcg_{dtype}_bias_reduce")
                .replace("TYPEDEF", f"typedef {CTYPE[dtype]} T;"))
        out[dtype] = _build(tmp, src, dtype, text)
    return out, tmp


def _build(tmp, src, dtype, text):
    """The driver ``text`` of ``dtype`` compiled against the kernels in ``src``."""
    main = tmp / f"driver_{dtype}.cpp"
    main.write_text(text)
    exe = tmp / f"driver_{dtype}"
    cmd = [CXX, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{TWIN}", f"-I{src}", "-o", str(exe), str(main)]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return exe


def _run(drivers, dtype, v, n, h, arrays, pad=0, max_cores=8, reduce_blocks=3, check=True):
    exes, tmp = drivers
    np_dtype = NP[dtype]

    def padded(a):
        out = np.zeros((a.shape[0], a.shape[1] + pad), np_dtype)
        out[:, :a.shape[1]] = a
        return out
    names = (["grad_hy"] if v.has_grad_hy else []) + (["grad_cy"] if v.has_grad_cy else []) + ["cx", "cy", "storage"]
    (tmp / "in.bin").write_bytes(b"".join(padded(arrays[k].astype(np_dtype)).tobytes() for k in names))
    proc = subprocess.run([str(exes[dtype]), v.tag, str(n), str(h), str(pad), str(max_cores), str(reduce_blocks),
                           str(tmp / "in.bin"), str(tmp / "out.bin")], capture_output=True, text=True, timeout=120)
    if not check:
        return proc
    assert proc.returncode == 0, proc.stderr
    raw = np.frombuffer((tmp / "out.bin").read_bytes(), np_dtype)
    k4 = n * (4 * h + pad)
    gates = raw[:k4].reshape(n, 4 * h + pad)[:, :4 * h]
    dcx = raw[k4:k4 + n * (h + pad)].reshape(n, h + pad)[:, :h]
    db = raw[k4 + n * (h + pad):]
    cores, tile, per = (int(x) for x in proc.stdout.split())
    return gates, dcx, db, cores, tile, per


def _sample(n, h, dtype, seed=0):
    op = te_defs.get("lstm_cell_backward")
    return {k: a.astype(NP[dtype]) for k, a in op.sample({"N": n, "H": h}, np.random.default_rng(seed)).items()}


def _reference(s, v):
    op = te_defs.get("lstm_cell_backward")
    f = {k: a.astype(np.float64) for k, a in s.items()}
    return op.reference(f["grad_hy"] if v.has_grad_hy else None, f["grad_cy"] if v.has_grad_cy else None,
                        f["cx"], f["cy"], f["storage"], has_bias=True)


def _close(got, want, tol, what):
    err = np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() + 1)
    assert err <= tol, f"{what}: relative error {err:.3g}"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("v", ascend.VARIANTS, ids=lambda v: v.tag)
@pytest.mark.parametrize("n, h", [(1, 1), (5, 37), (19, 200)])
def test_kernels_match_the_reference(drivers, dtype, v, n, h):
    s = _sample(n, h, dtype, seed=n * h)
    gates, dcx, db, cores, _, _ = _run(drivers, dtype, v, n, h, s, pad=3 if n > 1 else 0)
    ref = _reference(s, v)
    tol = TOL[dtype]
    _close(gates, ref["grad_gates"], tol, "grad_gates")
    _close(dcx, ref["grad_cx"], tol, "grad_cx")
    if v.has_bias:
        # the bias sums the stored (rounded) gate gradients in float32
        _close(db, gates.astype(np.float64).sum(0), tol, "grad_bias")
    blocks = -(-n // 8)  # 8-row groups; with fewer than the 8 cores, the others take slices of H
    assert cores <= 8 and cores % blocks == 0 and cores // blocks <= max(1, -(-h // 16))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_grad_bias_has_the_same_bits_on_any_core_count(drivers, dtype):
    v = ascend.Variant(True, True, True)
    n, h = 45, 19
    s = _sample(n, h, dtype, seed=7)
    runs = [_run(drivers, dtype, v, n, h, s, max_cores=c, reduce_blocks=b) for c, b in ((1, 1), (3, 3), (40, 7))]
    # cores used: 6 groups of 8 rows on 1 and 3 cores; on 40, each group's H=19 in 2 slices of 16
    assert [r[3] for r in runs] == [1, 3, 12]
    results = [r[:3] for r in runs]
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_nan_goes_through_and_large_hidden_sizes_fit_the_ub(drivers):
    v = ascend.Variant(True, True, True)
    n, h = 3, 3000  # several tiles per row
    s = _sample(n, h, "float32", seed=1)
    s["cy"][1, 5] = np.nan
    s["storage"][2, 7] = np.inf
    gates, dcx, db, _, tile, per = _run(drivers, "float32", v, n, h, s)
    assert tile < h and tile % 16 == 0 and tile * per <= 184 * 1024
    ref = _reference(s, v)
    assert np.array_equal(np.isnan(gates), np.isnan(ref["grad_gates"]))
    assert np.array_equal(np.isnan(dcx), np.isnan(ref["grad_cx"]))
    finite = np.isfinite(ref["grad_gates"])
    _close(np.where(finite, gates, 0), np.where(finite, ref["grad_gates"], 0), TOL["float32"], "grad_gates")


def test_the_twin_enforces_the_ub_capacity(tmp_path):
    """A kernel asking for more UB than the part has is refused by the twin, not silently run."""
    src = tmp_path / "over.cpp"
    src.write_text('''#include "kernel_operator.h"
using namespace AscendC;
int main() {
    try {
        fg_twin::launch(1, [] { TPipe pipe; TBuf<TPosition::VECCALC> a; pipe.InitBuffer(a, 200u * 1024u); });
    } catch (const fg_twin::Violation &) { return 0; }
    return 1;
}
''')
    exe = tmp_path / "over"
    proc = build_cache.run([CXX, "-std=c++17", f"-I{TWIN}", "-o", str(exe), str(src)], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert subprocess.run([str(exe)]).returncode == 0


def test_few_rows_spread_hidden_over_the_cores(drivers):
    """One row block on 8 cores: each core takes a slice of H, and the results do not change."""
    v = ascend.Variant(True, True, True)
    n, h = 3, 700
    s = _sample(n, h, "float32", seed=5)
    one = _run(drivers, "float32", v, n, h, s, max_cores=1)
    many = _run(drivers, "float32", v, n, h, s, max_cores=8)
    assert one[3] == 1 and many[3] == 8
    for a, b in zip(one[:3], many[:3]):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_the_twin_refuses_scalar_stores_to_gm(tmp_path):
    """GlobalTensor::SetValue goes through the core's data cache and out as whole 64-byte lines that
    race other cores' writes: the twin refuses it, so no generated kernel can rely on it."""
    src = tmp_path / "store.cpp"
    src.write_text('''#include "kernel_operator.h"
using namespace AscendC;
int main() {
    float gm[16] = {0};
    try {
        fg_twin::launch(1, [&] { GlobalTensor<float> g; g.SetGlobalBuffer(gm, 16); g.SetValue(3, 1.0f); });
    } catch (const fg_twin::Violation &) { return gm[3] == 0.0f ? 0 : 2; }
    return 1;
}
''')
    exe = tmp_path / "store"
    proc = build_cache.run([CXX, "-std=c++17", f"-I{TWIN}", "-o", str(exe), str(src)], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert subprocess.run([str(exe)]).returncode == 0


QUEUES = r'''#include <cstdio>
#include "kernel_operator.h"
using namespace AscendC;
// QUEUES VECIN queues of BUFFERS buffers each, streamed over ROWS rows the way the kernels do
// (alloc, copy in, enque; deque, compute, free); prints the twin's verdict
int main() {
    float gm[64] = {0};
    try {
        fg_twin::launch(1, [&] {
            TPipe pipe;
            GlobalTensor<float> g;
            g.SetGlobalBuffer(gm, 64);
            TQue<TPosition::VECIN, 2> q[QUEUES];
            for (auto &one : q) pipe.InitBuffer(one, BUFFERS, 8 * sizeof(float));
            for (int r = 0; r < ROWS; ++r) {
                for (auto &one : q) {
                    LocalTensor<float> x = one.AllocTensor<float>();
                    DataCopy(x, g, 8);
                    one.EnQue(x);
                }
                for (auto &one : q) one.FreeTensor(one.DeQue<float>());
            }
        });
    } catch (const fg_twin::Violation &e) {
        printf("%s\n", e.what());
        return 0;
    }
    printf("ok\n");
    return 0;
}
'''


@pytest.mark.parametrize("queues, buffers, rows, verdict", [
    (8, 1, 5, "ok"),  # 8 single buffers: 8 V_MTE2 IDs held at most
    (4, 2, 5, "ok"),  # the double-buffered budget: 4 queues
    (5, 2, 1, "ok"),  # one row: 5 frees, nothing re-allocated yet
    (5, 2, 2, "AllocEventID<V_MTE2>: all 8 event IDs in use"),  # a second row: 10 buffers freed
    (8, 2, 1, "ok"),
    (8, 2, 2, "AllocEventID<V_MTE2>: all 8 event IDs in use"),  # the cell kernel's old layout: a queue per stream
    (9, 1, 1, "AllocEventID<MTE2_V>: all 8 event IDs in use"),  # 9 tensors enqueued at once
])
def test_the_twin_holds_queues_to_the_event_budget(tmp_path, queues, buffers, rows, verdict):
    """CANN's queue events (asc-devkit kernel_tquebind_impl.h): EnQue takes an MTE2_V ID that DeQue
    releases, FreeTensor a V_MTE2 ID that stays held until the buffer is allocated again, 8 IDs per
    event type on Ascend910B.  So the buffers of all VECIN queues together must not exceed 8."""
    src = tmp_path / "queues.cpp"
    src.write_text(QUEUES.replace("QUEUES", str(queues)).replace("BUFFERS", str(buffers)).replace("ROWS", str(rows)))
    exe = tmp_path / "queues"
    proc = build_cache.run([CXX, "-std=c++17", f"-I{TWIN}", "-o", str(exe), str(src)], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout
    assert verdict in out, out


@pytest.mark.parametrize("body, message", [
    ("q.EnQue(q.AllocTensor<float>()); q.EnQue(q.AllocTensor<float>());", "usedCount exceeds the queue's depth 1"),
    ("auto x = q.AllocTensor<float>(); q.EnQue(x); q.FreeTensor(x);", "still queued"),
    ("auto x = q.AllocTensor<float>(); q.FreeTensor(x); q.FreeTensor(x);", "already free"),
    ("q.AllocTensor<float>(); q.AllocTensor<float>(); q.AllocTensor<float>();", "every buffer in use"),
    ("q.DeQue<float>();", "DeQue on an empty queue"),
])
def test_the_twin_checks_queue_states(tmp_path, body, message):
    src = tmp_path / "state.cpp"
    src.write_text('''#include <cstdio>
#include "kernel_operator.h"
using namespace AscendC;
int main() {
    try {
        fg_twin::launch(1, [] { TPipe pipe; TQue<TPosition::VECOUT, 1> q; pipe.InitBuffer(q, 2, 64); BODY });
    } catch (const fg_twin::Violation &e) { printf("%s\\n", e.what()); return 0; }
    return 1;
}
'''.replace("BODY", body))
    exe = tmp_path / "state"
    proc = build_cache.run([CXX, "-std=c++17", f"-I{TWIN}", "-o", str(exe), str(src)], outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and message in out.stdout, out.stdout


def test_a_kernel_missing_one_synchronisation_is_caught(ascend_tree, drivers, tmp_path):
    """The cell kernel less the MTE3 -> V wait after it copies the bias partial sums out of acc_ (as
    the kernels were before the twin modelled the pipes): the next tile's vector instructions
    overwrite acc_ while the copy may still read it, and the twin says so."""
    exes, tmp = drivers
    broken = tmp_path / "op_kernel"
    shutil.copytree(ascend_tree / "lstm_cell_backward" / "op_kernel", broken)
    kernel = broken / "fg_lstm_cell_backward_float32.cpp"
    text = kernel.read_text()
    sync = re.compile(r" *\{  // the copy out of acc_ is done before it is written again\n(?: .*\n)*? *\}\n")
    assert len(sync.findall(text)) == 4  # one per variant with the bias
    kernel.write_text(sync.sub("", text, count=1))  # hy_cy_bias, the first
    exe = _build(tmp_path, broken, "float32", (tmp / "driver_float32.cpp").read_text())
    v = ascend.Variant(True, True, True)
    s = _sample(45, 19, "float32", seed=7)
    for n, h, cores, caught in ((45, 19, 1, True), (1, 19, 1, False)):  # one tile, one row group: no next write
        proc = _run(({"float32": exe}, tmp_path), "float32", v, n, h, {k: a[:n] for k, a in s.items()},
                    max_cores=cores, check=False)
        if caught:
            assert proc.returncode == 4 and "Duplicate on PIPE_V writes UB" in proc.stderr, proc.stderr
            assert "SetFlag/WaitFlag<MTE3_V>" in proc.stderr, proc.stderr
        else:
            assert proc.returncode == 0, proc.stderr
    assert _run(drivers, "float32", v, 45, 19, s, max_cores=1)[3] == 1  # the kernel as generated passes


@pytest.mark.parametrize("dtype, n, h", [("float16", 8192, 4096), ("float32", 8192, 1), ("bfloat16", 1, 4096)])
def test_the_largest_sizes_run_on_the_twin_with_every_rule_kept(drivers, dtype, n, h):
    """The sizes the operator is made for, at their ends: N up to 8192 rows, H up to 4096 (many tiles
    per row, many row groups per core, 48 cores), with the twin checking the UB, the queue events, the
    pipes and the cores' GM bytes all the way.  The rows repeat a 64-row sample (so the float64
    reference is of 64 rows); grad_bias is checked against the sum of the rows' reference."""
    v = ascend.Variant(True, True, True)
    base = min(n, 64)
    s = _sample(base, h, dtype, seed=11)
    reps = n // base
    big = {k: np.tile(a, (reps, 1)) for k, a in s.items()}
    gates, dcx, db, cores, tile, _ = _run(drivers, dtype, v, n, h, big, max_cores=48, reduce_blocks=48)
    assert cores >= 40 or n * h < 40 * 8 * 16  # the work spread over (nearly) all 48 cores
    assert h < 4096 or tile < h  # H = 4096: rows of several tiles
    ref = _reference(s, v)
    for got, want, what in ((gates, ref["grad_gates"], "grad_gates"), (dcx, ref["grad_cx"], "grad_cx")):
        _close(got.reshape(reps, base, -1), np.broadcast_to(want, (reps,) + want.shape), TOL[dtype], what)
    _close(db, reps * ref["grad_bias"], TOL[dtype] * 4 + n * 2.0 ** -24, "grad_bias")  # n fp32 additions
