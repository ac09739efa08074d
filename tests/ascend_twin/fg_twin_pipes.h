// CPU TWIN of AscendC's pipes and their synchronisation -- part of the test double, not CANN.
//
// An AI Vector core runs its instructions on separate pipes that run asynchronously: PIPE_MTE2 copies
// GM -> UB, PIPE_V computes on UB, PIPE_MTE3 copies UB -> GM, PIPE_S does scalar reads and writes.
// The twin executes every instruction at once, in program order, but checks each one as the hardware
// would run it: an instruction on pipe p that touches a UB or GM range an earlier instruction on pipe
// q wrote (or, for a write, read) must be ordered after it, or it raises Violation.  What orders them
// (CANN's rules, see each rule's source):
//   - SetFlag<q_p>(id) on q (it fires once every earlier q instruction is done) and WaitFlag<q_p>(id)
//     on p; the queue protocol issues these itself: EnQue/DeQue (VECIN: MTE2_V, VECOUT: V_MTE3) and
//     FreeTensor/AllocTensor (VECIN: V_MTE2, VECOUT: MTE3_V);
//   - PipeBarrier<PIPE_ALL> (everything), PipeBarrier<p> (p's own earlier instructions);
//   - on PIPE_V, the compiler's auto-sync (--cce-auto-sync, on for kernel projects) orders V after V;
//   - scalar accesses (GetValue/SetValue) are ordered with every pipe by the compiler's auto-sync,
//     but only with the accesses they depend on: they order nothing else.
// Same-pipe copies whose destinations overlap need PipeBarrier<PIPE_MTE2/MTE3> (AscendC's DataCopy
// documentation).  Flags are checked too: a WaitFlag with no SetFlag before it would hang, a second
// SetFlag on a set flag is undefined, and a flag still set when the kernel ends was never waited.
// All of it is per core (fg_twin::Core, kernel_operator.h): pipes() is the current core's model.
//
// Knowledge is kept as vector clocks: issued[p] counts p's instructions, known[p][q] is how many of
// q's instructions are complete before p's next one starts; a flag carries the setter's clock.
// Local memories are shadowed per 32-byte block (what a vector or copy instruction moves at least); GM
// as ranges.  On an AI Cube core the compiler inserts no synchronisation at all
// (SYD/核内同步/关键特性说明.md): every cube pipe is ordered by flags, barriers and queues only.
#ifndef FG_ASCEND_TWIN_PIPES_H
#define FG_ASCEND_TWIN_PIPES_H

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fg_twin {

// AIV: S, V, MTE2 (GM -> UB), MTE3 (UB -> GM).  AIC: S, MTE2 (GM -> L1), MTE1 (L1 -> L0A/L0B), M (Mmad),
// FIX (L0C -> GM).  SYD/核内同步/核内同步能力概述.md
enum Pipe { P_S, P_V, P_MTE2, P_MTE3, P_MTE1, P_M, P_FIX, NPIPE };
inline const char *pipe_name(int p) {
    static const char *names[] = {"S", "V", "MTE2", "MTE3", "MTE1", "M", "FIX"};
    return names[p];
}

// a core's local memories: UB on an AI Vector core; L1, L0A, L0B, L0C and the BiasTable on an AI Cube
// core (Ascend910B: asc-tools cpudebug/src/api_check/inc/ascend910B1_ini.h, UB_SIZE, L1_SIZE,
// L0A/L0B/L0C_SIZE; the BiasTable's 1 KB: asc-devkit's per-chip buffer table)
enum Mem { M_UB, M_L1, M_L0A, M_L0B, M_L0C, M_BT, NMEM };
inline const char *mem_name(int m) {
    static const char *names[] = {"UB", "L1", "L0A", "L0B", "L0C", "BiasTable"};
    return names[m];
}
inline uint32_t mem_size(int m) {
    static const uint32_t sizes[] = {192 * 1024, 512 * 1024, 64 * 1024, 64 * 1024, 128 * 1024, 1024};
    return sizes[m];
}

struct Clock {
    uint64_t c[NPIPE] = {};
    void join(const Clock &o) {
        for (int q = 0; q < NPIPE; ++q) c[q] = std::max(c[q], o.c[q]);
    }
};

// one access: the instruction that made it (pipe, sequence number)
struct Access {
    uint8_t pipe = 0;
    uint64_t seq = 0;  // 0: none
};

struct PipeModel {
    uint64_t issued[NPIPE] = {};
    Clock known[NPIPE];
    // shadow of each local memory per 32-byte block: last writer and, per pipe, the last reader
    struct Block {
        Access writer;
        uint64_t reader[NPIPE] = {};
    };
    std::vector<Block> local[NMEM];
    // the Mmad in flight orders itself after the previous one on its L0C (Mmad.md: a PipeBarrier<PIPE_M>
    // between consecutive Mmads is needed only while (m/16)*(n/16) < 10)
    bool m_self_ordered = false;
    // the last Mmad's L0C bytes and sequence number, and PIPE_M's last barrier (PIPE_M or PIPE_ALL)
    uint32_t mmad_lo = 0, mmad_hi = 0;
    uint64_t mmad_seq = 0, m_barrier_at = 0;
    // GM shadow: accesses by address range, pruned once every pipe that touches GM is past them
    struct Range {
        uint64_t end;
        Access who;
        bool write;
    };
    std::multimap<uint64_t, Range> gm;
    uint64_t gm_longest = 0, gm_prune_at = 4096;
    // flags: per event (src, dst) and ID, the setter's clock; held by a queue or by the kernel
    struct Flag {
        bool set = false, queue = false;
        Clock clock;
    };
    Flag flags[NPIPE][NPIPE][8];
};

inline PipeModel &pipes();  // the current core's (kernel_operator.h); a memory's shadow is made when first used

inline uint64_t issue(int p) { return ++pipes().issued[p]; }

// GM bytes each core of the current launch read or wrote ("GM Memory Multi-Core Conflict Check" of
// CANN's npuchk): cores run at the same time, so one core's write may meet no other core's access.  In
// a mixed launch cross-core flags may order them: there the check is fg_twin_crosscore.h's, made at
// each access with the cores' vector clocks.
struct CoreRange {
    uint64_t lo, hi;
    int64_t core;
    bool write;
};
inline bool in_mixed_launch();  // fg_twin_crosscore.h
inline void mixed_gm_access(int p, uint64_t seq, bool write, uint64_t lo, uint64_t hi, const char *op);
inline std::vector<CoreRange> &launch_ranges() { static std::vector<CoreRange> v; return v; }
inline void core_touched(int p, uint64_t seq, uint64_t lo, uint64_t hi, bool write, const char *op) {
    if (in_mixed_launch()) {
        mixed_gm_access(p, seq, write, lo, hi, op);
        return;
    }
    std::vector<CoreRange> &v = launch_ranges();
    int64_t core = core_id();
    if (!v.empty() && v.back().core == core && v.back().write == write && v.back().hi == lo) {
        v.back().hi = hi;  // the continuation of the last range
        return;
    }
    v.push_back(CoreRange{lo, hi, core, write});
}
inline void check_cores() {
    std::vector<CoreRange> &v = launch_ranges();
    std::sort(v.begin(), v.end(), [](const CoreRange &a, const CoreRange &b) { return a.lo < b.lo; });
    // sweep over the ranges still open at lo (by end): a read meets the open writes, a write every range
    std::multimap<uint64_t, const CoreRange *> reads, writes;
    for (const CoreRange &r : v) {
        reads.erase(reads.begin(), reads.upper_bound(r.lo));
        writes.erase(writes.begin(), writes.upper_bound(r.lo));
        for (auto *open : {&writes, &reads}) {
            if (open == &reads && !r.write) continue;
            for (const auto &o : *open) {
                const CoreRange &q = *o.second;
                if (q.core == r.core) continue;
                throw Violation("cores " + std::to_string(q.core) + " and " + std::to_string(r.core) + " of one launch " +
                                (q.write && r.write ? "both write" : "write and read") + " GM bytes [" +
                                std::to_string(std::max(q.lo, r.lo)) + ", " + std::to_string(std::min(q.hi, r.hi)) +
                                "): a race between cores (split the work so each core owns its bytes, or SyncAll)");
            }
        }
        (r.write ? writes : reads).emplace(r.hi, &r);
    }
    v.clear();
}

// Is the earlier access (q, s) complete before pipe p's current instruction?  Scalar accesses are
// ordered by the compiler's auto-sync with the one access they conflict with (and nothing more).
inline bool ordered(int p, const Access &a) {
    PipeModel &m = pipes();
    int q = a.pipe;
    if (a.seq == 0) return true;
    if (q == p) return p == P_V || p == P_S || (p == P_M && m.m_self_ordered) || m.known[p].c[p] >= a.seq;
    if (p == P_S || q == P_S) {
        m.known[p].c[q] = std::max(m.known[p].c[q], a.seq);
        return true;
    }
    return m.known[p].c[q] >= a.seq;
}

[[noreturn]] inline void hazard(int p, bool write, const char *space, uint64_t lo, uint64_t hi, const Access &a, bool a_write,
                         const char *op);

inline void local_access(int mem, int p, uint64_t seq, bool write, uint32_t lo, uint32_t bytes, const char *op) {
    PipeModel &m = pipes();
    std::vector<PipeModel::Block> &shadow = m.local[mem];
    if (bytes == 0) return;
    if (shadow.empty()) shadow.assign(mem_size(mem) / 32, PipeModel::Block());
    uint32_t b0 = lo / 32, b1 = (lo + bytes + 31) / 32;
    for (uint32_t b = b0; b < b1 && b < shadow.size(); ++b) {
        PipeModel::Block &k = shadow[b];
        if (!ordered(p, k.writer)) hazard(p, write, mem_name(mem), lo, lo + bytes, k.writer, true, op);
        if (write) {
            for (int q = 0; q < NPIPE; ++q) {
                Access r{(uint8_t)q, k.reader[q]};
                if (q == p && r.seq == seq) continue;  // the instruction's own read (an Mmad accumulating)
                if (!ordered(p, r)) hazard(p, write, mem_name(mem), lo, lo + bytes, r, false, op);
            }
        }
    }
    for (uint32_t b = b0; b < b1 && b < shadow.size(); ++b) {
        PipeModel::Block &k = shadow[b];
        if (write) {
            k.writer = Access{(uint8_t)p, seq};
            std::fill(k.reader, k.reader + NPIPE, 0u);
        } else {
            k.reader[p] = seq;
        }
    }
}

inline void ub_access(int p, uint64_t seq, bool write, uint32_t lo, uint32_t bytes, const char *op) {
    local_access(M_UB, p, seq, write, lo, bytes, op);
}

// a GM access is done for everyone once each pipe that reads or writes GM has it in its past
inline bool gm_retired(const PipeModel::Range &r) {
    PipeModel &m = pipes();
    for (int p : {P_MTE2, P_MTE3, P_FIX}) {
        if (p == r.who.pipe && !r.write) continue;
        if (m.known[p].c[r.who.pipe] < r.who.seq) return false;
    }
    return true;
}

inline void gm_access(int p, uint64_t seq, bool write, const void *at, uint64_t bytes, const char *op) {
    PipeModel &m = pipes();
    if (bytes == 0) return;
    uint64_t lo = (uint64_t)(uintptr_t)at, hi = lo + bytes;
    auto it = m.gm.lower_bound(lo > m.gm_longest ? lo - m.gm_longest : 0);
    for (; it != m.gm.end() && it->first < hi; ++it) {
        const PipeModel::Range &r = it->second;
        if (r.end <= lo || (!write && !r.write)) continue;
        if (!ordered(p, r.who)) hazard(p, write, "GM", lo, hi, r.who, r.write, op);
    }
    m.gm.emplace(lo, PipeModel::Range{hi, Access{(uint8_t)p, seq}, write});
    core_touched(p, seq, lo, hi, write, op);
    m.gm_longest = std::max(m.gm_longest, bytes);
    if (m.gm.size() >= m.gm_prune_at) {
        for (auto k = m.gm.begin(); k != m.gm.end();) k = gm_retired(k->second) ? m.gm.erase(k) : std::next(k);
        m.gm_prune_at = std::max<uint64_t>(4096, 2 * m.gm.size());
    }
}

inline void set_flag(int src, int dst, int id, bool queue, const std::string &name) {
    PipeModel &m = pipes();
    require(id >= 0 && id < 8, "SetFlag<" + name + ">: event ID " + std::to_string(id) + " is not 0..7");
    PipeModel::Flag &f = m.flags[src][dst][id];
    require(!f.set, "SetFlag<" + name + ">(" + std::to_string(id) +
                        ") on a flag already set and not waited (undefined on the device)");
    f.set = true;
    f.queue = queue;
    f.clock = m.known[src];
    f.clock.c[src] = m.issued[src];  // fires once every earlier instruction on src is done
}

inline void wait_flag(int src, int dst, int id, const std::string &name) {
    PipeModel &m = pipes();
    require(id >= 0 && id < 8, "WaitFlag<" + name + ">: event ID " + std::to_string(id) + " is not 0..7");
    PipeModel::Flag &f = m.flags[src][dst][id];
    require(f.set, "WaitFlag<" + name + ">(" + std::to_string(id) + ") with no SetFlag before it: the " +
                       pipe_name(dst) + " pipe would hang");
    m.known[dst].join(f.clock);
    f.set = false;
}

inline void barrier(int p) {  // PipeBarrier<p>; p < 0: PIPE_ALL
    PipeModel &m = pipes();
    if (p < 0 || p == P_M) m.m_barrier_at = m.issued[P_M];
    if (p >= 0) {
        m.known[p].c[p] = m.issued[p];
        return;
    }
    for (int q = 0; q < NPIPE; ++q)
        for (int r = 0; r < NPIPE; ++r) m.known[q].c[r] = m.issued[r];
}

// at the end of a kernel: the TPipe waits the events its queues still hold; a flag the kernel set
// itself and never waited is an unpaired SetFlag
inline void end_of_kernel() {
    PipeModel &m = pipes();
    for (int s = 0; s < NPIPE; ++s)
        for (int d = 0; d < NPIPE; ++d)
            for (int id = 0; id < 8; ++id) {
                const PipeModel::Flag &f = m.flags[s][d][id];
                require(!f.set || f.queue, std::string("SetFlag<") + pipe_name(s) + "_" + pipe_name(d) + ">(" +
                                               std::to_string(id) + ") never waited by the end of the kernel");
            }
}

[[noreturn]] inline void hazard(int p, bool write, const char *space, uint64_t lo, uint64_t hi, const Access &a,
                                bool a_write, const char *op) {
    std::string what = std::string("pipe hazard: ") + op + " on PIPE_" + pipe_name(p) + (write ? " writes " : " reads ") +
                       space + " [" + std::to_string(lo) + ", " + std::to_string(hi) + ") that PIPE_" +
                       pipe_name(a.pipe) + " instruction #" + std::to_string(a.seq) + (a_write ? " wrote" : " reads") +
                       ", with nothing ordering them (";
    if (a.pipe == p)
        what += std::string("PipeBarrier<PIPE_") + pipe_name(p) + ">";
    else
        what += std::string("SetFlag/WaitFlag<") + pipe_name(a.pipe) + "_" + pipe_name(p) +
                ">, a queue's EnQue/DeQue or FreeTensor/AllocTensor, or PipeBarrier<PIPE_ALL>";
    throw Violation(what + ")");
}

}  // namespace fg_twin

#endif
