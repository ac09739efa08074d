"""The CPU twin of the ACL runtime (tests/ascend_twin/acl/acl.h) holds host code to CANN's rules for
asynchronous work: streams run when synchronised, aclrtMemcpyAsync copies only 64-byte aligned
aclrtMallocHost memory that stays allocated and unchanged until the stream runs the copy; and the
generated operator keeps to them with two calls in flight on one stream."""
import shutil
import subprocess
from pathlib import Path

import pytest

import build_cache

from ascend_shim import launch_shim

CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) on this machine")
HERE = Path(__file__).parent
TWIN = HERE / "ascend_twin"

RULES = r'''#include <cstdio>
#include <cstring>
#include <cstdlib>
#include "acl/acl.h"
// rules CASE: runs the case and prints what it saw, or the twin's verdict
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    const char *which = argv[1];
    bool known = false;
    aclInit(nullptr);
    aclrtSetDevice(0);
    aclrtStream s;
    aclrtCreateStream(&s);
    void *dev = nullptr, *pinned = nullptr;
    aclrtMalloc(&dev, 256, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMallocHost(&pinned, 256);
    char *pageable = (char *)std::aligned_alloc(64, 256);
    std::memset(pinned, 7, 256);
    std::memset(pageable, 7, 256);
    try {
BODIES
    } catch (const fg_twin_acl::Violation &e) {
        std::printf("%s\n", e.what());
        return 0;
    }
    if (!known) return 5;
    std::printf("ok\n");
    return 0;
}
'''
H2D = "aclrtMemcpyAsync(dev, 256, SRC, 256, ACL_MEMCPY_HOST_TO_DEVICE, s)"
CASES = {
    # the documented use: pinned, aligned, kept until the stream is synchronised
    "pinned": (H2D.replace("SRC", "pinned") + "; aclrtSynchronizeStream(s); char back[256];"
               "aclrtMemcpy(back, 256, dev, 256, ACL_MEMCPY_DEVICE_TO_HOST); if (back[9] != 7) return 3;", "ok"),
    # nothing happens before the stream runs
    "deferred": (H2D.replace("SRC", "pinned") + "; char back[256];"
                 "aclrtMemcpy(back, 256, dev, 256, ACL_MEMCPY_DEVICE_TO_HOST); if (back[9] == 7) return 3;"
                 "aclrtSynchronizeStream(s);", "ok"),
    "pageable": (H2D.replace("SRC", "pageable"), "host memory not from aclrtMallocHost"),
    "misaligned": ("aclrtMemcpyAsync(dev, 256, (char *)pinned + 32, 128, ACL_MEMCPY_HOST_TO_DEVICE, s)",
                   "must be 64-byte aligned"),
    "freed_early": (H2D.replace("SRC", "pinned") + "; aclrtFreeHost(pinned); aclrtSynchronizeStream(s);",
                    "the source was freed before the stream ran the copy"),
    "changed_early": (H2D.replace("SRC", "pinned") + "; std::memset(pinned, 8, 256); aclrtSynchronizeStream(s);",
                      "the host source changed before the stream ran the copy"),
    "host_to_host": ("if (aclrtMemcpyAsync(pinned, 256, pinned, 256, ACL_MEMCPY_HOST_TO_HOST, s) != "
                     "ACL_ERROR_RT_FEATURE_NOT_SUPPORT) return 3;", "ok"),
    "destroy_pending": (H2D.replace("SRC", "pinned") + "; aclrtDestroyStream(s);", "with work not synchronised"),
    # an event completes when the stream has run what came before it
    "event": ("aclrtEvent e; aclrtCreateEvent(&e);" + H2D.replace("SRC", "pinned") + "; aclrtRecordEvent(e, s);"
              "aclrtEventRecordedStatus st; aclrtQueryEventStatus(e, &st);"
              "if (st != ACL_EVENT_RECORDED_STATUS_NOT_READY) return 3;"
              "aclrtSynchronizeEvent(e); aclrtQueryEventStatus(e, &st);"
              "if (st != ACL_EVENT_RECORDED_STATUS_COMPLETE) return 4;", "ok"),
}


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rules")
    bodies = "\n".join(f'        if (!strcmp(which, "{name}")) {{ known = true; {body}; }}'
                       for name, (body, _) in CASES.items())
    src = tmp / "rules.cpp"
    src.write_text(RULES.replace("BODIES", bodies))
    exe = tmp / "rules"
    proc = build_cache.run([CXX, "-std=c++17", "-Wall", "-Werror", f"-I{TWIN}", "-o", str(exe), str(src)],
                           outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_twin_runtime_holds_async_copies_to_cann_rules(rules, case):
    proc = subprocess.run([str(rules), case], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    verdict = CASES[case][1]
    out = proc.stdout.strip()
    assert (out == "ok") if verdict == "ok" else (verdict in out), out


IN_FLIGHT = r'''#include <cstdio>
#include <cstring>
#include <vector>
#include "acl/acl.h"
#include "aclnnop/aclnn_thnn_fused_lstm_cell_backward.h"
// Calls of the operator on one stream: each synchronised at once, then all in flight before one
// synchronisation (the operator's host staging must not be reused while a copy from it is queued);
// prints 1 if every output has the same bytes both ways.
struct Case {
    int64_t n, h;
    float value;
    std::vector<void *> dev;
    std::vector<aclTensor *> t;
};
static void *device(size_t bytes, float value) {
    void *p = nullptr;
    aclrtMalloc(&p, bytes, ACL_MEM_MALLOC_HUGE_FIRST);
    std::vector<float> host(bytes / 4, value);
    aclrtMemcpy(p, bytes, host.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    return p;
}
static void make(Case &c) {
    int64_t shapes[6][2] = {{c.n, c.h}, {c.n, c.h}, {c.n, c.h}, {c.n, 4 * c.h}, {c.n, 4 * c.h}, {c.n, c.h}};
    for (int k = 0; k < 6; ++k) {
        int64_t strides[2] = {shapes[k][1], 1}, storage = shapes[k][0] * shapes[k][1];
        c.dev.push_back(device((size_t)storage * 4, k < 4 ? c.value + 0.25f * k : 0.0f));
        c.t.push_back(aclCreateTensor(shapes[k], 2, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, &storage, 1, c.dev.back()));
    }
    int64_t b = 4 * c.h, one = 1;
    c.dev.push_back(device((size_t)b * 4, 0.0f));
    c.t.push_back(aclCreateTensor(&b, 1, ACL_FLOAT, &one, 0, ACL_FORMAT_ND, &b, 1, c.dev.back()));
}
// grad_hy, cx, cy, storage in; grad_gates, grad_cx, grad_bias out; the workspace is returned
static void *call(Case &c, aclrtStream s) {
    uint64_t size = 0;
    aclOpExecutor *e = nullptr;
    if (aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(c.t[0], nullptr, c.t[1], c.t[2], c.t[3], true, c.t[4], c.t[5],
                                                       c.t[6], &size, &e) != 0) return nullptr;
    void *ws = nullptr;
    aclrtMalloc(&ws, size, ACL_MEM_MALLOC_HUGE_FIRST);
    if (aclnnThnnFusedLstmCellBackward(ws, size, e, s) != 0) return nullptr;
    return ws;
}
static std::vector<char> outputs(Case &c) {
    std::vector<char> all;
    for (int k = 4; k < 7; ++k) {
        size_t bytes = k == 4 ? c.n * 4 * c.h * 4 : k == 5 ? c.n * c.h * 4 : 4 * c.h * 4;
        std::vector<char> host(bytes);
        aclrtMemcpy(host.data(), bytes, c.dev[k], bytes, ACL_MEMCPY_DEVICE_TO_HOST);
        all.insert(all.end(), host.begin(), host.end());
    }
    return all;
}
int main() {
    aclInit(nullptr);
    aclrtSetDevice(0);
    aclrtStream s;
    aclrtCreateStream(&s);
    Case one[3] = {{2, 3, 1.0f, {}, {}}, {3, 5, 2.0f, {}, {}}, {5, 16, 0.5f, {}, {}}};
    Case many[3] = {{2, 3, 1.0f, {}, {}}, {3, 5, 2.0f, {}, {}}, {5, 16, 0.5f, {}, {}}};
    std::vector<void *> workspaces;
    for (Case &c : one) {
        make(c);
        workspaces.push_back(call(c, s));
        aclrtSynchronizeStream(s);
    }
    for (Case &c : many) {
        make(c);
        workspaces.push_back(call(c, s));
    }
    aclrtSynchronizeStream(s);
    bool same = true;
    for (int i = 0; i < 3; ++i) same = same && outputs(one[i]) == outputs(many[i]) && workspaces[i] && workspaces[3 + i];
    std::printf("%d\n", (int)same);
    return 0;
}
'''


def test_calls_in_flight_on_one_stream_keep_their_uploads(ascend_tree, tmp_path):
    """Three calls queued before one synchronisation give what each gives synchronised alone: each
    call's tiling and copy parameters stay in their own pinned staging block until its copy ran (the
    twin throws if a queued copy's source is freed or changed)."""
    root = ascend_tree / "lstm_cell_backward"
    (tmp_path / "shim.cpp").write_text(launch_shim(root / "op_kernel", root / "op_host", "lstm_cell_backward"))
    (tmp_path / "main.cpp").write_text(IN_FLIGHT)
    exe = tmp_path / "in_flight"
    cmd = [CXX, "-std=c++17", "-O1", "-Wall", "-Werror", f"-I{TWIN}", f"-I{TWIN / 'aclnn'}", f"-I{root / 'op_kernel'}",
           f"-I{root / 'op_host'}", "-o", str(exe), str(tmp_path / "main.cpp"),
           str(root / "op_host" / "aclnn_thnn_fused_lstm_cell_backward.cpp"), str(tmp_path / "shim.cpp")]
    proc = build_cache.run(cmd, outputs=[exe])
    assert proc.returncode == 0, proc.stderr[-4000:]
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "1", (proc.stdout, proc.stderr[-2000:])
