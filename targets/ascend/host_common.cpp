/* Fixed host helpers of the Ascend aclnn packages (lowering.ascend copies this file, less this
 * comment, into each package's op_host/aclnn_<op>.cpp inside an anonymous namespace): a tensor's view,
 * the plan of its layout (rows in place, or a contiguous copy through the workspace), the copy kernels'
 * parameters, the pinned host staging, the second phase's start, the gathers and the scatters.  The
 * including file provides <stdint.h>, <string.h>, <mutex>, <vector>, acl/acl.h, aclnn/aclnn_base.h,
 * opdev/op_errno.h, struct FgCopyParams (copy_params.h) and the macros FG_ASCEND_VECTOR_CORES (the fallback),
 * FG_TILING_BYTES and FG_COPY_PARAMS_BYTES. */
struct View {
    int64_t dims[8], strides[8], offset;
    uint64_t n;
    aclDataType dtype;
    char *addr;
};

aclnnStatus view_of(const aclTensor *t, View *v) {
    int64_t *dims = nullptr, *strides = nullptr;
    uint64_t nd = 0, ns = 0;
    void *addr = nullptr;
    aclnnStatus s = aclGetViewShape(t, &dims, &nd);
    if (s == ACLNN_SUCCESS) s = aclGetViewStrides(t, &strides, &ns);
    if (s == ACLNN_SUCCESS) s = aclGetViewOffset(t, &v->offset);
    if (s == ACLNN_SUCCESS) s = aclGetDataType(t, &v->dtype);
    if (s == ACLNN_SUCCESS) s = aclGetRawTensorAddr(t, &addr);
    if (s == ACLNN_SUCCESS && (nd > FG_COPY_MAX_DIMS || ns != nd)) s = ACLNN_ERR_PARAM_INVALID;
    if (s == ACLNN_SUCCESS) {
        v->n = nd;
        for (uint64_t i = 0; i < nd; ++i) {
            v->dims[i] = dims[i];
            v->strides[i] = strides[i];
            if (dims[i] < 0 || dims[i] > 0x7fffffff) s = ACLNN_ERR_PARAM_INVALID;
        }
    }
    delete[] dims;
    delete[] strides;
    v->addr = (char *)addr;
    return s;
}

size_t elem_bytes(aclDataType dt) { return dt == ACL_FLOAT16 || dt == ACL_BF16 ? 2u : 4u; }

bool same_dims(const View &v, const int64_t *dims, uint64_t n) {
    if (v.n != n) return false;
    for (uint64_t i = 0; i < n; ++i) {
        if (v.dims[i] != dims[i]) return false;
    }
    return true;
}

// the product of n sizes (a shape symbol's dimensions)
int64_t product(const int64_t *dims, uint64_t n) {
    int64_t p = 1;
    for (uint64_t i = 0; i < n; ++i) p *= dims[i];
    return p;
}

// the view's elements all at different addresses (dimensions of size > 1 by stride: each stride
// beyond the reach of the smaller ones)
bool apart(const View &v) {
    int64_t d[8], st[8];
    uint64_t k = 0;
    for (uint64_t i = 0; i < v.n; ++i) {
        if (v.dims[i] == 0) return true;  // no elements
        if (v.dims[i] == 1) continue;
        uint64_t j = k++;
        for (; j > 0 && st[j - 1] > v.strides[i]; --j) {
            d[j] = d[j - 1];
            st[j] = st[j - 1];
        }
        d[j] = v.dims[i];
        st[j] = v.strides[i];
    }
    int64_t reach = 0;  // the farthest element of the dimensions so far
    for (uint64_t j = 0; j < k; ++j) {
        if (st[j] <= reach) return false;
        reach += st[j] * (d[j] - 1);
    }
    return true;
}

enum { FG_BAD = 0, FG_ROWS = 1, FG_STRIDED = 2 };

// The view as rows (the dimensions before `split`) of adjacent elements (those from `split` on).
// FG_ROWS: row r starts r * *s0 elements in; FG_STRIDED: any other non-negative strides, gathered
// into (or, for an output whose elements are all apart, scattered from) a contiguous copy in the
// workspace; FG_BAD: a negative stride, or an output's elements on top of each other.
int plan(const View &v, uint64_t split, bool output, int64_t *s0) {
    int64_t rows = 1, cols = 1, expect = 1;
    bool dense = true, uniform = true, first = true;
    for (uint64_t i = 0; i < v.n; ++i) {
        if (v.strides[i] < 0) return FG_BAD;
        (i < split ? rows : cols) *= v.dims[i];
    }
    for (uint64_t i = v.n; i-- > split;) {  // the row's own dimensions, innermost first
        if (v.dims[i] == 1) continue;         // the stride of a dimension of size 1 means nothing
        dense = dense && v.strides[i] == expect;
        expect *= v.dims[i];
    }
    *s0 = cols;
    for (uint64_t i = split; i-- > 0;) {  // the rows' dimensions: one stride between rows
        if (v.dims[i] == 1) continue;
        if (first) *s0 = v.strides[i];
        uniform = uniform && (first || v.strides[i] == expect);
        expect = v.strides[i] * v.dims[i];
        first = false;
    }
    if (rows == 0 || cols == 0) return FG_ROWS;  // nothing to read or write
    if (dense && uniform && *s0 <= 0x7fffffff && (!output || rows == 1 || *s0 >= cols)) return FG_ROWS;
    if (output && !apart(v)) return FG_BAD;
    return FG_STRIDED;
}

// the copy between the view and a contiguous one of its shape (from the view for an input).  The
// dimensions go in order of destination stride, largest first: the copy kernel writes each line's
// span of the destination whole, and so the spans of different lines must not overlap.
struct FgCopyParams copy_params(const View &v, bool output) {
    struct FgCopyParams p;
    memset(&p, 0, sizeof(p));
    p.ndim = v.n ? (uint32_t)v.n : 1u;
    p.dims[0] = 1u;
    p.lines = 1u;
    int64_t dense = 1;
    for (uint64_t i = v.n; i-- > 0;) {
        p.dims[i] = (uint32_t)v.dims[i];
        (output ? p.src : p.dst)[i] = dense;
        (output ? p.dst : p.src)[i] = v.strides[i];
        dense *= v.dims[i];
    }
    // insertion sort, stable; dimensions of size 1 outermost, whatever their stride
    auto key = [&p](uint32_t k) { return p.dims[k] == 1u ? INT64_MAX : p.dst[k]; };
    for (uint32_t i = 1; i < p.ndim; ++i) {
        for (uint32_t j = i; j > 0 && key(j - 1) < key(j); --j) {
            uint32_t dim = p.dims[j];
            int64_t src = p.src[j], dst = p.dst[j];
            p.dims[j] = p.dims[j - 1], p.src[j] = p.src[j - 1], p.dst[j] = p.dst[j - 1];
            p.dims[j - 1] = dim, p.src[j - 1] = src, p.dst[j - 1] = dst;
        }
    }
    for (uint32_t i = 0; i + 1 < p.ndim; ++i) p.lines *= p.dims[i];
    return p;
}

uint64_t copy_elems(const struct FgCopyParams &p) { return (uint64_t)p.lines * p.dims[p.ndim - 1]; }

uint32_t copy_blocks(const struct FgCopyParams &p, uint32_t cores) { return p.lines < cores ? p.lines : cores; }

// The vector cores of the current device, as the runtime reports them (Ascend910B1/B2: 48,
// B3/B4: 40); FG_ASCEND_VECTOR_CORES when it does not say.
uint32_t vector_cores() {
    int32_t device = 0;
    int64_t n = 0;
    if (aclrtGetDevice(&device) == ACL_SUCCESS &&
        aclGetDeviceCapability((uint32_t)device, ACL_DEVICE_INFO_VECTOR_CORE_NUM, &n) == ACL_SUCCESS && n > 0 &&
        n <= 65535) {
        return (uint32_t)n;
    }
    return FG_ASCEND_VECTOR_CORES;
}

// NaN and Inf go through the kernels as IEEE 754 says only while the device computes in
// ACL_RT_OVERFLOW_MODE_INFNAN, Atlas A2's default; ACL_RT_OVERFLOW_MODE_SATURATION makes an Inf result
// +-MAX and a NaN result 0, the Cube's Mmad included (hicann/runtime acl_rt.h :280-284, :3161;
// docs/zh/api_ref/25-02_Enumerations.md :1376-1395; asc-devkit Mmad.md :317-331).  A device in
// saturation mode (or one whose mode cannot be read): ACLNN_ERR_RUNTIME_ERROR.  This reads the device's
// mode; a stream keeps the one the device had when the stream was created (04_device_management.md :701).
aclnnStatus ieee_overflow_mode() {
    aclrtFloatOverflowMode mode = ACL_RT_OVERFLOW_MODE_UNDEF;
    if (aclrtGetDeviceSatMode(&mode) != ACL_SUCCESS) return ACLNN_ERR_RUNTIME_ERROR;
    return mode == ACL_RT_OVERFLOW_MODE_INFNAN ? ACLNN_SUCCESS : ACLNN_ERR_RUNTIME_ERROR;
}

void *data(const View &v) { return v.addr + v.offset * (int64_t)elem_bytes(v.dtype); }

// a tensor the kernels do not read in place: its contiguous copy at workspace offset `at`
struct FgCopy {
    int used, output;
    aclDataType dtype;
    void *user;
    struct FgCopyParams params;  // user -> copy for an input, copy -> user for an output
    uint64_t at;
};

// tensor v (at `user`) given its contiguous copy at workspace offset `at`; returns the next free offset
uint64_t add_copy(FgCopy &c, const View &v, void *user, bool output, uint64_t at) {
    c.used = 1;
    c.output = output;
    c.dtype = v.dtype;
    c.user = user;
    c.at = at;
    c.params = copy_params(v, output);
    return at + (copy_elems(c.params) * elem_bytes(v.dtype) + 31u) / 32u * 32u;
}

typedef uint32_t (*fg_copy_launch)(uint32_t, aclrtStream, void *, void *, void *);

// Host staging of the second phase's upload: the tiling and the copies' parameters, laid out as the
// workspace's start.  CANN copies host -> device asynchronously only from aclrtMallocHost memory,
// 64-byte aligned (so are the workspace's offsets), and reads it when the stream gets to the copy,
// after the call has returned.  So a block goes back to the pool only once the event recorded after
// its copy has completed; blocks live as long as the library.
struct Staging {
    void *host;
    size_t bytes;  // of host
    aclrtEvent copied;
    bool taken, pending;  // filled by a call now / its copy maybe not yet run
};

struct StagingPool {
    std::mutex lock;
    std::vector<Staging *> blocks;
};

StagingPool &staging_pool() {
    static StagingPool *pool = new StagingPool;  // never destroyed: blocks may be in flight at exit
    return *pool;
}

// a block of at least `bytes` to fill; null if none can be had.  A free block too small for the call
// (the full LSTM's plans differ in size) is replaced by a larger one: its copy has completed.
Staging *staging_take(size_t bytes) {
    StagingPool &pool = staging_pool();
    std::lock_guard<std::mutex> guard(pool.lock);
    for (Staging *b : pool.blocks) {
        if (b->taken) continue;
        if (b->pending) {
            aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
            if (aclrtQueryEventStatus(b->copied, &status) != ACL_SUCCESS || status != ACL_EVENT_RECORDED_STATUS_COMPLETE) {
                continue;
            }
            b->pending = false;
        }
        if (b->bytes < bytes) {
            void *larger = nullptr;
            if (aclrtMallocHost(&larger, bytes) != ACL_SUCCESS) return nullptr;
            aclrtFreeHost(b->host);
            b->host = larger;
            b->bytes = bytes;
        }
        b->taken = true;
        return b;
    }
    Staging *b = new (std::nothrow) Staging();  // zeroed: nothing allocated yet
    bool ok = b && aclrtMallocHost(&b->host, bytes) == ACL_SUCCESS && aclrtCreateEvent(&b->copied) == ACL_SUCCESS;
    if (b) b->bytes = bytes;
    if (ok) {
        try {
            pool.blocks.push_back(b);
        } catch (...) {
            ok = false;
        }
    }
    if (!ok) {  // undo what was had
        if (b && b->copied) aclrtDestroyEvent(b->copied);
        if (b && b->host) aclrtFreeHost(b->host);
        delete b;
        return nullptr;
    }
    b->taken = true;
    return b;
}

void staging_give(Staging *b, bool pending) {
    std::lock_guard<std::mutex> guard(staging_pool().lock);
    b->pending = pending;
    b->taken = false;
}

// `bytes` of host data onto the workspace's start (fill writes them into a zeroed staging block, copied
// on the stream): the block is free again once the stream is past the copy; with no event, once it has
// synchronised, else it stays taken (it may still be read)
template <typename Fill>
aclnnStatus stage(void *workspace, size_t bytes, aclrtStream stream, Fill fill) {
    Staging *b = staging_take(bytes);
    if (!b) return ACLNN_ERR_INNER;
    memset(b->host, 0, bytes);
    fill((char *)b->host);
    if (aclrtMemcpyAsync(workspace, bytes, b->host, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream) != ACL_SUCCESS) {
        staging_give(b, false);
        return ACLNN_ERR_INNER;
    }
    bool recorded = aclrtRecordEvent(b->copied, stream) == ACL_SUCCESS;
    bool synced = recorded || aclrtSynchronizeStream(stream) == ACL_SUCCESS;
    if (synced) staging_give(b, recorded);
    return synced ? ACLNN_SUCCESS : ACLNN_ERR_INNER;
}

// The second phase's start: the workspace checked against the executor's needs, and the tiling and
// the copies' parameters copied to its start (workspace: 64-byte aligned, as aclrtMalloc gives).
// An executor refused here is used up too.
aclnnStatus upload(void *workspace, uint64_t size, uint64_t needed, const void *tiling, size_t bytes,
                   const FgCopy *copy, int n, aclrtStream stream) {
    if (size < needed || (uintptr_t)workspace % 64u != 0) return ACLNN_ERR_PARAM_INVALID;
    return stage(workspace, FG_TILING_BYTES + (size_t)n * FG_COPY_PARAMS_BYTES, stream, [&](char *h) {
        memcpy(h, tiling, bytes);
        for (int k = 0; k < n; ++k) {
            if (copy[k].used) memcpy(h + FG_TILING_BYTES + (size_t)k * FG_COPY_PARAMS_BYTES, &copy[k].params, sizeof(copy[k].params));
        }
    });
}

// ptr[k]: tensor k as the kernels see it (its copy in the workspace where it has one); the inputs
// with a copy are gathered into it (copy2 / copy4: the copy kernels for 2- and 4-byte elements)
aclnnStatus gather(const FgCopy *copy, void *const *user, int n, char *ws, uint32_t cores, aclrtStream stream,
                   fg_copy_launch copy2, fg_copy_launch copy4, void **ptr) {
    aclnnStatus s = ACLNN_SUCCESS;
    for (int k = 0; k < n; ++k) {
        const FgCopy &c = copy[k];
        ptr[k] = c.used ? (void *)(ws + c.at) : user[k];
        if (s != ACLNN_SUCCESS || !c.used || c.output || copy_elems(c.params) == 0) continue;
        char *params = ws + FG_TILING_BYTES + (uint64_t)k * FG_COPY_PARAMS_BYTES;
        const fg_copy_launch launch = elem_bytes(c.dtype) == 2u ? copy2 : copy4;
        if (launch(copy_blocks(c.params, cores), stream, c.user, ptr[k], params) != 0) s = ACLNN_ERR_INNER;
    }
    return s;
}

// the outputs with a copy scattered from it to the user's tensor
aclnnStatus scatter(const FgCopy *copy, void *const *ptr, int n, char *ws, uint32_t cores, aclrtStream stream,
                    fg_copy_launch copy2, fg_copy_launch copy4) {
    for (int k = 0; k < n; ++k) {
        const FgCopy &c = copy[k];
        if (!c.used || !c.output || copy_elems(c.params) == 0) continue;
        char *params = ws + FG_TILING_BYTES + (uint64_t)k * FG_COPY_PARAMS_BYTES;
        if ((elem_bytes(c.dtype) == 2u ? copy2 : copy4)(copy_blocks(c.params, cores), stream, ptr[k], c.user, params) != 0) {
            return ACLNN_ERR_INNER;
        }
    }
    return ACLNN_SUCCESS;
}
