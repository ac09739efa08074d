"""The CPU twin's mixed kernels (tests/ascend_twin/fg_twin_crosscore.h): a KERNEL_TYPE_MIX_AIC_1_2 kernel's
AICs and AIVs run together, synchronised by CrossCoreSetFlag / CrossCoreWaitFlag and SyncAll as CANN
documents them for Atlas A2, and give the right numbers; each rule of those flags broken on purpose is
refused with its name: a GM access of one core to another's bytes that no flag chain orders, a flag ID
outside 0..15, a counter past 15, a wait no core will ever satisfy, a mode or pipe the kernel type or the
API does not allow, SyncAll's own flags taken, sets never waited."""
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import build_cache

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
TWIN = Path(__file__).with_name("ascend_twin")
STEPS = 3

# A recurrence over STEPS steps, H[s+1] = 0.5 * H[s] . W^T + 1 (H 16 x 16, W 16 x 16), on NB blocks: the
# AIC of block b keeps its slice W_b (rows 8b..8b+7 of W, 8 = 16 / NB for NB = 2) in L1 and L0B for every
# step, multiplies H[s] (read from GM) by it into its workspace G_b (16 x 8), and tells its two AIVs
# (mode 2, flag 0); AIV v of block b waits, reads rows 8v..8v+7 of G_b, computes 0.5 g + 1 and writes it
# into H[s+1] (rows 8v.., columns 8b..), then tells its AIC it has read G_b (mode 2, flag 1); every core
# then waits for all the others (SyncAll<false>) before the next step reads H[s+1].  BREAK(...) names the
# cases that break one rule; the others run the kernel as it should be.
PROGRAM = r'''#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>
#include <vector>
#include "kernel_operator.h"
using namespace AscendC;

constexpr int S = STEPS_VALUE, N = 16;
static std::string which;
static bool BREAK(const char *name) { return which == name; }

struct Ids {  // what each core saw of its indices
    int64_t idx, sub, ratio, num;
    bool aic;
};
static std::vector<Ids> seen;

static void kernel(int nb, float *h, const float *w, float *ws) {
    KERNEL_TASK_TYPE_DEFAULT(BREAK("mode_for_type") || BREAK("sync_all_pure_vector") ? KERNEL_TYPE_MIX_AIV_1_0
                             : BREAK("not_mixed") ? KERNEL_TYPE_AIV_ONLY : KERNEL_TYPE_MIX_AIC_1_2);
    seen.push_back(Ids{GetBlockIdx(), GetSubBlockIdx(), GetTaskRatio(), GetBlockNum(), ASCEND_IS_AIC});
    const int cols = N / nb;  // W_b's rows: the block's columns of H
    TPipe pipe;
    if (BREAK("mode_for_type")) {
        CrossCoreSetFlag<1, PIPE_MTE3>(0);
        return;
    }
    if (BREAK("sync_all_pure_vector")) {
        SyncAll<false>();
        return;
    }
    if (BREAK("not_mixed")) {
        CrossCoreSetFlag<0, PIPE_MTE3>(0);
        return;
    }
    if ASCEND_IS_AIC {
        const int64_t b = GetBlockIdx();
        GlobalTensor<float> wg, g;
        wg.SetGlobalBuffer((float *)w + b * cols * N, cols * N);
        g.SetGlobalBuffer(ws + b * N * cols, N * cols);
        TBuf<TPosition::A1> a1_;
        TBuf<TPosition::B1> b1_;
        TBuf<TPosition::A2> a2_;
        TBuf<TPosition::B2> b2_;
        TBuf<TPosition::CO1> c1_;
        pipe.InitBuffer(a1_, N * N * 4);
        pipe.InitBuffer(b1_, N * N * 4);
        pipe.InitBuffer(a2_, N * N * 4);
        pipe.InitBuffer(b2_, N * N * 4);
        pipe.InitBuffer(c1_, N * N * 4);
        LocalTensor<float> a1 = a1_.Get<float>(), b1 = b1_.Get<float>(), a2 = a2_.Get<float>(), b2 = b2_.Get<float>();
        LocalTensor<float> c1 = c1_.Get<float>();
        // W_b into L1 and L0B once: B(p, j) = W_b[j][p], Zn fractals of 8 (C0) x 16
        DataCopy(b1, wg, Nd2NzParams(1, (uint16_t)cols, N, 0, N, 16, 1, 0));
        SetFlag<HardEvent::MTE2_MTE1>(0);
        WaitFlag<HardEvent::MTE2_MTE1>(0);
        LoadData(b2, b1, LoadData2DParams(0, 2, 1, 0, 0, false, 0));
        if (BREAK("counter_overflow"))
            for (int i = 0; i < 16; ++i) CrossCoreSetFlag<2, PIPE_FIX>(2);
        if (BREAK("mode_1_on_aic")) CrossCoreSetFlag<1, PIPE_FIX>(2);
        if (BREAK("mode_4")) CrossCoreSetFlag<4, PIPE_FIX>(2);
        if (BREAK("pipe_s")) CrossCoreSetFlag<2, PIPE_S>(2);
        if (BREAK("pipe_v_on_aic")) CrossCoreSetFlag<2, PIPE_V>(2);
        if (BREAK("sync_all_flag")) CrossCoreSetFlag<0, PIPE_FIX>(11);
        if (BREAK("fifteen_sets"))  // a counter holds 15 sets not yet waited
            for (int i = 0; i < 15; ++i) CrossCoreSetFlag<2, PIPE_FIX>(2);
        if (BREAK("mode_switch")) {  // flag 2 to the AIVs (mode 2), then to the AICs (mode 0) before they waited
            CrossCoreSetFlag<2, PIPE_FIX>(2);
            CrossCoreSetFlag<0, PIPE_FIX>(2);
        }
        for (int s = 0; s < S; ++s) {
            GlobalTensor<float> hs;
            hs.SetGlobalBuffer(h + s * N * N, N * N);
            DataCopy(a1, hs, Nd2NzParams(1, N, N, 0, N, 16, 1, 0));  // H[s]: Zz fractals of 16 x 8
            SetFlag<HardEvent::MTE2_MTE1>(0);
            WaitFlag<HardEvent::MTE2_MTE1>(0);
            LoadData(a2, a1, LoadData2DParams(0, 2, 1, 0, 0, false, 0));
            SetFlag<HardEvent::MTE1_M>(0);
            WaitFlag<HardEvent::MTE1_M>(0);
            Mmad(c1, a2, b2, MmadParams(N, (uint16_t)cols, N, 0, false, true));
            SetFlag<HardEvent::M_FIX>(0);
            WaitFlag<HardEvent::M_FIX>(0);
            Fixpipe(g, c1, FixpipeParamsV220((uint16_t)cols, N, N, (uint32_t)cols, false));
            if (BREAK("set_on_other_pipe"))
                CrossCoreSetFlag<2, PIPE_M>(0);  // fires once PIPE_M is done, not the Fixpipe on PIPE_FIX
            else
                CrossCoreSetFlag<2, PIPE_FIX>(BREAK("bad_flag_id") ? 16 : 0);
            CrossCoreWaitFlag(1);
            if (BREAK("sync_all_aiv_only"))
                SyncAll();  // isAIVOnly = true: the AICs sync among themselves, the AIVs among themselves
            else if (!BREAK("no_sync_all"))
                SyncAll<false>();
        }
        if (BREAK("never_waited")) CrossCoreSetFlag<2, PIPE_FIX>(3);
    }
    if ASCEND_IS_AIV {
        const int64_t b = GetBlockIdx() / GetTaskRatio(), v = GetSubBlockIdx();
        const int rows = N / 2;  // each AIV half of G_b's rows
        GlobalTensor<float> g;
        g.SetGlobalBuffer(ws + b * N * cols + v * rows * cols, rows * cols);
        TBuf<TPosition::VECCALC> g_, y_;
        pipe.InitBuffer(g_, rows * cols * 4);
        pipe.InitBuffer(y_, rows * cols * 4);
        LocalTensor<float> gl = g_.Get<float>(), y = y_.Get<float>();
        if (BREAK("never_set")) CrossCoreWaitFlag(5);
        if (BREAK("fifteen_sets"))
            for (int i = 0; i < 15; ++i) CrossCoreWaitFlag(2);
        for (int s = 0; s < S; ++s) {
            CrossCoreWaitFlag(0);
            DataCopy(gl, g, rows * cols);
            SetFlag<HardEvent::MTE2_V>(0);
            WaitFlag<HardEvent::MTE2_V>(0);
            Muls(y, gl, 0.5f, rows * cols);
            Adds(y, y, 1.0f, rows * cols);
            SetFlag<HardEvent::V_MTE3>(0);
            WaitFlag<HardEvent::V_MTE3>(0);
            GlobalTensor<float> next;
            next.SetGlobalBuffer(h + (s + 1) * N * N, N * N);
            for (int r = 0; r < rows; ++r) DataCopy(next[(v * rows + r) * N + b * cols], y[r * cols], cols);
            CrossCoreSetFlag<2, PIPE_MTE2>(1);
            if (BREAK("sync_all_aiv_only"))
                SyncAll();
            else if (!BREAK("no_sync_all"))
                SyncAll<false>();
        }
    }
}

// prog CASE BLOCKS: runs the kernel, prints H[1..S] and each core's indices, or the twin's verdict
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    which = argv[1];
    const int nb = atoi(argv[2]);
    std::vector<float> h((S + 1) * N * N, 0.0f), w(N * N), ws(N * N, 0.0f);
    for (int i = 0; i < N * N; ++i) {
        h[i] = (float)((i * 37) % 23) / 23.0f - 0.5f;
        w[i] = (float)((i * 11) % 19) / 19.0f * 0.25f - 0.125f;
    }
    try {
        fg_twin::launch(nb, [&] { kernel(nb, h.data(), w.data(), ws.data()); });
    } catch (const fg_twin::Violation &e) {
        printf("%s\n", e.what());
        return 0;
    }
    for (const Ids &c : seen)
        printf("core %s %lld %lld %lld %lld\n", c.aic ? "AIC" : "AIV", (long long)c.idx, (long long)c.sub,
               (long long)c.ratio,
               (long long)c.num);
    for (int i = 0; i < N * N; ++i) printf("%.9g %.9g\n", w[i], h[i]);
    for (int i = N * N; i < (S + 1) * N * N; ++i) printf("%.9g\n", h[i]);
    printf("ok\n");
    return 0;
}
'''


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("crosscore")
    src = tmp / "prog.cpp"
    src.write_text(PROGRAM.replace("STEPS_VALUE", str(STEPS)))
    exe = tmp / "prog"
    proc = build_cache.run([CXX, "-std=c++17", "-O1", "-Wall", "-Werror", f"-I{TWIN}", "-o", str(exe), str(src)],
                           outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


def _run(exe, case, blocks=2):
    out = subprocess.run([str(exe), case, str(blocks)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("blocks", [1, 2])
def test_a_mixed_kernel_runs_its_cores_together_and_gives_the_recurrence(prog, blocks):
    """AIC Mmad -> flag -> two AIVs -> flag back -> SyncAll, three steps: H[s+1] = 0.5 H[s] W^T + 1."""
    out = _run(prog, "correct", blocks).splitlines()
    assert out[-1] == "ok", out[-1]
    n = 16
    cores = [line for line in out if line.startswith("core ")]
    rows = [line for line in out if not line.startswith("core ")][:-1]
    w = np.array([float(r.split()[0]) for r in rows[:n * n]]).reshape(n, n)
    h = [np.array([float(r.split()[1]) for r in rows[:n * n]]).reshape(n, n)]
    flat = np.array([float(r) for r in rows[n * n:]])
    for s in range(STEPS):
        h.append(flat[s * n * n:(s + 1) * n * n].reshape(n, n))
    for s in range(STEPS):
        want = 0.5 * (h[s] @ w.T) + 1.0
        np.testing.assert_allclose(h[s + 1], want, rtol=1e-6, atol=1e-6)
    # every core ran once, with CANN's indices: an AIC its block, an AIV block * 2 + sub-block; GetTaskRatio
    # 1 on an AIC, 2 on an AIV; GetBlockNum the blocks
    want = []
    for b in range(blocks):
        want += [f"core AIC {b} 0 1 {blocks}", f"core AIV {2 * b} 0 2 {blocks}", f"core AIV {2 * b + 1} 1 2 {blocks}"]
    assert sorted(cores) == sorted(want)


def test_a_mixed_launch_is_repeatable(prog):
    """The cores switch at waits only, in a fixed order: two runs print the same bits."""
    assert _run(prog, "correct") == _run(prog, "correct")


# case: what the twin must say
RULES = {
    # no SyncAll: the next step's AIC reads H[s+1], which other blocks' AIVs write, with nothing ordering them
    "no_sync_all": r"cores (AIC|AIV) \d.* and (AIC|AIV) \d.* of one launch write and read GM bytes "
                   r"\[\d+, \d+\) unordered",
    # SyncAll<true> in a mixed kernel syncs the AIVs only (SyncAll.md :173): the AICs read H[s+1] unordered
    "sync_all_aiv_only": r"cores AIV \d.* and AIC \d.* of one launch write and read GM bytes .* unordered",
    # the set fires once PIPE_M is done: the Fixpipe's write to the workspace (PIPE_FIX) is not ordered
    "set_on_other_pipe": r"of one launch write and read GM bytes .* what PIPE_FIX instruction #1 of AIC 0 wrote",
    "bad_flag_id": r"CrossCoreSetFlag<2, PIPE_FIX>\(16\): flagId 16 is outside 0\.\.15",
    "counter_overflow": r"the counter of flag 2 on AIV 0 \(block 0, sub-block 0\) is already 15, its most: "
                        r"counter overflow",
    "never_set": r"AIV 0 \(block 0, sub-block 0\) waits in CrossCoreWaitFlag\(5\).* the device would hang",
    "mode_for_type": r"CrossCoreSetFlag<1, PIPE_MTE3>\(0\): mode 1 in a KERNEL_TYPE_MIX_AIV_1_0 kernel",
    "mode_1_on_aic": r"mode 1 syncs the AIVs of one block; an AIC takes no part",
    "mode_4": r"modeId 4 -- Atlas A2 has modes 0, 1 and 2",
    "pipe_s": r"CrossCoreSetFlag<2, PIPE_S>\(2\): the pipe must be .* never PIPE_S or PIPE_ALL",
    "pipe_v_on_aic": r"CrossCoreSetFlag<2, PIPE_V>\(2\) on AIC 0, which has no PIPE_V",
    "not_mixed": r"CrossCoreSetFlag in an AIV-only or AIC-only kernel: the hardware starts no scheduling module",
    "sync_all_flag": r"sets flag 11 itself and calls SyncAll, whose hard sync uses flags 11-14",
    "sync_all_pure_vector": r"SyncAll<false> in a KERNEL_TYPE_MIX_AIV_1_0 kernel: with no AIC it hangs the device",
    "mode_switch": r"CrossCoreSetFlag<0, PIPE_FIX>\(2\) on AIC 0: flag 2 still has sets or waits of mode 2 pending",
    "never_waited": r"flag 3 of AIV 0 \(block 0, sub-block 0\) holds 1 CrossCoreSetFlag never waited when the "
                    r"kernel ends",
}


@pytest.mark.parametrize("case", sorted(RULES))
def test_the_twin_refuses_a_broken_cross_core_rule(prog, case):
    out = _run(prog, case).strip()
    assert re.search(RULES[case], out), out


def test_a_counter_holds_fifteen_sets(prog):
    """15 sets ahead of their waits are within the counter's 0-15 (the 16th is counter_overflow)."""
    assert _run(prog, "fifteen_sets").splitlines()[-1] == "ok"
