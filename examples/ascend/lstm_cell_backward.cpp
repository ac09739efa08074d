// Calling example of fusedgrad's aclnnThnnFusedLstmCellBackward (package
// generated/ascend/lstm_cell_backward): one LSTM cell's backward for N = 5 rows of H = 7 units, on the
// state of a cell forward from random gates and cx, with random dhy and dc.  gradGates, gradCx and
// gradBias are checked against a float64 reference computed here.
//
// Build against the installed package (cmake --install <build> --prefix <dir>):
//   g++ -std=c++17 lstm_cell_backward.cpp -I<CANN>/include -I<dir>/include -L<dir>/lib -lfg_lstm_cell_backward
//       -L<CANN>/lib64 -lascendcl -lnnopbase -Wl,-rpath,<dir>/lib -o lstm_cell_backward
// ./lstm_cell_backward prints the largest error of each output and exits 1 when one is past its
// tolerance; ./lstm_cell_backward --perturb-reference moves one cx in the reference only, so it must exit 1.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_thnn_fused_lstm_cell_backward.h"

#define CHECK_RET(cond, return_expr) do { if (!(cond)) { return_expr; } } while (0)
#define LOG_PRINT(message, ...) do { printf(message, ##__VA_ARGS__); } while (0)

namespace {

const int64_t N = 5, H = 7;
const double TOLERANCE = 1e-5;  // of max(1, |reference|): float32 arithmetic against float64

// uniform in [lo, hi) from a 64-bit LCG with a fixed seed: the same values on every machine
float Uniform(uint64_t &state, float lo, float hi) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (float)((double)(state >> 40) / 16777216.0);
}

int64_t GetShapeSize(const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
}

// a contiguous float32 tensor of `shape` in device memory holding `host`
int CreateAclTensor(const std::vector<float> &host, const std::vector<int64_t> &shape, void **deviceAddr,
                    aclTensor **tensor) {
    const size_t bytes = (size_t)GetShapeSize(shape) * sizeof(float);
    auto ret = aclrtMalloc(deviceAddr, bytes, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
    ret = aclrtMemcpy(*deviceAddr, bytes, host.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
    std::vector<int64_t> strides(shape.size(), 1);
    for (int64_t k = (int64_t)shape.size() - 2; k >= 0; --k) strides[k] = strides[k + 1] * shape[k + 1];
    *tensor = aclCreateTensor(shape.data(), shape.size(), ACL_FLOAT, strides.data(), 0, ACL_FORMAT_ND, shape.data(),
                              shape.size(), *deviceAddr);
    return 0;
}

// prints the largest |got - want| of one output; false when it is past the tolerance (or not finite)
bool Compare(const char *name, const void *deviceAddr, const std::vector<double> &want) {
    std::vector<float> got(want.size());
    const size_t bytes = got.size() * sizeof(float);
    auto ret = aclrtMemcpy(got.data(), bytes, deviceAddr, bytes, ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return false);
    double err = 0, scale = 1;
    for (size_t k = 0; k < got.size(); ++k) {
        err = std::isfinite(got[k]) ? std::fmax(err, std::fabs(got[k] - want[k])) : INFINITY;
        scale = std::fmax(scale, std::fabs(want[k]));
    }
    LOG_PRINT("%-10s max |error| %.3e  tolerance %.3e\n", name, err, TOLERANCE * scale);
    return err <= TOLERANCE * scale;
}

}  // namespace

int main(int argc, char **argv) {
    const bool perturb = argc > 1 && strcmp(argv[1], "--perturb-reference") == 0;
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = aclInit(nullptr);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
    ret = aclrtSetDevice(deviceId);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
    ret = aclrtCreateStream(&stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);

    // a cell forward from random pre-activations in [-2, 2) and cx in [-1, 1): storage holds the
    // activated gates i, f, g, o (sigmoid, sigmoid, tanh, sigmoid) in [N, 4H], cy = f * cx + i * g
    uint64_t seed = 20261206;
    std::vector<float> cx(N * H), cy(N * H), storage(N * 4 * H), dhy(N * H), dc(N * H);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < H; ++j) {
            float *gate = &storage[n * 4 * H + j];
            for (int q = 0; q < 4; ++q) {
                const float a = Uniform(seed, -2, 2);
                gate[q * H] = q == 2 ? std::tanh(a) : 1 / (1 + std::exp(-a));
            }
            cx[n * H + j] = Uniform(seed, -1, 1);
            cy[n * H + j] = gate[H] * cx[n * H + j] + gate[0] * gate[2 * H];
            dhy[n * H + j] = Uniform(seed, -1, 1);
            dc[n * H + j] = Uniform(seed, -1, 1);
        }

    const std::vector<int64_t> state = {N, H}, gates = {N, 4 * H}, bias = {4 * H};
    void *addr[8] = {};  // dhy, dc, cx, cy, storage; gradGates, gradCx, gradBias
    aclTensor *tensor[8] = {};
    const std::vector<float> zeros(N * 4 * H, 0.0f);
    bool made = CreateAclTensor(dhy, state, &addr[0], &tensor[0]) == 0 &&
                CreateAclTensor(dc, state, &addr[1], &tensor[1]) == 0 &&
                CreateAclTensor(cx, state, &addr[2], &tensor[2]) == 0 &&
                CreateAclTensor(cy, state, &addr[3], &tensor[3]) == 0 &&
                CreateAclTensor(storage, gates, &addr[4], &tensor[4]) == 0 &&
                CreateAclTensor(zeros, gates, &addr[5], &tensor[5]) == 0 &&
                CreateAclTensor(zeros, state, &addr[6], &tensor[6]) == 0 &&
                CreateAclTensor(zeros, bias, &addr[7], &tensor[7]) == 0;
    CHECK_RET(made, return 1);

    // the two phases: check and plan, then queue on the stream
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor = nullptr;
    ret = aclnnThnnFusedLstmCellBackwardGetWorkspaceSize(tensor[0], tensor[1], tensor[2], tensor[3], tensor[4], true,
                                                         tensor[5], tensor[6], tensor[7], &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS,
              LOG_PRINT("aclnnThnnFusedLstmCellBackwardGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspace = nullptr;
    if (workspaceSize > 0) {
        ret = aclrtMalloc(&workspace, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
        CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
    }
    ret = aclnnThnnFusedLstmCellBackward(workspace, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnThnnFusedLstmCellBackward failed. ERROR: %d\n", ret); return ret);
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // the float64 reference: dc_t = dc + dhy * o * (1 - tanh(cy)^2), then each gate's pre-activation
    // gradient; gradCx = dc_t * f, gradBias the sum of gradGates over the rows
    if (perturb) cx[0] += 0.1f;
    std::vector<double> gradGates(N * 4 * H), gradCx(N * H), gradBias(4 * H, 0.0);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < H; ++j) {
            const float *gate = &storage[n * 4 * H + j];
            const double i = gate[0], f = gate[H], g = gate[2 * H], o = gate[3 * H];
            const double tc = std::tanh((double)cy[n * H + j]);
            const double dct = dc[n * H + j] + dhy[n * H + j] * o * (1 - tc * tc);
            const double d[4] = {dct * g * i * (1 - i), dct * cx[n * H + j] * f * (1 - f), dct * i * (1 - g * g),
                                 dhy[n * H + j] * tc * o * (1 - o)};
            for (int q = 0; q < 4; ++q) {
                gradGates[n * 4 * H + q * H + j] = d[q];
                gradBias[q * H + j] += d[q];
            }
            gradCx[n * H + j] = dct * f;
        }

    const bool pass = Compare("grad_gates", addr[5], gradGates) & Compare("grad_cx", addr[6], gradCx) &
                      Compare("grad_bias", addr[7], gradBias);
    LOG_PRINT("%s\n", pass ? "every output within tolerance" : "FAILED: an output is past its tolerance");

    for (int k = 0; k < 8; ++k) {
        aclDestroyTensor(tensor[k]);
        aclrtFree(addr[k]);
    }
    if (workspace != nullptr) aclrtFree(workspace);
    aclrtDestroyStream(stream);
    aclrtResetDevice(deviceId);
    aclFinalize();
    return pass ? 0 : 1;
}
