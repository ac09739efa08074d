/* The full LSTM's host code, op_host/aclnn_lstm.cpp after the package's start (lowering.ascend.lstm
 * writes the start: includes and the kernels' sizes; then host_common.cpp; then the launch dispatcher,
 * fg_lstm_launch, and the tensors' shapes, fg_lstm_dims, from its records; then this file, less this
 * comment).  CANN's aclnnLSTM and aclnnLstmBackward, two-phase: the first phase checks the arguments and
 * plans every launch, the second uploads the launches' tilings and queues them on the
 * stream in that order.  The launches are the shared plan's (fusedgrad/lstm/launches.py, the data every
 * host runs, held for every size in op_host/fg_lstm_plan.h), walked by PlanWalk and lowered onto this
 * package's kernels: its GEMMs and column sums on the Cube, its adds (b_ih + b_hh, a GEMM's addend) on
 * the add kernel, its copies and zero fills on the copy kernels; what stays here is what CANN's API
 * shape needs (the arguments, their views and dtypes, the outputs' lists) and the layer ops' lowering:
 * where a layer and direction has a split of its hidden units over the cube cores (fg_lpf_split: each
 * block's W_hh slice in L1, or streamed from GM a K chunk at a time at every step), equal lengths or packed,
 * its whole recurrence is one launch of the persistent forward kernel,
 * and its backward through time one launch of the persistent backward (lowering/ascend/persistent.py);
 * otherwise a Cube GEMM and a vector step kernel per step.  The step kernels compute in fp32; the GEMMs
 * take the call's dtype (an fp16 or bf16 call's x, weights, h and dgates in that dtype, rounded once from
 * the fp32 the step kernels write) with fp32 accumulation; fp16 and bf16 tensors the step kernels read
 * are widened into the workspace, and every output is rounded once on the way out.  Where every layer of
 * an fp16 or bf16 call runs on the persistent kernels (narrow_cells), their cells read and write the
 * caller's h, c, dy and activations in its dtype instead (but the forward's c: its recurrence is fp32). */
//@ helpers
#include "fg_lstm_persistent_tiling.h"
#include "fg_lstm_plan.h"

namespace {

// ------------------------------------------------------------------ blocks of rows

// A dense block of rows the plan reads or writes: `at` bytes from its base (a user tensor's address,
// the workspace's head with the launches' parameters, or the workspace's buffers after it), `pitch`
// elements of `esize` bytes (fp32: 4; fp16, bf16: 2) between rows.
enum { IN_USER, IN_HEAD, IN_BUFFERS };
struct Blk {
    int base;
    char *user;
    uint64_t at;
    uint32_t pitch;
    uint32_t esize;
};

Blk rows_from(Blk b, uint64_t r) {
    b.at += r * (uint64_t)b.pitch * b.esize;
    return b;
}
Blk cols_from(Blk b, uint64_t c) {
    b.at += c * b.esize;
    return b;
}

// ------------------------------------------------------------------ the plan

struct Op {
    int kind;  // OP_*: the launch dispatcher's (lowering/ascend/lstm.py writes it before this file)
    int dt;  // a GEMM's operand dtype; a copy's or fill's element size
    uint32_t blocks;
    int n;       // arguments before the parameters
    Blk a[FG_LSTM_ARGS];
    uint64_t params;  // offset of the launch's tiling or copy parameters in the head
};

}  // namespace

// the executor the first phase hands out (as CANN's opaque aclOpExecutor) and the second uses up
struct FgLstmPlan {
    std::vector<Op> ops, tail;  // the launches, and the copies out to strided outputs after them
    std::vector<char> head;     // the workspace's start: every launch's parameters, the ones vector
    uint64_t buffers;           // bytes of buffers after the head
    uint32_t vcores, ccores;    // the device's vector and cube cores the launches are planned for
    bool too_wide;              // a GEMM operand's rows are farther apart than the Cube's copies reach

    uint64_t put(const void *p, size_t n) {  // into the head, 64-byte aligned; returns its offset
        uint64_t at = (head.size() + 63u) / 64u * 64u;
        head.resize(at + n);
        memcpy(head.data() + at, p, n);
        return at;
    }
    Blk buffer(uint64_t rows, uint32_t pitch, uint32_t esize = 4u) {  // rows x pitch elements in the workspace
        Blk b{IN_BUFFERS, nullptr, buffers, pitch, esize};
        buffers += (rows * pitch * esize + 63u) / 64u * 64u;
        return b;
    }
    uint64_t head_bytes() const { return (head.size() + 63u) / 64u * 64u; }
    uint64_t workspace() const { return head_bytes() + buffers; }
};

namespace {

FgLstmPlan *new_plan() {
    FgLstmPlan *p = new (std::nothrow) FgLstmPlan;
    if (!p) return nullptr;
    p->buffers = 0;
    p->too_wide = false;
    p->vcores = vector_cores();
    p->ccores = FG_ASCEND_CUBE_CORES;
    int32_t device = 0;
    int64_t n = 0;
    if (aclrtGetDevice(&device) == ACL_SUCCESS &&
        aclGetDeviceCapability((uint32_t)device, ACL_DEVICE_INFO_AI_CORE_NUM, &n) == ACL_SUCCESS && n > 0 && n <= 65535) {
        p->ccores = (uint32_t)n;
    }
    return p;
}

// queue a launch of kind `kind` (dt: a GEMM's operand dtype, a copy's or fill's element size) on `blocks`
// cores, its arguments args[0 .. n) and its parameters par (bytes, into the head); after every other launch
// with `tail`
void push(FgLstmPlan &p, int kind, int dt, uint32_t blocks, const Blk *args, int n, const void *par, size_t bytes,
          bool tail = false) {
    Op o;
    memset(&o, 0, sizeof(o));
    o.kind = kind;
    o.dt = dt;
    o.blocks = blocks;
    for (int k = 0; k < n; ++k) o.a[o.n++] = args[k];
    o.params = p.put(par, bytes);
    (tail ? p.tail : p.ops).push_back(o);
}

// C[m, n] = A . B^T (+ bias), fp32 C (and bias), A and B of operand dtype dt: kind OP_MM (A [m, k],
// B [n, k]), OP_MM_BIAS, OP_MM_MK_KN (B stored [k, n]), OP_MM_KM_KN (A stored [k, m] too)
void mm(FgLstmPlan &p, int kind, int dt, Blk a, Blk b, const Blk *bias, Blk c, uint32_t m, uint32_t n, uint32_t k) {
    if (m == 0 || n == 0) return;
    // the GM -> L1 copies take a row stride of 16 bits (Nd2NzParams::srcDValue)
    if (a.pitch > FG_ND2NZ_MAX_PITCH || b.pitch > FG_ND2NZ_MAX_PITCH) p.too_wide = true;
    struct FgMmTiling t = fg_mm_tiling(m, n, k, a.pitch, b.pitch, c.pitch, &fg_lstm_mm_tiles[dt], p.ccores);
    const Blk args[4] = {a, b, bias ? *bias : c, c};
    push(p, kind, dt, t.cores, args, bias ? 4 : 3, &t, sizeof(t));
}

// a launch of the copy kernels (copy, fill, converting copies) over the parameters c: src (none for a
// fill) and dst, the lines over the vector cores; after every other launch with `tail`
void copy_launch(FgLstmPlan &p, int kind, const struct FgCopyParams &c, const Blk *src, Blk dst, bool tail = false) {
    const Blk args[2] = {src ? *src : dst, dst};
    if (copy_elems(c) > 0) push(p, kind, (int)dst.esize, copy_blocks(c, p.vcores), args + (src ? 0 : 1), src ? 2 : 1, &c, sizeof(c), tail);
}

// the copy parameters of rows x cols floats between blocks of rows with these pitches
struct FgCopyParams rows_params(uint32_t rows, uint32_t cols, uint32_t src_pitch, uint32_t dst_pitch) {
    struct FgCopyParams c;
    memset(&c, 0, sizeof(c));
    c.ndim = 2;
    c.lines = rows;
    c.dims[0] = rows;
    c.dims[1] = cols;
    c.src[0] = src_pitch;
    c.src[1] = 1;
    c.dst[0] = dst_pitch;
    c.dst[1] = 1;
    return c;
}

// rows x cols elements from one block of rows to another (of the same element size)
void copy_rows(FgLstmPlan &p, Blk src, Blk dst, uint32_t rows, uint32_t cols) {
    copy_launch(p, OP_COPY, rows_params(rows, cols, src.pitch, dst.pitch), &src, dst);
}

// dst[b] = src[t, b] at row b's last step t (rows of src [T, B, cols] by the batch sizes bs of T steps)
void gather_last(FgLstmPlan &p, const std::vector<int64_t> &bs, Blk src, Blk dst, int64_t B, uint32_t cols) {
    const int64_t T = (int64_t)bs.size();
    for (int64_t t = 0; t < T; ++t) {
        const int64_t lo = t + 1 < T ? bs[(size_t)(t + 1)] : 0, hi = bs[(size_t)t];
        copy_rows(p, rows_from(src, (uint64_t)(t * B + lo)), rows_from(dst, (uint64_t)lo), (uint32_t)(hi - lo), cols);
    }
}

// zeros into rows x cols elements of a block
void fill_rows(FgLstmPlan &p, Blk dst, uint32_t rows, uint32_t cols) {
    copy_launch(p, OP_FILL, rows_params(rows, cols, 0, dst.pitch), nullptr, dst);
}

// dst = a + b over rows x cols fp32 elements (the add kernel: FgCopyParams with b's row stride in src[2])
void add_rows(FgLstmPlan &p, Blk a, Blk b, Blk dst, uint32_t rows, uint32_t cols) {
    struct FgCopyParams c = rows_params(rows, cols, a.pitch, dst.pitch);
    c.src[2] = b.pitch;
    c.src[3] = 1;
    const Blk args[3] = {a, b, dst};
    if (copy_elems(c) > 0) push(p, OP_ADD, 4, copy_blocks(c, p.vcores), args, 3, &c, sizeof(c));
}

// rows x cols fp32 elements rounded (to nearest even) into a block of fp16 or bf16 (dtype)
void narrow_rows(FgLstmPlan &p, aclDataType dtype, Blk src, Blk dst, uint32_t rows, uint32_t cols) {
    copy_launch(p, dtype == ACL_FLOAT16 ? OP_NARROW_F16 : OP_NARROW_BF16, rows_params(rows, cols, src.pitch, dst.pitch),
                &src, dst);
}

// a user tensor's view: of the call's dtype, with the dims expected (a negative entry: any size)
aclnnStatus view_checked(const aclTensor *t, View *v, const int64_t *dims, uint64_t n, aclDataType dtype) {
    if (!t) return ACLNN_ERR_PARAM_NULLPTR;
    if (view_of(t, v) != ACLNN_SUCCESS || v->dtype != dtype || v->n != n) return ACLNN_ERR_PARAM_INVALID;
    for (uint64_t i = 0; i < n; ++i) {
        if (dims[i] >= 0 && v->dims[i] != dims[i]) return ACLNN_ERR_PARAM_INVALID;
    }
    return ACLNN_SUCCESS;
}

// packed variable-length rows [T*B, X] seen as time-major [T, B, X] (the layout the rows have)
void unpack(View *v, int64_t T, int64_t B) {
    const int64_t rows = v->strides[0];
    v->n = 3;
    v->dims[2] = v->dims[1], v->strides[2] = v->strides[1];
    v->dims[0] = T, v->dims[1] = B;
    v->strides[1] = rows, v->strides[0] = rows * B;
}

// batch_first [B, T, ...] seen as time-major [T, B, ...]
void swap01(View *v) {
    int64_t d = v->dims[0], s = v->strides[0];
    v->dims[0] = v->dims[1], v->strides[0] = v->strides[1];
    v->dims[1] = d, v->strides[1] = s;
}

// how a binding takes a user tensor: fp32 rows to read, rows as the GEMMs read them (the call's dtype),
// fp32 rows to write, rows of the call's dtype to write; rows as the persistent kernels' cells read or write
// them (the call's dtype where narrow_cells, else fp32) (lowering/ascend/lstm_entry.py's record names these
// but WRITE_GEMM)
enum { READ, READ_GEMM, WRITE, WRITE_GEMM, READ_CELL, WRITE_CELL };

// a user tensor's view as rows (its dimensions before `split`) of adjacent elements, taken as `mode` says:
// in place when its rows are dense in that form and within the Cube copies' reach, else a workspace buffer
// gathered from it first (fp16 and bf16 widened where read as fp32) or scattered to it after every launch
// (fp16 and bf16 rounded to nearest even)
aclnnStatus rows_of(FgLstmPlan &p, const View &v, uint64_t split, int mode, Blk *out) {
    int64_t s0 = 0;
    const bool write = mode == WRITE || mode == WRITE_GEMM;
    const bool as_is = mode == READ_GEMM || mode == WRITE_GEMM || v.dtype == ACL_FLOAT;
    const int kind = plan(v, split, write, &s0);
    if (kind == FG_BAD) return ACLNN_ERR_PARAM_INVALID;
    const int64_t rows = product(v.dims, split), cols = product(v.dims + split, v.n - split);
    const int64_t pitch = s0 > 0 ? s0 : cols;
    const Blk user{IN_USER, (char *)data(v), 0, (uint32_t)pitch, (uint32_t)elem_bytes(v.dtype)};
    if (kind == FG_ROWS && as_is && pitch <= FG_ND2NZ_MAX_PITCH) {
        *out = user;
        return ACLNN_SUCCESS;
    }
    *out = p.buffer((uint64_t)rows, (uint32_t)cols, as_is ? user.esize : 4u);
    const bool f16 = v.dtype == ACL_FLOAT16;
    const int cast = write ? (f16 ? OP_NARROW_F16 : OP_NARROW_BF16) : (f16 ? OP_WIDEN_F16 : OP_WIDEN_BF16);
    if (write) copy_launch(p, as_is ? OP_COPY : cast, copy_params(v, true), out, user, true);
    else copy_launch(p, as_is ? OP_COPY : cast, copy_params(v, false), &user, *out);
    return ACLNN_SUCCESS;
}

// the sizes every LSTM call shares, from its arguments
struct Sizes {
    int64_t T, B, I, H, L, D, per;  // per: tensors of params per layer and direction (4 with biases, else 2)
    int layout;  // the input's shape (FG_LSTM_SEQ, _SEQ_BF, _PACKED): dy and dx are laid out as it
    aclDataType dtype;  // of every tensor but batchSizes: float32, float16 or bfloat16
    std::vector<int64_t> bs;  // the batch size of each step (B at every step without batchSizes)
    bool varlen() const { return layout == FG_LSTM_PACKED; }  // packed sequences: batchSizes given
};

// batchSizes (device int64 [T]): read, and checked non-increasing from B down to at least 1
aclnnStatus batch_sizes(const aclTensor *t, Sizes *s) {
    s->bs.assign((size_t)s->T, s->B);
    if (!t) return ACLNN_SUCCESS;
    View v;
    if (view_of(t, &v) != ACLNN_SUCCESS || v.dtype != ACL_INT64 || v.n != 1 || v.dims[0] != s->T ||
        (s->T > 1 && v.strides[0] != 1)) {
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (s->T && aclrtMemcpy(s->bs.data(), (size_t)s->T * 8u, v.addr + v.offset * 8, (size_t)s->T * 8u,
                            ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS) {
        return ACLNN_ERR_PARAM_INVALID;
    }
    for (int64_t t2 = 0; t2 < s->T; ++t2) {
        if (s->bs[t2] < 1 || s->bs[t2] > (t2 ? s->bs[t2 - 1] : s->B) || (t2 == 0 && s->bs[0] != s->B)) {
            return ACLNN_ERR_PARAM_INVALID;
        }
    }
    return ACLNN_SUCCESS;
}

// the input's sizes: [T, B, I] ([B, T, I] batch first), or [T*B, I] with batchSizes; H from the first
// W_hh; the params list's length
aclnnStatus sizes_of(const aclTensor *input, const aclTensorList *params, const aclTensor *bsz, bool hasBias,
                     int64_t numLayers, bool bidirectional, bool batchFirst, Sizes *s) {
    if (!input || !params) return ACLNN_ERR_PARAM_NULLPTR;
    if (numLayers < 1 || numLayers > 1024) return ACLNN_ERR_PARAM_INVALID;
    s->L = numLayers;
    s->D = bidirectional ? 2 : 1;
    s->per = hasBias ? 4 : 2;
    if ((int64_t)params->Size() != s->L * s->D * s->per) return ACLNN_ERR_PARAM_INVALID;
    View in;
    if (view_of(input, &in) != ACLNN_SUCCESS || (in.dtype != ACL_FLOAT && in.dtype != ACL_FLOAT16 && in.dtype != ACL_BF16)) {
        return ACLNN_ERR_PARAM_INVALID;
    }
    s->dtype = in.dtype;
    s->layout = bsz ? FG_LSTM_PACKED : batchFirst ? FG_LSTM_SEQ_BF : FG_LSTM_SEQ;
    if (bsz) {
        View b;
        if (in.n != 2 || view_of(bsz, &b) != ACLNN_SUCCESS || b.n != 1 || b.dims[0] < 1) return ACLNN_ERR_PARAM_INVALID;
        s->T = b.dims[0];
        if (in.dims[0] % s->T) return ACLNN_ERR_PARAM_INVALID;
        s->B = in.dims[0] / s->T;
        unpack(&in, s->T, s->B);
    } else {
        if (in.n != 3) return ACLNN_ERR_PARAM_INVALID;
        if (batchFirst) swap01(&in);
        s->T = in.dims[0];
        s->B = in.dims[1];
    }
    s->I = in.dims[2];
    const aclTensor *w_hh = (*params)[1];
    if (!w_hh) return ACLNN_ERR_PARAM_NULLPTR;
    View w;
    if (view_of(w_hh, &w) != ACLNN_SUCCESS || w.dtype != s->dtype || w.n != 2 || w.dims[1] < 1 ||
        w.dims[0] != 4 * w.dims[1]) {
        return ACLNN_ERR_PARAM_INVALID;
    }
    s->H = w.dims[1];
    if (s->I < 1 || s->B < 1 || s->T < 0) return ACLNN_ERR_PARAM_INVALID;
    // the kernels index in 32 bits: every buffer of T*B rows of 4*D*H or I floats must stay below 2^31
    const int64_t widest = 4 * s->D * s->H > s->I ? 4 * s->D * s->H : s->I;
    if ((s->T * s->B + 64) * (widest + 64) >= ((int64_t)1 << 31)) return ACLNN_ERR_PARAM_INVALID;
    return batch_sizes(bsz, s);
}

bool narrow_cells(const FgLstmPlan &p, const Sizes &s);

// mode READ_CELL or WRITE_CELL as the call's cells take the tensor; any other as it is
int resolved(const FgLstmPlan &p, const Sizes &s, int mode) {
    if (mode != READ_CELL && mode != WRITE_CELL) return mode;
    const bool narrow = narrow_cells(p, s);
    return mode == READ_CELL ? (narrow ? READ_GEMM : READ) : (narrow ? WRITE_GEMM : WRITE);
}

// a user tensor of the shape `shape` (fg_lstm_dims, the generator's record; in: a layer's input width, a
// sequence's columns; a sequence batch first or packed seen as time-major [T, B, in]) as rows of its last
// dimension, taken as `mode` says
aclnnStatus bind(FgLstmPlan &p, const Sizes &s, const aclTensor *t, int mode, Blk *out, int shape, int64_t in = 0) {
    mode = resolved(p, s, mode);
    int64_t dims[FG_COPY_MAX_DIMS];
    const uint64_t n = fg_lstm_dims(shape, s, in, dims);
    View v;
    aclnnStatus st = view_checked(t, &v, dims, n, s.dtype);
    if (st != ACLNN_SUCCESS) return st;
    if (shape == FG_LSTM_PACKED) unpack(&v, s.T, s.B);
    if (shape == FG_LSTM_SEQ_BF) swap01(&v);
    return rows_of(p, v, v.n - 1u, mode, out);
}

// every layer and direction's parameters (params' order: w_ih, w_hh, and with biases b_ih, b_hh): to read
// as the GEMMs read them (the weights in the call's dtype, the biases fp32), or their gradients to write
aclnnStatus param_rows(FgLstmPlan &p, const Sizes &s, const aclTensorList *list, int mode, std::vector<Blk> *out) {
    if ((int64_t)list->Size() != s.L * s.D * s.per) return ACLNN_ERR_PARAM_INVALID;
    out->assign((size_t)(s.L * s.D * s.per), Blk{});
    for (int64_t k = 0; k < s.L * s.D * s.per; ++k) {
        const int a = (int)(k % s.per);
        aclnnStatus st = bind(p, s, (*list)[(uint64_t)k], mode == WRITE ? WRITE : a < 2 ? READ_GEMM : READ,
                              &(*out)[(size_t)k], FG_LSTM_W_IH + a, k / s.per / s.D == 0 ? s.I : s.D * s.H);
        if (st != ACLNN_SUCCESS) return st;
    }
    return ACLNN_SUCCESS;
}

// every layer and direction's tensor of a list (L*D tensors [T, B, H]) as rows of H, taken as `mode` says
aclnnStatus list_rows(FgLstmPlan &p, const Sizes &s, const aclTensorList *list, int mode, std::vector<Blk> *out) {
    if ((int64_t)list->Size() != s.L * s.D) return ACLNN_ERR_PARAM_INVALID;
    out->assign((size_t)(s.L * s.D), Blk{});
    for (int64_t k = 0; k < s.L * s.D; ++k) {
        aclnnStatus st = bind(p, s, (*list)[(uint64_t)k], mode, &(*out)[(size_t)k], FG_LSTM_STEPS);
        if (st != ACLNN_SUCCESS) return st;
    }
    return ACLNN_SUCCESS;
}

// the initial states [L*D, B, H] as rows of H, zeros when not given (mode READ, READ_GEMM or READ_CELL)
aclnnStatus states_in(FgLstmPlan &p, const Sizes &s, const aclTensor *t, int mode, Blk *out) {
    mode = resolved(p, s, mode);
    if (t) return bind(p, s, t, mode, out, FG_LSTM_STATES);
    *out = p.buffer((uint64_t)(s.L * s.D * s.B), (uint32_t)s.H, mode == READ_GEMM ? (uint32_t)elem_bytes(s.dtype) : 4u);
    fill_rows(p, *out, (uint32_t)(s.L * s.D * s.B), (uint32_t)s.H);
    return ACLNN_SUCCESS;
}

// the step kernels' UB use per tile element
uint32_t fwd_per_elem() { return fg_step_ub_per_elem(4u, FG_LCF_STREAMS, FG_LCF_OUT_TILES, FG_LCF_SLOTS); }
uint32_t bwd_per_elem() { return fg_step_ub_per_elem(4u, FG_LSB_STREAMS, FG_LSB_OUT_TILES, FG_LSB_SLOTS); }

// ------------------------------------------------------------------ the second phase

char *resolve(const Blk &b, char *ws, uint64_t head) {
    return (b.base == IN_USER ? b.user : b.base == IN_HEAD ? ws : ws + head) + b.at;
}

uint32_t launch(const Op &o, char *ws, uint64_t head, aclrtStream stream) {
    void *a[FG_LSTM_ARGS];
    for (int k = 0; k < o.n; ++k) a[k] = resolve(o.a[k], ws, head);
    return fg_lstm_launch(o.kind, o.dt, o.blocks, stream, a, ws, ws + o.params);
}

// upload the head and queue every launch, in the plan's order; the plan is used up
aclnnStatus run(FgLstmPlan *p, void *workspace, uint64_t workspaceSize, aclrtStream stream) {
    if (!p) return ACLNN_ERR_PARAM_NULLPTR;
    const uint64_t head = p->head_bytes(), need = p->workspace();
    aclnnStatus s = ACLNN_SUCCESS;
    if (need && !workspace) s = ACLNN_ERR_PARAM_NULLPTR;
    else if (workspaceSize < need || (uintptr_t)workspace % 64u != 0) s = ACLNN_ERR_PARAM_INVALID;
    if (s == ACLNN_SUCCESS && head) {
        s = stage(workspace, head, stream, [&](char *h) { memcpy(h, p->head.data(), p->head.size()); });
    }
    for (size_t k = 0; s == ACLNN_SUCCESS && k < p->ops.size(); ++k) {
        if (launch(p->ops[k], (char *)workspace, head, stream) != 0) s = ACLNN_ERR_INNER;
    }
    for (size_t k = 0; s == ACLNN_SUCCESS && k < p->tail.size(); ++k) {
        if (launch(p->tail[k], (char *)workspace, head, stream) != 0) s = ACLNN_ERR_INNER;
    }
    delete p;
    return s;
}

// a persistent kernel's split of H: blocks x units, the slice streamed from GM at every step or not
struct Split {
    uint32_t blocks, units, stream;
};

// whether a layer and direction runs as the persistent forward or backward: a split of H on the cube
// cores (with two vector cores each; *sp, else 0 blocks) for the GEMMs' operand dtype dt, rows the
// Cube's copies reach (W_hh's, and those of the other operands: h0 and h, or dgates and dh)
bool persistent_fits(const FgLstmPlan &p, const Sizes &s, int dt, Blk w_hh, Blk h0, Blk h, Split *sp) {
    *sp = Split{0u, 0u, 0u};
    if (s.B == 0 || s.T == 0) return false;
    const uint32_t cores = p.ccores < p.vcores / 2u ? p.ccores : p.vcores / 2u;
    fg_lpf_split((uint32_t)s.H, cores, FG_LPF_L1_BYTES, FG_LPF_L0B_BYTES, FG_LPF_L0C_BYTES, fg_lstm_mm_tiles[dt].bm,
                 fg_lstm_mm_tiles[dt].bk, FG_LPF_A_TILES, dt == DT_F32 ? 4u : 2u, &sp->blocks, &sp->units, &sp->stream);
    const uint32_t most = FG_ND2NZ_MAX_PITCH;
    return sp->blocks > 0u && w_hh.pitch <= most && h0.pitch <= most && h.pitch <= most;
}

// the state before step t of a layer in direction d (forward 0, reverse 1; the per-step plan's rule):
// the initial state's rows `init` at the direction's first step, else the step before's rows of
// `all` [T, B, H]; where fewer sequences ran that step (reverse, variable lengths), those rows and the
// initial state's for the sequences starting at t, gathered into `scratch` [B, H]
Blk previous(FgLstmPlan &p, const Sizes &s, int64_t d, int64_t t, Blk all, Blk init, Blk scratch) {
    const int64_t pt = d == 0 ? t - 1 : t + 1, n = s.bs[(size_t)t];
    if (pt < 0 || pt >= s.T) return init;
    const int64_t run = s.bs[(size_t)pt];
    if (run >= n) return rows_from(all, (uint64_t)(pt * s.B));
    copy_rows(p, rows_from(all, (uint64_t)(pt * s.B)), scratch, (uint32_t)run, (uint32_t)s.H);
    copy_rows(p, rows_from(init, (uint64_t)run), rows_from(scratch, (uint64_t)run), (uint32_t)(n - run), (uint32_t)s.H);
    return scratch;
}

// the UB a persistent backward's cell may take: all of it, less the rounding's (FgLpNarrow) for float16 and
// bfloat16 GEMMs (the forward's cell takes all of it)
uint32_t cell_ub(int dt) { return dt == DT_F32 ? FG_ASCEND_UB_BYTES : FG_ASCEND_UB_BYTES - FG_LP_NARROW_UB; }

// the UB a cell of the persistent kernels takes an element, its tensors of dtype dt or fp32 (NARROW_SLOTS: the
// float16 / bfloat16 cells' casts)
uint32_t fwd_cell_per_elem(int dt) {
    return dt == DT_F32 ? fwd_per_elem() : fg_step_ub_per_elem(4u, FG_LCF_STREAMS, FG_LCF_OUT_TILES, FG_LCF_NARROW_SLOTS);
}
uint32_t bwd_cell_per_elem(int dt, bool dy_narrow) {
    return dt == DT_F32 ? bwd_per_elem() : fg_step_ub_per_elem(4u, FG_LSB_STREAMS, FG_LSB_OUT_TILES,
                                                               dy_narrow ? FG_LSB_NARROW_DY_SLOTS : FG_LSB_NARROW_SLOTS);
}

// a persistent kernel's cell on its vector cores (a step kernel's tiling c, FgLcfTiling or FgLsbTiling):
// all B rows on every vector core, H in 2 * blocks parts of units / 2 (part = GetBlockIdx() of the AIV)
template <typename Tiling>
void persistent_cell_split(Tiling *c, uint32_t blocks, uint32_t units, uint32_t B) {
    const uint32_t half = units / 2u;
    c->cores = 2u * blocks;
    c->rows_per_core = B;
    c->group = B;
    c->groups = 1u;
    c->h_parts = 2u * blocks;
    c->h_span = half;
    if (c->tile > half) c->tile = half;
}

// what both persistent kernels' tilings (FgLpfTiling, FgLpbTiling) start with, the rest zeros
template <typename Tiling>
Tiling persistent_head(const Sizes &s, const Split &sp, bool reverse, Blk w_hh) {
    Tiling t;
    memset(&t, 0, sizeof(t));
    t.blocks = sp.blocks;
    t.units = sp.units;
    t.stream = sp.stream;
    t.steps = (uint32_t)s.T;
    t.n = (uint32_t)s.B;
    t.h = (uint32_t)s.H;
    t.reverse = reverse ? 1u : 0u;
    t.packed = s.varlen() ? 1u : 0u;
    t.s_w = w_hh.pitch;
    return t;
}

// a persistent kernel's launch: its tiling t, and with packed sequences each step's batch size after it
template <typename Tiling>
void push_persistent(FgLstmPlan &p, const Sizes &s, int kind, int dt, const Tiling &t, const Blk *args, int n) {
    std::vector<char> par(sizeof(t) + (t.packed ? (size_t)s.T * 4u : 0u));
    memcpy(par.data(), &t, sizeof(t));
    for (size_t k = 0; t.packed && k < (size_t)s.T; ++k) {
        const uint32_t b = (uint32_t)s.bs[k];
        memcpy(par.data() + sizeof(t) + 4u * k, &b, 4u);
    }
    push(p, kind, dt, t.blocks, args, n, par.data(), par.size());
}

// the persistent forward of one layer and direction: every step's h, c and (train) activations from
// h0, c0, W_hh and xw = x . W_ih^T + b_ih + b_hh, the gates through the workspace hw [B, 4H], on the
// split persistent_fits found
void persistent(FgLstmPlan &p, const Sizes &s, int dt, const Split &sp, bool train, bool reverse, Blk w_hh, Blk h0,
                Blk c0, Blk xw, Blk hw, Blk hk, Blk hg, Blk ck, const Blk acts[5]) {
    const uint32_t B = (uint32_t)s.B, H = (uint32_t)s.H, blocks = sp.blocks, units = sp.units;
    struct FgLpfTiling t = persistent_head<FgLpfTiling>(s, sp, reverse, w_hh);
    t.s_h0 = h0.pitch;
    t.s_hy = hk.pitch;
    t.s_hg = hg.pitch;
    t.st_hy = (uint64_t)B * hk.pitch;
    t.st_hg = (uint64_t)B * hg.pitch;
    t.st_cy = (uint64_t)B * ck.pitch;
    t.st_xw = (uint64_t)B * xw.pitch;
    for (int a = 0; a < 5; ++a) t.st_act[a] = train ? (uint64_t)B * acts[a].pitch : 0u;
    t.train = train ? 1u : 0u;
    struct FgLcfTiling c = fg_lcf_tiling(B, H, fwd_cell_per_elem(dt), FG_ASCEND_UB_BYTES, 2u * t.blocks);
    persistent_cell_split(&c, blocks, units, B);
    const Blk cell[10] = {hw, xw, c0, hk, ck, acts[0], acts[1], acts[2], acts[3], acts[4]};
    fg_lcf_pitches(&c, cell);
    t.cell = c;
    const Blk args[13] = {h0, w_hh, xw, c0, hk, hg, ck, acts[0], acts[1], acts[2], acts[3], acts[4], hw};
    push_persistent(p, s, OP_PERSIST, dt, t, args, 13);
}

// the persistent backward through time of one layer and direction (the forward in `reverse` order or
// not): every step's dgates (into dg, [T*B, 4H] rows of this direction) from the dh workspace dhr
// (holding dh at the start, dh0 at the end), the two dc workspaces dcs (dcs[0] holding dc at the
// start, dcs[T % 2] dc0 at the end), dy (fp32, or the caller's float16 / bfloat16: the kernel whose cell reads
// it so), c0, and the forward's saved sv (i, f, g, o, tanhc, h, c); dgg the dgates the GEMM reads (of operand
// dtype dt: dg itself for float32)
void persistent_bwd(FgLstmPlan &p, const Sizes &s, int dt, const Split &sp, bool reverse, Blk w_hh, Blk dhr, Blk dy,
                    const Blk dcs[2], Blk c0, const Blk sv[7], Blk dg, Blk dgg) {
    const uint32_t B = (uint32_t)s.B, H = (uint32_t)s.H, blocks = sp.blocks, units = sp.units;
    struct FgLpbTiling t = persistent_head<FgLpbTiling>(s, sp, reverse, w_hh);
    t.s_dg = dg.pitch;
    t.s_dhr = dhr.pitch;
    t.s_c0 = c0.pitch;
    t.s_c = sv[6].pitch;
    t.st_dy = (uint64_t)B * dy.pitch;
    t.st_c = (uint64_t)B * sv[6].pitch;
    t.st_dg = (uint64_t)B * dg.pitch;
    t.s_dgg = dgg.pitch;
    t.st_dgg = (uint64_t)B * dgg.pitch;
    for (int a = 0; a < 5; ++a) t.st_act[a] = (uint64_t)B * sv[a].pitch;
    const bool dy_narrow = dy.esize == 2u;  // the caller's float16 / bfloat16 dy (a lower layer's: fp32)
    struct FgLsbTiling c = fg_lsb_tiling(B, H, bwd_cell_per_elem(dt, dy_narrow), cell_ub(dt), 2u * blocks);
    persistent_cell_split(&c, blocks, units, B);
    const Blk cell[11] = {dhr, dy, dcs[0], c0, sv[0], sv[1], sv[2], sv[3], sv[4], dg, dcs[1]};
    fg_lsb_pitches(&c, cell);
    t.cell = c;
    const Blk args[14] = {w_hh, dhr, dy, dcs[0], dcs[1], c0, sv[6], sv[0], sv[1], sv[2], sv[3], sv[4], dg, dgg};
    push_persistent(p, s, dy_narrow ? OP_PERSIST_BWD_DY : OP_PERSIST_BWD, dt, t, args, 14);
}

// the GEMMs' operand dtype of a call
int gemm_dt(const Sizes &s) { return s.dtype == ACL_FLOAT ? DT_F32 : s.dtype == ACL_FLOAT16 ? DT_F16 : DT_BF16; }

// whether a float16 / bfloat16 call's layers all run on the persistent kernels (a split of H; rows of H and
// the workspace's are within the Cube copies' reach), whose cells read and write the caller's tensors in its
// dtype (lowering/ascend/persistent.py NARROW): the modes READ_CELL and WRITE_CELL bind them so
bool narrow_cells(const FgLstmPlan &p, const Sizes &s) {
    const Blk rows{IN_BUFFERS, nullptr, 0, (uint32_t)s.H, 2u};
    Split sp;
    return s.dtype != ACL_FLOAT && persistent_fits(p, s, gemm_dt(s), rows, rows, rows, &sp);
}

// the first phase's end: the plan handed out as the executor with its workspace size, or deleted and
// the status returned
aclnnStatus hand_out(FgLstmPlan *p, aclnnStatus st, uint64_t *workspaceSize, aclOpExecutor **executor) {
    if (st == ACLNN_SUCCESS && p->too_wide) st = ACLNN_ERR_PARAM_INVALID;  // rows wider than the GEMMs take
    if (st == ACLNN_SUCCESS) st = ieee_overflow_mode();  // NaN and Inf as IEEE 754 says (host_common.cpp)
    if (st != ACLNN_SUCCESS) {
        delete p;
        return st;
    }
    *workspaceSize = p->workspace();
    *executor = reinterpret_cast<aclOpExecutor *>(p);
    return ACLNN_SUCCESS;
}

// ------------------------------------------------------------------ the shared plan's walk

// an argument of a plan launch at its layer: its buffer's slot (fg_plan_slot) and view (offset, shape,
// strides in elements of the plan's dense buffer)
struct PlanArg {
    int64_t slot;
    int64_t off;
    uint32_t rank;
    int64_t shape[4], strides[4];
};

// One pass's plan (op_host/fg_lstm_plan.h: fusedgrad/lstm/launches.py's data for every size) walked in
// its order, each launch lowered onto this package's kernels. A plan buffer (a slot: its family at a
// layer) is the call's (user: its fp32 rows and the rows the GEMMs read, one block or one per layer and
// direction for the [L*D, T, B, H] ones), a weight, a gradient the call wants, or a workspace buffer
// made at its first use: fp32, and in the GEMMs' dtype where a GEMM reads it (float32 calls: one
// buffer); zeros first where the plan says so; kept as the generator says (fg_lstm_keep: in another
// family's storage, K-major). gemm, add, copy, column_sum, zero_past_batch and gather_last_steps are
// lowered here, the layer ops by the pass's `layer` (false: a launch it does not lower); without
// `dparams` the launches that only make the parameters' gradients are left out.
class PlanWalk {
  public:
    PlanWalk(FgLstmPlan &p, const Sizes &s, bool backward, bool bias, bool train, bool need_dx, bool dparams, int dt)
        : p_(p), s_(s), dt_(dt), dparams_(dparams), plan_(fg_plan_find(backward, s.D, bias, s.varlen(), train, need_dx)),
          slots_((size_t)(FG_PB_N * s.L)) {}

    // a user tensor of a family of the whole call: one block, or one per layer and direction
    void user(int family, const std::vector<Blk> &f, const std::vector<Blk> &g) {
        slots_[(size_t)(family * s_.L)].f = f, slots_[(size_t)(family * s_.L)].g = g;
    }

    // user tensors of one block each, {family, block}, as the GEMMs read them too
    void users(std::initializer_list<std::pair<int, Blk>> blocks) {
        for (const auto &b : blocks) user(b.first, {b.second}, {b.second});
    }

    // the parameters (w_ih, w_hh in the call's dtype; b_ih, b_hh fp32) of every layer and direction,
    // or with `grads` their gradients (fp32), params' order; their families fg_lstm_param_families (fg_lstm_plan.h)
    void params(const std::vector<Blk> &w, bool grads) {
        for (int64_t k = 0; k < s_.L * s_.D; ++k) {
            for (int a = 0; a < s_.per; ++a) {
                Place &pl = slots_[(size_t)(fg_lstm_param_families[grads][k % s_.D][a] * s_.L + k / s_.D)];
                pl.f = pl.g = {w[(size_t)(k * s_.per + a)]};
            }
        }
    }

    // the launch's argument `param` (false: it has none)
    bool arg(const FgPlanLaunch &x, int param, PlanArg *out) const {
        for (uint32_t a = 0; a < x.nargs; ++a) {
            const struct FgPlanArg &g = fg_plan_args[x.first_arg + a];
            if ((int)g.param != param) continue;
            const struct FgPlanView &w = fg_plan_views[g.view];
            if (w.rank > 4u) return false;
            out->slot = fg_plan_slot(g.buffer, l_, s_.L);
            out->off = fg_plan_eval(w.offset, v_);
            out->rank = w.rank;
            for (uint32_t k = 0; k < w.rank; ++k) {
                out->shape[k] = fg_plan_eval(w.shape[k], v_);
                out->strides[k] = fg_plan_eval(w.strides[k], v_);
            }
            return out->slot >= 0 && out->slot < (int64_t)slots_.size();
        }
        return false;
    }

    // the block where a view's first element is: fp32, or (gemm) as the GEMMs read it
    bool locate(const PlanArg &a, bool gemm, Blk *out) {
        const Place *pl = place(a.slot, gemm);
        if (!pl) return false;
        const std::vector<Blk> &b = gemm ? pl->g : pl->f;
        const int64_t w = slots_[(size_t)a.slot].width, size = slots_[(size_t)a.slot].size;
        const int64_t per = b.size() > 1 ? size / (int64_t)b.size() : size + 1;
        const int64_t k = a.off / per, rem = a.off % per;
        bool empty = false;
        for (uint32_t j = 0; j < a.rank; ++j) empty = empty || a.shape[j] == 0;
        if (empty && !b.empty() && w >= 1) {  // nothing to read or write (it may start at the buffer's end)
            *out = b[0];
            return true;
        }
        if (w < 1 || k >= (int64_t)b.size()) return false;
        *out = cols_from(rows_from(b[(size_t)k], (uint64_t)(rem / w)), (uint64_t)(rem % w));
        return true;
    }

    // locate for a view of whole rows of its buffer: false for another (a last stride but 1, rows not
    // one buffer row apart, a buffer kept K-major)
    bool rows(const PlanArg &a, bool gemm, Blk *out) {
        const Slot &sl = slots_[(size_t)a.slot];
        if (sl.width < 0 || kept(a.slot).kmajor) return false;
        for (uint32_t k = 0; k + 1u < a.rank; ++k) {
            int64_t inner = sl.width;
            for (uint32_t j = k + 1u; j + 1u < a.rank; ++j) inner *= a.shape[j];
            if (a.shape[k] > 1 && a.strides[k] != inner) return false;
        }
        if (a.rank && a.shape[a.rank - 1u] > 1 && a.strides[a.rank - 1u] != 1) return false;
        return locate(a, gemm, out);
    }

    // walk the plan: every launch wanted lowered here or by layer(launch, *this)
    template <typename Layer>
    aclnnStatus run(Layer &&layer) {
        if (!plan_) return ACLNN_ERR_INNER;
        fg_plan_buffers_of(*plan_, s_.L, [&](const struct FgPlanBuffer &b, int64_t l) {
            const int64_t k = fg_plan_slot(b.name, l, s_.L);
            if (k < 0 || k >= (int64_t)slots_.size() || slots_[(size_t)k].width >= 0) return;
            Slot &sl = slots_[(size_t)k];
            int64_t v[FG_PV_N];
            fg_plan_vars(s_.T, s_.B, s_.I, s_.H, s_.L, l, v);
            sl.size = 1;
            for (uint8_t j = 0; j < b.rank; ++j) sl.size *= fg_plan_eval(b.shape[j], v);
            sl.width = b.rank ? fg_plan_eval(b.shape[b.rank - 1u], v) : 1;
            sl.workspace = b.role == FG_PR_WORKSPACE;
            sl.zero = b.zero != 0;
        });
        aclnnStatus st = ACLNN_SUCCESS;
        fg_plan_walk(*plan_, s_.L, [&](const struct FgPlanLaunch &x, int64_t l) {
            if (st != ACLNN_SUCCESS || (x.dparams_only && !dparams_)) return;
            at(l);
            const bool ok = x.op == FG_OP_GEMM ? gemm(x) : x.op == FG_OP_ADD ? add(x) : x.op == FG_OP_COPY ? copy(x) :
                            x.op == FG_OP_COLUMN_SUM ? column_sum(x) : x.op == FG_OP_ZERO_PAST_BATCH ? zero_past_batch(x) :
                            x.op == FG_OP_GATHER_LAST_STEPS ? gather_last_steps(x) : layer(x, *this);
            if (!ok) st = ACLNN_ERR_INNER;
        });
        return st;
    }

  private:
    struct Place {
        std::vector<Blk> f, g;
    };
    struct Slot : Place {
        int64_t width = -1, size = 0;  // the plan buffer's last dimension and elements (width -1: none)
        bool workspace = false, zero = false;
    };

    void at(int64_t l) {
        l_ = l;
        fg_plan_vars(s_.T, s_.B, s_.I, s_.H, s_.L, l, v_);
    }

    const FgLstmKeep &kept(int64_t slot) const { return fg_lstm_keep[slot / s_.L]; }

    // whether a data movement (copy, zero fill, gather) into a slot moves what the GEMMs read: a
    // workspace buffer only GEMMs read
    bool as_gemm(int64_t slot) const { return slots_[(size_t)slot].workspace && kept(slot).gemm; }

    // a slot's place; a workspace buffer's fp32 or GEMM-dtype storage made at its first use (one
    // storage for both in a float32 call), in the family fg_lstm_keep says ([C, R] for the plan's
    // [R, C] where it says K-major)
    const Place *place(int64_t slot, bool gemm) {
        const FgLstmKeep &k = kept(slot);
        if ((int64_t)k.store != slot / s_.L) return place((int64_t)k.store * s_.L + slot % s_.L, gemm);
        Slot &pl = slots_[(size_t)slot];
        if (!pl.f.empty() && !pl.g.empty()) return &pl;
        if (!pl.workspace || pl.width < 0) return nullptr;
        const int64_t w = pl.width, rows = w ? pl.size / w : 0;
        const uint32_t width = (uint32_t)(k.kmajor ? rows : w);
        const uint64_t n = (uint64_t)(k.kmajor ? w : rows);
        const bool same = dt_ == DT_F32;
        std::vector<Blk> &mine = gemm || same ? pl.g : pl.f;
        if (mine.empty()) {
            mine.push_back(p_.buffer(n, width, gemm && !same ? 2u : 4u));
            if (pl.zero) fill_rows(p_, mine[0], (uint32_t)n, width);
            if (same) pl.f = pl.g;
        }
        return &pl;
    }

    // c = a . b (+ bias) (+ addend): a row-major, or a transposed buffer's (read K-major); b row-major
    // (stored [K, N]) or column-major (a weight [N, K]); the addend added after the GEMM
    bool gemm(const FgPlanLaunch &x) {
        PlanArg a, b, c, bias, addend;
        Blk ab, bb, cb, biasb, addb;
        if (!arg(x, FG_PP_A, &a) || !arg(x, FG_PP_B, &b) || !arg(x, FG_PP_C, &c) || !rows(c, false, &cb)) return false;
        const uint32_t m = (uint32_t)a.shape[0], k = (uint32_t)a.shape[1], n = (uint32_t)b.shape[1];
        const bool has_bias = (x.flags_on & FG_PF_HAS_BIAS) != 0, has_addend = (x.flags_on & FG_PF_HAS_ADDEND) != 0;
        if (has_bias && (!arg(x, FG_PP_BIAS, &bias) || !rows(bias, false, &biasb))) return false;
        if (has_addend && (!arg(x, FG_PP_ADDEND, &addend) || !rows(addend, false, &addb))) return false;
        const bool a_km = kept(a.slot).kmajor != 0;
        if (a_km) {  // a view [M, K] of the plan's [R, C] kept as its transpose: the storage's rows c0 .., column r0
            const int64_t w = slots_[(size_t)a.slot].width;
            if (a.strides[1] != 1 || (a.shape[0] > 1 && a.strides[0] != w) || !locate_transposed(a, &ab)) return false;
        } else if (!rows(a, true, &ab)) {
            return false;
        }
        // b read as the [N, K] rows a column-major view is stored in (a weight), or as row-major [K, N]:
        // the bias GEMM takes the first, a K-major A the second, otherwise what the view's strides are
        const bool can_nk = b.shape[0] <= 1 || b.strides[0] == 1, can_kn = b.shape[1] <= 1 || b.strides[1] == 1;
        const bool b_nk = a_km ? false : has_bias ? true : !can_kn;
        if (b_nk ? !can_nk : !can_kn) return false;
        PlanArg bt = b;
        if (b_nk) {  // seen as the [N, K] rows it is stored in
            bt.shape[0] = b.shape[1], bt.shape[1] = b.shape[0], bt.strides[0] = b.strides[1], bt.strides[1] = 1;
        }
        if (!rows(bt, true, &bb)) return false;
        if (has_bias && a_km) return false;  // no such Cube GEMM
        const int kind = a_km ? OP_MM_KM_KN : has_bias ? OP_MM_BIAS : b_nk ? OP_MM : OP_MM_MK_KN;
        if (k == 0) {  // an empty sum: zeros, or the addend (no bias: every K of the plan's biased GEMMs is >= 1)
            if (has_bias) return false;
            if (has_addend) copy_rows(p_, addb, cb, m, n);
            else fill_rows(p_, cb, m, n);
            return true;
        }
        mm(p_, kind, dt_, ab, bb, has_bias ? &biasb : nullptr, cb, m, n, k);
        if (has_addend) add_rows(p_, cb, addb, cb, m, n);
        return true;
    }

    // where a transposed buffer's view starts in its storage (as the GEMMs read it): the plan's element
    // (r0, c0) is the storage's row c0, column r0
    bool locate_transposed(const PlanArg &a, Blk *out) {
        const Place *pl = place(a.slot, true);
        const int64_t w = slots_[(size_t)a.slot].width;
        if (!pl || w < 1) return false;
        const int64_t r0 = a.off / w, c0 = a.off % w;
        *out = cols_from(rows_from(pl->g[0], (uint64_t)c0), (uint64_t)r0);
        return true;
    }

    bool add(const FgPlanLaunch &x) {
        PlanArg a, b, out;
        Blk ab, bb, ob;
        if (!arg(x, FG_PP_A, &a) || !arg(x, FG_PP_B, &b) || !arg(x, FG_PP_OUT, &out) || !rows(a, false, &ab) ||
            !rows(b, false, &bb) || !rows(out, false, &ob)) {
            return false;
        }
        add_rows(p_, ab, bb, ob, 1u, (uint32_t)a.shape[0]);
        return true;
    }

    // dst = src, both [X, Y, Z] views of rows
    bool copy(const FgPlanLaunch &x) {
        PlanArg src, dst;
        Blk sb, db;
        if (!arg(x, FG_PP_SRC, &src) || !arg(x, FG_PP_DST, &dst)) return false;
        const bool g = as_gemm(dst.slot);
        if (!rows(src, g, &sb) || !rows(dst, g, &db) || sb.esize != db.esize) return false;
        copy_rows(p_, sb, db, (uint32_t)(src.shape[0] * src.shape[1]), (uint32_t)src.shape[2]);
        return true;
    }

    // s = the column sums of a [M, N] (fp32): the GEMM ones[1, M] . a
    bool column_sum(const FgPlanLaunch &x) {
        PlanArg a, sv;
        Blk ab, sb;
        if (!arg(x, FG_PP_A, &a) || !arg(x, FG_PP_S, &sv) || !rows(a, false, &ab) || !rows(sv, false, &sb)) return false;
        const uint32_t m = (uint32_t)a.shape[0];
        if (ones_.pitch < m) {
            std::vector<float> ones((size_t)m, 1.0f);
            ones_ = Blk{IN_HEAD, nullptr, p_.put(ones.data(), ones.size() * 4u), m, 4u};
        }
        mm(p_, OP_MM_MK_KN, DT_F32, ones_, ab, nullptr, sb, 1u, (uint32_t)a.shape[1], m);
        return true;
    }

    // rows [T', B, N]: zeros past each step's batch size (batch_sizes from its view's offset)
    bool zero_past_batch(const FgPlanLaunch &x) {
        PlanArg bs, r;
        Blk rb;
        if (!arg(x, FG_PP_BATCH_SIZES, &bs) || !arg(x, FG_PP_ROWS, &r) || !rows(r, as_gemm(r.slot), &rb)) return false;
        const int64_t B = r.shape[1];
        for (int64_t t = 0; t < r.shape[0]; ++t) {
            const int64_t n = s_.bs[(size_t)(bs.off + t)];
            fill_rows(p_, rows_from(rb, (uint64_t)(t * B + n)), (uint32_t)(B - n), (uint32_t)r.shape[2]);
        }
        return true;
    }

    // dst[b] = src[t, b] at row b's last step t
    bool gather_last_steps(const FgPlanLaunch &x) {
        PlanArg src, dst;
        Blk sb, db;
        if (!arg(x, FG_PP_SRC, &src) || !arg(x, FG_PP_DST, &dst)) return false;
        const bool g = as_gemm(dst.slot);
        if (src.shape[0] != s_.T || !kept(dst.slot).kmajor || !rows(src, g, &sb) || !locate_transposed(dst, &db)) {
            return false;
        }
        gather_last(p_, s_.bs, sb, db, src.shape[1], (uint32_t)src.shape[2]);
        return true;
    }

    FgLstmPlan &p_;
    const Sizes &s_;
    int dt_;
    bool dparams_;
    const struct FgPlanVariant *plan_;
    int64_t l_ = 0, v_[FG_PV_N] = {0};
    Blk ones_{IN_HEAD, nullptr, 0, 0, 4u};
    std::vector<Slot> slots_;  // by fg_plan_slot
};

//@ passes
// ------------------------------------------------------------------ the passes

// aclnnLSTM's launches once its tensors are bound (a, FgLstmForwardArgs, of the generator's record of the
// entry point: lowering/ascend/lstm_entry.py): the plan's, lowered here. With `train` the saved lists are the
// caller's; without, h and c of every step are in the workspace, and one step's activations.
aclnnStatus forward(FgLstmPlan &p, const Sizes &s, bool train, FgLstmForwardArgs &a) {
    const int64_t T = s.T, B = s.B, H = s.H, D = s.D, L = s.L, TB = T * B;
    const uint32_t h = (uint32_t)H, g4 = 4u * h;
    const int dt = gemm_dt(s);  // the GEMMs' operands: the call's dtype
    const bool low = dt != DT_F32, narrow = narrow_cells(p, s);  // narrow: h and the activations in the call's dtype
    const uint32_t ge = low ? 2u : 4u, ce = narrow ? ge : 4u;
    if (!low) a.h0g = a.h0;
    if (T == 0) {  // no steps: the final state is the initial state
        copy_rows(p, a.h0, a.hy, (uint32_t)(L * D * B), h);
        copy_rows(p, a.c0, a.cy, (uint32_t)(L * D * B), h);
        return ACLNN_SUCCESS;
    }
    std::vector<Blk> *acts[5] = {&a.i, &a.f, &a.g, &a.o, &a.tanhc};  // the kernel's order
    for (int64_t k = 0; !train && k < L * D; ++k) {
        a.h.push_back(p.buffer((uint64_t)TB, h, ce));
        a.c.push_back(p.buffer((uint64_t)TB, h));
    }
    for (int n = 0; !train && n < 5; ++n) acts[n]->assign((size_t)(L * D), p.buffer((uint64_t)B, h, ce));
    const Blk hw = p.buffer((uint64_t)B, g4);
    const Blk prev_h = p.buffer((uint64_t)B, h, ge), prev_c = p.buffer((uint64_t)B, h);
    // h of every step as the GEMMs read it: h itself (float32, or written in the call's dtype), or its fp16 /
    // bf16 rounding
    std::vector<Blk> hg((size_t)(L * D));
    for (int64_t k = 0; k < L * D; ++k) hg[(size_t)k] = low && !narrow ? p.buffer((uint64_t)TB, h, ge) : a.h[(size_t)k];
    // the lowering of the plan's lstm_layer_forward for layer and direction k: the persistent kernel where
    // it fits, else a GEMM and a step kernel per step (not with narrow cells: false); hy and cy from the steps
    auto layer = [&](int64_t k, int64_t d, Blk xw) {
        const Blk whh = a.w[(size_t)(k * s.per + 1)];
        const Blk hk = a.h[(size_t)k], ck = a.c[(size_t)k], hgk = hg[(size_t)k];
        const Blk h0k = rows_from(a.h0g, (uint64_t)(k * B)), c0k = rows_from(a.c0, (uint64_t)(k * B));
        Blk act[5];
        for (int n = 0; n < 5; ++n) act[n] = (*acts[n])[(size_t)k];
        if (s.varlen()) {  // steps past a sequence's end are zeros in every output
            fill_rows(p, hk, (uint32_t)TB, h);
            fill_rows(p, ck, (uint32_t)TB, h);
            for (int n = 0; train && n < 5; ++n) fill_rows(p, act[n], (uint32_t)TB, h);
            if (low && !narrow) fill_rows(p, hgk, (uint32_t)TB, h);  // the next layer's GEMM reads its padding
        }
        Split sp;
        const bool whole = persistent_fits(p, s, dt, whh, h0k, hgk, &sp);
        if (narrow && !whole) return false;
        if (whole) persistent(p, s, dt, sp, train, d == 1, whh, h0k, c0k, xw, hw, hk, hgk, ck, act);
        for (int64_t q = 0; q < T && !whole; ++q) {
            const int64_t t = d == 0 ? q : T - 1 - q, n = s.bs[(size_t)t];
            const Blk hp = previous(p, s, d, t, hgk, h0k, prev_h), cp = previous(p, s, d, t, ck, c0k, prev_c);
            // h_{t-1} . W_hh^T, then the step: gates = that + (x . W_ih^T + b_ih + b_hh)_t
            mm(p, OP_MM, dt, hp, whh, nullptr, hw, (uint32_t)n, g4, h);
            const uint64_t at = (uint64_t)(t * B), sat = train ? at : 0u;
            const Blk args[10] = {hw, rows_from(xw, at), cp, rows_from(hk, at), rows_from(ck, at),
                                  rows_from(act[0], sat), rows_from(act[1], sat), rows_from(act[2], sat),
                                  rows_from(act[3], sat), rows_from(act[4], sat)};
            struct FgLcfTiling tl = fg_lcf_tiling((uint32_t)n, h, fwd_per_elem(), FG_ASCEND_UB_BYTES, p.vcores);
            fg_lcf_pitches(&tl, args);
            if (n > 0) push(p, OP_FWD, 0, tl.cores, args, 10, &tl, sizeof(tl));
            if (low) narrow_rows(p, s.dtype, args[3], rows_from(hgk, at), (uint32_t)n, h);
        }
        // the final states: each sequence's last step (forward: its own length; reverse: step 0)
        const Blk hyk = rows_from(a.hy, (uint64_t)(k * B)), cyk = rows_from(a.cy, (uint64_t)(k * B));
        if (d == 0) {
            gather_last(p, s.bs, hk, hyk, B, h);
            gather_last(p, s.bs, ck, cyk, B, h);
        } else {
            copy_rows(p, hk, hyk, (uint32_t)B, h);
            copy_rows(p, ck, cyk, (uint32_t)B, h);
        }
        return true;
    };
    PlanWalk pw(p, s, false, s.per == 4, train, true, true, dt);
    pw.users({{FG_PB_X, a.x}, {FG_PB_C0, a.c0}, {FG_PB_Y, a.y}, {FG_PB_HY, a.hy}, {FG_PB_CY, a.cy}});
    pw.user(FG_PB_H0, {a.h0}, {a.h0g});
    pw.user(FG_PB_H, a.h, hg);
    pw.user(FG_PB_C, a.c, a.c);
    const int saved[5] = {FG_PB_I, FG_PB_F, FG_PB_G, FG_PB_O, FG_PB_TANHC};
    for (int n = 0; train && n < 5; ++n) pw.user(saved[n], *acts[n], *acts[n]);
    pw.params(a.w, false);
    return pw.run([&](const FgPlanLaunch &x, PlanWalk &at) {
        PlanArg hv, xv;
        Blk xw;
        if (x.op != FG_OP_LSTM_LAYER_FORWARD || !at.arg(x, FG_PP_H, &hv) || !at.arg(x, FG_PP_XW, &xv) ||
            !at.locate(xv, false, &xw)) {
            return false;
        }
        return layer(hv.off / (T * B * H), x.flags_on & FG_PF_REVERSE ? 1 : 0, xw);
    });
}

// aclnnLstmBackward's launches once its tensors are bound (a, FgLstmBackwardArgs), of the outputs `want`
// (dx, dh0, dc0, dparams)
aclnnStatus backward(FgLstmPlan &p, const Sizes &s, const bool want[4], FgLstmBackwardArgs &a) {
    const int64_t T = s.T, B = s.B, H = s.H, D = s.D, L = s.L;
    const uint32_t hh = (uint32_t)H, g4 = 4u * hh;
    const int dt = gemm_dt(s);  // the GEMMs' operands: the call's dtype
    const bool low = dt != DT_F32, narrow = narrow_cells(p, s);  // narrow: dy, c0, c, the activations in its dtype
    if (T == 0) {  // no steps: the initial states' gradients are dh, dc; no others
        if (want[1]) copy_rows(p, a.dh, a.dh0, (uint32_t)(L * D * B), hh);
        if (want[2]) copy_rows(p, a.dc, a.dc0, (uint32_t)(L * D * B), hh);
        for (size_t k = 0; want[3] && k < a.dw.size(); ++k) {
            const int64_t kind = (int64_t)k % s.per, l = (int64_t)k / s.per / D;
            fill_rows(p, a.dw[k], kind < 2 ? g4 : 1u, kind == 0 ? (uint32_t)(l == 0 ? s.I : D * H) : kind == 1 ? hh : g4);
        }
        return ACLNN_SUCCESS;
    }
    const Blk dh_rec = p.buffer((uint64_t)B, hh);
    const Blk dcs[2] = {p.buffer((uint64_t)B, hh), p.buffer((uint64_t)B, hh)};
    const Blk prev_c = p.buffer((uint64_t)B, hh);
    // the forward's saved tensors in the step kernel's order, then h (as the GEMMs read it: the layer's
    // input and h_{t-1} of the weight gradients) and c
    const std::vector<Blk> *saved[7] = {&a.i, &a.f, &a.g, &a.o, &a.tanhc, &a.h, &a.c};
    // the lowering of the plan's lstm_layer_backward for layer and direction k: dgates (dgd, fp32, and
    // dgd_g as the GEMMs read them) of every step from dy (dyd: this direction's columns), the persistent
    // kernel where it fits, else a step kernel and a GEMM per step (not with narrow cells: false); dh0 and dc0
    // where wanted. The plan's dgates_t is not written: the GEMMs read dgates K-major instead.
    auto layer = [&](int64_t k, int64_t d, Blk dyd, Blk dgd, Blk dgd_g) {
        const Blk whh = a.w[(size_t)(k * s.per + 1)];
        Blk sv[7];
        for (int n = 0; n < 7; ++n) sv[n] = (*saved[n])[(size_t)k];
        const Blk ck = sv[6], c0k = rows_from(a.c0, (uint64_t)(k * B));
        const Blk dhk = rows_from(a.dh, (uint64_t)(k * B)), dck = rows_from(a.dc, (uint64_t)(k * B));
        const Blk dh0k = rows_from(a.dh0, (uint64_t)(k * B)), dc0k = rows_from(a.dc0, (uint64_t)(k * B));
        int flip = 0;
        Split sp;
        const bool whole = persistent_fits(p, s, dt, whh, dgd_g, dh_rec, &sp);
        if (narrow && !whole) return false;
        if (d == 1 || whole) {  // every sequence's last step in this direction: the gradients start there
            copy_rows(p, dhk, dh_rec, (uint32_t)B, hh);
            copy_rows(p, dck, dcs[0], (uint32_t)B, hh);
        }
        if (whole && s.varlen() && d == 0) copy_rows(p, dck, dcs[1], (uint32_t)B, hh);  // rows join in either
        if (whole) {  // the whole recurrence in one launch; dh0 where it leaves it (rows past a step's batch keep
            // theirs), dc0 in the dc workspace the step after a row's last wrote (backward step q writes dcs[(q + 1) % 2])
            persistent_bwd(p, s, dt, sp, d == 1, whh, dh_rec, dyd, dcs, c0k, sv, dgd, dgd_g);
            if (want[1]) copy_rows(p, dh_rec, dh0k, (uint32_t)B, hh);
            for (int64_t t = 0; want[2] && t < T; ++t) {  // the rows whose backward ends at t (forward: all, t = 0)
                const int64_t lo = d == 1 && t + 1 < T ? s.bs[(size_t)(t + 1)] : 0, hi = d == 1 || t == 0 ? s.bs[(size_t)t] : 0;
                const Blk dc = dcs[(d == 0 ? T : t + 1) % 2];  // written by that step
                copy_rows(p, rows_from(dc, (uint64_t)lo), rows_from(dc0k, (uint64_t)lo), (uint32_t)(hi - lo), hh);
            }
        }
        for (int64_t q = 0; q < T && !whole; ++q) {
            const int64_t t = d == 0 ? T - 1 - q : q, n = s.bs[(size_t)t];
            const uint64_t at = (uint64_t)(t * B);
            if (d == 0) {  // sequences whose last step is t start here from dh, dc
                const uint64_t lo = (uint64_t)(t + 1 < T ? s.bs[(size_t)(t + 1)] : 0);
                copy_rows(p, rows_from(dhk, lo), rows_from(dh_rec, lo), (uint32_t)(n - lo), hh);
                copy_rows(p, rows_from(dck, lo), rows_from(dcs[flip], lo), (uint32_t)(n - lo), hh);
            }
            const Blk cp = previous(p, s, d, t, ck, c0k, prev_c);
            const Blk args[11] = {dh_rec, rows_from(dyd, at), dcs[flip], cp, rows_from(sv[0], at), rows_from(sv[1], at),
                                  rows_from(sv[2], at), rows_from(sv[3], at), rows_from(sv[4], at), rows_from(dgd, at),
                                  dcs[1 - flip]};
            struct FgLsbTiling tl = fg_lsb_tiling((uint32_t)n, hh, bwd_per_elem(), FG_ASCEND_UB_BYTES, p.vcores);
            fg_lsb_pitches(&tl, args);
            push(p, OP_BWD, 0, tl.cores, args, 11, &tl, sizeof(tl));
            flip = 1 - flip;
            if (low) narrow_rows(p, s.dtype, args[9], rows_from(dgd_g, at), (uint32_t)n, g4);
            // dh_{t-1} = dgates_t . W_hh (W_hh stored [4H, H]: K-major)
            mm(p, OP_MM_MK_KN, dt, rows_from(dgd_g, at), whh, nullptr, dh_rec, (uint32_t)n, hh, g4);
            // sequences whose first step (in this direction) is t end here: dh0, dc0
            const uint64_t lo = (uint64_t)(d == 1 && t + 1 < T ? s.bs[(size_t)(t + 1)] : 0);
            if ((d == 0 && t == 0) || d == 1) {
                if (want[1]) copy_rows(p, rows_from(dh_rec, lo), rows_from(dh0k, lo), (uint32_t)(n - lo), hh);
                if (want[2]) copy_rows(p, rows_from(dcs[flip], lo), rows_from(dc0k, lo), (uint32_t)(n - lo), hh);
            }
        }
        return true;
    };
    PlanWalk pw(p, s, true, s.per == 4, true, want[0], want[3], dt);
    pw.users({{FG_PB_X, a.x}, {FG_PB_H0, a.h0}, {FG_PB_C0, a.c0}, {FG_PB_DY, a.dy}, {FG_PB_GRAD_HY, a.dh},
              {FG_PB_GRAD_CY, a.dc}});
    if (want[0]) pw.users({{FG_PB_DX, a.dx}});
    const int names[7] = {FG_PB_I, FG_PB_F, FG_PB_G, FG_PB_O, FG_PB_TANHC, FG_PB_H, FG_PB_C};
    for (int n = 0; n < 7; ++n) pw.user(names[n], *saved[n], *saved[n]);
    pw.params(a.w, false);
    if (want[3]) pw.params(a.dw, true);
    return pw.run([&](const FgPlanLaunch &x, PlanWalk &at) {
        PlanArg cv, dyv, dgv;
        Blk dyd, dgd, dgd_g;
        if (x.op != FG_OP_LSTM_LAYER_BACKWARD || !at.arg(x, FG_PP_C, &cv) || !at.arg(x, FG_PP_DY, &dyv) ||
            !at.arg(x, FG_PP_DGATES, &dgv) || !at.locate(dyv, false, &dyd) || !at.locate(dgv, false, &dgd) ||
            !at.locate(dgv, true, &dgd_g)) {
            return false;
        }
        return layer(cv.off / (T * B * H), x.flags_on & FG_PF_REVERSE ? 1 : 0, dyd, dgd, dgd_g);
    });
}

}  // namespace
