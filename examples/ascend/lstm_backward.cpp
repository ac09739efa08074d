// Calling example of fusedgrad's aclnnLstmBackward (package generated/ascend/lstm): a 2-layer
// bidirectional LSTM over sequences of lengths 5, 4 and 2 (batchSizes 3, 3, 2, 2, 1), aclnnLSTM with
// train = true, then aclnnLstmBackward on the lists it saved and random dy, dh, dc.  dx, dh0, dc0 and
// every parameter's gradient are checked against a float64 backward through time computed here.
//
// Build against the installed package (cmake --install <build> --prefix <dir>):
//   g++ -std=c++17 lstm_backward.cpp -I<CANN>/include -I<dir>/include -L<dir>/lib -lfg_lstm
//       -L<CANN>/lib64 -lascendcl -lnnopbase -Wl,-rpath,<dir>/lib -o lstm_backward
// ./lstm_backward prints the largest error of each gradient and exits 1 when one is past its tolerance;
// ./lstm_backward --perturb-reference moves one weight in the reference only, so it must exit 1.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "aclnnop/aclnn_lstm.h"
#include "aclnnop/aclnn_lstm_backward.h"

#define CHECK_RET(cond, return_expr) do { if (!(cond)) { return_expr; } } while (0)
#define LOG_PRINT(message, ...) do { printf(message, ##__VA_ARGS__); } while (0)

namespace {

const int64_t T = 5, B = 3, I = 6, H = 8, L = 2, D = 2, LD = L * D;  // steps, batch, sizes, layers, directions
const std::vector<int64_t> BATCH_SIZES = {3, 3, 2, 2, 1};  // sequences running at each step: lengths 5, 4, 2
const double TOLERANCE = 1e-5;  // of max(1, |reference|): float32 arithmetic against float64

// uniform in [lo, hi) from a 64-bit LCG with a fixed seed: the same values on every machine
std::vector<float> Uniform(uint64_t &state, int64_t n, float lo, float hi) {
    std::vector<float> v((size_t)n);
    for (float &x : v) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        x = lo + (hi - lo) * (float)((double)(state >> 40) / 16777216.0);
    }
    return v;
}

struct DeviceTensor {
    void *addr = nullptr;
    aclTensor *tensor = nullptr;
};

// a contiguous tensor of `shape` in device memory holding `host`
template <typename Elem>
int CreateAclTensor(const std::vector<Elem> &host, const std::vector<int64_t> &shape, aclDataType dtype,
                    DeviceTensor *t) {
    const size_t bytes = host.size() * sizeof(Elem);
    auto ret = aclrtMalloc(&t->addr, bytes, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMalloc failed. ERROR: %d\n", ret); return ret);
    ret = aclrtMemcpy(t->addr, bytes, host.data(), bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret); return ret);
    std::vector<int64_t> strides(shape.size(), 1);
    for (int64_t k = (int64_t)shape.size() - 2; k >= 0; --k) strides[k] = strides[k + 1] * shape[k + 1];
    t->tensor = aclCreateTensor(shape.data(), shape.size(), dtype, strides.data(), 0, ACL_FORMAT_ND, shape.data(),
                                shape.size(), t->addr);
    return 0;
}

int64_t Count(const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
}

// float32 tensors of these shapes, zeros (outputs)
int CreateOutputs(const std::vector<std::vector<int64_t>> &shapes, std::vector<DeviceTensor> &out) {
    out.resize(shapes.size());
    for (size_t k = 0; k < shapes.size(); ++k) {
        auto ret = CreateAclTensor(std::vector<float>((size_t)Count(shapes[k])), shapes[k], ACL_FLOAT, &out[k]);
        CHECK_RET(ret == ACL_SUCCESS, return ret);
    }
    return 0;
}

std::vector<float> ToHost(const DeviceTensor &t, int64_t n) {
    std::vector<float> host((size_t)n);
    auto ret = aclrtMemcpy(host.data(), n * sizeof(float), t.addr, n * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtMemcpy failed. ERROR: %d\n", ret));
    return host;
}

aclTensorList *ListOf(const std::vector<DeviceTensor> &v) {
    std::vector<const aclTensor *> t;
    for (const DeviceTensor &d : v) t.push_back(d.tensor);
    return aclCreateTensorList(t.data(), t.size());
}

int64_t Length(int64_t b) {  // sequence b's number of steps
    int64_t n = 0;
    for (int64_t s : BATCH_SIZES) n += s > b;
    return n;
}

// The reference of one layer and direction.  Weights' rows in the gate order i, f, g, o; a sequence's
// steps in order t = 0 .. len-1 (reverse: len-1 .. 0); x [T, B, in], the rest [T, B, H].
struct Layer {
    int64_t in;
    bool reverse;
    const float *w_ih, *w_hh, *b_ih, *b_hh, *h0, *c0;  // [4H, in], [4H, H], [4H], [4H], [B, H], [B, H]
    std::vector<double> x, gate[4], h, c;               // gate: i, f, g, o (activated)

    // the step sequence b takes before step t; -1: it starts from h0, c0
    int64_t Before(int64_t t, int64_t b) const { return reverse ? (t + 1 < Length(b) ? t + 1 : -1) : t - 1; }
    double Prev(const std::vector<double> &s, const float *s0, int64_t t, int64_t b, int64_t j) const {
        const int64_t p = Before(t, b);
        return p < 0 ? (double)s0[b * H + j] : s[(p * B + b) * H + j];
    }

    void Forward() {
        for (auto *v : {&gate[0], &gate[1], &gate[2], &gate[3], &h, &c}) v->assign((size_t)(T * B * H), 0.0);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t s = 0; s < Length(b); ++s) {
                const int64_t t = reverse ? Length(b) - 1 - s : s;
                for (int64_t r = 0; r < 4 * H; ++r) {
                    double a = (double)b_ih[r] + b_hh[r];
                    for (int64_t k = 0; k < in; ++k) a += (double)w_ih[r * in + k] * x[(t * B + b) * in + k];
                    for (int64_t k = 0; k < H; ++k) a += (double)w_hh[r * H + k] * Prev(h, h0, t, b, k);
                    gate[r / H][(t * B + b) * H + r % H] = r / H == 2 ? std::tanh(a) : 1 / (1 + std::exp(-a));
                }
                for (int64_t j = 0, e = (t * B + b) * H; j < H; ++j, ++e) {
                    c[e] = gate[1][e] * Prev(c, c0, t, b, j) + gate[0][e] * gate[2][e];
                    h[e] = gate[3][e] * std::tanh(c[e]);
                }
            }
    }

    // backward through time from dy (this direction's columns of [T, B, D*H]) and dhy, dcy [B, H]:
    // adds to dx [T, B, in] and the parameters' gradients, writes dh0, dc0
    void Backward(const std::vector<double> &dy, int64_t col, const float *dhy, const float *dcy,
                  std::vector<double> &dx, std::vector<double> *dparams, double *dh0, double *dc0) const {
        for (int64_t b = 0; b < B; ++b) {
            std::vector<double> dh(dhy + b * H, dhy + (b + 1) * H), dc(dcy + b * H, dcy + (b + 1) * H), da(4 * H);
            for (int64_t s = Length(b) - 1; s >= 0; --s) {
                const int64_t t = reverse ? Length(b) - 1 - s : s;
                for (int64_t j = 0, e = (t * B + b) * H; j < H; ++j, ++e) {
                    const double i = gate[0][e], f = gate[1][e], g = gate[2][e], o = gate[3][e], tc = std::tanh(c[e]);
                    dh[j] += dy[(t * B + b) * D * H + col + j];
                    const double dct = dc[j] + dh[j] * o * (1 - tc * tc);
                    da[j] = dct * g * i * (1 - i);
                    da[H + j] = dct * Prev(c, c0, t, b, j) * f * (1 - f);
                    da[2 * H + j] = dct * i * (1 - g * g);
                    da[3 * H + j] = dh[j] * tc * o * (1 - o);
                    dc[j] = dct * f;
                }
                for (int64_t r = 0; r < 4 * H; ++r) {
                    for (int64_t k = 0; k < in; ++k) dparams[0][r * in + k] += da[r] * x[(t * B + b) * in + k];
                    for (int64_t k = 0; k < H; ++k) dparams[1][r * H + k] += da[r] * Prev(h, h0, t, b, k);
                    dparams[2][r] += da[r];
                    dparams[3][r] += da[r];
                }
                for (int64_t k = 0; k < in; ++k)
                    for (int64_t r = 0; r < 4 * H; ++r) dx[(t * B + b) * in + k] += (double)w_ih[r * in + k] * da[r];
                for (int64_t k = 0; k < H; ++k) {
                    dh[k] = 0;
                    for (int64_t r = 0; r < 4 * H; ++r) dh[k] += (double)w_hh[r * H + k] * da[r];
                }
            }
            for (int64_t j = 0; j < H; ++j) dh0[b * H + j] = dh[j], dc0[b * H + j] = dc[j];
        }
    }
};

// prints the largest |got - want| of one output; false when it is past the tolerance (or not finite)
bool Compare(const std::string &name, const std::vector<float> &got, const std::vector<double> &want) {
    double err = 0, scale = 1;
    for (size_t k = 0; k < got.size(); ++k) {
        err = std::isfinite(got[k]) ? std::fmax(err, std::fabs(got[k] - want[k])) : INFINITY;
        scale = std::fmax(scale, std::fabs(want[k]));
    }
    LOG_PRINT("%-22s max |error| %.3e  tolerance %.3e\n", name.c_str(), err, TOLERANCE * scale);
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

    // random inputs in [-1, 1), weights and biases in [-1/sqrt(H), 1/sqrt(H)) as PyTorch initialises
    // them.  x [T*B, I] and dy [T*B, D*H] are laid out as [T, B, *]: rows past a sequence's end are
    // never read, so they hold values too.
    uint64_t seed = 20261206;
    const float k = 1.0f / std::sqrt((float)H);
    std::vector<float> x = Uniform(seed, T * B * I, -1, 1), h0 = Uniform(seed, LD * B * H, -1, 1),
                       c0 = Uniform(seed, LD * B * H, -1, 1), dy = Uniform(seed, T * B * D * H, -1, 1),
                       dhy = Uniform(seed, LD * B * H, -1, 1), dcy = Uniform(seed, LD * B * H, -1, 1);
    std::vector<std::vector<float>> params;  // per layer, per direction: w_ih, w_hh, b_ih, b_hh
    std::vector<std::vector<int64_t>> paramShapes;
    for (int64_t l = 0; l < L; ++l)
        for (int64_t d = 0; d < D; ++d)
            for (std::vector<int64_t> shape : {std::vector<int64_t>{4 * H, l == 0 ? I : D * H}, {4 * H, H}, {4 * H},
                                               {4 * H}}) {
                params.push_back(Uniform(seed, Count(shape), -k, k));
                paramShapes.push_back(shape);
            }

    DeviceTensor xDev, h0Dev, c0Dev, dyDev, dhDev, dcDev, bsDev;
    std::vector<DeviceTensor> paramDev(params.size()), fwdOut, saved, bwdOut, dparamDev;
    bool made = CreateAclTensor(x, {T * B, I}, ACL_FLOAT, &xDev) == 0 &&
                CreateAclTensor(h0, {LD, B, H}, ACL_FLOAT, &h0Dev) == 0 &&
                CreateAclTensor(c0, {LD, B, H}, ACL_FLOAT, &c0Dev) == 0 &&
                CreateAclTensor(dy, {T * B, D * H}, ACL_FLOAT, &dyDev) == 0 &&
                CreateAclTensor(dhy, {LD, B, H}, ACL_FLOAT, &dhDev) == 0 &&
                CreateAclTensor(dcy, {LD, B, H}, ACL_FLOAT, &dcDev) == 0 &&
                CreateAclTensor(BATCH_SIZES, {T}, ACL_INT64, &bsDev) == 0 &&
                CreateOutputs({{T, B, D * H}, {LD, B, H}, {LD, B, H}}, fwdOut) == 0 &&  // output, hy, cy
                CreateOutputs(std::vector<std::vector<int64_t>>(7 * LD, {T, B, H}), saved) == 0 &&
                CreateOutputs({{T * B, I}, {LD, B, H}, {LD, B, H}}, bwdOut) == 0 &&  // dx, dh0, dc0
                CreateOutputs(paramShapes, dparamDev) == 0;
    for (size_t p = 0; made && p < params.size(); ++p)
        made = CreateAclTensor(params[p], paramShapes[p], ACL_FLOAT, &paramDev[p]) == 0;
    CHECK_RET(made, return 1);
    aclTensorList *paramList = ListOf(paramDev), *hx = ListOf({h0Dev, c0Dev}), *dparamList = ListOf(dparamDev);
    aclTensorList *lists[7];  // i, j (g), f, o, h, c, tanh(c): LD tensors each, the forward's out, the backward's in
    for (int a = 0; a < 7; ++a) lists[a] = ListOf({saved.begin() + a * LD, saved.begin() + (a + 1) * LD});

    // the forward (train: it saves the lists), then the backward; each in two phases on the stream
    uint64_t fwdSize = 0, bwdSize = 0;
    aclOpExecutor *executor = nullptr;
    void *fwdWorkspace = nullptr, *bwdWorkspace = nullptr;
    ret = aclnnLSTMGetWorkspaceSize(xDev.tensor, paramList, hx, bsDev.tensor, true, L, 0.0, true, D == 2, false,
                                    fwdOut[0].tensor, fwdOut[1].tensor, fwdOut[2].tensor, lists[0], lists[1], lists[2],
                                    lists[3], lists[4], lists[5], lists[6], &fwdSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnLSTMGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    if (fwdSize > 0) CHECK_RET(aclrtMalloc(&fwdWorkspace, fwdSize, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS, return 1);
    ret = aclnnLSTM(fwdWorkspace, fwdSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnLSTM failed. ERROR: %d\n", ret); return ret);
    ret = aclnnLstmBackwardGetWorkspaceSize(xDev.tensor, hx, paramList, dyDev.tensor, dhDev.tensor, dcDev.tensor,
                                            lists[0], lists[1], lists[2], lists[3], lists[4], lists[5], lists[6],
                                            bsDev.tensor, true, L, 0.0, true, D == 2, false, nullptr, bwdOut[0].tensor,
                                            bwdOut[1].tensor, bwdOut[2].tensor, dparamList, &bwdSize, &executor);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnLstmBackwardGetWorkspaceSize failed. ERROR: %d\n", ret); return ret);
    if (bwdSize > 0) CHECK_RET(aclrtMalloc(&bwdWorkspace, bwdSize, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS, return 1);
    ret = aclnnLstmBackward(bwdWorkspace, bwdSize, executor, stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclnnLstmBackward failed. ERROR: %d\n", ret); return ret);
    ret = aclrtSynchronizeStream(stream);
    CHECK_RET(ret == ACL_SUCCESS, LOG_PRINT("aclrtSynchronizeStream failed. ERROR: %d\n", ret); return ret);

    // the float64 reference: the forward layer by layer (layer l > 0 reads layer l-1's [T, B, D*H]
    // output), then backward through time from the top layer down
    if (perturb) params[0][0] += 0.1f;
    std::vector<Layer> layers;
    std::vector<double> in(x.begin(), x.end());
    for (int64_t l = 0; l < L; ++l) {
        std::vector<double> y((size_t)(T * B * D * H), 0.0);
        for (int64_t d = 0; d < D; ++d) {
            const size_t at = (size_t)(l * D + d) * 4, state = (size_t)(l * D + d) * B * H;
            Layer layer{l == 0 ? I : D * H, d == 1, params[at].data(), params[at + 1].data(), params[at + 2].data(),
                        params[at + 3].data(), &h0[state], &c0[state], in, {}, {}, {}};
            layer.Forward();
            for (int64_t e = 0; e < T * B * H; ++e) y[(e / H) * D * H + d * H + e % H] = layer.h[e];
            layers.push_back(layer);
        }
        in = y;
    }
    std::vector<double> dOut(dy.begin(), dy.end()), dh0((size_t)(LD * B * H)), dc0(dh0.size()), dx;
    std::vector<std::vector<double>> dparams(params.size());
    for (size_t p = 0; p < params.size(); ++p) dparams[p].assign(params[p].size(), 0.0);
    for (int64_t l = L - 1; l >= 0; --l) {
        dx.assign((size_t)(T * B * layers[l * D].in), 0.0);
        for (int64_t d = 0; d < D; ++d) {
            const int64_t kd = l * D + d;
            layers[kd].Backward(dOut, d * H, &dhy[kd * B * H], &dcy[kd * B * H], dx, &dparams[kd * 4], &dh0[kd * B * H],
                                &dc0[kd * B * H]);
        }
        dOut = dx;
    }

    bool pass = Compare("dx", ToHost(bwdOut[0], T * B * I), dx) & Compare("dh0", ToHost(bwdOut[1], LD * B * H), dh0) &
                Compare("dc0", ToHost(bwdOut[2], LD * B * H), dc0);
    const char *names[4] = {"dweight_ih", "dweight_hh", "dbias_ih", "dbias_hh"};
    for (size_t p = 0; p < params.size(); ++p) {
        const std::string name = names[p % 4] + ("_l" + std::to_string(p / 4 / D)) + (p / 4 % D ? "_reverse" : "");
        pass &= Compare(name, ToHost(dparamDev[p], (int64_t)params[p].size()), dparams[p]);
    }
    LOG_PRINT("%s\n", pass ? "every gradient within tolerance" : "FAILED: a gradient is past its tolerance");

    // release: a list destroys the tensors it holds
    for (aclTensorList *list : {paramList, hx, dparamList}) aclDestroyTensorList(list);
    for (aclTensorList *list : lists) aclDestroyTensorList(list);
    for (DeviceTensor *t : {&xDev, &dyDev, &dhDev, &dcDev, &bsDev}) aclDestroyTensor(t->tensor);
    for (auto *group : {&fwdOut, &bwdOut})
        for (DeviceTensor &t : *group) aclDestroyTensor(t.tensor);
    for (DeviceTensor *t : {&xDev, &h0Dev, &c0Dev, &dyDev, &dhDev, &dcDev, &bsDev}) aclrtFree(t->addr);
    for (auto *group : {&paramDev, &fwdOut, &saved, &bwdOut, &dparamDev})
        for (DeviceTensor &t : *group) aclrtFree(t.addr);
    for (void *w : {fwdWorkspace, bwdWorkspace})
        if (w != nullptr) aclrtFree(w);
    aclrtDestroyStream(stream);
    aclrtResetDevice(deviceId);
    aclFinalize();
    return pass ? 0 : 1;
}
