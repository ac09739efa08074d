/* The traffic driver of benchmarks/ascend_traffic.py: one aclnn operator (LayerNormBackward with FG_LN,
 * else ThnnFusedLstmCellBackward) of dtype FG_DTYPE on dense zero tensors of the two sizes given
 * (rows, row length), run through its two-phase API on the twin; prints the GM bytes read and written. */
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "kernel_operator.h"
#include "acl/acl.h"
#ifdef FG_LN
#include "aclnnop/aclnn_layer_norm_backward.h"
#else
#include "aclnnop/aclnn_thnn_fused_lstm_cell_backward.h"
#endif

static aclTensor *tensor(std::vector<int64_t> shape, aclDataType dt, void **ptr) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
    size_t bytes = (size_t)n * (dt == ACL_FLOAT ? 4 : 2);
    if (aclrtMalloc(ptr, bytes, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) exit(3);
    std::vector<uint8_t> zeros(bytes, 0);  // zeros: finite values, the traffic does not depend on them
    aclrtMemcpy(*ptr, bytes, zeros.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    return aclCreateTensor(shape.data(), shape.size(), dt, strides.data(), 0, ACL_FORMAT_ND, &n, 1, *ptr);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const int64_t a = atoll(argv[1]), b = atoll(argv[2]);
    const aclDataType dt = FG_DTYPE;
    aclInit(nullptr);
    aclrtSetDevice(0);
    aclrtStream stream;
    aclrtCreateStream(&stream);
    void *p[9];
    uint64_t ws_size = 0;
    aclOpExecutor *ex = nullptr;
    int s;
#ifdef FG_LN
    aclTensor *dy = tensor({a, b}, dt, &p[0]), *x = tensor({a, b}, dt, &p[1]);
    aclTensor *mean = tensor({a, 1}, dt, &p[2]), *rstd = tensor({a, 1}, dt, &p[3]);
    aclTensor *w = tensor({b}, dt, &p[4]), *dx = tensor({a, b}, dt, &p[5]);
    aclTensor *dw = tensor({b}, dt, &p[6]), *db = tensor({b}, dt, &p[7]);
    int64_t norm[1] = {b};
    bool mask[3] = {true, true, true};
    aclIntArray *ns = aclCreateIntArray(norm, 1);
    aclBoolArray *ms = aclCreateBoolArray(mask, 3);
    s = aclnnLayerNormBackwardGetWorkspaceSize(dy, x, ns, mean, rstd, w, nullptr, ms, dx, dw, db, &ws_size, &ex);
#else
    aclTensor *dhy = tensor({a, b}, dt, &p[0]), *dc = tensor({a, b}, dt, &p[1]);
    aclTensor *cx = tensor({a, b}, dt, &p[2]), *cy = tensor({a, b}, dt, &p[3]);
    aclTensor *st = tensor({a, 4 * b}, dt, &p[4]), *dg = tensor({a, 4 * b}, dt, &p[5]);
    aclTensor *dcx = tensor({a, b}, dt, &p[6]), *dbias = tensor({4 * b}, dt, &p[7]);
    s = aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(dhy, dc, cx, cy, st, true, dg, dcx, dbias, &ws_size, &ex);
#endif
    if (s != 0) return 4;
    void *ws = nullptr;
    aclrtMalloc(&ws, ws_size, ACL_MEM_MALLOC_HUGE_FIRST);
    fg_twin::gm_read_bytes() = fg_twin::gm_write_bytes() = 0;
#ifdef FG_LN
    s = aclnnLayerNormBackward(ws, ws_size, ex, stream);
#else
    s = aclnnThnnFusedLstmCellBackward(ws, ws_size, ex, stream);
#endif
    if (s != 0) return 5;
    aclrtSynchronizeStream(stream);  // the stream runs the kernels now
    printf("%llu %llu\n", (unsigned long long)fg_twin::gm_read_bytes(), (unsigned long long)fg_twin::gm_write_bytes());
    return 0;
}
