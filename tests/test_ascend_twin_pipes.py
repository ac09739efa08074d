"""The CPU twin's pipe model (tests/ascend_twin/fg_twin_pipes.h): small AscendC programs that order
their pipes correctly run, and each missing synchronisation CANN's documents require is caught as a
hazard, an unpaired or doubled flag, or a race between cores.  (That the generated kernels pass, and
that one with a synchronisation removed is caught, is in test_ascend_kernels.py.)"""
import shutil
import subprocess
from pathlib import Path

import pytest

import build_cache

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
TWIN = Path(__file__).with_name("ascend_twin")

PROGRAM = r'''#include <cstdio>
#include <cstring>
#include "kernel_operator.h"
using namespace AscendC;
// prog CASE CORES: runs the case's body on CORES cores and prints the twin's verdict
int main(int argc, char **argv) {
    static float gm[1024], out[1024];
    if (argc != 3) return 2;
    const char *which = argv[1];
    bool known = false;  // the case exists
    try {
        fg_twin::launch(atoi(argv[2]), [&] {
            TPipe pipe;
            GlobalTensor<float> g, o;
            g.SetGlobalBuffer(gm, 1024);
            o.SetGlobalBuffer(out, 1024);
            TBuf<TPosition::VECCALC> a_, b_;
            pipe.InitBuffer(a_, 256 * sizeof(float));
            pipe.InitBuffer(b_, 256 * sizeof(float));
            LocalTensor<float> a = a_.Get<float>(), b = b_.Get<float>();
            TQue<TPosition::VECIN, 1> qin;
            TQue<TPosition::VECOUT, 1> qout;
            pipe.InitBuffer(qin, 2, 64 * sizeof(float));
            pipe.InitBuffer(qout, 2, 64 * sizeof(float));
            (void)a; (void)b; (void)g; (void)o;
BODIES
        });
    } catch (const fg_twin::Violation &e) {
        printf("%s\n", e.what());
        return 0;
    }
    if (!known) return 5;
    printf("ok\n");
    return 0;
}
'''

# a SetFlag/WaitFlag pair with an ID the TPipe has free
SYNC = "{ TEventID e = pipe.FetchEventID(HardEvent::EV); SetFlag<HardEvent::EV>(e); WaitFlag<HardEvent::EV>(e); }"


def sync(event):
    return SYNC.replace("EV", event)


COPY_OUT = "DataCopy(o, a, 64);"
COPY_IN = "DataCopy(a, g, 64);"
STREAM = '''for (int r = 0; r < 6; ++r) {  // the queue protocol alone orders a streamed row
    LocalTensor<float> x = qin.AllocTensor<float>(); DataCopy(x, g[64 * r], 64); qin.EnQue(x);
    LocalTensor<float> y = qin.DeQue<float>(); LocalTensor<float> z = qout.AllocTensor<float>();
    Muls(z, y, 2.0f, 64); qout.EnQue(z); qin.FreeTensor(y);
    LocalTensor<float> w = qout.DeQue<float>(); DataCopy(o[64 * r], w, 64); qout.FreeTensor(w);
}'''
CASES = {
    # vector results copied out: V -> MTE3
    "v_then_mte3": ("Duplicate(a, 1.0f, 64);" + COPY_OUT, "PIPE_MTE3 reads UB [0, 256) that PIPE_V instruction #1 wrote"),
    "v_then_mte3_synced": ("Duplicate(a, 1.0f, 64);" + sync("V_MTE3") + COPY_OUT, "ok"),
    "v_then_mte3_barrier": ("Duplicate(a, 1.0f, 64); PipeBarrier<PIPE_ALL>();" + COPY_OUT, "ok"),
    # a buffer written again while its copy out may still read it: MTE3 -> V (the kernels' old bug)
    "mte3_then_v": ("Duplicate(a, 1.0f, 64);" + sync("V_MTE3") + COPY_OUT + "Duplicate(a, 0.0f, 64);",
                    "Duplicate on PIPE_V writes UB [0, 256) that PIPE_MTE3 instruction #1 reads"),
    "mte3_then_v_synced": ("Duplicate(a, 1.0f, 64);" + sync("V_MTE3") + COPY_OUT + sync("MTE3_V") +
                           "Duplicate(a, 0.0f, 64);", "ok"),
    # copied in, then computed on: MTE2 -> V; computed on, then copied into: V -> MTE2
    "mte2_then_v": (COPY_IN + "Muls(b, a, 2.0f, 64);", "Muls on PIPE_V reads UB [0, 256) that PIPE_MTE2"),
    "mte2_then_v_synced": (COPY_IN + sync("MTE2_V") + "Muls(b, a, 2.0f, 64);", "ok"),
    "v_then_mte2": (COPY_IN + sync("MTE2_V") + "Muls(b, a, 2.0f, 64); PipeBarrier<PIPE_MTE2>();" + COPY_IN,
                    "PIPE_MTE2 writes UB [0, 256) that PIPE_V"),
    "v_then_mte2_synced": (COPY_IN + sync("MTE2_V") + "Muls(b, a, 2.0f, 64);" + sync("V_MTE2") + COPY_IN, "ok"),
    # the flag must go the right way: MTE2_V does not order V before MTE3
    "wrong_event": ("Duplicate(a, 1.0f, 64);" + sync("MTE2_V") + COPY_OUT, "SetFlag/WaitFlag<V_MTE3>"),
    # vector after vector: the compiler's auto-sync orders PIPE_V
    "v_then_v": ("Duplicate(a, 1.0f, 64); Muls(b, a, 2.0f, 64); Add(a, a, b, 64);", "ok"),
    # copies into overlapping UB need PipeBarrier<PIPE_MTE2>; GM destinations PipeBarrier<PIPE_MTE3>
    "mte2_overlap": (COPY_IN + COPY_IN, "PipeBarrier<PIPE_MTE2>"),
    "mte2_overlap_barrier": (COPY_IN + "PipeBarrier<PIPE_MTE2>();" + COPY_IN, "ok"),
    "mte3_overlap": ("Duplicate(a, 1.0f, 64);" + sync("V_MTE3") + COPY_OUT + COPY_OUT, "PipeBarrier<PIPE_MTE3>"),
    # GM written, then read back by the same core: MTE3 -> MTE2
    "gm_readback": ("Duplicate(a, 1.0f, 64);" + sync("V_MTE3") + COPY_OUT + "DataCopy(b, o, 64);",
                    "PIPE_MTE2 reads GM"),
    "gm_readback_synced": ("Duplicate(a, 1.0f, 64);" + sync("V_MTE3") + COPY_OUT + sync("MTE3_MTE2") +
                           "DataCopy(b, o, 64);", "ok"),
    # scalar accesses are ordered by the compiler's auto-sync
    "scalar": (COPY_IN + "float v = a.GetValue(3); b.SetValue(0, v); float w = g.GetValue(5); (void)w;", "ok"),
    # flags: paired, never doubled, never left set
    "wait_unset": ("WaitFlag<HardEvent::V_MTE3>(0);", "with no SetFlag before it: the MTE3 pipe would hang"),
    "set_twice": ("SetFlag<HardEvent::V_MTE3>(0); SetFlag<HardEvent::V_MTE3>(0);", "already set"),
    "never_waited": ("SetFlag<HardEvent::V_MTE3>(1);", "SetFlag<V_MTE3>(1) never waited"),
    "bad_id": ("SetFlag<HardEvent::V_MTE3>(8);", "event ID 8 is not 0..7"),
    "queue_flag_taken": ("LocalTensor<float> x = qout.AllocTensor<float>(); qout.EnQue(x);"
                         "SetFlag<HardEvent::V_MTE3>(0);", "already set"),
    "queues": (STREAM, "ok"),
}


CORE_CASES = {
    # each core its own 64 floats: no race
    "own_bytes": ("Duplicate(a, 1.0f, 64);" + sync("V_MTE3") + "DataCopy(o[64 * GetBlockIdx()], a, 64);", "ok"),
    # every core the same 64 floats
    "same_bytes": ("Duplicate(a, 1.0f, 64);" + sync("V_MTE3") + COPY_OUT, "cores 0 and 1 of one launch both write GM"),
    # core 0 writes what core 1 reads
    "read_other": ("Duplicate(a, 1.0f, 64);" + sync("V_MTE3") + "if (GetBlockIdx() == 0) { DataCopy(o, a, 64); }"
                   "else { DataCopy(b, o[32], 64); }", "write and read GM"),
}


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pipes")
    bodies = "\n".join(f'            if (!strcmp(which, "{name}")) {{ known = true; {body} }}'
                       for name, (body, _) in {**CASES, **CORE_CASES}.items())
    src = tmp / "prog.cpp"
    src.write_text(PROGRAM.replace("BODIES", bodies))
    exe = tmp / "prog"
    proc = build_cache.run([CXX, "-std=c++17", "-O1", "-Wall", "-Werror", f"-I{TWIN}", "-o", str(exe), str(src)],
                           outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


def _run(exe, case, cores):
    out = subprocess.run([str(exe), case, str(cores)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_twin_orders_pipes_as_cann_requires(prog, case):
    out = _run(prog, case, cores=1)
    verdict = CASES[case][1]
    assert (out == "ok") if verdict == "ok" else (verdict in out), out


@pytest.mark.parametrize("case", sorted(CORE_CASES))
def test_the_twin_refuses_races_between_cores(prog, case):
    out = _run(prog, case, cores=3)
    verdict = CORE_CASES[case][1]
    assert (out == "ok") if verdict == "ok" else (verdict in out), out
