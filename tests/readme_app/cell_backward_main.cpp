// Calls README.md's aclnn example, cell_backward (compiled beside this file from README's C++ block),
// on the CPU twin of CANN: float32 inputs read from a file into device tensors, the outputs written to
// another, for tests/test_readme.py.
//
//   main N H IN OUT   IN: grad_hy, grad_cy, cx, cy [N, H], storage [N, 4H], raw float32
//                     OUT: grad_gates [N, 4H], grad_cx [N, H], grad_bias [4H]; prints cell_backward's status
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_thnn_fused_lstm_cell_backward.h"

aclnnStatus cell_backward(const aclTensor *dhy, const aclTensor *dcy, const aclTensor *cx, const aclTensor *cy,
                          const aclTensor *storage, aclTensor *dgates, aclTensor *dcx, aclTensor *dbias,
                          aclrtStream stream);

struct Device {
    void *ptr = nullptr;
    aclTensor *tensor = nullptr;
};

// a dense tensor of `shape` in device memory, from `host` floats when given
static Device make(std::vector<int64_t> shape, const float *host) {
    Device d;
    int64_t elems = 1;
    for (int64_t s : shape) elems *= s;
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t i = shape.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * shape[i];
    size_t bytes = (size_t)elems * sizeof(float);
    if (aclrtMalloc(&d.ptr, bytes, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) std::exit(101);
    if (host && aclrtMemcpy(d.ptr, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE) != ACL_SUCCESS) std::exit(102);
    std::vector<int64_t> storage = {elems};
    d.tensor = aclCreateTensor(shape.data(), shape.size(), ACL_FLOAT, strides.data(), 0, ACL_FORMAT_ND,
                               storage.data(), storage.size(), d.ptr);
    return d;
}

static void copy_out(const Device &d, size_t elems, std::vector<float> &out) {
    size_t at = out.size(), bytes = elems * sizeof(float);
    out.resize(at + elems);
    if (aclrtMemcpy(out.data() + at, bytes, d.ptr, bytes, ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS) std::exit(103);
}

int main(int argc, char **argv) {
    if (argc != 5) return 100;
    const int64_t N = std::atoll(argv[1]), H = std::atoll(argv[2]);
    std::vector<float> in((size_t)(8 * N * H));
    FILE *f = std::fopen(argv[3], "rb");
    if (!f || std::fread(in.data(), sizeof(float), in.size(), f) != in.size()) return 104;
    std::fclose(f);
    if (aclInit(nullptr) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) return 105;
    aclrtStream stream = nullptr;
    if (aclrtCreateStream(&stream) != ACL_SUCCESS) return 106;
    const float *p = in.data();
    Device dhy = make({N, H}, p), dcy = make({N, H}, p + N * H), cx = make({N, H}, p + 2 * N * H);
    Device cy = make({N, H}, p + 3 * N * H), storage = make({N, 4 * H}, p + 4 * N * H);
    Device dgates = make({N, 4 * H}, nullptr), dcx = make({N, H}, nullptr), dbias = make({4 * H}, nullptr);
    aclnnStatus status = cell_backward(dhy.tensor, dcy.tensor, cx.tensor, cy.tensor, storage.tensor, dgates.tensor,
                                       dcx.tensor, dbias.tensor, stream);
    std::printf("cell_backward: %d\n", (int)status);
    std::vector<float> out;
    copy_out(dgates, (size_t)(4 * N * H), out);
    copy_out(dcx, (size_t)(N * H), out);
    copy_out(dbias, (size_t)(4 * H), out);
    f = std::fopen(argv[4], "wb");
    if (!f || std::fwrite(out.data(), sizeof(float), out.size(), f) != out.size()) return 107;
    std::fclose(f);
    for (Device *d : {&dhy, &dcy, &cx, &cy, &storage, &dgates, &dcx, &dbias}) {
        aclDestroyTensor(d->tensor);
        aclrtFree(d->ptr);
    }
    aclrtDestroyStream(stream);
    aclrtResetDevice(0);
    aclFinalize();
    return 0;
}
