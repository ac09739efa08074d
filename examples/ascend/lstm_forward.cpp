// Calling example of fusedgrad's aclnnLSTM (package generated/ascend/lstm): a 2-layer bidirectional
// LSTM forward with train = true and a given hx, on random inputs and weights, every output checked
// against a float64 reference computed here in plain loops.
//
// Build against the installed package (cmake --install <build> --prefix <dir>):
//   g++ -std=c++17 lstm_forward.cpp -I<CANN>/include -I<dir>/include -L<dir>/lib -lfg_lstm
//       -L<CANN>/lib64 -lascendcl -lnnopbase -Wl,-rpath,<dir>/lib -o lstm_forward
// ./lstm_forward prints the largest error of each output and exits 1 when one is past its tolerance;
// ./lstm_forward --perturb-reference moves one weight in the reference only, so it must exit 1.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_lstm.h"

#define CHECK_RET(cond, return_expr) do { if (!(cond)) { return_expr; } } while (0)
#define LOG_PRINT(message, ...) do { printf(message, ##__VA_ARGS__); } while (0)

namespace {

const int64_t T = 5, B = 3, I = 6, H = 8, L = 2, D = 2;  // steps, batch, input size, hidden size, layers, directions
const int64_t LD = L * D;
const double TOLERANCE = 1e-5;  // of max(1, |reference|): float32 arithmetic against float64

// uniform in [lo, hi) from a 64-bit LCG with a fixed seed: the same values on every machine
struct Random {
    uint64_t state = 20261206;
    std::vector<float> Uniform(int64_t n, float lo, float hi) {
        std::vector<float> v((size_t)n);
        for (float &x : v) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            x = lo + (hi - lo) * (float)((double)(state >> 40) / 16777216.0);
        }
        return v;
    }
};

struct DeviceTensor {
    void *addr = nullptr;
    aclTensor *tensor = nullptr;
    int64_t size = 0;
};

int Init(int32_t deviceId, aclrtStream *stream) {
    auto ret = aclInit(nullptr);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclInit failed. ERROR: %d\n", ret); return ret);
    ret = aclrtSetDevice(deviceId);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSetDevice failed. ERROR: %d\n", ret); return ret);
    ret = aclrtCreateStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtCreateStream failed. ERROR: %d\n", ret); return ret);
    return 0;
}

// a contiguous float32 tensor of `shape` in device memory, holding `host` (an output: zeros)
int CreateAclTensor(const std::vector<int64_t> &shape, const std::vector<float> &host, DeviceTensor *t) {
    t->size = 1;
    for (int64_t n : shape) t->size *= n;
    std::vector<float> data = host.empty() ? std::vector<float>((size_t)t->size, 0.0f) : host;
    size_t bytes = (size_t)t->size * sizeof(float);
    auto ret = aclrtMalloc(&t->addr, bytes, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
    ret = aclrtMemcpy(t->addr, bytes, data.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
    std::vector<int64_t> strides(shape.size(), 1);
    for (int64_t k = (int64_t)shape.size() - 2; k >= 0; --k) strides[k] = strides[k + 1] * shape[k + 1];
    t->tensor = aclCreateTensor(shape.data(), shape.size(), ACL_FLOAT, strides.data(), 0, ACL_FORMAT_ND, shape.data(),
                                shape.size(), t->addr);
    return 0;
}

std::vector<float> ToHost(const DeviceTensor &t) {
    std::vector<float> host((size_t)t.size);
    size_t bytes = host.size() * sizeof(float);
    auto ret = aclrtMemcpy(host.data(), bytes, t.addr, bytes, ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret));
    return host;
}

aclTensorList *ListOf(const std::vector<DeviceTensor> &v) {
    std::vector<const aclTensor *> t;
    for (const DeviceTensor &d : v) t.push_back(d.tensor);
    return aclCreateTensorList(t.data(), t.size());
}

// The reference: one layer and direction over the sequence (reverse: t = T-1 down to 0) from x [T, B, in],
// writing its H columns of y [T, B, D*H], saved[0..6] (i, g, f, o activated, h, c, tanh(c): the API's
// lists' order, each [T, B, H]) and the last state.  params[0..3]: w_ih [4H, in], w_hh [4H, H], b_ih, b_hh [4H]; rows
// in the gate order i, f, g, o.
void ReferenceLayer(const std::vector<double> &x, int64_t in, const std::vector<float> *params, bool reverse,
                    const float *h0, const float *c0, std::vector<double> &y, std::vector<double> saved[7],
                    double *hy, double *cy) {
    std::vector<double> h(h0, h0 + B * H), c(c0, c0 + B * H), next(B * H);
    for (auto *s = saved; s != saved + 7; ++s) s->assign((size_t)(T * B * H), 0.0);
    for (int64_t step = 0; step < T; ++step) {
        const int64_t t = reverse ? T - 1 - step : step;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t j = 0; j < H; ++j) {
                double a[4];  // pre-activations of i, f, g, o
                for (int64_t q = 0; q < 4; ++q) {
                    const int64_t r = q * H + j;
                    double sum = (double)params[2][r] + params[3][r];
                    for (int64_t k = 0; k < in; ++k) sum += (double)params[0][r * in + k] * x[(t * B + b) * in + k];
                    for (int64_t k = 0; k < H; ++k) sum += (double)params[1][r * H + k] * h[b * H + k];
                    a[q] = sum;
                }
                const double gi = 1 / (1 + std::exp(-a[0])), gf = 1 / (1 + std::exp(-a[1])), gg = std::tanh(a[2]),
                             go = 1 / (1 + std::exp(-a[3]));
                const int64_t e = (t * B + b) * H + j;
                c[b * H + j] = gf * c[b * H + j] + gi * gg;
                const double tc = std::tanh(c[b * H + j]);
                next[b * H + j] = go * tc;
                const double values[7] = {gi, gg, gf, go, go * tc, c[b * H + j], tc};
                for (int k = 0; k < 7; ++k) saved[k][e] = values[k];
                y[(t * B + b) * D * H + (reverse ? H : 0) + j] = go * tc;
            }
        h = next;
    }
    for (int64_t e = 0; e < B * H; ++e) hy[e] = h[e], cy[e] = c[e];
}

// prints the largest |got - want| of one output; false when it is past the tolerance (or not finite)
bool Compare(const char *name, const std::vector<float> &got, const double *want) {
    double err = 0, scale = 1;
    for (size_t k = 0; k < got.size(); ++k) {
        const double diff = std::fabs(got[k] - want[k]);
        err = std::isfinite(got[k]) ? std::fmax(err, diff) : INFINITY;
        scale = std::fmax(scale, std::fabs(want[k]));
    }
    LOG_PRINT("%-8s max |error| %.3e  tolerance %.3e\n", name, err, TOLERANCE * scale);
    return err <= TOLERANCE * scale;
}

}  // namespace

int main(int argc, char **argv) {
    const bool perturb = argc > 1 && strcmp(argv[1], "--perturb-reference") == 0;
    int32_t deviceId = 0;
    aclrtStream stream;
    auto ret = Init(deviceId, &stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("Init acl failed. ERROR: %d\n", ret); return ret);

    // inputs: x and the state in [-1, 1), weights and biases in [-1/sqrt(H), 1/sqrt(H)) as PyTorch
    // initialises them (the gates stay away from saturation)
    Random rng;
    const float k = 1.0f / std::sqrt((float)H);
    std::vector<float> x = rng.Uniform(T * B * I, -1, 1), h0 = rng.Uniform(LD * B * H, -1, 1),
                       c0 = rng.Uniform(LD * B * H, -1, 1);
    std::vector<std::vector<float>> params;  // per layer, per direction: w_ih, w_hh, b_ih, b_hh
    for (int64_t l = 0; l < L; ++l)
        for (int64_t d = 0; d < D; ++d) {
            const int64_t in = l == 0 ? I : D * H;
            for (int64_t n : {4 * H * in, 4 * H * H, 4 * H, 4 * H}) params.push_back(rng.Uniform(n, -k, k));
        }

    DeviceTensor xDev, h0Dev, c0Dev, yDev, hyDev, cyDev;
    std::vector<DeviceTensor> paramDev(params.size()), saved[7];  // i, j (g), f, o, h, c, tanh(c)
    ret = CreateAclTensor({T, B, I}, x, &xDev);
    CHECK_RET(ret == ACL_SUCCESS, return ret);
    for (size_t p = 0; p < params.size(); ++p) {
        const int64_t in = p / 4 / D == 0 ? I : D * H;
        const std::vector<int64_t> shapes[4] = {{4 * H, in}, {4 * H, H}, {4 * H}, {4 * H}};
        ret = CreateAclTensor(shapes[p % 4], params[p], &paramDev[p]);
        CHECK_RET(ret == ACL_SUCCESS, return ret);
    }
    const std::vector<int64_t> state = {LD, B, H};
    bool made = CreateAclTensor(state, h0, &h0Dev) == 0 && CreateAclTensor(state, c0, &c0Dev) == 0 &&
                CreateAclTensor({T, B, D * H}, {}, &yDev) == 0 && CreateAclTensor(state, {}, &hyDev) == 0 &&
                CreateAclTensor(state, {}, &cyDev) == 0;
    CHECK_RET(made, return 1);
    for (auto &list : saved) {
        list.resize(LD);
        for (DeviceTensor &t : list) {
            ret = CreateAclTensor({T, B, H}, {}, &t);
            CHECK_RET(ret == ACL_SUCCESS, return ret);
        }
    }
    aclTensorList *paramList = ListOf(paramDev), *hx = ListOf({h0Dev, c0Dev}), *lists[7];
    for (int a = 0; a < 7; ++a) lists[a] = ListOf(saved[a]);

    // the two phases: check and plan, then queue on the stream
    uint64_t workspaceSize = 0;
    aclOpExecutor *executor = nullptr;
    ret = aclnnLSTMGetWorkspaceSize(xDev.tensor, paramList, hx, nullptr, true, L, 0.0, true, D == 2, false, yDev.tensor,
                                    hyDev.tensor, cyDev.tensor, lists[0], lists[1], lists[2], lists[3], lists[4],
                                    lists[5], lists[6], &workspaceSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnLSTMGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    void *workspace = nullptr;
    if (workspaceSize > 0) {
        ret = aclrtMalloc(&workspace, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST);
        CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("allocate workspace failed. ERROR: %d\n", ret); return ret);
    }
    ret = aclnnLSTM(workspace, workspaceSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnLSTM failed. ERROR: %d\n", ret); return ret);
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // the float64 reference, layer by layer: layer l > 0 reads layer l-1's output [T, B, D*H]
    if (perturb) params[0][0] += 0.1f;
    std::vector<double> in(x.begin(), x.end()), y((size_t)(T * B * D * H)), hy((size_t)(LD * B * H)), cy(hy.size());
    std::vector<double> want[7];
    for (auto &w : want) w.resize((size_t)(LD * T * B * H));
    for (int64_t l = 0; l < L; ++l) {
        for (int64_t d = 0; d < D; ++d) {
            const int64_t kd = l * D + d;
            std::vector<double> one[7];
            ReferenceLayer(in, l == 0 ? I : D * H, &params[(size_t)kd * 4], d == 1, &h0[kd * B * H], &c0[kd * B * H], y,
                           one, &hy[kd * B * H], &cy[kd * B * H]);
            for (int a = 0; a < 7; ++a) std::copy(one[a].begin(), one[a].end(), want[a].begin() + kd * T * B * H);
        }
        in = y;
    }

    bool pass = Compare("output", ToHost(yDev), y.data()) & Compare("hy", ToHost(hyDev), hy.data()) &
                Compare("cy", ToHost(cyDev), cy.data());
    const char *names[7] = {"i", "j", "f", "o", "h", "c", "tanhc"};
    for (int a = 0; a < 7; ++a) {
        std::vector<float> got;
        for (const DeviceTensor &t : saved[a]) {
            std::vector<float> part = ToHost(t);
            got.insert(got.end(), part.begin(), part.end());
        }
        pass &= Compare(names[a], got, want[a].data());
    }
    LOG_PRINT("%s\n", pass ? "every output within tolerance" : "FAILED: an output is past its tolerance");

    // release: a list destroys the tensors it holds
    aclDestroyTensorList(paramList);
    aclDestroyTensorList(hx);
    for (aclTensorList *list : lists) aclDestroyTensorList(list);
    for (DeviceTensor *t : {&xDev, &yDev, &hyDev, &cyDev}) aclDestroyTensor(t->tensor);
    for (DeviceTensor *t : {&xDev, &h0Dev, &c0Dev, &yDev, &hyDev, &cyDev}) aclrtFree(t->addr);
    for (DeviceTensor &t : paramDev) aclrtFree(t.addr);
    for (auto &list : saved)
        for (DeviceTensor &t : list) aclrtFree(t.addr);
    if (workspace != nullptr) aclrtFree(workspace);
    aclrtDestroyStream(stream);
    aclrtResetDevice(deviceId);
    aclFinalize();
    return pass ? 0 : 1;
}
