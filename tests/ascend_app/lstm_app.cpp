// The full LSTM's aclnn API (aclnnLSTM, aclnnLstmBackward) called as a CANN application calls it:
// device tensors, tensor lists, the two phases, a stream.  Test driver for tests/ascend_lstm.py.
//
//   lstm_app fwd|bwd CONFIG IN OUT
// CONFIG: "T B I H L D hasBias batchFirst train varlen hasHx pad dtype" (dtype 0 float32, 1 float16,
// 2 bfloat16) then T batch sizes when varlen.
// Every tensor of rank >= 2 gets rows of its last size + pad (pad > 0: no tensor is contiguous; the
// pads hold NaN, which the operator must never read).  IN: the inputs as dense float32, in order:
//   fwd: input, params (the list's order), then h0, c0 when hasHx
//   bwd: input, h0, c0, params, dy, dh, dc, then the lists i, g, f, o, h, c, tanhc (L*D tensors each)
// (float32 values, stored on the device in dtype).  OUT: the outputs, dense, as float32: fwd: output, hy, cy, then with train the lists i, j, f, o, h, c,
// tanhc; bwd: dx, dh0, dc0, dparams.  Prints the two phases' statuses (built with FG_TWIN_COUNTERS
// against the twin: then also the GM bytes and Cube multiply-adds it counted).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_lstm.h"
#include "aclnnop/aclnn_lstm_backward.h"
#ifdef FG_TWIN_COUNTERS
#include "kernel_operator.h"
#endif

namespace {

int64_t PAD = 0;
aclDataType DTYPE = ACL_FLOAT;

// float32 <-> the 16-bit formats, rounding to nearest even (the inputs are exact in their dtype)
uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds past 65504: Inf
    if (a < 0x38800000u) {                                     // subnormal or zero in fp16
        float m = fabsf(f) * 16777216.0f;                       // in units of 2^-24
        return (uint16_t)(sign | (uint32_t)nearbyintf(m));
    }
    uint32_t r = a - 0x38000000u;  // rebias the exponent
    return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}
float from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float f;
    if (e == 0) {
        f = (float)m / 16777216.0f;
        return sign ? -f : f;
    }
    uint32_t u = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
    memcpy(&f, &u, 4);
    return f;
}

struct Dev {
    aclDataType dtype;
    std::vector<int64_t> dims, strides;
    void *mem = nullptr;
    size_t bytes = 0;
    aclTensor *t = nullptr;
};

Dev *make(std::vector<int64_t> dims, aclDataType dtype = DTYPE) {
    Dev *d = new Dev;
    d->dims = dims;
    d->dtype = dtype;
    d->strides.assign(dims.size(), 1);
    int64_t span = 1, esize = dtype == ACL_INT64 ? 8 : dtype == ACL_FLOAT ? 4 : 2;
    for (size_t k = dims.size(); k-- > 0;) {
        d->strides[k] = span;
        span *= (k + 1 == dims.size() && dims.size() >= 2 && dtype != ACL_INT64) ? dims[k] + PAD : dims[k];
    }
    d->bytes = (size_t)(span > 0 ? span : 1) * esize;
    aclrtMalloc(&d->mem, d->bytes, ACL_MEM_MALLOC_HUGE_FIRST);
    std::vector<uint8_t> nan(d->bytes);  // NaN in every element: what the gaps hold
    for (size_t k = 0; k + esize <= d->bytes; k += esize) {
        const float f = NAN;
        const uint16_t h = dtype == ACL_FLOAT16 ? 0x7e00 : 0x7fc0;
        memcpy(&nan[k], esize == 2 ? (const void *)&h : (const void *)&f, esize == 2 ? 2 : 4);
    }
    aclrtMemcpy(d->mem, d->bytes, nan.data(), d->bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    int64_t storage = span;
    d->t = aclCreateTensor(dims.data(), dims.size(), dtype, d->strides.data(), 0, ACL_FORMAT_ND, &storage, 1, d->mem);
    return d;
}

int64_t count(const Dev *d) {
    int64_t n = 1;
    for (int64_t x : d->dims) n *= x;
    return n;
}

// the element at dense index e of d, as an offset in floats
int64_t at(const Dev *d, int64_t e) {
    int64_t off = 0;
    for (size_t k = d->dims.size(); k-- > 0;) {
        off += (e % d->dims[k]) * d->strides[k];
        e /= d->dims[k];
    }
    return off;
}

void put(Dev *d, FILE *f) {
    std::vector<uint8_t> host(d->bytes);
    aclrtMemcpy(host.data(), d->bytes, d->mem, d->bytes, ACL_MEMCPY_DEVICE_TO_HOST);
    for (int64_t e = 0; e < count(d); ++e) {
        float v;
        if (fread(&v, 4, 1, f) != 1) exit(3);
        const size_t k = (size_t)at(d, e);
        if (d->dtype == ACL_FLOAT) {
            memcpy(&host[k * 4], &v, 4);
        } else {
            const uint16_t h = d->dtype == ACL_FLOAT16 ? to_f16(v) : to_bf16(v);
            memcpy(&host[k * 2], &h, 2);
        }
    }
    aclrtMemcpy(d->mem, d->bytes, host.data(), d->bytes, ACL_MEMCPY_HOST_TO_DEVICE);
}

void get(Dev *d, FILE *f) {
    std::vector<uint8_t> host(d->bytes);
    aclrtMemcpy(host.data(), d->bytes, d->mem, d->bytes, ACL_MEMCPY_DEVICE_TO_HOST);
    for (int64_t e = 0; e < count(d); ++e) {
        const size_t k = (size_t)at(d, e);
        float v;
        uint16_t h;
        if (d->dtype == ACL_FLOAT) {
            memcpy(&v, &host[k * 4], 4);
        } else {
            memcpy(&h, &host[k * 2], 2);
            v = d->dtype == ACL_FLOAT16 ? from_f16(h) : from_bf16(h);
        }
        fwrite(&v, 4, 1, f);
    }
}

aclTensorList *list_of(const std::vector<Dev *> &v) {
    std::vector<const aclTensor *> t;
    for (Dev *d : v) t.push_back(d->t);
    return aclCreateTensorList(t.data(), t.size());
}

// every misuse of the two APIs, each printed with the first phase's status (or the second's)
int errors() {
    const int64_t T = 3, B = 2, I = 4, H = 5;
    Dev *x = make({T, B, I}), *w_ih = make({4 * H, I}), *w_hh = make({4 * H, H}), *b_ih = make({4 * H}),
        *b_hh = make({4 * H}), *h0 = make({1, B, H}), *c0 = make({1, B, H}), *y = make({T, B, H}),
        *hy = make({1, B, H}), *cy = make({1, B, H}), *x16 = make({T, B, I}, ACL_FLOAT16),
        *w_bad = make({4 * H, H + 1}), *y_bad = make({T, B, H + 1}), *bs_up = make({T}, ACL_INT64),
        *bs_first = make({T}, ACL_INT64), *x2 = make({T * B, I}), *xi = make({T, B, I}, ACL_INT32);
    Dev *w_ih_bad = make({4 * H, I + 1}), *b_bad = make({4 * H + 1}), *h0_bad = make({1, B, H + 1}),
        *act_bad = make({T, B, H + 1});
    const int64_t up[3] = {1, 2, 2}, first[3] = {1, 1, 1};
    aclrtMemcpy(bs_up->mem, 24, up, 24, ACL_MEMCPY_HOST_TO_DEVICE);
    aclrtMemcpy(bs_first->mem, 24, first, 24, ACL_MEMCPY_HOST_TO_DEVICE);
    std::vector<Dev *> acts;
    for (int a = 0; a < 7; ++a) acts.push_back(make({T, B, H}));
    aclTensorList *params = list_of({w_ih, w_hh, b_ih, b_hh}), *short_params = list_of({w_ih, w_hh, b_ih});
    aclTensorList *bad_params = list_of({w_ih, w_bad, b_ih, b_hh}), *hx = list_of({h0, c0}), *hx1 = list_of({h0});
    aclTensorList *bad_w_ih = list_of({w_ih_bad, w_hh, b_ih, b_hh}), *bad_b_hh = list_of({w_ih, w_hh, b_ih, b_bad});
    aclTensorList *hx_bad = list_of({h0_bad, c0}), *l_bad = list_of({act_bad});
    aclTensorList *l[7];
    for (int a = 0; a < 7; ++a) l[a] = list_of({acts[(size_t)a]});
    // a y whose rows sit on top of each other
    const int64_t dims[3] = {T, B, H}, zero[3] = {0, 0, 1}, storage = H;
    aclTensor *y_overlap = aclCreateTensor(dims, 3, ACL_FLOAT, zero, 0, ACL_FORMAT_ND, &storage, 1, y->mem);
    uint64_t ws = 0;
    aclOpExecutor *e = nullptr;
    auto fwd = [&](const char *what, const aclTensor *in, const aclTensorList *p, const aclTensorList *h,
                   const aclTensor *bsz, int64_t layers, double dropout, aclTensor *out, aclTensorList *i_out,
                   aclOpExecutor **exec) {
        printf("%s: %d\n", what, aclnnLSTMGetWorkspaceSize(in, p, h, bsz, true, layers, dropout, true, false, false, out,
                                                          hy->t, cy->t, i_out, l[1], l[2], l[3], l[4], l[5], l[6], &ws,
                                                          exec));
    };
    fwd("fwd null input", nullptr, params, hx, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd null params", x->t, nullptr, hx, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd null output", x->t, params, hx, nullptr, 1, 0.0, nullptr, l[0], &e);
    fwd("fwd null iOut with train", x->t, params, hx, nullptr, 1, 0.0, y->t, nullptr, &e);
    fwd("fwd null executor", x->t, params, hx, nullptr, 1, 0.0, y->t, l[0], nullptr);
    fwd("fwd int32 input", xi->t, params, hx, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd mixed dtypes", x16->t, params, hx, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd 3 params", x->t, short_params, hx, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd w_hh [4H, H+1]", x->t, bad_params, hx, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd hx of one tensor", x->t, params, hx1, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd w_ih [4H, I+1]", x->t, bad_w_ih, hx, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd b_hh [4H+1]", x->t, bad_b_hh, hx, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd h0 [1, B, H+1]", x->t, params, hx_bad, nullptr, 1, 0.0, y->t, l[0], &e);
    fwd("fwd iOut [T, B, H+1]", x->t, params, hx, nullptr, 1, 0.0, y->t, l_bad, &e);
    fwd("fwd 0 layers", x->t, params, hx, nullptr, 0, 0.0, y->t, l[0], &e);
    fwd("fwd dropout 0.5", x->t, params, hx, nullptr, 1, 0.5, y->t, l[0], &e);
    fwd("fwd output [T, B, H+1]", x->t, params, hx, nullptr, 1, 0.0, y_bad->t, l[0], &e);
    fwd("fwd output rows on top of each other", x->t, params, hx, nullptr, 1, 0.0, y_overlap, l[0], &e);
    fwd("fwd batchSizes increasing", x2->t, params, hx, bs_up->t, 1, 0.0, y->t, l[0], &e);
    fwd("fwd batchSizes first != B", x2->t, params, hx, bs_first->t, 1, 0.0, y->t, l[0], &e);
    fwd("fwd batchSizes with a 3-D input", x->t, params, hx, bs_first->t, 1, 0.0, y->t, l[0], &e);
    printf("fwd null executor in phase two: %d\n", aclnnLSTM(nullptr, 0, nullptr, nullptr));
    auto bwd = [&](const char *what, const aclTensor *dy, bool train, const aclBoolArray *mask, aclTensor *dx,
                   aclOpExecutor **exec) {
        Dev *dh0 = make({1, B, H}), *dc0 = make({1, B, H});
        aclTensorList *dp = list_of({make({4 * H, I}), make({4 * H, H}), make({4 * H}), make({4 * H})});
        printf("%s: %d\n", what, aclnnLstmBackwardGetWorkspaceSize(x->t, hx, params, dy, hy->t, cy->t, l[0], l[1], l[2],
                                                                  l[3], l[4], l[5], l[6], nullptr, true, 1, 0.0, train,
                                                                  false, false, mask, dx, dh0->t, dc0->t, dp, &ws, exec));
    };
    const bool three[3] = {true, true, true}, no_dx[4] = {false, true, true, true};
    aclBoolArray *mask3 = aclCreateBoolArray(three, 3), *mask_no_dx = aclCreateBoolArray(no_dx, 4);
    Dev *dx = make({T, B, I});
    bwd("bwd null dy", nullptr, true, nullptr, dx->t, &e);
    bwd("bwd null dxOut", y->t, true, nullptr, nullptr, &e);
    bwd("bwd train false", y->t, false, nullptr, dx->t, &e);
    bwd("bwd outputMask of 3", y->t, true, mask3, dx->t, &e);
    bwd("bwd dy [T, B, H+1]", y_bad->t, true, nullptr, dx->t, &e);
    bwd("bwd null executor", y->t, true, nullptr, dx->t, nullptr);
    bwd("bwd no dx wanted, dxOut null", y->t, true, mask_no_dx, nullptr, &e);
    printf("bwd null executor in phase two: %d\n", aclnnLstmBackward(nullptr, 0, nullptr, nullptr));
    return 0;
}

// a small forward first (FG_APP_WARMUP): the library's staging pool then holds a block smaller than
// the call after it needs
void warmup(aclrtStream stream) {
    const int64_t pad = PAD;
    const aclDataType dtype = DTYPE;
    PAD = 0, DTYPE = ACL_FLOAT;
    Dev *x = make({1, 1, 1}), *y = make({1, 1, 1}), *hy = make({1, 1, 1}), *cy = make({1, 1, 1});
    aclTensorList *params = list_of({make({4, 1}), make({4, 1})});
    uint64_t ws_size = 0;
    aclOpExecutor *exec = nullptr;
    aclnnStatus s = aclnnLSTMGetWorkspaceSize(x->t, params, nullptr, nullptr, false, 1, 0.0, false, false, false, y->t,
                                              hy->t, cy->t, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                              nullptr, &ws_size, &exec);
    void *ws = nullptr;
    if (s == 0 && ws_size) aclrtMalloc(&ws, ws_size, ACL_MEM_MALLOC_HUGE_FIRST);
    if (s == 0) s = aclnnLSTM(ws, ws_size, exec, stream);
    aclrtSynchronizeStream(stream);
    printf("warmup: %d\n", s);
    PAD = pad, DTYPE = dtype;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "errors") == 0) {
        aclInit(nullptr);
        aclrtSetDevice(0);
        return errors();
    }
    if (argc != 5) return 2;
    const bool fwd = strcmp(argv[1], "fwd") == 0;
    FILE *cfg = fopen(argv[2], "r");
    long long T, B, I, H, L, D, hasBias, batchFirst, train, varlen, hasHx, pad, dtype;
    if (fscanf(cfg, "%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld", &T, &B, &I, &H, &L, &D,
               &hasBias, &batchFirst, &train, &varlen, &hasHx, &pad, &dtype) != 13) return 2;
    DTYPE = dtype == 1 ? ACL_FLOAT16 : dtype == 2 ? ACL_BF16 : ACL_FLOAT;
    std::vector<int64_t> bs((size_t)T, B);
    for (long long t = 0; varlen && t < T; ++t) {
        if (fscanf(cfg, "%lld", (long long *)&bs[(size_t)t]) != 1) return 2;
    }
    fclose(cfg);
    PAD = pad;
    aclInit(nullptr);
    aclrtSetDevice(0);
    aclrtStream stream;
    aclrtCreateStream(&stream);

    if (std::getenv("FG_APP_WARMUP")) warmup(stream);
    const int64_t LD = L * D;
    std::vector<int64_t> xdims = varlen ? std::vector<int64_t>{T * B, I}
                                        : (batchFirst ? std::vector<int64_t>{B, T, I} : std::vector<int64_t>{T, B, I});
    std::vector<int64_t> ydims = varlen ? std::vector<int64_t>{T * B, D * H}
                                        : (batchFirst ? std::vector<int64_t>{B, T, D * H} : std::vector<int64_t>{T, B, D * H});
    std::vector<Dev *> params;
    for (int64_t l = 0; l < L; ++l)
        for (int64_t d = 0; d < D; ++d) {
            const int64_t in = l == 0 ? I : D * H;
            params.push_back(make({4 * H, in}));
            params.push_back(make({4 * H, H}));
            if (hasBias) {
                params.push_back(make({4 * H}));
                params.push_back(make({4 * H}));
            }
        }
    Dev *bsz = nullptr;
    if (varlen) {
        bsz = make({T}, ACL_INT64);
        aclrtMemcpy(bsz->mem, bsz->bytes, bs.data(), (size_t)T * 8, ACL_MEMCPY_HOST_TO_DEVICE);
    }
    FILE *in = fopen(argv[3], "rb");
    FILE *out = fopen(argv[4], "wb");
    Dev *x = make(xdims);
    Dev *h0 = make({LD, B, H}), *c0 = make({LD, B, H});
    uint64_t ws_size = 0;
    aclOpExecutor *exec = nullptr;
    aclnnStatus s1, s2 = -1;
    std::vector<Dev *> outs;
    if (fwd) {
        put(x, in);
        for (Dev *p : params) put(p, in);
        if (hasHx) {
            put(h0, in);
            put(c0, in);
        }
        Dev *y = make(varlen ? std::vector<int64_t>{T, B, D * H} : ydims);
        Dev *hy = make({LD, B, H}), *cy = make({LD, B, H});
        outs = {y, hy, cy};
        std::vector<Dev *> lists[7];
        for (int a = 0; a < 7; ++a)
            for (int64_t k = 0; train && k < LD; ++k) lists[a].push_back(make({T, B, H}));
        aclTensorList *ll[7];
        for (int a = 0; a < 7; ++a) {
            ll[a] = list_of(lists[a]);
            outs.insert(outs.end(), lists[a].begin(), lists[a].end());
        }
        aclTensorList *plist = list_of(params);
        aclTensorList *hx = hasHx ? list_of({h0, c0}) : nullptr;
        s1 = aclnnLSTMGetWorkspaceSize(x->t, plist, hx, bsz ? bsz->t : nullptr, hasBias, L, 0.0, train, D == 2,
                                       batchFirst, y->t, hy->t, cy->t, ll[0], ll[1], ll[2], ll[3], ll[4], ll[5], ll[6],
                                       &ws_size, &exec);
        printf("aclnnLSTMGetWorkspaceSize: %d\n", s1);
        if (s1 == 0) {
            void *ws = nullptr;
            if (ws_size) aclrtMalloc(&ws, ws_size, ACL_MEM_MALLOC_HUGE_FIRST);
            s2 = aclnnLSTM(ws, ws_size, exec, stream);
            aclrtSynchronizeStream(stream);
            if (ws) aclrtFree(ws);
        }
        printf("aclnnLSTM: %d\n", s2);
    } else {
        put(x, in);
        put(h0, in);
        put(c0, in);
        for (Dev *p : params) put(p, in);
        Dev *dy = make(ydims), *dh = make({LD, B, H}), *dc = make({LD, B, H});
        put(dy, in);
        put(dh, in);
        put(dc, in);
        std::vector<Dev *> lists[7];
        aclTensorList *ll[7];
        for (int a = 0; a < 7; ++a) {
            for (int64_t k = 0; k < LD; ++k) {
                lists[a].push_back(make({T, B, H}));
                put(lists[a].back(), in);
            }
            ll[a] = list_of(lists[a]);
        }
        Dev *dx = make(xdims), *dh0 = make({LD, B, H}), *dc0 = make({LD, B, H});
        std::vector<Dev *> dparams;
        for (Dev *p : params) dparams.push_back(make(p->dims));
        outs = {dx, dh0, dc0};
        outs.insert(outs.end(), dparams.begin(), dparams.end());
        aclTensorList *plist = list_of(params), *dplist = list_of(dparams), *hx = list_of({h0, c0});
        // FG_APP_NO_DPARAMS: outputMask {dx, dh0, dc0} only (dparams left as made: zeros)
        const bool no_dparams = std::getenv("FG_APP_NO_DPARAMS") != nullptr;
        const bool want3[4] = {true, true, true, false};
        aclBoolArray *mask = no_dparams ? aclCreateBoolArray(want3, 4) : nullptr;
        s1 = aclnnLstmBackwardGetWorkspaceSize(x->t, hx, plist, dy->t, dh->t, dc->t, ll[0], ll[1], ll[2], ll[3], ll[4],
                                               ll[5], ll[6], bsz ? bsz->t : nullptr, hasBias, L, 0.0, true, D == 2,
                                               batchFirst, mask, dx->t, dh0->t, dc0->t, dplist, &ws_size, &exec);
        printf("aclnnLstmBackwardGetWorkspaceSize: %d\n", s1);
        if (s1 == 0) {
            void *ws = nullptr;
            if (ws_size) aclrtMalloc(&ws, ws_size, ACL_MEM_MALLOC_HUGE_FIRST);
            s2 = aclnnLstmBackward(ws, ws_size, exec, stream);
            aclrtSynchronizeStream(stream);
            if (ws) aclrtFree(ws);
        }
        printf("aclnnLstmBackward: %d\n", s2);
    }
    fclose(in);
#ifdef FG_TWIN_COUNTERS
    printf("twin: gm_read %llu gm_write %llu cube_macs_useful %llu cube_macs_issued %llu l1_copies_beside_mte1 %llu\n",
           (unsigned long long)fg_twin::gm_read_bytes(), (unsigned long long)fg_twin::gm_write_bytes(),
           (unsigned long long)fg_twin::cube_macs_useful(), (unsigned long long)fg_twin::cube_macs_issued(),
           (unsigned long long)fg_twin::l1_copies_beside_mte1());
#endif
    for (Dev *d : outs) get(d, out);
    fclose(out);
    aclrtDestroyStream(stream);
    aclrtResetDevice(0);
    aclFinalize();
    return s1 == 0 && s2 == 0 ? 0 : 1;
}
