// A program written against CANN's documented aclnn API of LayerNorm backward
// (aclnnLayerNormBackward), as a user of CANN writes it: ACL init, device buffers, aclCreateTensor
// with strides, aclIntArray/aclBoolArray, the two-phase call, results copied back and printed.  It
// includes only CANN's headers; tests build it against the generated operator and the CPU twin of
// the runtime.
//
//   app fp32|fp16|bf16 STATS SHAPE NORM_NDIM HAS_WEIGHT MASK LAYOUT INPUTS
//       STATS       same (mean, rstd in the input's dtype) | fp32
//       SHAPE       the input's dims, comma-separated (2,3,5; any may be 0)
//       NORM_NDIM   j: normalizedShape is the input's trailing j dims (1..ndim)
//       HAS_WEIGHT  0 (weightOptional, biasOptional NULL) | 1 (both passed; bias is NaN, it is unused)
//       MASK        outputMask as three 0/1 chars (gradInput, gradWeight, gradBias); an output whose
//                   bit is 0 is passed as NULL and not printed
//       LAYOUT      dense | padded (input, gradOut, gradInputOut: the rows of the flattened [M, D]
//                   D + 3 elements apart) | strided (input, gradOut, gradInputOut with their first two
//                   dims swapped in memory; mean, rstd, weight, bias, gradWeightOut, gradBiasOut
//                   every other element; rank 1: everything every other element)
//       INPUTS      raw, in logical row-major order: gradOut, input, mean, rstd[, weight]
//     prints the two phases' statuses, grad_input / grad_weight / grad_bias (those asked for, in
//     logical row-major order), "inputs intact" when no input buffer was written, and for the padded
//     and strided layouts "gaps intact" when the output buffers' elements outside the views still
//     hold what the app wrote there before the call.  Storage outside the input views holds NaN.
//   app errors   every checked misuse and its status code
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_layer_norm_backward.h"

#define CHECK(call)                                                          \
    do {                                                                     \
        int ret_ = (int)(call);                                              \
        if (ret_ != 0) {                                                     \
            std::printf("%s failed: %d\n", #call, ret_);                     \
            std::exit(1);                                                    \
        }                                                                    \
    } while (0)

static const uint8_t GAP_IN = 0xFF;   // input storage outside the view: NaN in fp32 and fp16
static const uint8_t GAP_OUT = 0x7F;  // output storage before the call (padded, strided layouts)

static float half_to_float(uint16_t b) {  // the application's own conversion for printing
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

static size_t elem_size(aclDataType dt) {
    return dt == ACL_FLOAT16 || dt == ACL_BF16 ? 2 : dt == ACL_DOUBLE ? 8 : 4;
}

static int64_t product(const std::vector<int64_t> &dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

// row-major strides of `shape` with the innermost elements `step` apart (a dim of 0 counts as 1, as
// PyTorch's contiguous strides do)
static std::vector<int64_t> row_major(const std::vector<int64_t> &shape, int64_t step = 1) {
    std::vector<int64_t> s(shape.size());
    for (size_t i = shape.size(); i-- > 0;) {
        s[i] = step;
        step *= shape[i] > 0 ? shape[i] : 1;
    }
    return s;
}

// the storage offsets of a view's elements, in logical row-major order
static std::vector<int64_t> offsets(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides) {
    int64_t n = product(shape);
    std::vector<int64_t> out, idx(shape.size(), 0);
    out.reserve((size_t)n);
    for (int64_t k = 0; k < n; ++k) {
        int64_t off = 0;
        for (size_t i = 0; i < shape.size(); ++i) off += idx[i] * strides[i];
        out.push_back(off);
        for (size_t i = shape.size(); i-- > 0;) {
            if (++idx[i] < shape[i]) break;
            idx[i] = 0;
        }
    }
    return out;
}

struct Device {
    void *ptr = nullptr;
    aclTensor *tensor = nullptr;
    std::vector<int64_t> shape, strides;
    int64_t elems = 0;             // storage elements
    aclDataType dt = ACL_FLOAT;
    std::vector<uint8_t> before;   // the storage as written before the call (empty: not written)
};

// a tensor of `shape` with `strides` over `elems` elements of device memory.  host: its elements in
// logical row-major order, placed through the strides into storage otherwise filled with the byte
// `fill`; no host data and fill < 0: the memory is left as allocated
static Device make(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides, int64_t elems,
                   aclDataType dt, const void *host, int fill) {
    Device d;
    d.shape = shape;
    d.strides = strides;
    d.elems = elems;
    d.dt = dt;
    size_t e = elem_size(dt), bytes = (size_t)elems * e;
    CHECK(aclrtMalloc(&d.ptr, bytes ? bytes : e, ACL_MEM_MALLOC_HUGE_FIRST));  // size 0 is refused
    if (host || fill >= 0) {
        d.before.assign(bytes, (uint8_t)(fill >= 0 ? fill : 0));
        if (host) {
            std::vector<int64_t> off = offsets(shape, strides);
            for (size_t k = 0; k < off.size(); ++k)
                std::memcpy(d.before.data() + (size_t)off[k] * e, (const uint8_t *)host + k * e, e);
        }
        if (bytes) CHECK(aclrtMemcpy(d.ptr, bytes, d.before.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    }
    std::vector<int64_t> storage = {elems};
    d.tensor = aclCreateTensor(shape.data(), shape.size(), dt, strides.data(), 0, ACL_FORMAT_ND, storage.data(),
                               storage.size(), d.ptr);
    return d;
}

static void release(Device &d) {
    if (d.tensor) aclDestroyTensor(d.tensor);
    if (d.ptr) aclrtFree(d.ptr);
    d.tensor = nullptr;
    d.ptr = nullptr;
}

static std::vector<uint8_t> read_back(const Device &d) {
    size_t bytes = (size_t)d.elems * elem_size(d.dt);
    std::vector<uint8_t> host(bytes);
    if (bytes) CHECK(aclrtMemcpy(host.data(), bytes, d.ptr, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    return host;
}

static void print(const char *name, const Device &d) {
    std::vector<uint8_t> host = read_back(d);
    std::printf("%s", name);
    for (int64_t off : offsets(d.shape, d.strides)) {
        float v;
        if (d.dt == ACL_FLOAT16) {
            uint16_t b;
            std::memcpy(&b, host.data() + 2 * off, 2);
            v = half_to_float(b);
        } else if (d.dt == ACL_BF16) {  // the top half of a float
            uint16_t b;
            std::memcpy(&b, host.data() + 2 * off, 2);
            uint32_t u = (uint32_t)b << 16;
            std::memcpy(&v, &u, 4);
        } else {
            std::memcpy(&v, host.data() + 4 * off, 4);
        }
        std::printf(" %.9g", v);
    }
    std::printf("\n");
}

// no byte of d's storage has changed since it was written
static bool unchanged(const Device &d) { return d.ptr == nullptr || read_back(d) == d.before; }

// the elements of d's storage outside its view still hold what was written there before the call
static bool gaps_unchanged(const Device &d) {
    if (d.ptr == nullptr || d.before.empty()) return true;
    std::vector<uint8_t> now = read_back(d);
    std::vector<char> seen((size_t)d.elems, 0);
    for (int64_t off : offsets(d.shape, d.strides)) seen[(size_t)off] = 1;
    size_t e = elem_size(d.dt);
    for (size_t i = 0; i < seen.size(); ++i)
        if (!seen[i] && std::memcmp(now.data() + i * e, d.before.data() + i * e, e) != 0) return false;
    return true;
}

static bool parse_dims(const std::string &text, std::vector<int64_t> &dims) {
    size_t start = 0;
    while (true) {
        size_t end = text.find(',', start);
        std::string part = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return false;
        dims.push_back(atoll(part.c_str()));
        if (end == std::string::npos) return true;
        start = end + 1;
    }
}

static int usage() {
    std::printf("usage: app fp32|fp16|bf16 same|fp32 SHAPE NORM_NDIM 0|1 MASK dense|padded|strided INPUTS | app errors\n");
    return 2;
}

static int run(aclrtStream stream, char **argv) {
    const std::string p = argv[1], stats = argv[2], layout = argv[7], mask_text = argv[6], weight = argv[5];
    if ((p != "fp32" && p != "fp16" && p != "bf16") || (stats != "same" && stats != "fp32")) return usage();
    if (layout != "dense" && layout != "padded" && layout != "strided") return usage();
    if (weight != "0" && weight != "1") return usage();
    if (mask_text.size() != 3 || mask_text.find_first_not_of("01") != std::string::npos) return usage();
    const aclDataType dt = p == "fp16" ? ACL_FLOAT16 : p == "bf16" ? ACL_BF16 : ACL_FLOAT;
    const aclDataType sdt = stats == "fp32" ? ACL_FLOAT : dt;
    std::vector<int64_t> shape;
    if (!parse_dims(argv[3], shape)) return usage();
    const int64_t ndim = (int64_t)shape.size(), j = atoll(argv[4]);
    if (j < 1 || j > ndim) return usage();
    const bool has_weight = weight == "1";
    bool mask[3] = {mask_text[0] == '1', mask_text[1] == '1', mask_text[2] == '1'};

    // A = the leading dims, R = normalizedShape; the stats are [A..., 1 x j]
    std::vector<int64_t> lead(shape.begin(), shape.end() - j), norm(shape.end() - j, shape.end());
    std::vector<int64_t> stat_shape = lead;
    stat_shape.insert(stat_shape.end(), (size_t)j, 1);
    const int64_t M = product(lead), D = product(norm);
    const size_t e = elem_size(dt), se = elem_size(sdt);

    // the views' strides and storage sizes
    std::vector<int64_t> x_strides = row_major(shape), stat_strides = row_major(stat_shape), w_strides = row_major(norm);
    int64_t x_elems = M * D, stat_elems = M, w_elems = D;
    if (layout == "padded") {  // the A dims from a row pitch of D + 3, the R dims adjacent
        x_strides = row_major(lead, D + 3);
        std::vector<int64_t> inner = row_major(norm);
        x_strides.insert(x_strides.end(), inner.begin(), inner.end());
        x_elems = M * (D + 3);
    } else if (layout == "strided") {
        if (ndim == 1) {
            x_strides = {2};
            x_elems = 2 * D;
        } else {  // storage of the shape with dims 0 and 1 swapped, viewed as a transpose
            std::vector<int64_t> swapped = shape;
            std::swap(swapped[0], swapped[1]);
            x_strides = row_major(swapped);
            std::swap(x_strides[0], x_strides[1]);
        }
        stat_strides = row_major(stat_shape, 2);
        stat_elems = 2 * M;
        w_strides = row_major(norm, 2);
        w_elems = 2 * D;
    }

    const size_t want = 2 * (size_t)(M * D) * e + 2 * (size_t)M * se + (has_weight ? (size_t)D * e : 0);
    std::vector<uint8_t> in(want + 1);
    FILE *f = std::fopen(argv[8], "rb");
    size_t got = f ? std::fread(in.data(), 1, in.size(), f) : 0;
    if (f) std::fclose(f);
    if (got != want) {
        std::printf("INPUTS: %s holds %s%zu bytes, want %zu\n", argv[8], got > want ? "more than " : "",
                    got > want ? want : got, want);
        return 3;
    }
    const uint8_t *p_dy = in.data(), *p_x = p_dy + (size_t)(M * D) * e, *p_mean = p_x + (size_t)(M * D) * e;
    const uint8_t *p_rstd = p_mean + (size_t)M * se, *p_w = p_rstd + (size_t)M * se;

    Device dy = make(shape, x_strides, x_elems, dt, p_dy, GAP_IN);
    Device x = make(shape, x_strides, x_elems, dt, p_x, GAP_IN);
    Device mean = make(stat_shape, stat_strides, stat_elems, sdt, p_mean, GAP_IN);
    Device rstd = make(stat_shape, stat_strides, stat_elems, sdt, p_rstd, GAP_IN);
    Device w, b;
    if (has_weight) {
        std::vector<uint8_t> nan((size_t)D * e + 1, GAP_IN);  // bias is only validated: NaN shows any use
        w = make(norm, w_strides, w_elems, dt, p_w, GAP_IN);
        b = make(norm, w_strides, w_elems, dt, nan.data(), GAP_IN);
    }
    const int out_fill = layout == "dense" ? -1 : GAP_OUT;  // dense: left as allocated
    Device dx, dw, db;
    if (mask[0]) dx = make(shape, x_strides, x_elems, dt, nullptr, out_fill);
    if (mask[1]) dw = make(norm, w_strides, w_elems, dt, nullptr, out_fill);
    if (mask[2]) db = make(norm, w_strides, w_elems, dt, nullptr, out_fill);
    aclIntArray *normalized_shape = aclCreateIntArray(norm.data(), norm.size());
    aclBoolArray *output_mask = aclCreateBoolArray(mask, 3);

    uint64_t workspace_size = 0;
    aclOpExecutor *executor = nullptr;
    aclnnStatus s = aclnnLayerNormBackwardGetWorkspaceSize(dy.tensor, x.tensor, normalized_shape, mean.tensor,
                                                           rstd.tensor, w.tensor, b.tensor, output_mask, dx.tensor,
                                                           dw.tensor, db.tensor, &workspace_size, &executor);
    std::printf("GetWorkspaceSize: %d, workspace %llu bytes\n", (int)s, (unsigned long long)workspace_size);
    int rc = 0;
    void *workspace = nullptr;
    if (s != ACL_SUCCESS) {
        rc = 4;
    } else {
        if (workspace_size > 0) CHECK(aclrtMalloc(&workspace, workspace_size, ACL_MEM_MALLOC_HUGE_FIRST));
        s = aclnnLayerNormBackward(workspace, workspace_size, executor, stream);
        std::printf("LayerNormBackward: %d\n", (int)s);
        CHECK(aclrtSynchronizeStream(stream));
        if (s != ACL_SUCCESS) {
            rc = 5;
        } else {
            if (mask[0]) print("grad_input", dx);
            if (mask[1]) print("grad_weight", dw);
            if (mask[2]) print("grad_bias", db);
            bool intact = true;
            for (const Device *d : {&dy, &x, &mean, &rstd, &w, &b}) intact = intact && unchanged(*d);
            std::printf("inputs %s\n", intact ? "intact" : "modified");
            if (layout != "dense") {
                bool gaps = true;
                for (const Device *d : {&dx, &dw, &db}) gaps = gaps && gaps_unchanged(*d);
                std::printf("gaps %s\n", gaps ? "intact" : "clobbered");
            }
        }
    }
    if (workspace) CHECK(aclrtFree(workspace));
    aclDestroyIntArray(normalized_shape);
    aclDestroyBoolArray(output_mask);
    for (Device *d : {&dy, &x, &mean, &rstd, &w, &b, &dx, &dw, &db}) release(*d);
    return rc;
}

static int errors(aclrtStream stream) {
    // every misuse the operator reports, each with a tensor set that is otherwise right (the base case:
    // input, gradOut fp32 [2,3,4], normalizedShape [4], mean, rstd fp32 [2,3,1], weight, bias [4],
    // outputMask {1,1,1}, gradInputOut [2,3,4], gradWeightOut, gradBiasOut [4]).  First the calls that
    // must succeed (both phases), so that the misuses are known to fail for their own reason.
    const aclDataType F = ACL_FLOAT, H = ACL_FLOAT16;
    enum { DY, X, MEAN, RSTD, W, B, DX, DW, DB, ROLES };
    void *buf[ROLES];  // one zeroed buffer per tensor role, big enough for any view below (30 fp32)
    std::vector<uint8_t> zeros(128, 0);
    for (void *&p : buf) {
        CHECK(aclrtMalloc(&p, zeros.size(), ACL_MEM_MALLOC_HUGE_FIRST));
        CHECK(aclrtMemcpy(p, zeros.size(), zeros.data(), zeros.size(), ACL_MEMCPY_HOST_TO_DEVICE));
    }
    std::vector<aclTensor *> made;
    auto T = [&](std::vector<int64_t> shape, aclDataType dt, int role, std::vector<int64_t> strides = {}) {
        if (strides.empty()) strides = row_major(shape);
        std::vector<int64_t> storage = {product(shape)};
        made.push_back(aclCreateTensor(shape.data(), shape.size(), dt, strides.data(), 0, ACL_FORMAT_ND,
                                       storage.data(), storage.size(), buf[role]));
        return made.back();
    };
    const int64_t n4[] = {4}, n_long[] = {1, 2, 3, 4}, n_lead[] = {3};
    const bool all[] = {true, true, true}, first[] = {true, false, false};
    aclIntArray *norm = aclCreateIntArray(n4, 1), *norm_long = aclCreateIntArray(n_long, 4);
    aclIntArray *norm_empty = aclCreateIntArray(n4, 0), *norm_lead = aclCreateIntArray(n_lead, 1);
    aclBoolArray *mask = aclCreateBoolArray(all, 3), *mask2 = aclCreateBoolArray(all, 2);
    aclBoolArray *mask100 = aclCreateBoolArray(first, 3);
    uint64_t ws = 0;
    aclOpExecutor *ex = nullptr;

    struct Args {
        const aclTensor *dy, *x;
        const aclIntArray *norm;
        const aclTensor *mean, *rstd, *w, *b;
        const aclBoolArray *mask;
        aclTensor *dx, *dw, *db;
        uint64_t *ws;
        aclOpExecutor **ex;
    };
    const Args base = {T({2, 3, 4}, F, DY), T({2, 3, 4}, F, X), norm, T({2, 3, 1}, F, MEAN), T({2, 3, 1}, F, RSTD),
                       T({4}, F, W), T({4}, F, B), mask, T({2, 3, 4}, F, DX), T({4}, F, DW), T({4}, F, DB), &ws, &ex};
    auto phase_one = [](const Args &a) {
        return aclnnLayerNormBackwardGetWorkspaceSize(a.dy, a.x, a.norm, a.mean, a.rstd, a.w, a.b, a.mask, a.dx, a.dw,
                                                      a.db, a.ws, a.ex);
    };
    // the base case as `change` leaves it
    auto with = [&](auto change) {
        Args a = base;
        change(a);
        return a;
    };
    // the base case with gradOut, input, weight, bias and the outputs of dt, mean and rstd of sdt
    auto typed = [&](aclDataType dt, aclDataType sdt) {
        return with([&](Args &a) {
            a.dy = T({2, 3, 4}, dt, DY), a.x = T({2, 3, 4}, dt, X), a.w = T({4}, dt, W), a.b = T({4}, dt, B);
            a.mean = T({2, 3, 1}, sdt, MEAN), a.rstd = T({2, 3, 1}, sdt, RSTD);
            a.dx = T({2, 3, 4}, dt, DX), a.dw = T({4}, dt, DW), a.db = T({4}, dt, DB);
        });
    };
    // a call that must succeed: both phases, with a workspace of the size asked for; the first status
    // that is not 0
    auto both = [&](Args a) {
        uint64_t size = 0;
        aclOpExecutor *executor = nullptr;
        a.ws = &size, a.ex = &executor;
        aclnnStatus s = phase_one(a);
        if (s != ACL_SUCCESS) return s;
        void *workspace = nullptr;
        if (size > 0) CHECK(aclrtMalloc(&workspace, size, ACL_MEM_MALLOC_HUGE_FIRST));
        s = aclnnLayerNormBackward(workspace, size, executor, stream);
        CHECK(aclrtSynchronizeStream(stream));
        if (workspace) CHECK(aclrtFree(workspace));
        return s;
    };

    struct Case {
        const char *what;
        aclnnStatus got;
    };
    Case cases[] = {
        {"base case", both(base)},
        {"fp16 input with fp32 mean and rstd", both(typed(H, F))},
        {"bf16 input with fp32 mean and rstd", both(typed(ACL_BF16, F))},
        {"mean and rstd [2,3]", both(with([&](Args &a) { a.mean = T({2, 3}, F, MEAN), a.rstd = T({2, 3}, F, RSTD); }))},
        {"mask {1,0,0} with null gradWeightOut and gradBiasOut",
         both(with([&](Args &a) { a.mask = mask100, a.dw = nullptr, a.db = nullptr; }))},
        {"null gradOut", phase_one(with([](Args &a) { a.dy = nullptr; }))},
        {"null input", phase_one(with([](Args &a) { a.x = nullptr; }))},
        {"null normalizedShape", phase_one(with([](Args &a) { a.norm = nullptr; }))},
        {"null mean", phase_one(with([](Args &a) { a.mean = nullptr; }))},
        {"null rstd", phase_one(with([](Args &a) { a.rstd = nullptr; }))},
        {"null outputMask", phase_one(with([](Args &a) { a.mask = nullptr; }))},
        {"null gradInputOut with mask[0]", phase_one(with([](Args &a) { a.dx = nullptr; }))},
        {"null gradWeightOut with mask[1]", phase_one(with([](Args &a) { a.dw = nullptr; }))},
        {"null gradBiasOut with mask[2]", phase_one(with([](Args &a) { a.db = nullptr; }))},
        {"null workspaceSize", phase_one(with([](Args &a) { a.ws = nullptr; }))},
        {"null executor", phase_one(with([](Args &a) { a.ex = nullptr; }))},
        {"int32 input", phase_one(typed(ACL_INT32, ACL_INT32))},
        {"double input", phase_one(typed(ACL_DOUBLE, ACL_DOUBLE))},
        {"fp16 gradOut with fp32 input", phase_one(with([&](Args &a) { a.dy = T({2, 3, 4}, H, DY); }))},
        {"fp16 mean with fp32 input", phase_one(typed(F, H))},  // mean and rstd alike, narrower than the input
        {"fp16 mean and rstd with bf16 input", phase_one(typed(ACL_BF16, H))},  // as wide, but another type
        {"fp16 rstd with fp32 mean",  // fp16 input: either stats dtype alone would do
         phase_one(with([&](Args &a) { a = typed(H, F), a.rstd = T({2, 3, 1}, H, RSTD); }))},
        {"normalizedShape longer than input", phase_one(with([&](Args &a) { a.norm = norm_long; }))},
        {"empty normalizedShape", phase_one(with([&](Args &a) { a.norm = norm_empty; }))},
        {"normalizedShape not the trailing dims", phase_one(with([&](Args &a) { a.norm = norm_lead; }))},
        {"outputMask of 2", phase_one(with([&](Args &a) { a.mask = mask2; }))},
        {"gradOut [2,3,5]", phase_one(with([&](Args &a) { a.dy = T({2, 3, 5}, F, DY); }))},
        {"mean [3,2,1]", phase_one(with([&](Args &a) { a.mean = T({3, 2, 1}, F, MEAN); }))},
        {"weight [5]", phase_one(with([&](Args &a) { a.w = T({5}, F, W); }))},
        {"gradInputOut [2,3,5]", phase_one(with([&](Args &a) { a.dx = T({2, 3, 5}, F, DX); }))},
        {"gradWeightOut fp16", phase_one(with([&](Args &a) { a.dw = T({4}, H, DW); }))},
        {"gradInputOut elements overlap", phase_one(with([&](Args &a) { a.dx = T({2, 3, 4}, F, DX, {0, 0, 0}); }))},
        {"null executor in phase two", aclnnLayerNormBackward(nullptr, 0, nullptr, stream)},
    };
    for (const Case &c : cases) std::printf("%s: %d\n", c.what, (int)c.got);

    // phase two told one byte less than phase one asked for (the buffer itself is big enough)
    ws = 0, ex = nullptr;
    aclnnStatus s = phase_one(base);
    void *workspace = nullptr;
    if (s != ACL_SUCCESS) {
        std::printf("workspace too small in phase two: phase one %d\n", (int)s);
    } else if (ws == 0) {
        std::printf("workspace too small in phase two: no workspace\n");
        (void)aclnnLayerNormBackward(nullptr, 0, ex, stream);  // the executor used up
        CHECK(aclrtSynchronizeStream(stream));
    } else {
        CHECK(aclrtMalloc(&workspace, ws, ACL_MEM_MALLOC_HUGE_FIRST));
        s = aclnnLayerNormBackward(workspace, ws - 1, ex, stream);
        std::printf("workspace too small in phase two: %d\n", (int)s);
        CHECK(aclrtSynchronizeStream(stream));
        CHECK(aclrtFree(workspace));
    }

    for (aclTensor *t : made) aclDestroyTensor(t);
    for (const aclIntArray *a : {norm, norm_long, norm_empty, norm_lead}) aclDestroyIntArray(a);
    for (const aclBoolArray *a : {mask, mask2, mask100}) aclDestroyBoolArray(a);
    for (void *p : buf) CHECK(aclrtFree(p));
    return 0;
}

int main(int argc, char **argv) {
    CHECK(aclInit(nullptr));
    CHECK(aclrtSetDevice(0));
    aclrtStream stream = nullptr;
    CHECK(aclrtCreateStream(&stream));
    int rc;
    if (argc == 2 && std::string(argv[1]) == "errors")
        rc = errors(stream);
    else if (argc == 9)
        rc = run(stream, argv);
    else
        rc = usage();
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    return rc;
}
