// CPU TWIN of AscendC's Cube side on Ascend910B (__NPU_ARCH__ 2201) -- part of the test double, not CANN.
//
// A cube-only kernel (KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY)) runs on an AI Cube core: L1
// (TPosition A1/B1), L0A (A2), L0B (B2), L0C (CO1), and the pipes MTE2 (GM -> L1), MTE1 (L1 -> L0A/L0B),
// M (Mmad) and FIX (L0C -> GM).  The basic API a matmul needs, with CANN's documented semantics and
// checks (sources: asc-devkit docs/zh/api and impl/basic_api, asc-tools cpudebug/src/api_check):
//   DataCopy(L1, GM, Nd2NzParams)      ND rows -> Nz fractals, columns zero-padded to 32 bytes
//   LoadData(L0A/L0B, L1, LoadData2DParams)  512-byte fractals, b16 fractals optionally transposed
//   Mmad(L0C, L0A, L0B, MmadParams)    L0A Zz x L0B Zn -> L0C Nz, fp32 accumulation, m == 1 is GEMV
//   Fixpipe(GM, L0C, FixpipeParamsV220)  Nz -> ND rows, fp32 -> fp16/bf16 (round to nearest even)
// Besides the pipe hazards (fg_twin_pipes.h; the compiler inserts no synchronisation on the cube), the
// twin tracks which local bytes hold data: an Mmad or Fixpipe that uses bytes no instruction wrote (or
// copied from written bytes) raises Violation, so packing mistakes that only move garbage are caught.
#ifndef FG_ASCEND_TWIN_CUBE_H
#define FG_ASCEND_TWIN_CUBE_H

#include <cfloat>
#include <type_traits>

#include "fg_twin_overflow.h"

enum KernelType { KERNEL_TYPE_AIV_ONLY, KERNEL_TYPE_AIC_ONLY, KERNEL_TYPE_MIX_AIV_1_0, KERNEL_TYPE_MIX_AIC_1_0,
                  KERNEL_TYPE_MIX_AIC_1_1, KERNEL_TYPE_MIX_AIC_1_2 };

namespace fg_twin {
// the core types the kernel runs on: AIV-only and AIC-only kernels block after block on one type, a
// mixed kernel's AICs and AIVs all at once (fg_twin_crosscore.h)
inline void kernel_type(KernelType t);
inline void set_kernel_type(KernelType t) {
    bool fresh = std::all_of(pipes().issued, pipes().issued + NPIPE, [](uint64_t n) { return n == 0; });
    require(fresh && AscendC::TPipe::current() == nullptr,
            "KERNEL_TASK_TYPE_DEFAULT must come first in the kernel, before any TPipe or instruction");
    kernel_type(t);
}

// multiply-adds of the Mmads run so far: those of the m x n x k products asked for, and those the Cube
// unit performs, whole 16 x C0 x 16 fractals (Mmad pads m and n to 16 and k to C0)
inline uint64_t &cube_macs_useful() { static uint64_t v = 0; return v; }
inline uint64_t &cube_macs_issued() { static uint64_t v = 0; return v; }
// GM -> L1 copies (Nd2Nz) issued while an MTE1 instruction issued before them is not known complete to
// PIPE_MTE2: nothing orders the copy after that load, so the hardware may run the two at once (a kernel
// whose copies wait for every earlier load, as a single L1 buffer must, counts none)
inline uint64_t &l1_copies_beside_mte1() { static uint64_t v = 0; return v; }

// the bytes [lo, lo + n) of local memory m: mark them as holding data, or check that they do
inline void mark_valid(int m, uint32_t lo, uint32_t n) { std::fill(valid(m).begin() + lo, valid(m).begin() + lo + n, (uint8_t)1); }
inline bool is_valid(int m, uint32_t lo, uint32_t n) {
    return std::all_of(valid(m).begin() + lo, valid(m).begin() + lo + n, [](uint8_t v) { return v != 0; });
}
template <typename T>
inline constexpr bool cube_input() {
    return std::is_same<T, half>::value || std::is_same<T, bfloat16_t>::value || std::is_same<T, float>::value;
}
}  // namespace fg_twin

#define KERNEL_TASK_TYPE_DEFAULT(t) fg_twin::set_kernel_type(t)

namespace AscendC {

// ------------------------------------------------------------------ GM -> L1: DataCopy with Nd2NzParams
// kernel_struct_data_copy.h (2201): every field uint16_t, in this order
struct Nd2NzParams {
    uint16_t ndNum = 0, nValue = 0, dValue = 0, srcNdMatrixStride = 0, srcDValue = 0, dstNzC0Stride = 0, dstNzNStride = 0,
             dstNzMatrixStride = 0;
    Nd2NzParams() = default;
    Nd2NzParams(uint16_t ndNum_, uint16_t nValue_, uint16_t dValue_, uint16_t srcNdMatrixStride_, uint16_t srcDValue_,
                uint16_t dstNzC0Stride_, uint16_t dstNzNStride_, uint16_t dstNzMatrixStride_)
        : ndNum(ndNum_), nValue(nValue_), dValue(dValue_), srcNdMatrixStride(srcNdMatrixStride_), srcDValue(srcDValue_),
          dstNzC0Stride(dstNzC0Stride_), dstNzNStride(dstNzNStride_), dstNzMatrixStride(dstNzMatrixStride_) {}
};

// L1[i*dstNzMatrixStride + (c/C0)*dstNzC0Stride*C0 + r*dstNzNStride*C0 + c%C0] = GM[i*srcNdMatrixStride + r*srcDValue + c]
// for i < ndNum, r < nValue, c < dValue, with C0 = 32 / sizeof(T); columns up to the next multiple of
// C0 are written as zeros (DataCopy（GMToL1随路转换-ND2NZ搬运）.md; ranges :86-97, dst 32-byte aligned :134)
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const Nd2NzParams &p) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4, "Nd2Nz copies 1-, 2- and 4-byte types");
    const char *op = "DataCopy(Nd2NzParams)";
    fg_twin::require(dst.mem() == fg_twin::M_L1 && fg_twin::mem_on_core(fg_twin::M_L1),
                     std::string(op) + ": the destination must be in L1 (A1/B1), on an AI Cube core");
    fg_twin::require(dst.offset() % 32 == 0, std::string(op) + ": L1 destination not 32-byte aligned");
    fg_twin::require(p.ndNum <= 4095 && p.nValue <= 16384 && p.srcDValue >= 1 && p.dstNzC0Stride >= 1 &&
                         p.dstNzC0Stride <= 16384 && p.dstNzNStride >= 1 && p.dstNzNStride <= 16384 &&
                         p.dstNzMatrixStride <= 16384,
                     std::string(op) + ": a field outside its documented range");
    if (p.ndNum == 0 || p.nValue == 0 || p.dValue == 0) return;  // NOP
    const uint32_t C0 = 32 / sizeof(T), chunks = (p.dValue + C0 - 1) / C0;
    fg_twin::PipeModel &pm = fg_twin::pipes();
    if (pm.known[fg_twin::P_MTE2].c[fg_twin::P_MTE1] < pm.issued[fg_twin::P_MTE1]) ++fg_twin::l1_copies_beside_mte1();
    uint64_t seq = fg_twin::issue(fg_twin::P_MTE2);
    T *out = dst.data();
    for (uint32_t i = 0; i < p.ndNum; ++i)
        for (uint32_t r = 0; r < p.nValue; ++r) {
            const GlobalTensor<T> row = src[(uint64_t)i * p.srcNdMatrixStride + (uint64_t)r * p.srcDValue];
            fg_twin::require(row.size() >= p.dValue, std::string(op) + ": source row past the GlobalTensor's end");
            fg_twin::gm_access(fg_twin::P_MTE2, seq, false, row.data(), p.dValue * sizeof(T), op);
            fg_twin::gm_read_bytes() += p.dValue * sizeof(T);
            for (uint32_t c = 0; c < chunks; ++c) {
                uint64_t at = (uint64_t)i * p.dstNzMatrixStride + (uint64_t)c * p.dstNzC0Stride * C0 +
                              (uint64_t)r * p.dstNzNStride * C0;
                dst.check((uint32_t)at, C0);
                for (uint32_t e = 0; e < C0; ++e) {
                    uint32_t col = c * C0 + e;
                    static const uint8_t zero[sizeof(T)] = {};
                    std::memcpy((void *)&out[at + e], col < p.dValue ? (const void *)(row.data() + col) : (const void *)zero,
                                sizeof(T));  // columns past dValue: "补0对齐到32字节"
                }
                uint32_t lo = dst.offset() + (uint32_t)at * (uint32_t)sizeof(T);
                fg_twin::local_access(fg_twin::M_L1, fg_twin::P_MTE2, seq, true, lo, 32, op);
                fg_twin::mark_valid(fg_twin::M_L1, lo, 32);
            }
        }
}

// ------------------------------------------------------------------ L1 -> L0A/L0B: LoadData (2D)
// kernel_struct_mm.h: (startIndex, repeatTimes, srcStride, sid, dstGap, ifTranspose, addrMode); repeatTimes
// is a uint8_t (a brace-initialised count above 255 does not compile)
struct LoadData2DParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0;
    uint8_t sid = 0;
    uint16_t dstGap = 0;
    bool ifTranspose = false;
    uint8_t addrMode = 0;
    LoadData2DParams() = default;
    LoadData2DParams(uint16_t startIndex_, uint8_t repeatTimes_, uint16_t srcStride_, uint8_t sid_, uint16_t dstGap_,
                     bool ifTranspose_, uint8_t addrMode_)
        : startIndex(startIndex_), repeatTimes(repeatTimes_), srcStride(srcStride_), sid(sid_), dstGap(dstGap_),
          ifTranspose(ifTranspose_), addrMode(addrMode_) {}
};

// per repeat i: the 512-byte fractal at startIndex + i*srcStride (units of 512 bytes) to dst fractal
// i*(dstGap + 1); transposed, row j of the dst fractal is column j of the source (16x16, b16 only).
// LoadData_2D.md :85-91, :134-135; asc-tools kernel_loaddata_check.cpp :22-69 (spans within the tensors)
template <typename T>
void LoadData(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LoadData2DParams &p) {
    const char *op = "LoadData(LoadData2DParams)";
    fg_twin::require(src.mem() == fg_twin::M_L1 && (dst.mem() == fg_twin::M_L0A || dst.mem() == fg_twin::M_L0B) &&
                         fg_twin::mem_on_core(fg_twin::M_L1),
                     std::string(op) + ": the twin models L1 -> L0A/L0B on an AI Cube core");
    fg_twin::require(src.offset() % 32 == 0, std::string(op) + ": L1 source not 32-byte aligned");
    fg_twin::require(dst.offset() % 512 == 0, std::string(op) + ": L0A/L0B destination not 512-byte aligned");
    fg_twin::require(p.sid == 0 && p.addrMode == 0, std::string(op) + ": sid and addrMode must be 0 for L1 -> L0");
    fg_twin::require(!p.ifTranspose || sizeof(T) == 2, std::string(op) + ": ifTranspose works on 16-bit types only "
                                                                          "(CANN warns; the data would be wrong)");
    if (p.repeatTimes == 0) return;
    const uint32_t F = 512 / sizeof(T), R = p.repeatTimes;
    fg_twin::require((uint64_t)(p.startIndex + (uint64_t)(R - 1) * p.srcStride + 1) * 512 <= (uint64_t)src.capacity() * sizeof(T),
                     std::string(op) + ": source fractals past the L1 tensor's end");
    fg_twin::require((uint64_t)(R + (uint64_t)(R - 1) * p.dstGap) * 512 <= (uint64_t)dst.capacity() * sizeof(T),
                     std::string(op) + ": destination fractals past the L0 tensor's end");
    uint64_t seq = fg_twin::issue(fg_twin::P_MTE1);
    for (uint32_t i = 0; i < R; ++i) {
        uint32_t s = (p.startIndex + i * p.srcStride) * F, d = (p.dstGap + 1) * F * i;
        uint32_t slo = src.offset() + s * (uint32_t)sizeof(T), dlo = dst.offset() + d * (uint32_t)sizeof(T);
        fg_twin::local_access(fg_twin::M_L1, fg_twin::P_MTE1, seq, false, slo, 512, op);
        fg_twin::local_access(dst.mem(), fg_twin::P_MTE1, seq, true, dlo, 512, op);
        const T *in = src.data() + s;
        T *out = dst.data() + d;
        if (!p.ifTranspose) {
            std::memcpy((void *)out, (const void *)in, 512);
            std::memcpy(&fg_twin::valid(dst.mem())[dlo], &fg_twin::valid(fg_twin::M_L1)[slo], 512);
        } else {
            for (uint32_t j = 0; j < 16; ++j)
                for (uint32_t c = 0; c < 16; ++c) {
                    out[j * 16 + c] = in[c * 16 + j];
                    for (uint32_t b = 0; b < 2; ++b)
                        fg_twin::valid(dst.mem())[dlo + (j * 16 + c) * 2 + b] = fg_twin::valid(fg_twin::M_L1)[slo + (c * 16 + j) * 2 + b];
                }
        }
    }
}

// ------------------------------------------------------------------ L1 -> L0A/L0B: LoadDataWithTranspose
// kernel_struct_mm.h :94-124
struct LoadData2dTransposeParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0, dstGap = 0, dstFracGap = 0;
    uint8_t addrMode = 0;
    LoadData2dTransposeParams() = default;
    LoadData2dTransposeParams(uint16_t startIndex_, uint8_t repeatTimes_, uint16_t srcStride_, uint16_t dstGap_,
                              uint16_t dstFracGap_, uint8_t addrMode_ = 0)
        : startIndex(startIndex_), repeatTimes(repeatTimes_), srcStride(srcStride_), dstGap(dstGap_),
          dstFracGap(dstFracGap_), addrMode(addrMode_) {}
};

// b32 (the twin models 4-byte types): per repeat i, the square of two consecutive 16 x 8 source
// fractals at startIndex + i*srcStride (units of the 1024-byte square), S[r][c] = left[r][c] for c < 8,
// right[r][c-8] after, is transposed and split into two 16 x 8 fractals: F0[r][c] = S[c][r] at
// destination fractal i*(dstGap + 1), F1[r][c] = S[8 + c][r] dstFracGap + 1 fractals after F0
// (LoadDataWithTranspose.md 参数说明 and 约束说明: L1 source 32-byte, L0 destination 512-byte aligned,
// repeatTimes 0 a NOP, transposed fractals must not overlap; the element mapping is the document's
// pseudo code, examples/.../load_data_l12l0/scripts/load_data_with_transpose.py, b32; dtypes on 2201:
// kernel_operator_mm_check.h :401-423)
template <typename T>
void LoadDataWithTranspose(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LoadData2dTransposeParams &p) {
    static_assert(sizeof(T) == 4, "LoadDataWithTranspose: the twin models 4-byte types (float, int32_t, uint32_t)");
    const char *op = "LoadDataWithTranspose";
    fg_twin::require(src.mem() == fg_twin::M_L1 && (dst.mem() == fg_twin::M_L0A || dst.mem() == fg_twin::M_L0B) &&
                         fg_twin::mem_on_core(fg_twin::M_L1),
                     std::string(op) + ": L1 (A1/B1) -> L0A/L0B (A2/B2) on an AI Cube core");
    fg_twin::require(src.offset() % 32 == 0, std::string(op) + ": L1 source not 32-byte aligned");
    fg_twin::require(dst.offset() % 512 == 0, std::string(op) + ": L0A/L0B destination not 512-byte aligned");
    fg_twin::require(p.addrMode == 0, std::string(op) + ": the twin models addrMode 0 (increasing addresses)");
    if (p.repeatTimes == 0) return;  // NOP
    const uint32_t R = p.repeatTimes, F = 128;  // elements of a 512-byte fractal
    fg_twin::require((uint64_t)(p.startIndex + (uint64_t)(R - 1) * p.srcStride + 1) * 2 * F <= src.capacity(),
                     std::string(op) + ": source squares past the L1 tensor's end");
    std::vector<uint32_t> frac;  // destination fractals, to check that none overlaps another
    for (uint32_t i = 0; i < R; ++i)
        for (uint32_t h = 0; h < 2; ++h) frac.push_back(i * (p.dstGap + 1u) + h * (p.dstFracGap + 1u));
    std::vector<uint32_t> sorted = frac;
    std::sort(sorted.begin(), sorted.end());
    fg_twin::require(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                     std::string(op) + ": transposed fractals overlap in the destination (dstGap/dstFracGap)");
    fg_twin::require((uint64_t)(sorted.back() + 1) * F <= dst.capacity(), std::string(op) + ": destination fractals past the L0 tensor's end");
    uint64_t seq = fg_twin::issue(fg_twin::P_MTE1);
    for (uint32_t i = 0; i < R; ++i) {
        const uint32_t s = (p.startIndex + i * p.srcStride) * 2 * F, slo = src.offset() + s * 4u;
        fg_twin::local_access(fg_twin::M_L1, fg_twin::P_MTE1, seq, false, slo, 1024, op);
        for (uint32_t h = 0; h < 2; ++h) {
            const uint32_t d = frac[2 * i + h] * F, dlo = dst.offset() + d * 4u;
            fg_twin::local_access(dst.mem(), fg_twin::P_MTE1, seq, true, dlo, 512, op);
            for (uint32_t r = 0; r < 16; ++r)
                for (uint32_t c = 0; c < 8; ++c) {
                    const uint32_t row = 8 * h + c, col = r;  // F_h[r][c] = S[8h + c][r]
                    const uint32_t at = s + (col < 8 ? row * 8 + col : F + row * 8 + col - 8);
                    dst.data()[d + r * 8 + c] = src.data()[at];
                    std::memcpy(&fg_twin::valid(dst.mem())[dlo + (r * 8 + c) * 4], &fg_twin::valid(fg_twin::M_L1)[src.offset() + at * 4], 4);
                }
        }
    }
}

// ------------------------------------------------------------------ Fill (InitConstValueParams)
// kernel_struct_mm.h :444-460
template <typename T>
struct InitConstValueParams {
    uint16_t repeatTimes = 0, blockNum = 0, dstGap = 0;
    T initValue = T();
    InitConstValueParams() = default;
    InitConstValueParams(uint16_t repeatTimes_, uint16_t blockNum_, uint16_t dstGap_, T initValue_)
        : repeatTimes(repeatTimes_), blockNum(blockNum_), dstGap(dstGap_), initValue(initValue_) {}
};

// repeatTimes x blockNum blocks set to initValue, dstGap blocks between repeats: in L1 (A1/B1, pipe
// MTE2, 32-byte blocks, 32-byte aligned) or L0A/L0B (pipe MTE1, 512-byte blocks and alignment); either
// count 0 a NOP (Fill.md 功能说明, InitConstValueParams, 约束说明)
template <typename T>
void Fill(const LocalTensor<T> &dst, const InitConstValueParams<T> &p) {
    const char *op = "Fill(InitConstValueParams)";
    const bool l1 = dst.mem() == fg_twin::M_L1;
    fg_twin::require((l1 || dst.mem() == fg_twin::M_L0A || dst.mem() == fg_twin::M_L0B) && fg_twin::mem_on_core(dst.mem()),
                     std::string(op) + ": the destination must be in L1, L0A or L0B, on an AI Cube core");
    const uint32_t block = l1 ? 32u : 512u;
    fg_twin::require(dst.offset() % block == 0, std::string(op) + (l1 ? ": L1 destination not 32-byte aligned"
                                                                     : ": L0A/L0B destination not 512-byte aligned"));
    fg_twin::require(p.repeatTimes <= 32767 && p.blockNum <= 32767 && p.dstGap <= 32767,
                     std::string(op) + ": a field above 32767");
    if (p.repeatTimes == 0 || p.blockNum == 0) return;  // NOP
    const int pipe = l1 ? fg_twin::P_MTE2 : fg_twin::P_MTE1;
    uint64_t seq = fg_twin::issue(pipe);
    const uint32_t per = block / (uint32_t)sizeof(T);
    for (uint32_t r = 0; r < p.repeatTimes; ++r) {
        const uint32_t at = r * (p.blockNum + p.dstGap) * per, n = p.blockNum * per;
        dst.check(at, n);
        const uint32_t lo = dst.offset() + at * (uint32_t)sizeof(T);
        fg_twin::local_access(dst.mem(), pipe, seq, true, lo, n * (uint32_t)sizeof(T), op);
        for (uint32_t e = 0; e < n; ++e) dst.data()[at + e] = p.initValue;
        fg_twin::mark_valid(dst.mem(), lo, n * (uint32_t)sizeof(T));
    }
}

// ------------------------------------------------------------------ L1 -> BiasTable: DataCopy
// kernel_struct_data_copy.h :57-80 (srcStride/dstStride are the documented srcGap/dstGap)
struct DataCopyParams {
    uint16_t blockCount = 1, blockLen = 0, srcStride = 0, dstStride = 0;
    DataCopyParams() = default;
    DataCopyParams(uint16_t count, uint16_t len, uint16_t srcStride_, uint16_t dstStride_)
        : blockCount(count), blockLen(len), srcStride(srcStride_), dstStride(dstStride_) {}
};

// C1 (L1) -> C2 (BiasTable), pipe MTE1: blockCount blocks of blockLen x 64 bytes (Atlas A2's unit), the
// source blocks srcStride x 32 bytes apart and the destination blocks dstStride x 64 bytes apart; the
// destination 64-byte and the source 32-byte aligned, blockCount <= 4095, blockCount or blockLen 0 a
// NOP, a destination past the BiasTable an exception (DataCopy（L1ToBiasTable-Buffer数据搬运）.md,
// 约束说明; dav_c220 kernel_operator_data_copy_impl.h :254-262, copy_cbuf_to_bt).  A2 converts half to
// float on the way; the twin models float -> float only.
template <typename T, typename U>
void DataCopy(const LocalTensor<T> &dst, const LocalTensor<U> &src, const DataCopyParams &p) {
    static_assert(std::is_same<T, float>::value && std::is_same<U, float>::value,
                  "DataCopy(DataCopyParams) between local buffers: the twin models L1 -> BiasTable, float -> float");
    const char *op = "DataCopy(L1 -> BiasTable)";
    fg_twin::require(src.mem() == fg_twin::M_L1 && dst.mem() == fg_twin::M_BT && fg_twin::mem_on_core(fg_twin::M_BT),
                     std::string(op) + ": the source in L1 (C1), the destination in the BiasTable (C2), on an AI Cube core");
    fg_twin::require(dst.offset() % 64 == 0, std::string(op) + ": BiasTable destination not 64-byte aligned");
    fg_twin::require(src.offset() % 32 == 0, std::string(op) + ": L1 source not 32-byte aligned");
    fg_twin::require(p.blockCount <= 4095, std::string(op) + ": blockCount above 4095");
    if (p.blockCount == 0 || p.blockLen == 0) return;  // NOP
    const uint32_t len = p.blockLen * 64u;
    uint64_t seq = fg_twin::issue(fg_twin::P_MTE1);
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        const uint32_t s = i * (len + p.srcStride * 32u), d = i * (len + p.dstStride * 64u);
        fg_twin::require((uint64_t)dst.offset() + d + len <= fg_twin::mem_size(fg_twin::M_BT),
                         std::string(op) + ": destination past the BiasTable's " +
                             std::to_string(fg_twin::mem_size(fg_twin::M_BT)) + " bytes");
        src.check(s / 4u, len / 4u);
        dst.check(d / 4u, len / 4u);
        const uint32_t slo = src.offset() + s, dlo = dst.offset() + d;
        fg_twin::local_access(fg_twin::M_L1, fg_twin::P_MTE1, seq, false, slo, len, op);
        fg_twin::local_access(fg_twin::M_BT, fg_twin::P_MTE1, seq, true, dlo, len, op);
        std::memcpy((void *)(dst.data() + d / 4u), (const void *)(src.data() + s / 4u), len);
        std::memcpy(&fg_twin::valid(fg_twin::M_BT)[dlo], &fg_twin::valid(fg_twin::M_L1)[slo], len);
    }
}

// ------------------------------------------------------------------ Mmad
// kernel_struct_mm.h :392-441
struct MmadParams {
    uint16_t m = 0, n = 0, k = 0;
    bool isBias = false;
    int32_t fmOffset = 0;
    bool enSsparse = false, enWinogradA = false, enWinogradB = false;
    uint8_t unitFlag = 0;
    bool kDirectionAlign = false, cmatrixSource = false, cmatrixInitVal = true;
    MmadParams() = default;
    MmadParams(uint16_t m_, uint16_t n_, uint16_t k_, uint8_t unitFlag_, bool cmatrixSource_, bool cmatrixInitVal_)
        : m(m_), n(n_), k(k_), unitFlag(unitFlag_), cmatrixSource(cmatrixSource_), cmatrixInitVal(cmatrixInitVal_) {}
};

// C[i][j] = (init ? 0 : C[i][j]) + sum_p A[i][p] * B[p][j] for i < m, j < n, p < K1*C0, with A in L0A as Zz
// (16 x C0 fractals, row-major between them), B in L0B as Zn, C in L0C as Nz with 16 x 16 fractals:
//   A(i, p) = fm[((i/16)*K1 + p/C0)*16*C0 + (i%16)*C0 + p%C0]    (m == 1: GEMV, A read as a plain row)
//   B(p, j) = filter[((p/C0)*N1 + j/16)*16*C0 + (j%16)*C0 + p%C0]
//   C(i, j) = dst[((j/16)*R16(m) + i)*16 + j%16]
// with C0 = 32 / sizeof(input), K1 = ceil(k/C0), N1 = ceil(n/16) (Mmad.md :99-131, :157-160, :167-179,
// :214-231, :284, :293-307; kernel_operator_mm_check.h :64-92).  NaN and Inf: fg_twin_overflow.h (kept,
// or results saturated in saturation mode).  The cube reads whole fractals: K runs to the end of the
// last C0 block (K=36 reads 40, K-方向对齐约束.md), so those padding elements must hold data and their
// products count (Nd2Nz's zero columns do that for K in the rows; a K-major operand's last rows must be
// zeroed).  A GEMV (m == 1) reads its k elements.  The sum: exact products added in double, one
// rounding to float per Mmad (the device's order inside one Mmad is not documented).
// With a bias in the BiasTable (the overload's bias tensor in C2), C starts from bias[j] instead: the
// bias's position selects the source (kernel_operator_mm_base_impl.h :479-502), cmatrixInitVal must
// be false for it to be used (Mmad.md :170-172; the bias example sets it so), the bias 128-byte aligned
// (kernel_operator_mm_check.h :95-108).  A bias in L0C (accumulate) is not modelled.
template <typename C, typename A, typename B>
void mmad(const LocalTensor<C> &dst, const LocalTensor<A> &fm, const LocalTensor<B> &filter, const LocalTensor<float> *bias,
          const MmadParams &p) {
    static_assert(std::is_same<C, float>::value && std::is_same<A, B>::value && fg_twin::cube_input<A>(),
                  "Mmad on Ascend910B: half x half, bfloat16_t x bfloat16_t or float x float into float");
    const char *op = bias ? "Mmad with bias" : "Mmad";
    fg_twin::require(dst.mem() == fg_twin::M_L0C && fm.mem() == fg_twin::M_L0A && filter.mem() == fg_twin::M_L0B,
                     "Mmad: dst in L0C (CO1), fm in L0A (A2), filter in L0B (B2)");
    fg_twin::require(dst.offset() % 1024 == 0, "Mmad: L0C destination not 1024-byte aligned");
    fg_twin::require(fm.offset() % 512 == 0 && filter.offset() % 512 == 0, "Mmad: L0A/L0B operand not 512-byte aligned");
    fg_twin::require(p.m <= 4095 && p.n <= 4095 && p.k <= 4095, "Mmad: m, n, k must be at most 4095");
    fg_twin::require(p.unitFlag == 0, "Mmad: the twin models unitFlag 0 only");
    fg_twin::require(!p.kDirectionAlign || std::is_same<A, float>::value, "Mmad: kDirectionAlign is for float inputs");
    const bool init = p.cmatrixInitVal && !p.isBias;
    if (bias) {
        fg_twin::require(bias->mem() == fg_twin::M_BT, "Mmad with bias: the twin models a bias in the BiasTable (C2) only");
        fg_twin::require(bias->offset() % 128 == 0, "Mmad with bias: bias not 128-byte aligned");
        fg_twin::require(!p.cmatrixInitVal && !p.isBias, "Mmad with bias: cmatrixInitVal must be false (C starts from the "
                                                         "BiasTable), or the bias is not used");
    } else {
        fg_twin::require(init || !p.cmatrixSource, "Mmad: accumulating from the bias table (cmatrixSource) needs the "
                                                   "overload that takes the bias tensor");
    }
    if (p.m == 0 || p.n == 0 || p.k == 0) return;  // NOP
    // with kDirectionAlign (float) L0A and L0B hold K aligned to 16, not 8: a row of A's fractals is
    // ceil(k/16)*2 long, of which the first ceil(k/8) are read (K-方向对齐约束.md; Mmad.md :175)
    const uint32_t m = p.m, n = p.n, k = p.k, C0 = 32 / sizeof(A), K1r = (k + C0 - 1) / C0,
                   K1 = p.kDirectionAlign ? (k + 15) / 16 * 2 : K1r, N1 = (n + 15) / 16, M16 = (m + 15) / 16 * 16;
    auto a_at = [&](uint32_t i, uint32_t q) { return m == 1 ? q : ((i / 16) * K1 + q / C0) * 16 * C0 + (i % 16) * C0 + q % C0; };
    auto b_at = [&](uint32_t q, uint32_t j) { return ((q / C0) * N1 + j / 16) * 16 * C0 + (j % 16) * C0 + q % C0; };
    auto c_at = [&](uint32_t i, uint32_t j) { return ((j / 16) * M16 + i) * 16 + j % 16; };
    // the elements each operand spans: whole fractals (a GEMV row: k elements)
    const uint32_t a_span = m == 1 ? k : ((M16 / 16 - 1) * K1 + K1r) * 16 * C0, b_span = K1r * C0 * N1 * 16,
                   c_span = N1 * 16 * M16;
    fm.check(0, a_span);
    filter.check(0, b_span);
    dst.check(0, c_span);
    // consecutive Mmads on one L0C need a PipeBarrier<PIPE_M> between them while (m/16)*(n/16) < 10;
    // from there on the cube orders them itself (Mmad.md :293-307), whatever else synchronises them
    fg_twin::PipeModel &pm = fg_twin::pipes();
    const uint32_t c_lo = dst.offset(), c_hi = dst.offset() + c_span * 4;
    const bool small = (m / 16) * (n / 16) < 10;
    fg_twin::require(!small || pm.mmad_seq == 0 || pm.m_barrier_at >= pm.mmad_seq || c_hi <= pm.mmad_lo || pm.mmad_hi <= c_lo,
                     "Mmad right after an Mmad on the same L0C with no PipeBarrier<PIPE_M> between them, while (m/16)*(n/16) = " +
                         std::to_string((m / 16) * (n / 16)) + " < 10 (Mmad.md)");
    pm.m_self_ordered = !small;
    uint64_t seq = fg_twin::issue(fg_twin::P_M);
    pm.mmad_lo = c_lo;
    pm.mmad_hi = c_hi;
    pm.mmad_seq = seq;
    fg_twin::local_access(fg_twin::M_L0A, fg_twin::P_M, seq, false, fm.offset(), a_span * (uint32_t)sizeof(A), op);
    fg_twin::local_access(fg_twin::M_L0B, fg_twin::P_M, seq, false, filter.offset(), b_span * (uint32_t)sizeof(B), op);
    const uint32_t c_bytes = c_span * 4;
    if (bias) {
        bias->check(0, n);
        fg_twin::local_access(fg_twin::M_BT, fg_twin::P_M, seq, false, bias->offset(), n * 4u, op);
    } else if (!init) {
        fg_twin::local_access(fg_twin::M_L0C, fg_twin::P_M, seq, false, dst.offset(), c_bytes, op);
    }
    fg_twin::local_access(fg_twin::M_L0C, fg_twin::P_M, seq, true, dst.offset(), c_bytes, op);
    fg_twin::pipes().m_self_ordered = false;
    fg_twin::cube_macs_useful() += (uint64_t)m * n * k;
    fg_twin::cube_macs_issued() += (uint64_t)M16 * N1 * 16 * K1r * C0;
    const uint32_t kr = m == 1 ? k : K1r * C0;  // the K elements the cube reads
    std::vector<float> a(m * kr), b(kr * n);
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t q = 0; q < kr; ++q) {
            uint32_t at = a_at(i, q);
            fg_twin::require(fg_twin::is_valid(fg_twin::M_L0A, fm.offset() + at * (uint32_t)sizeof(A), sizeof(A)),
                             "Mmad reads A(" + std::to_string(i) + ", " + std::to_string(q) + ") from L0A bytes that hold no data" +
                                 (m == 1 ? " (with m == 1 Mmad is a GEMV and reads L0A as a plain row, not Zz)" : ""));
            a[i * kr + q] = fg_twin_overflow::mmad_input(AscendC::detail::widen(fm.data()[at]));
        }
    for (uint32_t q = 0; q < kr; ++q)
        for (uint32_t j = 0; j < n; ++j) {
            uint32_t at = b_at(q, j);
            fg_twin::require(fg_twin::is_valid(fg_twin::M_L0B, filter.offset() + at * (uint32_t)sizeof(B), sizeof(B)),
                             "Mmad reads B(" + std::to_string(q) + ", " + std::to_string(j) + ") from L0B bytes that hold no data");
            b[q * n + j] = fg_twin_overflow::mmad_input(AscendC::detail::widen(filter.data()[at]));
        }
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; ++j) {
            uint32_t at = c_at(i, j), lo = dst.offset() + at * 4;
            double acc = 0.0;
            if (bias) {
                fg_twin::require(fg_twin::is_valid(fg_twin::M_BT, bias->offset() + j * 4u, 4),
                                 "Mmad with bias reads bias(" + std::to_string(j) + ") from BiasTable bytes that hold no data");
                acc = bias->data()[j];
            } else if (!init) {
                fg_twin::require(fg_twin::is_valid(fg_twin::M_L0C, lo, 4), "Mmad accumulates onto L0C bytes that hold no data");
                acc = dst.data()[at];
            }
            double sum = 0.0;
            for (uint32_t q = 0; q < kr; ++q) sum += (double)a[i * kr + q] * (double)b[q * n + j];
            dst.data()[at] = fg_twin_overflow::mmad_output((float)(acc + sum));
            fg_twin::mark_valid(fg_twin::M_L0C, lo, 4);
        }
}

template <typename C, typename A, typename B>
void Mmad(const LocalTensor<C> &dst, const LocalTensor<A> &fm, const LocalTensor<B> &filter, const MmadParams &p) {
    mmad(dst, fm, filter, (const LocalTensor<float> *)nullptr, p);
}
template <typename C, typename A, typename B, typename V>
void Mmad(const LocalTensor<C> &dst, const LocalTensor<A> &fm, const LocalTensor<B> &filter, const LocalTensor<V> &bias,
          const MmadParams &p) {
    static_assert(std::is_same<V, float>::value, "Mmad with bias: the twin models a float bias");
    mmad(dst, fm, filter, &bias, p);
}

// ------------------------------------------------------------------ L0C -> GM: Fixpipe
enum class QuantMode_t { NoQuant, F322F16, F322BF16 };
// kernel_struct_fixpipe.h :106-165
struct FixpipeParamsV220 {
    uint16_t nSize = 0, mSize = 0, srcStride = 0;
    uint32_t dstStride = 0;
    QuantMode_t quantPre = QuantMode_t::NoQuant;
    uint64_t deqScalar = 0;
    uint16_t ndNum = 1, srcNdStride = 0, dstNdStride = 0;
    bool reluEn = false;
    uint8_t unitFlag = 0;
    bool isChannelSplit = false;
    FixpipeParamsV220() = default;
    FixpipeParamsV220(uint16_t nSize_, uint16_t mSize_, uint16_t srcStride_, uint32_t dstStride_, bool reluEn_)
        : nSize(nSize_), mSize(mSize_), srcStride(srcStride_), dstStride(dstStride_), reluEn(reluEn_) {}
    FixpipeParamsV220(uint16_t nSize_, uint16_t mSize_, uint16_t srcStride_, uint32_t dstStride_, bool reluEn_,
                      QuantMode_t quantPre_, uint64_t deqScalar_, uint16_t ndNum_, uint16_t srcNdStride_,
                      uint16_t dstNdStride_, uint8_t unitFlag_)
        : nSize(nSize_), mSize(mSize_), srcStride(srcStride_), dstStride(dstStride_), quantPre(quantPre_),
          deqScalar(deqScalar_), ndNum(ndNum_), srcNdStride(srcNdStride_), dstNdStride(dstNdStride_), reluEn(reluEn_),
          unitFlag(unitFlag_) {}
};

// ND out (the default CFG_ROW_MAJOR): dst[j*dstStride + c] = cvt(L0C[(c/16)*srcStride*16 + j*16 + c%16])
// for j < mSize, c < nSize; cvt: float as is (NoQuant), to half (F322F16) or bfloat16 (F322BF16) rounded
// to nearest even -- quantPre is never inferred from the types (Fixpipe（L0C到GM数据搬运）.md :148-152,
// :201-206, :245-250; kernel_operator_mm_check.h :109-246; NZ2ND.md :9-22).  The 2201 implementation
// issues PipeBarrier<PIPE_FIX> before every copy (kernel_operator_fixpipe_v2_impl.h :257-279).
template <typename T, typename U>
void Fixpipe(const GlobalTensor<T> &dst, const LocalTensor<U> &src, const FixpipeParamsV220 &p) {
    static_assert(std::is_same<U, float>::value && fg_twin::cube_input<T>(), "Fixpipe here: float L0C to float, half or bfloat16_t GM");
    const char *op = "Fixpipe";
    fg_twin::require(src.mem() == fg_twin::M_L0C, "Fixpipe: the source must be in L0C (CO1)");
    fg_twin::require(src.offset() % 64 == 0, "Fixpipe: L0C source not 64-byte aligned");
    fg_twin::require(p.nSize <= 4095 && p.mSize <= 8192, "Fixpipe: nSize <= 4095 and mSize <= 8192 (NZ2ND)");
    fg_twin::require(p.dstStride != 0, "Fixpipe: dstStride must not be 0");
    fg_twin::require(p.ndNum == 1 && p.unitFlag == 0 && !p.isChannelSplit, "Fixpipe: the twin models ndNum 1, unitFlag 0");
    QuantMode_t want = std::is_same<T, float>::value ? QuantMode_t::NoQuant
                       : std::is_same<T, half>::value ? QuantMode_t::F322F16 : QuantMode_t::F322BF16;
    fg_twin::require(p.quantPre == want, "Fixpipe: quantPre does not match the types (float -> float NoQuant, "
                                         "float -> half F322F16, float -> bfloat16 F322BF16; it is never inferred)");
    if (p.mSize == 0 || p.nSize == 0) return;  // NOP
    fg_twin::require(p.srcStride >= p.mSize, "Fixpipe: srcStride (L0C rows between fractal columns) below mSize");
    fg_twin::barrier(fg_twin::P_FIX);
    uint64_t seq = fg_twin::issue(fg_twin::P_FIX);
    const uint32_t cols = (p.nSize + 15) / 16;
    src.check(0, ((cols - 1) * p.srcStride + p.mSize) * 16);
    for (uint32_t c = 0; c < cols; ++c)
        fg_twin::local_access(fg_twin::M_L0C, fg_twin::P_FIX, seq, false, src.offset() + c * p.srcStride * 64, p.mSize * 64u, op);
    for (uint32_t j = 0; j < p.mSize; ++j) {
        const GlobalTensor<T> row = dst[(uint64_t)j * p.dstStride];
        fg_twin::require(row.size() >= p.nSize, "Fixpipe: destination row past the GlobalTensor's end");
        fg_twin::gm_access(fg_twin::P_FIX, seq, true, row.data(), p.nSize * sizeof(T), op);
        fg_twin::gm_write_bytes() += p.nSize * sizeof(T);
        for (uint32_t c = 0; c < p.nSize; ++c) {
            uint32_t at = (c / 16) * p.srcStride * 16 + j * 16 + c % 16;
            fg_twin::require(fg_twin::is_valid(fg_twin::M_L0C, src.offset() + at * 4, 4),
                             "Fixpipe reads L0C bytes that hold no data (row " + std::to_string(j) + ", column " +
                                 std::to_string(c) + ")");
            float v = src.data()[at];
            if (p.reluEn && v < 0) v = 0;
            row.data()[c] = AscendC::detail::narrow<T>(v);
        }
    }
}

}  // namespace AscendC

#endif
