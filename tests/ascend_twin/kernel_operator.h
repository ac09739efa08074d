// CPU TWIN of the AscendC kernel API (kernel_operator.h) -- a test double, not CANN.
//
// It implements, with their documented semantics, the AscendC primitives that fusedgrad's
// generated kernels use, so that the generated sources compile with g++ and run on a CPU:
// GlobalTensor, LocalTensor, TPipe / TQue / TBuf over a unified buffer (UB) of 192 KiB whose
// capacity is enforced, with CANN's queue rules (buffer states, depth, at most 64 buffers per TPipe,
// and the event IDs each EnQue and FreeTensor holds: 8 per event type on Ascend910B, so 8 live
// buffers over all queues of a position), DataCopy (32-byte granularity enforced) and DataCopyPad, the vector
// instructions Add, Sub, Mul, Div, Muls, Adds, Exp, Sqrt, Duplicate, Cast (operand starts must be
// 32-byte aligned in UB), SetFlag / WaitFlag / PipeBarrier, and GetBlockIdx / GetBlockNum /
// GetSubBlockIdx / GetTaskRatio.
// Every instruction is checked against the pipe it runs on (fg_twin_pipes.h): a UB or GM range used
// by two pipes with no synchronisation between them is a hazard.  Within one launch, no two cores
// may write (or one write and another read) the same GM bytes.  A rule broken raises fg_twin::Violation.
// Blocks run one after another (fg_twin::launch), on AI Vector cores unless the kernel declares itself
// cube-only (KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY)): the Cube side is fg_twin_cube.h.  A mixed
// kernel (KERNEL_TYPE_MIX_*) runs its cores concurrently, as cooperative fibers synchronised by
// CrossCoreSetFlag / CrossCoreWaitFlag / SyncAll (fg_twin_crosscore.h).  Every core has its own local
// memories, pipes and events: the state the twin keeps per core is a fg_twin::Core, the current one core().
#ifndef FG_ASCEND_TWIN_KERNEL_OPERATOR_H
#define FG_ASCEND_TWIN_KERNEL_OPERATOR_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#define __global__
#define __aicore__
#define __gm__
#define GM_ADDR uint8_t *

namespace fg_twin {
struct Violation : std::runtime_error {
    explicit Violation(const std::string &what) : std::runtime_error("AscendC twin: " + what) {}
};
inline void require(bool ok, const std::string &what) {
    if (!ok) throw Violation(what);
}
// the core running now (its state: fg_twin::Core below) and the launch's blocks (GetBlockNum)
struct Core;
inline Core &core();
inline int core_id();
inline int64_t &block_num() { static int64_t v = 1; return v; }
// GM traffic of the kernels run so far (DataCopy, DataCopyPad, GetValue), in bytes: what a launch
// costs in memory bandwidth, the one cost of these kernels the twin can count
inline uint64_t &gm_read_bytes() { static uint64_t v = 0; return v; }
inline uint64_t &gm_write_bytes() { static uint64_t v = 0; return v; }

// Hardware events between pipes.  TQue takes its synchronisation IDs from one pool of QUE_MAX_EVENT
// per event type (asc-devkit impl/basic_api/kernel_tpipe_impl.h AllocEventID: the lowest free ID,
// ASCENDC_DEBUG_ASSERT "current id is %ld, max buffer number in same queue position is %d"); the
// pool is the TPipe's, so every queue of one position shares it.
constexpr int QUE_MAX_EVENT = 8;  // Atlas A2 / Ascend910B (__NPU_ARCH__ 2201), kernel_macros.h
constexpr int QBUF_MAX_LEN = 64;  // buffers one TPipe manages, kernel_macros.h
enum class HardEvent { MTE2_V, V_MTE2, V_MTE3, MTE3_V, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S, MTE2_MTE3, MTE3_MTE2,
                       MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, M_FIX, FIX_M, MAX };
inline const char *event_name(HardEvent e) {
    static const char *names[] = {"MTE2_V", "V_MTE2", "V_MTE3", "MTE3_V", "S_V", "V_S",
                                  "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S", "MTE2_MTE3", "MTE3_MTE2",
                                  "MTE2_MTE1", "MTE1_MTE2", "MTE1_M", "M_MTE1", "M_FIX", "FIX_M"};
    return names[(int)e];
}
inline uint32_t *event_pools();  // the current core's
inline void reset_events() { std::fill(event_pools(), event_pools() + (int)HardEvent::MAX, 0u); }
inline int alloc_event(HardEvent e) {
    uint32_t &used = event_pools()[(int)e];
    for (int id = 0; id < QUE_MAX_EVENT; ++id) {
        if (!(used & (1u << id))) {
            used |= 1u << id;
            return id;
        }
    }
    throw Violation(std::string("AllocEventID<") + event_name(e) + ">: all " + std::to_string(QUE_MAX_EVENT) +
                    " event IDs in use (more live queue buffers on one position than Ascend910B has events)");
}
inline int fetch_event(HardEvent e) {  // TPipe::FetchEventID: a free ID, not taken
    for (int id = 0; id < QUE_MAX_EVENT; ++id)
        if (!(event_pools()[(int)e] & (1u << id))) return id;
    throw Violation(std::string("FetchEventID<") + event_name(e) + ">: all " + std::to_string(QUE_MAX_EVENT) +
                    " event IDs in use");
}
inline void release_event(HardEvent e, int id) {
    uint32_t &used = event_pools()[(int)e];
    require(id >= 0 && id < QUE_MAX_EVENT && (used & (1u << id)), "ReleaseEventID of an ID not held");
    used &= ~(1u << id);
}

// IEEE binary16 <-> float, round to nearest even (what the hardware's CAST_RINT does)
inline float h2f(uint16_t b) {
    uint32_t sign = (uint32_t)(b & 0x8000u) << 16, e = (b >> 10) & 0x1fu, m = b & 0x3ffu, u;
    float f;
    if (e == 0) {
        f = (float)m * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    u = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint16_t f2h(float f) {
    uint32_t u, a, sign;
    std::memcpy(&u, &f, 4);
    sign = (u >> 16) & 0x8000u;
    a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        uint32_t bits = (a - 0x38000000u) >> 13, rest = a & 0x1fffu;
        bits += (rest > 0x1000u || (rest == 0x1000u && (bits & 1u))) ? 1u : 0u;
        return (uint16_t)(sign | bits);
    }
    if (a > 0x33000000u) {
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
        uint32_t q = m >> shift, rest = m & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
        q += (rest > tie || (rest == tie && (q & 1u))) ? 1u : 0u;
        return (uint16_t)(sign | q);
    }
    return (uint16_t)sign;
}
// bfloat16 <-> float: the top 16 bits of a float, rounded to nearest even; NaN stays NaN (quieted)
inline float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint16_t f2bf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
}  // namespace fg_twin

#include "fg_twin_pipes.h"

namespace fg_twin {
// The core a block runs on: an AI Vector core (UB; pipes V, MTE2, MTE3, S) unless the kernel says
// KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY): an AI Cube core (L1, L0A, L0B, L0C; pipes MTE2,
// MTE1, M, FIX, S).  Ascend910B has 24 cube cores (the AIC count of CANN's platform tables; the
// FG_TWIN_CUBE_CORES environment variable overrides it, as FG_TWIN_VECTOR_CORES does the AIV count).
enum class CoreType { AIV, AIC };
}  // namespace fg_twin
namespace AscendC {
class TPipe;
}
namespace fg_twin {
// Everything the twin keeps per core: which core it is, its local memories (allocated when first used),
// the bytes TPipe has handed out, its event IDs, its pipes' state and its TPipe.  A launch of AIV-only or
// AIC-only blocks reuses one Core block after block; a mixed launch has one per AIC and AIV.
struct Core {
    CoreType type = CoreType::AIV;
    int64_t block = 0;  // the block (AI Core) it belongs to
    int64_t sub = 0;    // an AIV's index in its block (GetSubBlockIdx), 0 on an AIC
    int64_t ratio = 1;  // GetTaskRatio: the AIVs per block on an AIV of a mixed kernel, else 1
    int id = 0;         // its index among the launch's cores
    std::vector<uint8_t> memory[NMEM], valid[NMEM];
    uint32_t mem_used[NMEM] = {};
    uint32_t event_pools[(int)HardEvent::MAX] = {};
    PipeModel pipes;
    AscendC::TPipe *tpipe = nullptr;
};
inline Core &sequential_core() { static Core c; return c; }  // the core of launches of blocks one after another
inline Core *&current_core() {
    static Core *p = &sequential_core();
    return p;
}
inline Core &core() { return *current_core(); }
inline int core_id() { return core().id; }
inline PipeModel &pipes() { return core().pipes; }
inline uint32_t *event_pools() { return core().event_pools; }
inline CoreType &core_type() { return core().type; }
inline const char *core_name() { return core_type() == CoreType::AIC ? "an AI Cube core" : "an AI Vector core"; }
inline bool pipe_on_core(int p) {
    return core_type() == CoreType::AIC ? (p == P_S || p == P_MTE2 || p == P_MTE3 || p == P_MTE1 || p == P_M || p == P_FIX)
                                        : (p == P_S || p == P_V || p == P_MTE2 || p == P_MTE3);
}
inline bool mem_on_core(int m) { return core_type() == CoreType::AIC ? m != M_UB : m == M_UB; }
// each local memory's bytes, the bytes TPipe has handed out, and which bytes hold data (written by an
// instruction of this kernel, or copied from such bytes): reading the others is reading garbage.  A
// core's memories start stale: UB bytes 0xA5, L1/L0 bytes 0xFF (NaN in every float format), none valid.
inline uint8_t stale_byte(int m) { return m == M_UB ? (uint8_t)0xA5 : (uint8_t)0xFF; }
inline std::vector<uint8_t> &memory(int m) {
    std::vector<uint8_t> &v = core().memory[m];
    if (v.empty()) v.assign(mem_size(m), stale_byte(m));
    return v;
}
inline std::vector<uint8_t> &valid(int m) {
    std::vector<uint8_t> &v = core().valid[m];
    if (v.empty()) v.assign(mem_size(m), (uint8_t)0);
    return v;
}
inline uint32_t *mem_used() { return core().mem_used; }
// a core as a kernel finds it when it starts: stale memories, nothing allotted, no events, fresh pipes
inline void reset_core(Core &c, CoreType type, int64_t block, int64_t sub, int64_t ratio, int id) {
    c.type = type;
    c.block = block;
    c.sub = sub;
    c.ratio = ratio;
    c.id = id;
    for (int m = 0; m < NMEM; ++m) {
        std::fill(c.memory[m].begin(), c.memory[m].end(), stale_byte(m));
        std::fill(c.valid[m].begin(), c.valid[m].end(), (uint8_t)0);
    }
    std::fill(c.mem_used, c.mem_used + NMEM, 0u);
    std::fill(c.event_pools, c.event_pools + (int)HardEvent::MAX, 0u);
    c.pipes = PipeModel();
    c.tpipe = nullptr;
}
inline std::vector<uint8_t> &ub() { return memory(M_UB); }
inline uint32_t &ub_used() { return mem_used()[M_UB]; }

// the pipes an event goes between (source, destination)
inline void event_pipes(HardEvent e, int &src, int &dst) {
    static const int table[][2] = {{P_MTE2, P_V}, {P_V, P_MTE2}, {P_V, P_MTE3}, {P_MTE3, P_V},
                                   {P_S, P_V},    {P_V, P_S},    {P_S, P_MTE2}, {P_MTE2, P_S},
                                   {P_S, P_MTE3}, {P_MTE3, P_S}, {P_MTE2, P_MTE3}, {P_MTE3, P_MTE2},
                                   {P_MTE2, P_MTE1}, {P_MTE1, P_MTE2}, {P_MTE1, P_M}, {P_M, P_MTE1},
                                   {P_M, P_FIX},  {P_FIX, P_M}};
    src = table[(int)e][0];
    dst = table[(int)e][1];
    require(pipe_on_core(src) && pipe_on_core(dst), std::string("event ") + event_name(e) + " on " + core_name() +
                                                        ", which has no PIPE_" + pipe_name(pipe_on_core(src) ? dst : src));
}
inline void set_event(HardEvent e, int id, bool queue) {
    int src, dst;
    event_pipes(e, src, dst);
    set_flag(src, dst, id, queue, event_name(e));
}
inline void wait_event(HardEvent e, int id) {
    int src, dst;
    event_pipes(e, src, dst);
    wait_flag(src, dst, id, event_name(e));
}
// the UB bytes [lo, lo + bytes) and GM bytes an instruction touches, checked on its pipe
inline void ub_read(int p, uint64_t seq, uint32_t lo, uint32_t bytes, const char *op) { ub_access(p, seq, false, lo, bytes, op); }
inline void ub_write(int p, uint64_t seq, uint32_t lo, uint32_t bytes, const char *op) { ub_access(p, seq, true, lo, bytes, op); }
}  // namespace fg_twin

// the device bfloat16 type (storage only).  The scalar unit of Ascend910B converts it only through
// AscendC's ToFloat / ToBfloat16 (Cast): the twin's type has no conversions of its own.
struct bfloat16_t {
    uint16_t bits = 0;
};

// the device half type (storage only; arithmetic goes through float, as the kernels do)
struct half {
    uint16_t bits = 0;
    half() = default;
    explicit half(float f) : bits(fg_twin::f2h(f)) {}
    explicit operator float() const { return fg_twin::h2f(bits); }
};

namespace AscendC {

// scalar bfloat16 <-> float (asc-devkit kernel_scalar_convert.h on __NPU_ARCH__ 2201: exact widening,
// round-to-nearest-even narrowing)
inline float ToFloat(const bfloat16_t &b) { return fg_twin::bf2f(b.bits); }
inline bfloat16_t ToBfloat16(const float &f) { bfloat16_t b; b.bits = fg_twin::f2bf(f); return b; }

// The block and core indices as CANN gives them on Ascend910B (asc-devkit impl/basic_api/dav_c220/
// kernel_operator_sys_var_impl.h): GetBlockNum is the launch's block count (numBlocks) on every core
// (kernel_operator_sys_var_intf_impl.h :73-82, get_block_num()); GetBlockIdx is the block on an AIC and
// block * GetTaskRatio() + GetSubBlockIdx() on an AIV (:56-73: "get_subblockdim --- return 1 in aic,
// return 2 in aiv"); GetSubBlockIdx 0 on an AIC, 0 or 1 on an AIV (:31-41); GetTaskRatio 1 on an AIC,
// the AIVs per block on an AIV (:43-54; GetTaskRatio.md :39-40), GetTaskRation its old name
// (kernel_operator_sys_var_intf_impl.h :68); GetSubBlockNum as GetTaskRatio (the dav_c220 file
// :75-86).  In an AIV-only or AIC-only launch every block is one core: GetBlockIdx is the block,
// GetTaskRatio 1.
inline int64_t GetTaskRatio() { return fg_twin::core().type == fg_twin::CoreType::AIC ? 1 : fg_twin::core().ratio; }
inline int64_t GetTaskRation() { return GetTaskRatio(); }
inline int64_t GetSubBlockIdx() { return fg_twin::core().type == fg_twin::CoreType::AIC ? 0 : fg_twin::core().sub; }
inline int64_t GetSubBlockNum() { return GetTaskRatio(); }
inline int64_t GetBlockIdx() {
    const fg_twin::Core &c = fg_twin::core();
    return c.type == fg_twin::CoreType::AIC ? c.block : c.block * c.ratio + c.sub;
}
inline int64_t GetBlockNum() { return fg_twin::block_num(); }

// TPositions and the memory each is on (Ascend910B, kernel_event.h GetPhyType): VECIN/VECOUT/VECCALC
// UB; A1, B1, C1 L1; A2 L0A; B2 L0B; CO1 L0C; C2 the BiasTable (CO2 is GM there, not a local buffer)
enum class TPosition { VECIN, VECOUT, VECCALC, A1, B1, C1, A2, B2, C2, CO1 };
constexpr int hardware(TPosition p) {
    return p == TPosition::A1 || p == TPosition::B1 || p == TPosition::C1 ? fg_twin::M_L1
           : p == TPosition::A2                                           ? fg_twin::M_L0A
           : p == TPosition::B2                                           ? fg_twin::M_L0B
           : p == TPosition::CO1                                          ? fg_twin::M_L0C
           : p == TPosition::C2                                           ? fg_twin::M_BT
                                                                          : fg_twin::M_UB;
}
enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_FIX, PIPE_ALL };
// PipeBarrier<P> orders P's own instructions; PIPE_ALL orders every pipe after everything before it.
// An AI Vector core has no PIPE_M / PIPE_MTE1 / PIPE_FIX, an AI Cube core no PIPE_V, and PIPE_S takes
// no barrier (PipeBarrier(ISASI).md; SYD/核内同步 table 2).
template <pipe_t P>
inline void PipeBarrier() {
    static_assert(P != PIPE_S, "PipeBarrier takes no PIPE_S");
    constexpr int p = P == PIPE_V ? fg_twin::P_V : P == PIPE_MTE2 ? fg_twin::P_MTE2 : P == PIPE_MTE3 ? fg_twin::P_MTE3
                      : P == PIPE_MTE1 ? fg_twin::P_MTE1 : P == PIPE_M ? fg_twin::P_M : P == PIPE_FIX ? fg_twin::P_FIX : -1;
    fg_twin::require(p < 0 || fg_twin::pipe_on_core(p), std::string("PipeBarrier<PIPE_") + (p < 0 ? "ALL" : fg_twin::pipe_name(p)) +
                                                             "> on " + fg_twin::core_name() + ", which has no such pipe");
    fg_twin::barrier(p);
}
using fg_twin::HardEvent;
using TEventID = int8_t;
enum event_t { EVENT_ID0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };
// SetFlag fires once every earlier instruction on the source pipe is done; WaitFlag holds the
// destination pipe until then.  They pair up per event and ID.
template <HardEvent E>
inline void SetFlag(int32_t id) { fg_twin::set_event(E, id, false); }
template <HardEvent E>
inline void WaitFlag(int32_t id) { fg_twin::wait_event(E, id); }
enum class RoundMode { CAST_NONE, CAST_RINT };

template <typename T>
class GlobalTensor {
  public:
    void SetGlobalBuffer(__gm__ T *p, uint64_t size) { p_ = p; size_ = size; }
    GlobalTensor operator[](uint64_t off) const {
        fg_twin::require(off <= size_, "GlobalTensor offset past its end");
        GlobalTensor g;
        g.p_ = p_ + off;
        g.size_ = size_ - off;
        return g;
    }
    T *data() const { return p_; }
    uint64_t size() const { return size_; }
    T GetValue(uint64_t i) const {
        fg_twin::require(i < size_, "GlobalTensor::GetValue past its end");
        fg_twin::gm_access(fg_twin::P_S, fg_twin::issue(fg_twin::P_S), false, p_ + i, sizeof(T), "GlobalTensor::GetValue");
        fg_twin::gm_read_bytes() += sizeof(T);
        return p_[i];
    }
    // On the device a scalar store to GM lands in the core's data cache and goes out later as a whole
    // 64-byte line (DataCacheCleanAndInvalid), overwriting what other cores wrote in that line: the
    // kernels must write GM with DataCopy/DataCopyPad only, and the twin refuses scalar stores.
    void SetValue(uint64_t, T) const {
        fg_twin::require(false, "GlobalTensor::SetValue: scalar stores to GM race other cores (write with DataCopyPad)");
    }

  private:
    T *p_ = nullptr;
    uint64_t size_ = 0;
};

template <typename T>
class LocalTensor {
  public:
    LocalTensor() = default;
    LocalTensor(uint32_t off, uint32_t bytes) : off_(off), bytes_(bytes) {}
    LocalTensor(int mem, uint32_t off, uint32_t bytes) : mem_(mem), off_(off), bytes_(bytes) {}
    LocalTensor operator[](uint32_t elems) const {
        fg_twin::require(elems * sizeof(T) <= bytes_, "LocalTensor offset past its end");
        return LocalTensor(mem_, off_ + elems * (uint32_t)sizeof(T), bytes_ - elems * (uint32_t)sizeof(T));
    }
    template <typename U>
    LocalTensor<U> ReinterpretCast() const { return LocalTensor<U>(mem_, off_, bytes_); }
    T *data() const { return reinterpret_cast<T *>(fg_twin::memory(mem_).data() + off_); }
    int mem() const { return mem_; }
    uint32_t offset() const { return off_; }
    uint32_t capacity() const { return bytes_ / (uint32_t)sizeof(T); }
    T GetValue(uint32_t i) const {
        scalar("LocalTensor::GetValue");
        check(i, 1);
        fg_twin::ub_read(fg_twin::P_S, fg_twin::issue(fg_twin::P_S), off_ + i * (uint32_t)sizeof(T), sizeof(T), "LocalTensor::GetValue");
        return data()[i];
    }
    void SetValue(uint32_t i, T v) const {
        scalar("LocalTensor::SetValue");
        check(i, 1);
        fg_twin::ub_write(fg_twin::P_S, fg_twin::issue(fg_twin::P_S), off_ + i * (uint32_t)sizeof(T), sizeof(T), "LocalTensor::SetValue");
        data()[i] = v;
    }
    void check(uint32_t first, uint32_t count) const {
        fg_twin::require((uint64_t)(first + count) * sizeof(T) <= bytes_, "access past a LocalTensor's end");
    }
    void scalar(const char *op) const {  // the twin models scalar access to UB only
        fg_twin::require(mem_ == fg_twin::M_UB, std::string(op) + " on " + fg_twin::mem_name(mem_) + ": the twin models "
                                                    "scalar access to UB only");
    }

  private:
    int mem_ = fg_twin::M_UB;
    uint32_t off_ = 0, bytes_ = 0;
};

class TPipe;

// TQue with CANN's buffer states and event lifetimes (kernel_tquebind_impl.h): AllocTensor walks a
// round-robin cursor to the next FREE buffer and releases the event its FreeTensor took; EnQue takes
// an event (VECIN: MTE2_V, VECOUT: V_MTE3) that DeQue releases; FreeTensor takes one (VECIN:
// V_MTE2, VECOUT: MTE3_V) that stays held until that buffer is allocated again.  So every buffer of
// every queue of a position that has been freed holds an ID of the position's pool.
template <TPosition P, int DEPTH>
class TQue {
    static_assert(P == TPosition::VECIN || P == TPosition::VECOUT,
                  "TQue: the twin models VECIN and VECOUT queues (VECCALC and the cube positions: TBuf and flags)");
    static constexpr fg_twin::HardEvent ENQ = P == TPosition::VECIN ? fg_twin::HardEvent::MTE2_V : fg_twin::HardEvent::V_MTE3;
    static constexpr fg_twin::HardEvent FREE_EVT = P == TPosition::VECIN ? fg_twin::HardEvent::V_MTE2 : fg_twin::HardEvent::MTE3_V;
    enum State { FREE, OCCUPIED, ENQUE, DEQUE };

  public:
    template <typename T>
    LocalTensor<T> AllocTensor() {
        fg_twin::require(num_ > 0, "TQue::AllocTensor before TPipe::InitBuffer");
        for (int step = 0; step < num_; ++step) {
            int k = (cursor_ + step) % num_;
            if (state_[k] != FREE) continue;
            cursor_ = (k + 1) % num_;
            if (free_evt_[k] >= 0) {  // WaitFlag + ReleaseEventID of the event FreeTensor set
                fg_twin::wait_event(FREE_EVT, free_evt_[k]);
                fg_twin::release_event(FREE_EVT, free_evt_[k]);
                free_evt_[k] = -1;
            }
            state_[k] = OCCUPIED;
            return LocalTensor<T>(base_ + k * len_, len_);
        }
        throw fg_twin::Violation("TQue::AllocTensor with every buffer in use");
    }
    template <typename T>
    void EnQue(const LocalTensor<T> &t) {
        int k = index(t, "EnQue");
        fg_twin::require(state_[k] == OCCUPIED || state_[k] == DEQUE, "TQue::EnQue of a buffer not allocated");
        fg_twin::require(used_ < DEPTH, "TQue::EnQue: usedCount exceeds the queue's depth " + std::to_string(DEPTH));
        enq_evt_[k] = fg_twin::alloc_event(ENQ);
        fg_twin::set_event(ENQ, enq_evt_[k], true);
        state_[k] = ENQUE;
        ++used_;
        queued_.push_back(k);
    }
    template <typename T>
    LocalTensor<T> DeQue() {
        fg_twin::require(!queued_.empty(), "TQue::DeQue on an empty queue");
        int k = queued_.front();
        queued_.erase(queued_.begin());
        fg_twin::wait_event(ENQ, enq_evt_[k]);
        fg_twin::release_event(ENQ, enq_evt_[k]);
        enq_evt_[k] = -1;
        state_[k] = DEQUE;
        --used_;
        return LocalTensor<T>(base_ + k * len_, len_);
    }
    template <typename T>
    void FreeTensor(const LocalTensor<T> &t) {
        int k = index(t, "FreeTensor");
        fg_twin::require(state_[k] != FREE, "TQue::FreeTensor of a buffer already free");
        fg_twin::require(state_[k] != ENQUE, "TQue::FreeTensor of a buffer still queued (DeQue it first)");
        free_evt_[k] = fg_twin::alloc_event(FREE_EVT);  // held until this buffer is allocated again
        fg_twin::set_event(FREE_EVT, free_evt_[k], true);
        state_[k] = FREE;
    }

  private:
    friend class TPipe;
    template <typename T>
    int index(const LocalTensor<T> &t, const char *what) const {
        int k = len_ ? (int)((t.offset() - base_) / len_) : -1;
        fg_twin::require(num_ > 0 && t.offset() >= base_ && k >= 0 && k < num_ && t.offset() == base_ + k * len_,
                         std::string("TQue::") + what + " of a tensor that is not one of its buffers");
        return k;
    }
    uint32_t base_ = 0, len_ = 0;
    int num_ = 0, used_ = 0, cursor_ = 0;
    State state_[fg_twin::QBUF_MAX_LEN] = {};
    int enq_evt_[fg_twin::QBUF_MAX_LEN] = {}, free_evt_[fg_twin::QBUF_MAX_LEN] = {};
    std::vector<int> queued_;
};

template <TPosition P>
class TBuf {
  public:
    template <typename T>
    LocalTensor<T> Get() const { return LocalTensor<T>(hardware(P), base_, len_); }

  private:
    friend class TPipe;
    uint32_t base_ = 0, len_ = 0;
};

class TPipe {
  public:
    TPipe() {
        std::fill(fg_twin::mem_used(), fg_twin::mem_used() + fg_twin::NMEM, 0u);
        fg_twin::reset_events();
        current() = this;
        // on an AI Cube core TPipe's Init takes and sets M_MTE1 IDs 0, 1, 2 "for matmul macro", waited
        // only when the pipe is destroyed (kernel_tpipe_impl.h): a kernel's own flags must not use them
        if (fg_twin::core_type() == fg_twin::CoreType::AIC) {
            for (int id = 0; id < 3; ++id) fg_twin::set_event(HardEvent::M_MTE1, fg_twin::alloc_event(HardEvent::M_MTE1), true);
        }
    }
    ~TPipe() {
        if (current() == this) current() = nullptr;
    }
    static TPipe *&current() { return fg_twin::core().tpipe; }  // the current core's
    // event IDs for a kernel's own SetFlag/WaitFlag, from the pool the queues use
    TEventID FetchEventID(HardEvent e) { return (TEventID)fg_twin::fetch_event(e); }
    template <HardEvent E>
    TEventID AllocEventID() { return (TEventID)fg_twin::alloc_event(E); }
    template <HardEvent E>
    void ReleaseEventID(TEventID id) { fg_twin::release_event(E, id); }
    template <TPosition P, int DEPTH>
    void InitBuffer(TQue<P, DEPTH> &q, int num, uint32_t len) {
        on_core(hardware(P));
        fg_twin::require(num >= 1 && num <= fg_twin::QBUF_MAX_LEN,
                         "TPipe::InitBuffer: num must be 1.." + std::to_string(fg_twin::QBUF_MAX_LEN) + ", got " +
                             std::to_string(num));
        fg_twin::require(q.num_ == 0, "TPipe::InitBuffer of a queue twice");
        fg_twin::require(len > 0, "TPipe::InitBuffer: len must be > 0");  // kernel_tpipe_impl.h
        count(num);
        q.base_ = reserve(hardware(P), (uint32_t)num * round(len));
        q.len_ = round(len);
        q.num_ = num;
        for (int k = 0; k < num; ++k) q.enq_evt_[k] = q.free_evt_[k] = -1;
    }
    template <TPosition P>
    void InitBuffer(TBuf<P> &b, uint32_t len) {
        on_core(hardware(P));
        fg_twin::require(len > 0, "TPipe::InitBuffer: len must be > 0");
        count(1);
        b.base_ = reserve(hardware(P), round(len));
        b.len_ = round(len);
    }

  private:
    int buffers_ = 0;
    void count(int num) {  // kernel_tpipe_impl.h: "Total buffer num managed by TPipe is %d, should be in range (0, %d]"
        buffers_ += num;
        fg_twin::require(buffers_ <= fg_twin::QBUF_MAX_LEN, "TPipe manages " + std::to_string(buffers_) +
                                                                " buffers, more than " + std::to_string(fg_twin::QBUF_MAX_LEN));
    }
    // every memory is allotted in 32-byte blocks (kernel_tpipe_impl.h); a cube buffer that must start
    // on 512 or 1024 bytes gets there only by the sizes before it
    static uint32_t round(uint32_t len) { return (len + 31u) & ~31u; }
    static void on_core(int mem) {
        fg_twin::require(fg_twin::mem_on_core(mem), std::string("TPipe::InitBuffer of a ") + fg_twin::mem_name(mem) +
                                                        " buffer on " + fg_twin::core_name() + ", which has none");
    }
    static uint32_t reserve(int mem, uint32_t bytes) {
        uint32_t at = fg_twin::mem_used()[mem];
        fg_twin::require(at + bytes <= fg_twin::mem_size(mem), std::string(fg_twin::mem_name(mem)) + " overflow: " +
                                                                  std::to_string(at + bytes) + " bytes of " +
                                                                  std::to_string(fg_twin::mem_size(mem)));
        fg_twin::mem_used()[mem] = at + bytes;
        return at;
    }
};

inline TPipe *GetTPipePtr() {
    fg_twin::require(TPipe::current() != nullptr, "GetTPipePtr with no TPipe");
    return TPipe::current();
}

struct DataCopyExtParams {
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;  // bytes
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};
template <typename T>
struct DataCopyPadExtParams {
    bool isPad = false;
    uint8_t leftPadding = 0, rightPadding = 0;
    T paddingValue = T();
};

namespace detail {
template <typename T>
inline void in_ub(const LocalTensor<T> &t, const char *what) {
    fg_twin::require(t.mem() == fg_twin::M_UB && fg_twin::mem_on_core(fg_twin::M_UB),
                     std::string(what) + ": the operand must be in UB, on an AI Vector core (got " +
                         fg_twin::mem_name(t.mem()) + " on " + fg_twin::core_name() + ")");
}
template <typename T>
inline void aligned_start(const LocalTensor<T> &t, const char *what) {
    in_ub(t, what);
    fg_twin::require(t.offset() % 32 == 0, std::string(what) + ": UB operand not 32-byte aligned");
}
// the vector unit's Cast of one element
inline float widen(float f) { return f; }
inline float widen(half h) { return (float)h; }
inline float widen(bfloat16_t b) { return ToFloat(b); }
template <typename H>
inline H narrow(float f);
template <>
inline float narrow<float>(float f) { return f; }
template <>
inline half narrow<half>(float f) { return half(f); }
template <>
inline bfloat16_t narrow<bfloat16_t>(float f) { return ToBfloat16(f); }
// one instruction on PIPE_V: it reads its sources' first n elements and writes dst's
struct Operand {
    uint32_t off, bytes;
};
template <typename D>
inline void vector_op(const char *op, const LocalTensor<D> &dst, int32_t n, std::initializer_list<Operand> srcs) {
    fg_twin::require(n >= 0, std::string(op) + ": negative count");
    aligned_start(dst, op);
    dst.check(0, (uint32_t)n);
    uint64_t seq = fg_twin::issue(fg_twin::P_V);
    for (const Operand &o : srcs) {
        fg_twin::require(o.off % 32 == 0, std::string(op) + ": UB operand not 32-byte aligned");
        fg_twin::ub_read(fg_twin::P_V, seq, o.off, o.bytes, op);
    }
    fg_twin::ub_write(fg_twin::P_V, seq, dst.offset(), (uint32_t)n * (uint32_t)sizeof(D), op);
}
template <typename T>
inline Operand operand(const LocalTensor<T> &t, int32_t n) {
    in_ub(t, "a vector instruction");
    t.check(0, (uint32_t)n);
    return Operand{t.offset(), (uint32_t)n * (uint32_t)sizeof(T)};
}
// GM -> UB on PIPE_MTE2 (bytes read, UB bytes written), UB -> GM on PIPE_MTE3
template <typename T>
inline void copy_in(const char *op, const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t bytes, uint32_t ub_bytes) {
    in_ub(dst, op);  // GM -> L1 is the Nd2NzParams form
    uint64_t seq = fg_twin::issue(fg_twin::P_MTE2);
    fg_twin::gm_access(fg_twin::P_MTE2, seq, false, src.data(), bytes, op);
    fg_twin::ub_write(fg_twin::P_MTE2, seq, dst.offset(), ub_bytes, op);
    std::memcpy(dst.data(), src.data(), bytes);
    fg_twin::gm_read_bytes() += bytes;
}
template <typename T>
inline void copy_out(const char *op, const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t bytes) {
    in_ub(src, op);
    uint64_t seq = fg_twin::issue(fg_twin::P_MTE3);
    fg_twin::ub_read(fg_twin::P_MTE3, seq, src.offset(), bytes, op);
    fg_twin::gm_access(fg_twin::P_MTE3, seq, true, dst.data(), bytes, op);
    std::memcpy(dst.data(), src.data(), bytes);
    fg_twin::gm_write_bytes() += bytes;
}
}  // namespace detail

// DataCopy moves whole 32-byte blocks: count * sizeof(T) must be a multiple of 32
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count) {
    fg_twin::require(count * sizeof(T) % 32 == 0, "DataCopy of a length that is not a multiple of 32 bytes");
    detail::aligned_start(dst, "DataCopy");
    dst.check(0, count);
    fg_twin::require(count <= src.size(), "DataCopy reads past the GlobalTensor");
    detail::copy_in("DataCopy", dst, src, count * sizeof(T), count * sizeof(T));
}
template <typename T>
void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count) {
    fg_twin::require(count * sizeof(T) % 32 == 0, "DataCopy of a length that is not a multiple of 32 bytes");
    detail::aligned_start(src, "DataCopy");
    src.check(0, count);
    fg_twin::require(count <= dst.size(), "DataCopy writes past the GlobalTensor");
    detail::copy_out("DataCopy", dst, src, count * sizeof(T));
}
// DataCopyPad: any byte length (one block here); into UB the tail of the last 32-byte block is padded
template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p,
                 const DataCopyPadExtParams<T> &) {
    fg_twin::require(p.blockCount == 1 && p.blockLen % sizeof(T) == 0, "DataCopyPad: one block of whole elements");
    uint32_t n = p.blockLen / (uint32_t)sizeof(T);
    detail::aligned_start(dst, "DataCopyPad");
    dst.check(0, (n * (uint32_t)sizeof(T) + 31u) / 32u * 32u / (uint32_t)sizeof(T));
    fg_twin::require(n <= src.size(), "DataCopyPad reads past the GlobalTensor");
    detail::copy_in("DataCopyPad", dst, src, p.blockLen, (p.blockLen + 31u) / 32u * 32u);
}
template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p) {
    fg_twin::require(p.blockCount == 1 && p.blockLen % sizeof(T) == 0, "DataCopyPad: one block of whole elements");
    uint32_t n = p.blockLen / (uint32_t)sizeof(T);
    detail::aligned_start(src, "DataCopyPad");
    src.check(0, n);
    fg_twin::require(n <= dst.size(), "DataCopyPad writes past the GlobalTensor");
    detail::copy_out("DataCopyPad", dst, src, p.blockLen);
}

#define FG_TWIN_BINARY(NAME, OP)                                                                   \
    template <typename T>                                                                          \
    void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, int32_t n) { \
        detail::vector_op(#NAME, dst, n, {detail::operand(a, n), detail::operand(b, n)});          \
        T *d = dst.data(); const T *x = a.data(); const T *y = b.data();                           \
        for (int32_t i = 0; i < n; ++i) d[i] = x[i] OP y[i];                                       \
    }
FG_TWIN_BINARY(Add, +)
FG_TWIN_BINARY(Sub, -)
FG_TWIN_BINARY(Mul, *)
FG_TWIN_BINARY(Div, /)
#undef FG_TWIN_BINARY

template <typename T>
void Muls(const LocalTensor<T> &dst, const LocalTensor<T> &a, T s, int32_t n) {
    detail::vector_op("Muls", dst, n, {detail::operand(a, n)});
    for (int32_t i = 0; i < n; ++i) dst.data()[i] = a.data()[i] * s;
}
template <typename T>
void Adds(const LocalTensor<T> &dst, const LocalTensor<T> &a, T s, int32_t n) {
    detail::vector_op("Adds", dst, n, {detail::operand(a, n)});
    for (int32_t i = 0; i < n; ++i) dst.data()[i] = a.data()[i] + s;
}
template <typename T>
void Exp(const LocalTensor<T> &dst, const LocalTensor<T> &a, int32_t n) {
    detail::vector_op("Exp", dst, n, {detail::operand(a, n)});
    for (int32_t i = 0; i < n; ++i) dst.data()[i] = std::exp(a.data()[i]);
}
template <typename T>
void Sqrt(const LocalTensor<T> &dst, const LocalTensor<T> &a, int32_t n) {
    detail::vector_op("Sqrt", dst, n, {detail::operand(a, n)});
    for (int32_t i = 0; i < n; ++i) dst.data()[i] = std::sqrt(a.data()[i]);
}
template <typename T>
void Duplicate(const LocalTensor<T> &dst, T s, int32_t n) {
    detail::vector_op("Duplicate", dst, n, {});
    for (int32_t i = 0; i < n; ++i) dst.data()[i] = s;
}
// Cast between float and half or bfloat16: RINT rounds to nearest even, NONE is exact (to float)
template <typename H>
void CastToFloat(const LocalTensor<float> &dst, const LocalTensor<H> &a, int32_t n) {
    detail::vector_op("Cast", dst, n, {detail::operand(a, n)});
    for (int32_t i = 0; i < n; ++i) dst.data()[i] = detail::widen(a.data()[i]);
}
template <typename H>
void CastFromFloat(const LocalTensor<H> &dst, const LocalTensor<float> &a, RoundMode mode, int32_t n) {
    fg_twin::require(mode == RoundMode::CAST_RINT, "Cast from float needs a rounding mode (CAST_RINT)");
    detail::vector_op("Cast", dst, n, {detail::operand(a, n)});
    for (int32_t i = 0; i < n; ++i) dst.data()[i] = detail::narrow<H>(a.data()[i]);
}
inline void Cast(const LocalTensor<float> &dst, const LocalTensor<half> &a, RoundMode, int32_t n) { CastToFloat(dst, a, n); }
inline void Cast(const LocalTensor<float> &dst, const LocalTensor<bfloat16_t> &a, RoundMode, int32_t n) { CastToFloat(dst, a, n); }
inline void Cast(const LocalTensor<half> &dst, const LocalTensor<float> &a, RoundMode mode, int32_t n) {
    CastFromFloat(dst, a, mode, n);
}
inline void Cast(const LocalTensor<bfloat16_t> &dst, const LocalTensor<float> &a, RoundMode mode, int32_t n) {
    CastFromFloat(dst, a, mode, n);
}

}  // namespace AscendC

#include "fg_twin_cube.h"

#include "fg_twin_crosscore.h"

namespace fg_twin {
// Run a kernel on block_dim blocks, one after another, each with a fresh core (stale memories, fresh
// pipes); then check that no core wrote GM bytes another core of the same launch wrote or read.  A
// kernel that declares a mixed type (KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_*), its first statement)
// stops there and runs again with all its cores at once (run_mixed, fg_twin_crosscore.h).
template <typename F>
void launch(int64_t block_dim, F &&kernel) {
    block_num() = block_dim;
    launch_ranges().clear();
    bool cube = false;
    try {
        for (int64_t b = 0; b < block_dim; ++b) {
            // an AI Vector core until the kernel says KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY)
            reset_core(core(), CoreType::AIV, b, 0, 1, (int)b);
            kernel();
            end_of_kernel();
            cube = core_type() == CoreType::AIC;
        }
    } catch (const RestartMixed &r) {
        launch_ranges().clear();
        run_mixed(r.type, block_dim, std::function<void()>([&] { kernel(); }));
        return;
    }
    if (cube) {
        const char *env = std::getenv("FG_TWIN_CUBE_CORES");
        int64_t cores = env ? std::atoll(env) : 24;
        require(block_dim <= cores, "a cube kernel launched on " + std::to_string(block_dim) + " blocks: Ascend910B has " +
                                        std::to_string(cores) + " AI Cube cores");
    }
    check_cores();
}
}  // namespace fg_twin

#endif
