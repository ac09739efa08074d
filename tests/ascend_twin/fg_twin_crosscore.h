// CPU TWIN of AscendC's mixed kernels and cross-core synchronisation on Ascend910B (__NPU_ARCH__ 2201,
// Atlas A2) -- part of the test double, not CANN.
//
// What CANN says (asc-devkit = hicann/asc-devkit as mirrored at cannmirror/asc-devkit 0da921b; docs under
// docs/zh/api/SIMD-API/基础API/, SYNC = 同步控制/核间同步/; asc-tools = hicann/asc-tools 2113e48):
//  - Kernel types (Kernel-Tiling/设置Kernel类型.md :112-130; the enum: impl/basic_api/utils/
//    kernel_utils_macros.h :88-100): KERNEL_TYPE_MIX_AIC_1_2 starts, for numBlocks N, N AICs and 2N AIVs
//    (each block one AIC and two AIVs), MIX_AIC_1_1 N and N, MIX_AIC_1_0 N AICs, MIX_AIV_1_0 N AIVs
//    ("with hard sync").  AIV_ONLY / AIC_ONLY start no scheduling module, so no cross-core sync works
//    there (SYNC/CrossCoreSetFlag(ISASI).md :118).  CPU debug forks one process per core and refuses
//    more than 25 blocks of a mixed kernel on 910B1 (asc-tools cpudebug/include/kern_fwk.h :101-137,
//    cpudebug/src/regfwk/stub_base.cpp :288-299); the twin allows the AIC count (24, FG_TWIN_CUBE_CORES).
//  - Core type: ASCEND_IS_AIV / ASCEND_IS_AIC, in CPU debug (g_coreType == AscendC::AIV / AIC) tested at
//    run time, on the device constexpr; used as `if ASCEND_IS_AIC { ... }` (impl/utils/sys_macros.h
//    :69-87).  Indices: kernel_operator.h (GetBlockIdx, GetSubBlockIdx, GetTaskRatio, GetBlockNum).
//  - CrossCoreSetFlag<uint8_t modeId, pipe_t pipe>(uint16_t flagId) and CrossCoreWaitFlag<uint8_t modeId =
//    0, pipe_t pipe = PIPE_S>(uint16_t flagId) (include/basic_api/kernel_operator_block_sync_intf.h :89-93;
//    impl/basic_api/kernel_operator_block_sync_intf_impl.h :254-264).  On 2201 the set is
//    ffts_cross_core_sync(pipe, 1 + (mode & 3) << 4 + (flagId & 0xf) << 8) and the wait wait_flag_dev(
//    flagId), ignoring modeId and pipe (impl/basic_api/dav_c220/kernel_operator_sync_impl.h :117-127,
//    :494-505; SYNC/CrossCoreWaitFlag(ISASI).md :56: on A2 the wait holds every pipe).
//  - Modes on Atlas A2: 0, 1, 2 (mode 4 is Ascend 950's) (CrossCoreSetFlag(ISASI).md :78-85).
//      0: all AICs of the launch together, or all AIVs: each core's counter goes up once every core of
//         its type has set (:38; SYNC/关键特性说明.md :21, :27);
//      1: the AIVs of one block: each AIV's counter goes up once both have set (:39; 关键特性说明.md :51);
//      2: AIC <-> AIVs of one block: an AIC's set raises both AIVs' counters, the AIC's goes up once both
//         AIVs have set (:40; 关键特性说明.md :78, :84).
//    Kernel types per mode (:126-128): 0 in MIX_AIV_1_0, MIX_AIC_1_0, MIX_AIC_1_1, MIX_AIC_1_2; 1 and 2
//    in MIX_AIC_1_1 and MIX_AIC_1_2 only.
//  - pipe: PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3 or PIPE_FIX; never PIPE_S or PIPE_ALL (:94,
//    :135); the set fires once the pipe's earlier instructions are done (:33).  The wait's pipe is not
//    used on A2 (CrossCoreWaitFlag(ISASI).md :56, its default is PIPE_S): the twin takes any but PIPE_ALL
//    (:49, :91).
//  - flagId: 0-15, 16 per core; the hardware keeps the low 4 bits of a larger one (:103, :141).  Each
//    flag is a counter of 0-15 per core: a wait with the counter at 0 blocks the core (instructions
//    already issued go on), else takes one; a counter past 15 is an error that stops the kernel (:142).
//    Sets and waits must pair, or the behaviour is undefined (:134); a wait nobody satisfies blocks the
//    core for ever (CrossCoreWaitFlag(ISASI).md :128).  One core may use a flag in another mode only once
//    every set and wait of the previous mode on it is done (:143-144).  SyncAll uses flags 11-14: a
//    kernel using SyncAll must not set them itself (:133).
//  - SyncAll<bool isAIVOnly = true>() (the hard sync; the soft one with GM/UB workspaces is not
//    modelled) needs a mixed kernel type: __mix__(0, 1) (MIX_AIV_1_0) for a pure vector kernel,
//    __mix__(1, 1) / (1, 2) for a mixed one (SYNC/SyncAll.md :170-171); isAIVOnly = false in a pure vector
//    kernel hangs (:172); isAIVOnly = true in a mixed kernel syncs the AIVs only (:173).  On 2201 it is
//    PipeBarrier<PIPE_ALL>, then with isAIVOnly: set mode 0 flag 14 on PIPE_MTE3 and wait 14; without:
//    the AIC waits flag 12, sets mode 0 flag 11 (PIPE_FIX), waits 11, sets mode 2 flag 13 (PIPE_MTE3); an
//    AIV sets mode 2 flag 12 (PIPE_MTE3) and waits 13 (dav_c220/kernel_operator_sync_impl.h :117-120,
//    :363-403).  The twin runs exactly these sets and waits.
//  - A real mixed kernel: ops-nn's grouped matmul quant (GMMQuantMixCoreCompute): the AIC sets
//    CrossCoreSetFlag<SYNC_MODE2, PIPE_FIX> after writing GM with the cube, the AIVs wait, read, and set
//    CrossCoreSetFlag<SYNC_MODE2, PIPE_MTE2> back; the AIV takes its cube's index as GetBlockIdx() /
//    GetTaskRation().
//
// The twin: a mixed launch makes one Core per AIC and AIV (block-major: the AIC, then AIV 0, AIV 1) and
// runs each as a cooperative fiber (ucontext).  A core runs until a CrossCoreWaitFlag finds its counter at
// 0 (or it ends); then the next core in order that can run does, so a run is repeatable.  When no core
// can run and some have not ended, the device would hang: Violation, naming each blocked core and flag.
// Happens-before: every core keeps a vector clock over (core, pipe) -- how many of that core's
// instructions on that pipe it knows complete.  A set takes the setter's clock with its own entries from
// its pipe (PIPE_S counted as done: the compiler orders scalar code), a group's completion joins its
// setters' clocks, and a satisfied wait joins that into the waiter's clock (the wait holds all its pipes).
// Two cores' accesses to the same GM bytes (one a write) are a race unless the earlier one is in the
// later core's clock when it makes its access (checked at each access against the bytes' last write
// and the reads since, which is enough: each of those was checked against the ones before it).
#ifndef FG_ASCEND_TWIN_CROSSCORE_H
#define FG_ASCEND_TWIN_CROSSCORE_H

#include <sys/mman.h>
#include <ucontext.h>

#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

namespace fg_twin {

constexpr int XFLAG_NUM = 16;      // flag IDs per core, modes 0-2 (CrossCoreSetFlag(ISASI).md :141)
constexpr int XCOUNTER_MAX = 15;   // a flag's counter counts 0-15 (:142)
constexpr uint16_t SYNC_AIC_FLAG = 11, SYNC_AIV_FLAG = 12, SYNC_AIC_AIV_FLAG = 13, SYNC_AIV_ONLY_ALL = 14;
constexpr size_t FIBER_STACK = 16u << 20;  // reserved, not committed: pages are taken as they are used

// thrown by the first block of a launch that runs blocks one after another when the kernel says it is
// mixed: the launch runs it again with all its cores (not a Violation)
struct RestartMixed {
    KernelType type;
};

inline const char *kernel_type_name(KernelType t) {
    static const char *names[] = {"KERNEL_TYPE_AIV_ONLY",    "KERNEL_TYPE_AIC_ONLY",    "KERNEL_TYPE_MIX_AIV_1_0",
                                  "KERNEL_TYPE_MIX_AIC_1_0", "KERNEL_TYPE_MIX_AIC_1_1", "KERNEL_TYPE_MIX_AIC_1_2"};
    return names[(int)t];
}

using XClock = std::vector<uint64_t>;  // [core * NPIPE + pipe]: that pipe's instructions known complete

// one core of a mixed launch
struct XCore {
    Core core;
    XClock clock;
    std::deque<XClock> counter[XFLAG_NUM];  // completed sets not yet waited, with the clock each carries
    int mode[XFLAG_NUM];                    // the mode of the flag's last set by this core (-1: none)
    int waiting = -1;                       // the flag it is blocked on
    bool done = false;
    std::exception_ptr error;
    ucontext_t ctx;
    void *stack = nullptr;
};

// the sets of one group (mode, flag, setter type, block) not yet complete, per setter
struct XPending {
    int mode = 0, flag = 0;
    std::vector<int> setters, receivers;
    std::vector<std::deque<XClock>> queues;
};

// GM shadow of a mixed launch: disjoint byte ranges, each with its last write and the reads since
struct XAccess {
    int core = -1;
    uint8_t pipe = 0;
    uint64_t seq = 0;
};
struct XSegment {
    uint64_t hi;
    XAccess write;
    std::vector<XAccess> reads;
};

struct MixedLaunch {
    KernelType type = KERNEL_TYPE_MIX_AIC_1_2;
    int64_t blocks = 0;
    int aic = 0, aiv = 0;  // cores of each type per block
    std::vector<std::unique_ptr<XCore>> cores;
    std::map<std::tuple<int, int, int, int>, XPending> pending;
    std::map<uint64_t, XSegment> gm;
    ucontext_t main;
    int current = -1;
    std::function<void()> body;
    bool sync_all = false;    // the kernel called SyncAll
    int own_sync_flag = -1;   // a flag of SyncAll's (11-14) the kernel set itself
};
inline MixedLaunch *&mixed() { static MixedLaunch *m = nullptr; return m; }
inline bool in_mixed_launch() { return mixed() != nullptr; }
inline XCore &xcore() { return *mixed()->cores[mixed()->current]; }

// a core by its kernel's names: "AIC 3" (GetBlockIdx 3), "AIV 7 (block 3, sub-block 1)"
inline std::string core_label(int id) {
    const Core &c = mixed()->cores[id]->core;
    if (c.type == CoreType::AIC) return "AIC " + std::to_string(c.block);
    return "AIV " + std::to_string(c.block * c.ratio + c.sub) + " (block " + std::to_string(c.block) + ", sub-block " +
           std::to_string(c.sub) + ")";
}

inline bool has_aiv(KernelType t) { return t == KERNEL_TYPE_MIX_AIV_1_0 || t == KERNEL_TYPE_MIX_AIC_1_1 || t == KERNEL_TYPE_MIX_AIC_1_2; }

// KERNEL_TASK_TYPE_DEFAULT(t) (fg_twin_cube.h): AIV-only and AIC-only kernels set the core type of the
// block running; a mixed type restarts a launch of blocks as a mixed launch, and in a mixed launch must
// be the launch's own
inline void kernel_type(KernelType t) {
    const bool mix = t != KERNEL_TYPE_AIV_ONLY && t != KERNEL_TYPE_AIC_ONLY;
    if (in_mixed_launch()) {
        require(t == mixed()->type, std::string("KERNEL_TASK_TYPE_DEFAULT(") + kernel_type_name(t) + ") on " +
                                        core_label(mixed()->current) + " of a " + kernel_type_name(mixed()->type) +
                                        " kernel: one kernel has one type");
        return;
    }
    if (mix) {
        require(core().block == 0, std::string("KERNEL_TASK_TYPE_DEFAULT(") + kernel_type_name(t) +
                                       ") only from block " + std::to_string(core().block) + ": one kernel has one type");
        throw RestartMixed{t};
    }
    core_type() = t == KERNEL_TYPE_AIC_ONLY ? CoreType::AIC : CoreType::AIV;
}

// ------------------------------------------------------------------ happens-before in GM
[[noreturn]] inline void cross_race(const XAccess &a, bool a_write, int c, int p, bool write, uint64_t lo, uint64_t hi,
                                    const char *op) {
    throw Violation("cores " + core_label(a.core) + " and " + core_label(c) + " of one launch " +
                    (a_write && write ? "both write" : "write and read") + " GM bytes [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + ") unordered: " + op + " on PIPE_" + pipe_name(p) + " of " + core_label(c) +
                    (write ? " writes" : " reads") + " what PIPE_" + pipe_name(a.pipe) + " instruction #" +
                    std::to_string(a.seq) + " of " + core_label(a.core) + (a_write ? " wrote" : " reads") +
                    ", and no CrossCoreSetFlag -> CrossCoreWaitFlag chain or SyncAll orders them: a race between "
                    "cores (a set fires once its pipe's earlier instructions are done, CrossCoreSetFlag(ISASI).md :33)");
}
inline bool known(int c, const XAccess &a) {
    return a.core < 0 || a.core == c || mixed()->cores[c]->clock[(size_t)a.core * NPIPE + a.pipe] >= a.seq;
}
inline void split_segment(std::map<uint64_t, XSegment> &gm, uint64_t at) {
    auto it = gm.upper_bound(at);
    if (it == gm.begin()) return;
    --it;
    if (it->first < at && at < it->second.hi) {
        XSegment tail = it->second;
        it->second.hi = at;
        gm.emplace(at, tail);
    }
}
inline void mixed_gm_access(int p, uint64_t seq, bool write, uint64_t lo, uint64_t hi, const char *op) {
    MixedLaunch &m = *mixed();
    const int c = m.current;
    const XAccess now{c, (uint8_t)p, seq};
    split_segment(m.gm, lo);
    split_segment(m.gm, hi);
    uint64_t pos = lo;
    auto it = m.gm.lower_bound(lo);
    while (pos < hi) {
        if (it == m.gm.end() || it->first > pos) {
            uint64_t end = it == m.gm.end() ? hi : std::min(hi, it->first);
            it = m.gm.emplace_hint(it, pos, XSegment{end, XAccess{}, {}});
        }
        XSegment &s = it->second;
        if (!known(c, s.write)) cross_race(s.write, true, c, p, write, it->first, s.hi, op);
        if (write) {
            for (const XAccess &r : s.reads)
                if (!known(c, r)) cross_race(r, false, c, p, write, it->first, s.hi, op);
            s.write = now;
            s.reads.clear();
        } else {
            bool found = false;
            for (XAccess &r : s.reads)
                if (r.core == c && r.pipe == p) {
                    r.seq = seq;
                    found = true;
                }
            if (!found) s.reads.push_back(now);
        }
        pos = s.hi;
        ++it;
    }
}

// ------------------------------------------------------------------ flags
inline int twin_pipe(AscendC::pipe_t p) {
    using namespace AscendC;
    return p == PIPE_S ? P_S : p == PIPE_V ? P_V : p == PIPE_M ? P_M : p == PIPE_MTE1 ? P_MTE1 : p == PIPE_MTE2 ? P_MTE2
           : p == PIPE_MTE3 ? P_MTE3 : p == PIPE_FIX ? P_FIX : -1;
}
inline std::string flag_call(const char *api, int mode, int pipe, int flag) {
    return std::string(api) + "<" + std::to_string(mode) + ", PIPE_" + (pipe < 0 ? "ALL" : pipe_name(pipe)) + ">(" +
           std::to_string(flag) + ")";
}
inline void check_mode(const std::string &call, int mode) {
    MixedLaunch &m = *mixed();
    require(mode == 0 || mode == 1 || mode == 2,
            call + ": modeId " + std::to_string(mode) + " -- Atlas A2 has modes 0, 1 and 2 (CrossCoreSetFlag(ISASI).md :81)");
    require(mode == 0 || m.type == KERNEL_TYPE_MIX_AIC_1_1 || m.type == KERNEL_TYPE_MIX_AIC_1_2,
            call + ": mode " + std::to_string(mode) + " in a " + kernel_type_name(m.type) +
                " kernel; modes 1 and 2 need KERNEL_TYPE_MIX_AIC_1_1 or KERNEL_TYPE_MIX_AIC_1_2 (CrossCoreSetFlag(ISASI).md :126-128)");
}
inline void check_flag(const std::string &call, int flag) {
    require(flag >= 0 && flag < XFLAG_NUM, call + ": flagId " + std::to_string(flag) +
                                               " is outside 0..15 (the hardware would use its low 4 bits, CrossCoreSetFlag(ISASI).md :141)");
}
inline void check_sync_all_flags() {
    MixedLaunch &m = *mixed();
    require(!m.sync_all || m.own_sync_flag < 0,
            "the kernel sets flag " + std::to_string(m.own_sync_flag) +
                " itself and calls SyncAll, whose hard sync uses flags 11-14 (CrossCoreSetFlag(ISASI).md :133)");
}
inline void require_mixed(const char *api) {
    require(in_mixed_launch(), std::string(api) + " in an AIV-only or AIC-only kernel: the hardware starts no scheduling "
                                                  "module for it, so cross-core sync cannot work; declare "
                                                  "KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_...) (CrossCoreSetFlag(ISASI).md :118)");
}

// hand the completed sets of a group to its receivers' counters
inline void complete(XPending &g, const std::string &call) {
    MixedLaunch &m = *mixed();
    for (;;) {
        for (const auto &q : g.queues)
            if (q.empty()) return;
        XClock joined(m.cores.size() * NPIPE, 0);
        for (auto &q : g.queues) {
            for (size_t k = 0; k < joined.size(); ++k) joined[k] = std::max(joined[k], q.front()[k]);
            q.pop_front();
        }
        for (int r : g.receivers) {
            std::deque<XClock> &counter = m.cores[r]->counter[g.flag];
            require((int)counter.size() < XCOUNTER_MAX,
                    call + " on " + core_label(m.current) + ": the counter of flag " + std::to_string(g.flag) + " on " +
                        core_label(r) + " is already " + std::to_string(XCOUNTER_MAX) +
                        ", its most: counter overflow, the device stops the kernel (a flag counts 0-15 sets not yet "
                        "waited, CrossCoreSetFlag(ISASI).md :142)");
            counter.push_back(joined);
        }
    }
}

inline void cross_set(int mode, AscendC::pipe_t pipe_arg, int flag, bool sync_all) {
    const int pipe = twin_pipe(pipe_arg);
    const std::string call = flag_call("CrossCoreSetFlag", mode, pipe, flag);
    require_mixed("CrossCoreSetFlag");
    MixedLaunch &m = *mixed();
    XCore &x = xcore();
    const int c = m.current;
    check_mode(call, mode);
    require(mode != 1 || x.core.type == CoreType::AIV,
            call + " on " + core_label(c) + ": mode 1 syncs the AIVs of one block; an AIC takes no part (CrossCoreSetFlag(ISASI).md :39)");
    require(pipe >= 0 && pipe != P_S, call + ": the pipe must be PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3 or PIPE_FIX, "
                                             "never PIPE_S or PIPE_ALL (CrossCoreSetFlag(ISASI).md :94, :135)");
    require(pipe_on_core(pipe), call + " on " + core_label(c) + ", which has no PIPE_" + pipe_name(pipe));
    check_flag(call, flag);
    if (!sync_all && flag >= SYNC_AIC_FLAG && flag <= SYNC_AIV_ONLY_ALL) m.own_sync_flag = flag;
    check_sync_all_flags();
    // the group this set belongs to and the cores whose counters it raises
    const bool aic = x.core.type == CoreType::AIC;
    const int block = mode == 0 ? -1 : (int)x.core.block;
    auto key = std::make_tuple(mode, flag, aic ? 1 : 0, block);
    auto found = m.pending.find(key);
    if (found == m.pending.end()) {
        XPending g;
        g.mode = mode;
        g.flag = flag;
        for (size_t i = 0; i < m.cores.size(); ++i) {
            const Core &o = m.cores[i]->core;
            const bool same_type = (o.type == CoreType::AIC) == aic, same_block = o.block == x.core.block;
            if (mode == 0 ? same_type : mode == 1 ? same_type && same_block : same_block && same_type) g.setters.push_back((int)i);
            if (mode == 0 ? same_type : mode == 1 ? same_type && same_block : same_block && !same_type) g.receivers.push_back((int)i);
        }
        g.queues.resize(g.setters.size());
        found = m.pending.emplace(key, g).first;
    }
    XPending &g = found->second;
    require(!g.receivers.empty(), call + " on " + core_label(c) + ": no core of this block waits for it (a " +
                                      kernel_type_name(m.type) + " block has no " + (aic ? "AIV" : "AIC") + ")");
    // one flag, another mode: every set and wait of the last mode on this core must be done (:143-144)
    if (x.mode[flag] >= 0 && x.mode[flag] != mode) {
        bool busy = !x.counter[flag].empty();  // sets for this core not waited yet
        for (const auto &other : m.pending) {  // its own sets of the old mode not complete or not waited yet
            const XPending &o = other.second;
            if (o.flag != flag || o.mode == mode) continue;
            if (std::find(o.setters.begin(), o.setters.end(), c) == o.setters.end()) continue;
            for (const auto &q : o.queues) busy = busy || !q.empty();
            for (int r : o.receivers) busy = busy || !m.cores[r]->counter[flag].empty();
        }
        require(!busy, call + " on " + core_label(c) + ": flag " + std::to_string(flag) + " still has sets or waits of mode " +
                           std::to_string(x.mode[flag]) + " pending on this core; switch a flag's mode only when they are "
                           "all done (CrossCoreSetFlag(ISASI).md :143-144)");
    }
    x.mode[flag] = mode;
    // what this set carries: the setter's knowledge, and its own instructions the pipe has completed
    XClock snap = x.clock;
    const PipeModel &pm = x.core.pipes;
    for (int q = 0; q < NPIPE; ++q)
        snap[(size_t)c * NPIPE + q] = q == pipe || q == P_S ? pm.issued[q] : pm.known[pipe].c[q];
    for (size_t k = 0; k < g.setters.size(); ++k)
        if (g.setters[k] == c) g.queues[k].push_back(snap);
    complete(g, call);
}

inline void cross_wait(int mode, AscendC::pipe_t pipe_arg, int flag) {
    const int pipe = twin_pipe(pipe_arg);
    const std::string call = flag_call("CrossCoreWaitFlag", mode, pipe, flag);
    require_mixed("CrossCoreWaitFlag");
    check_mode(call, mode);
    require(pipe >= 0, call + ": PIPE_ALL is not a pipe a wait may name (CrossCoreWaitFlag(ISASI).md :49, :91)");
    check_flag(call, flag);
    MixedLaunch &m = *mixed();
    XCore &x = xcore();
    while (x.counter[flag].empty()) {  // blocked: the other cores run
        x.waiting = flag;
        swapcontext(&x.ctx, &m.main);
    }
    x.waiting = -1;
    const XClock &got = x.counter[flag].front();
    for (size_t k = 0; k < x.clock.size(); ++k) x.clock[k] = std::max(x.clock[k], got[k]);
    x.counter[flag].pop_front();
}

inline void sync_all(bool aiv_only) {
    require_mixed("SyncAll");
    MixedLaunch &m = *mixed();
    require(aiv_only || m.aic > 0, std::string("SyncAll<false> in a ") + kernel_type_name(m.type) +
                                       " kernel: with no AIC it hangs the device; a pure vector kernel uses SyncAll<true> "
                                       "(SyncAll.md :172)");
    m.sync_all = true;
    check_sync_all_flags();
    barrier(-1);  // PipeBarrier<PIPE_ALL>
    using namespace AscendC;
    const bool aic = core_type() == CoreType::AIC;
    if (aiv_only) {
        cross_set(0, PIPE_MTE3, SYNC_AIV_ONLY_ALL, true);
        cross_wait(0, PIPE_S, SYNC_AIV_ONLY_ALL);
    } else if (aic) {
        cross_wait(0, PIPE_S, SYNC_AIV_FLAG);
        cross_set(0, PIPE_FIX, SYNC_AIC_FLAG, true);
        cross_wait(0, PIPE_S, SYNC_AIC_FLAG);
        cross_set(2, PIPE_MTE3, SYNC_AIC_AIV_FLAG, true);
    } else {
        cross_set(2, PIPE_MTE3, SYNC_AIV_FLAG, true);
        cross_wait(0, PIPE_S, SYNC_AIC_AIV_FLAG);
    }
}

// ------------------------------------------------------------------ running the cores
inline void fiber_main() {
    MixedLaunch &m = *mixed();
    XCore &x = xcore();
    try {
        m.body();
        end_of_kernel();
    } catch (...) {
        x.error = std::current_exception();
    }
    x.done = true;
    swapcontext(&x.ctx, &m.main);
}

inline std::string blocked_cores() {
    MixedLaunch &m = *mixed();
    std::string s;
    for (size_t i = 0; i < m.cores.size(); ++i) {
        const XCore &x = *m.cores[i];
        if (x.done) continue;
        s += (s.empty() ? "" : "; ") + core_label((int)i) + " waits in CrossCoreWaitFlag(" + std::to_string(x.waiting) + ")";
    }
    return s;
}

// the launch's end: every completed set was waited, every group's sets complete (CrossCoreSetFlag(ISASI).md
// :134: unpaired sets and waits are undefined)
inline void end_of_mixed_launch() {
    MixedLaunch &m = *mixed();
    for (size_t i = 0; i < m.cores.size(); ++i)
        for (int f = 0; f < XFLAG_NUM; ++f)
            require(m.cores[i]->counter[f].empty(),
                    "flag " + std::to_string(f) + " of " + core_label((int)i) + " holds " +
                        std::to_string(m.cores[i]->counter[f].size()) +
                        " CrossCoreSetFlag never waited when the kernel ends (sets and waits must pair, "
                        "CrossCoreSetFlag(ISASI).md :134)");
    for (const auto &e : m.pending)
        for (size_t k = 0; k < e.second.setters.size(); ++k)
            require(e.second.queues[k].empty(),
                    "CrossCoreSetFlag<" + std::to_string(e.second.mode) + ">(" + std::to_string(e.second.flag) + ") of " +
                        core_label(e.second.setters[k]) + " never completed: the other cores of its group did not set "
                        "the flag as often before the kernel ended");
}

struct MixedGuard {  // puts the twin back to launches of blocks, however a mixed launch ends
    std::unique_ptr<MixedLaunch> owned;
    ~MixedGuard() {
        for (auto &x : owned->cores)
            if (x->stack) munmap(x->stack, FIBER_STACK);
        mixed() = nullptr;
        current_core() = &sequential_core();
    }
};

// Run a mixed kernel: its cores as fibers, each from the start, switched only when a core waits on a flag
// whose counter is 0 or ends; the next to run is the next core in order that can.
inline void run_mixed(KernelType type, int64_t block_dim, std::function<void()> body) {
    MixedGuard guard{std::unique_ptr<MixedLaunch>(new MixedLaunch())};
    MixedLaunch &m = *guard.owned;
    m.type = type;
    m.blocks = block_dim;
    m.aic = type == KERNEL_TYPE_MIX_AIV_1_0 ? 0 : 1;
    m.aiv = type == KERNEL_TYPE_MIX_AIC_1_2 ? 2 : has_aiv(type) ? 1 : 0;
    m.body = std::move(body);
    const char *env = std::getenv(m.aic ? "FG_TWIN_CUBE_CORES" : "FG_TWIN_VECTOR_CORES");
    const int64_t most = env ? std::atoll(env) : m.aic ? 24 : 48;
    require(block_dim >= 1 && block_dim <= most, std::string("a ") + kernel_type_name(type) + " kernel launched on " +
                                                     std::to_string(block_dim) + " blocks: Ascend910B has " + std::to_string(most) +
                                                     (m.aic ? " AI Cube cores" : " AI Vector cores") + " (one per block)");
    for (int64_t b = 0; b < block_dim; ++b)
        for (int k = 0; k < m.aic + m.aiv; ++k) {
            std::unique_ptr<XCore> x(new XCore());
            const bool aic = k < m.aic;
            reset_core(x->core, aic ? CoreType::AIC : CoreType::AIV, b, aic ? 0 : k - m.aic, aic ? 1 : m.aiv, (int)m.cores.size());
            std::fill(x->mode, x->mode + XFLAG_NUM, -1);
            m.cores.push_back(std::move(x));
        }
    for (auto &x : m.cores) {
        x->clock.assign(m.cores.size() * NPIPE, 0);
        x->stack = mmap(nullptr, FIBER_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        require(x->stack != MAP_FAILED, "no memory for a core's stack");
        getcontext(&x->ctx);
        x->ctx.uc_stack.ss_sp = x->stack;
        x->ctx.uc_stack.ss_size = FIBER_STACK;
        x->ctx.uc_link = nullptr;
        makecontext(&x->ctx, fiber_main, 0);
    }
    mixed() = &m;
    const int n = (int)m.cores.size();
    int last = n - 1;
    for (;;) {
        int pick = -1;
        bool live = false;
        for (int k = 1; k <= n && pick < 0; ++k) {
            const int i = (last + k) % n;
            const XCore &x = *m.cores[i];
            live = live || !x.done;
            if (!x.done && (x.waiting < 0 || !x.counter[x.waiting].empty())) pick = i;
        }
        if (pick < 0) {
            require(!live, "every core still running waits on a flag no core will set: " + blocked_cores() +
                               " -- the device would hang (CrossCoreWaitFlag(ISASI).md :128)");
            break;
        }
        m.current = pick;
        current_core() = &m.cores[pick]->core;
        swapcontext(&m.main, &m.cores[pick]->ctx);
        current_core() = &sequential_core();
        if (m.cores[pick]->error) std::rethrow_exception(m.cores[pick]->error);
        last = pick;
    }
    end_of_mixed_launch();
}

}  // namespace fg_twin

// the core type a kernel's code runs on: `if ASCEND_IS_AIC { ... }` (impl/utils/sys_macros.h :69-74,
// the CPU-debug form)
#define ASCEND_IS_AIV (fg_twin::core_type() == fg_twin::CoreType::AIV)
#define ASCEND_IS_AIC (fg_twin::core_type() == fg_twin::CoreType::AIC)
#define ASCEND_IS_NOT_AIV (fg_twin::core_type() != fg_twin::CoreType::AIV)
#define ASCEND_IS_NOT_AIC (fg_twin::core_type() != fg_twin::CoreType::AIC)

namespace AscendC {
template <uint8_t modeId, pipe_t pipe>
inline void CrossCoreSetFlag(uint16_t flagId) { fg_twin::cross_set(modeId, pipe, flagId, false); }
template <uint8_t modeId = 0, pipe_t pipe = PIPE_S>
inline void CrossCoreWaitFlag(uint16_t flagId) { fg_twin::cross_wait(modeId, pipe, flagId); }
template <bool isAIVOnly = true>
inline void SyncAll() { fg_twin::sync_all(isAIVOnly); }
}  // namespace AscendC

#endif
