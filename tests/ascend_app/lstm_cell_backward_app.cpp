// A program written against the documented aclnn API of ThnnFusedLstmCellGrad, as a user of CANN
// writes it: ACL init, device buffers, aclCreateTensor with strides, the two-phase call, results
// copied back and printed.  It includes only CANN's headers; tests build it against the generated
// operator and the CPU twin of the runtime.
//
//   app fp32|fp16|bf16 N H PAD HAS_HY HAS_DC HAS_BIAS INPUTS   inputs: raw rows of H + PAD ([N, 4H]: 4H + PAD);
//                                                         PAD -1: cx, cy column-major (see below)
//   app errors                                              every checked misuse and its status code
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_thnn_fused_lstm_cell_backward.h"

#define CHECK(call)                                                          \
    do {                                                                     \
        int ret_ = (int)(call);                                              \
        if (ret_ != 0) {                                                     \
            std::printf("%s failed: %d\n", #call, ret_);                     \
            std::exit(1);                                                    \
        }                                                                    \
    } while (0)

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

static size_t elem_size(aclDataType dt) { return dt == ACL_FLOAT16 || dt == ACL_BF16 ? 2 : 4; }

struct Device {
    void *ptr = nullptr;
    aclTensor *tensor = nullptr;
};

// a tensor of `shape` with `strides` over `elems` elements of device memory, from host bytes
static Device make_strided(std::vector<int64_t> shape, std::vector<int64_t> strides, int64_t elems, aclDataType dt,
                           const void *host) {
    Device d;
    size_t elem = elem_size(dt), bytes = (size_t)elems * elem;
    CHECK(aclrtMalloc(&d.ptr, bytes ? bytes : elem, ACL_MEM_MALLOC_HUGE_FIRST));
    if (host) CHECK(aclrtMemcpy(d.ptr, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
    std::vector<int64_t> storage = {elems};
    d.tensor = aclCreateTensor(shape.data(), shape.size(), dt, strides.data(), 0, ACL_FORMAT_ND, storage.data(),
                               storage.size(), d.ptr);
    return d;
}

// a [rows, cols] tensor whose rows are `stride` elements apart ([cols]: adjacent elements)
static Device make(std::vector<int64_t> shape, int64_t stride, aclDataType dt, const void *host) {
    int64_t rows = shape.size() == 2 ? shape[0] : 1;
    std::vector<int64_t> strides = shape.size() == 2 ? std::vector<int64_t>{stride, 1} : std::vector<int64_t>{1};
    return make_strided(shape, strides, rows * stride, dt, host);
}

static void release(Device &d) {
    if (d.tensor) aclDestroyTensor(d.tensor);
    if (d.ptr) aclrtFree(d.ptr);
}

static void print(const char *name, const Device &d, int64_t rows, int64_t cols, int64_t stride, aclDataType dt,
                  int64_t col_stride = 1, int64_t elems = -1) {
    size_t elem = elem_size(dt), bytes = (size_t)(elems >= 0 ? elems : rows * stride) * elem;
    std::vector<uint8_t> host(bytes ? bytes : 1);
    CHECK(aclrtMemcpy(host.data(), bytes, d.ptr, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
    std::printf("%s", name);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            size_t i = (size_t)(r * stride + c * col_stride);
            float v;
            if (dt == ACL_FLOAT16) {
                uint16_t b;
                std::memcpy(&b, host.data() + 2 * i, 2);
                v = half_to_float(b);
            } else if (dt == ACL_BF16) {  // the top half of a float
                uint16_t b;
                std::memcpy(&b, host.data() + 2 * i, 2);
                uint32_t u = (uint32_t)b << 16;
                std::memcpy(&v, &u, 4);
            } else {
                std::memcpy(&v, host.data() + 4 * i, 4);
            }
            std::printf(" %.9g", v);
        }
    std::printf("\n");
}

static int errors() {
    // every misuse the first phase reports, with a tensor set that is otherwise right
    const int64_t N = 2, H = 3;
    std::vector<float> zeros(64, 0.0f);
    Device cx = make({N, H}, H, ACL_FLOAT, zeros.data()), cy = make({N, H}, H, ACL_FLOAT, zeros.data());
    Device st = make({N, 4 * H}, 4 * H, ACL_FLOAT, zeros.data()), g = make({N, 4 * H}, 4 * H, ACL_FLOAT, nullptr);
    Device dcx = make({N, H}, H, ACL_FLOAT, nullptr), db = make({4 * H}, 4 * H, ACL_FLOAT, nullptr);
    Device half_cy = make({N, H}, H, ACL_FLOAT16, zeros.data()), int_cx = make({N, H}, H, ACL_INT32, zeros.data());
    Device wide = make({N, H + 1}, H + 1, ACL_FLOAT, zeros.data()), bias5 = make({5}, 5, ACL_FLOAT, nullptr);
    int64_t shape[2] = {N, H}, overlapping[2] = {0, 1}, storage[1] = {N * H};
    aclTensor *gapped = aclCreateTensor(shape, 2, ACL_FLOAT, overlapping, 0, ACL_FORMAT_ND, storage, 1, dcx.ptr);
    uint64_t ws = 0;
    aclOpExecutor *ex = nullptr;
    struct Case { const char *what; aclnnStatus got; };
    Case cases[] = {
        {"null cx", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, nullptr, cy.tensor, st.tensor, true, g.tensor, dcx.tensor, db.tensor, &ws, &ex)},
        {"null storage", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, cx.tensor, cy.tensor, nullptr, true, g.tensor, dcx.tensor, db.tensor, &ws, &ex)},
        {"null gradGatesOut", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, cx.tensor, cy.tensor, st.tensor, true, nullptr, dcx.tensor, db.tensor, &ws, &ex)},
        {"null gradBiasOut with hasBias", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, cx.tensor, cy.tensor, st.tensor, true, g.tensor, dcx.tensor, nullptr, &ws, &ex)},
        {"null executor", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, cx.tensor, cy.tensor, st.tensor, true, g.tensor, dcx.tensor, db.tensor, &ws, nullptr)},
        {"int32 cx", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, int_cx.tensor, cy.tensor, st.tensor, true, g.tensor, dcx.tensor, db.tensor, &ws, &ex)},
        {"mixed dtypes", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, cx.tensor, half_cy.tensor, st.tensor, true, g.tensor, dcx.tensor, db.tensor, &ws, &ex)},
        {"cy [N, H+1]", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, cx.tensor, wide.tensor, st.tensor, true, g.tensor, dcx.tensor, db.tensor, &ws, &ex)},
        {"storage [N, H]", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, cx.tensor, cy.tensor, cy.tensor, true, g.tensor, dcx.tensor, db.tensor, &ws, &ex)},
        {"gradBiasOut [5]", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, cx.tensor, cy.tensor, st.tensor, true, g.tensor, dcx.tensor, bias5.tensor, &ws, &ex)},
        {"gradHy [N, H+1]", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(wide.tensor, nullptr, cx.tensor, cy.tensor, st.tensor, true, g.tensor, dcx.tensor, db.tensor, &ws, &ex)},
        {"gradCxOut rows on top of each other", aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(nullptr, nullptr, cx.tensor, cy.tensor, st.tensor, true, g.tensor, gapped, db.tensor, &ws, &ex)},
        {"null executor in phase two", aclnnThnnFusedLstmCellBackward(nullptr, 0, nullptr, nullptr)},
    };
    for (const Case &c : cases) std::printf("%s: %d\n", c.what, (int)c.got);
    aclDestroyTensor(gapped);
    for (Device *d : {&cx, &cy, &st, &g, &dcx, &db, &half_cy, &int_cx, &wide, &bias5}) release(*d);
    return 0;
}

int main(int argc, char **argv) {
    CHECK(aclInit(nullptr));
    CHECK(aclrtSetDevice(0));
    aclrtStream stream = nullptr;
    CHECK(aclrtCreateStream(&stream));
    int rc = 0;
    if (argc == 2 && std::string(argv[1]) == "errors") {
        rc = errors();
    } else if (argc == 9) {
        const std::string prec = argv[1];
        aclDataType dt = prec == "fp16" ? ACL_FLOAT16 : prec == "bf16" ? ACL_BF16 : ACL_FLOAT;
        int64_t N = atoll(argv[2]), H = atoll(argv[3]), pad = atoll(argv[4]);
        bool has_hy = atoi(argv[5]), has_dc = atoi(argv[6]), has_bias = atoi(argv[7]);
        const int64_t rp = pad < 0 ? 0 : pad;  // row padding (none for the column-major case)
        size_t elem = elem_size(dt), row = (size_t)(N * (H + rp)) * elem, row4 = (size_t)(N * (4 * H + rp)) * elem;
        std::vector<uint8_t> in((has_hy + has_dc + 2) * row + row4 + 1);
        FILE *f = std::fopen(argv[8], "rb");
        size_t got = std::fread(in.data(), 1, in.size() - 1, f);
        std::fclose(f);
        if (got != in.size() - 1) return 3;
        const uint8_t *p = in.data();
        Device hy, dc;
        if (has_hy) { hy = make({N, H}, H + rp, dt, p); p += row; }
        if (has_dc) { dc = make({N, H}, H + rp, dt, p); p += row; }
        // PAD -1: cx, cy, grad_cx and grad_gates column-major (input bytes in that order), grad_bias every
        // other element: none of their elements adjacent
        const bool cm = pad < 0;
        Device cx = cm ? make_strided({N, H}, {1, N}, N * H, dt, p) : make({N, H}, H + pad, dt, p);
        Device cy = cm ? make_strided({N, H}, {1, N}, N * H, dt, p + row) : make({N, H}, H + pad, dt, p + row);
        Device st = make({N, 4 * H}, 4 * H + (cm ? 0 : pad), dt, p + 2 * row);
        Device g = cm ? make_strided({N, 4 * H}, {1, N}, 4 * N * H, dt, nullptr) : make({N, 4 * H}, 4 * H + pad, dt, nullptr);
        Device dcx = cm ? make_strided({N, H}, {1, N}, N * H, dt, nullptr) : make({N, H}, H + pad, dt, nullptr);
        Device db = cm ? make_strided({4 * H}, {2}, 8 * H, dt, nullptr) : make({4 * H}, 4 * H, dt, nullptr);

        uint64_t workspace_size = 0;
        aclOpExecutor *executor = nullptr;
        aclnnStatus s = aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(
            hy.tensor, dc.tensor, cx.tensor, cy.tensor, st.tensor, has_bias, g.tensor, dcx.tensor,
            has_bias ? db.tensor : nullptr, &workspace_size, &executor);
        std::printf("GetWorkspaceSize: %d, workspace %llu bytes\n", (int)s, (unsigned long long)workspace_size);
        if (s != ACL_SUCCESS) return 4;
        void *workspace = nullptr;
        if (workspace_size > 0) CHECK(aclrtMalloc(&workspace, workspace_size, ACL_MEM_MALLOC_HUGE_FIRST));
        s = aclnnThnnFusedLstmCellBackward(workspace, workspace_size, executor, stream);
        std::printf("ThnnFusedLstmCellBackward: %d\n", (int)s);
        CHECK(aclrtSynchronizeStream(stream));
        if (cm) {
            print("grad_gates", g, N, 4 * H, 1, dt, N, 4 * N * H);
            print("grad_cx", dcx, N, H, 1, dt, N, N * H);
            if (has_bias) print("grad_bias", db, 1, 4 * H, 0, dt, 2, 8 * H);
        } else {
            print("grad_gates", g, N, 4 * H, 4 * H + pad, dt);
            print("grad_cx", dcx, N, H, H + pad, dt);
            if (has_bias) print("grad_bias", db, 1, 4 * H, 4 * H, dt);
        }
        if (workspace) aclrtFree(workspace);
        for (Device *d : {&hy, &dc, &cx, &cy, &st, &g, &dcx, &db}) release(*d);
    } else {
        std::printf("usage: app fp32|fp16|bf16 N H PAD HAS_HY HAS_DC HAS_BIAS INPUTS | app errors\n");
        rc = 2;
    }
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    return rc;
}
