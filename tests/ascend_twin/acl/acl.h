// CPU TWIN of the ACL runtime (acl/acl.h) -- a test double, not CANN.
//
// The runtime calls a host program makes around an aclnn operator, with their documented meaning:
// device memory is host memory that the twin tracks (a free of an unknown pointer or a copy past an
// allocation is an error), 64-byte aligned as aclrtMalloc's.  A stream queues its work (asynchronous
// copies, kernel launches, events) and runs it only when it is synchronised, as a device runs it
// after the calls returned; kernels run on the AscendC twin (kernel_operator.h).
// aclrtMemcpyAsync is held to CANN's rules (acl_rt.h and the aclrtMemcpyAsync documentation of
// CANN 8.0): source and destination 64-byte aligned, host memory only from aclrtMallocHost, no
// host-to-host copies; and the source must still be allocated, with the same bytes, when the stream
// runs the copy.  A rule broken throws fg_twin_acl::Violation.
// CANN's public types, error codes and enums of acl_base.h are the twin's acl/acl_base.h, which this
// file includes (as CANN's acl.h does, through acl_rt.h).
#ifndef FG_ASCEND_TWIN_ACL_H
#define FG_ASCEND_TWIN_ACL_H

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "acl/acl_base.h"
#include "fg_twin_overflow.h"

// hicann/runtime include/external/acl/acl_rt.h: the runtime's enums the twin's calls take, with
// CANN's full value sets (aclrtMemcpyKind and aclrtMemMallocPolicy numbered in order, as CANN's are)
typedef enum aclrtEventRecordedStatus {
    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
} aclrtEventRecordedStatus;

typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST,
    ACL_MEMCPY_HOST_TO_DEVICE,
    ACL_MEMCPY_DEVICE_TO_HOST,
    ACL_MEMCPY_DEVICE_TO_DEVICE,
    ACL_MEMCPY_DEFAULT,
    ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
    ACL_MEMCPY_INNER_DEVICE_TO_DEVICE,
    ACL_MEMCPY_INTER_DEVICE_TO_DEVICE,
} aclrtMemcpyKind;

// aclrtMalloc takes any of them (CANN's allocates device memory under every policy)
typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_MEM_MALLOC_HUGE_ONLY,
    ACL_MEM_MALLOC_NORMAL_ONLY,
    ACL_MEM_MALLOC_HUGE_FIRST_P2P,
    ACL_MEM_MALLOC_HUGE_ONLY_P2P,
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P,
    ACL_MEM_MALLOC_HUGE1G_ONLY,
    ACL_MEM_MALLOC_HUGE1G_ONLY_P2P,
    ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
    ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000,
    ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000,
} aclrtMemMallocPolicy;

namespace fg_twin_acl {
inline std::map<char *, size_t> &allocations() { static std::map<char *, size_t> m; return m; }
inline int &state() { static int s = 0; return s; }  // 1 after aclInit, 2 with a device set
inline bool inside(const void *p, size_t n) {  // [p, p + n) within one device allocation
    auto &m = allocations();
    auto it = m.upper_bound((char *)p);
    if (it == m.begin()) return false;
    --it;
    return (const char *)p >= it->first && (const char *)p + n <= it->first + it->second;
}
inline bool aligned(const void *p) { return (uintptr_t)p % 64 == 0; }
}  // namespace fg_twin_acl

namespace fg_twin_acl {
// Host memory from aclrtMallocHost (page-locked on a device): the only host memory aclrtMemcpyAsync
// may copy from or to.
inline std::map<char *, size_t> &host_allocations() { static std::map<char *, size_t> m; return m; }
inline bool inside_host(const void *p, size_t n) {
    auto &m = host_allocations();
    auto it = m.upper_bound((char *)p);
    if (it == m.begin()) return false;
    --it;
    return (const char *)p >= it->first && (const char *)p + n <= it->first + it->second;
}
struct Violation : std::runtime_error {
    explicit Violation(const std::string &what) : std::runtime_error("ACL twin: " + what) {}
};
// A stream runs its work when it is synchronised (or an event recorded on it is), in order, as a
// device runs it some time after the calls that queued it returned.
struct Stream {
    std::vector<std::function<void()>> work;
    size_t done = 0;
    aclrtFloatOverflowMode sat_mode = fg_twin_overflow::device_mode();  // the device's when created
    void run(size_t upto) {
        struct Mode {  // the work runs under the stream's overflow mode
            explicit Mode(aclrtFloatOverflowMode *m) { fg_twin_overflow::running_mode() = m; }
            ~Mode() { fg_twin_overflow::running_mode() = nullptr; }
        } mode(&sat_mode);
        while (done < upto) work[done++]();
        if (done == work.size()) {
            work.clear();
            done = 0;
        }
    }
};
inline std::set<Stream *> &streams() { static std::set<Stream *> s; return s; }
inline Stream *stream_of(aclrtStream s) {
    Stream *p = (Stream *)s;
    if (!streams().count(p)) throw Violation("a stream that aclrtCreateStream did not make (or destroyed)");
    return p;
}
inline void enqueue(aclrtStream s, std::function<void()> f) { stream_of(s)->work.push_back(std::move(f)); }
}  // namespace fg_twin_acl

inline aclError aclInit(const char *) { fg_twin_acl::state() = 1; return ACL_SUCCESS; }
inline aclError aclFinalize() { fg_twin_acl::state() = 0; return ACL_SUCCESS; }
inline aclError aclrtSetDevice(int32_t id) {
    if (fg_twin_acl::state() < 1 || id != 0) return ACL_ERROR_INVALID_PARAM;
    fg_twin_acl::state() = 2;
    return ACL_SUCCESS;
}
inline aclError aclrtResetDevice(int32_t) { fg_twin_acl::state() = 1; return ACL_SUCCESS; }
inline aclError aclrtGetDevice(int32_t *id) {
    if (fg_twin_acl::state() < 2 || !id) return ACL_ERROR_INVALID_PARAM;
    *id = 0;
    return ACL_SUCCESS;
}
// the device's capabilities: an Ascend910B's (AI cores 24, vector cores 48 as on 910B1/B2);
// FG_TWIN_VECTOR_CORES sets the vector cores (40 on 910B3/B4) to plan for another part
inline aclError aclGetDeviceCapability(uint32_t device, aclDeviceInfo info, int64_t *value) {
    if (fg_twin_acl::state() < 2 || device != 0 || !value) return ACL_ERROR_INVALID_PARAM;
    const char *cores = std::getenv("FG_TWIN_VECTOR_CORES");
    switch (info) {
    case ACL_DEVICE_INFO_AI_CORE_NUM: *value = std::getenv("FG_TWIN_CUBE_CORES") ? std::atoll(std::getenv("FG_TWIN_CUBE_CORES")) : 24;
        return ACL_SUCCESS;
    case ACL_DEVICE_INFO_VECTOR_CORE_NUM: *value = cores ? std::atoll(cores) : 48; return ACL_SUCCESS;
    case ACL_DEVICE_INFO_L2_SIZE: *value = 192ll << 20; return ACL_SUCCESS;
    default: return ACL_ERROR_INVALID_PARAM;
    }
}
// the device's floating-point overflow mode (fg_twin_overflow.h; acl_rt.h :3151, :3161): streams
// created after a set run under the new mode, those created before keep theirs
inline aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode) {
    if (fg_twin_acl::state() < 2) return ACL_ERROR_INVALID_PARAM;
    if (mode != ACL_RT_OVERFLOW_MODE_SATURATION && mode != ACL_RT_OVERFLOW_MODE_INFNAN) return ACL_ERROR_INVALID_PARAM;
    fg_twin_overflow::device_mode() = mode;
    return ACL_SUCCESS;
}
inline aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode) {
    if (fg_twin_acl::state() < 2 || !mode) return ACL_ERROR_INVALID_PARAM;
    *mode = fg_twin_overflow::device_mode();
    return ACL_SUCCESS;
}
inline aclError aclrtCreateStream(aclrtStream *s) {
    if (fg_twin_acl::state() < 2 || s == nullptr) return ACL_ERROR_INVALID_PARAM;
    fg_twin_acl::Stream *p = new fg_twin_acl::Stream;
    fg_twin_acl::streams().insert(p);
    *s = p;
    return ACL_SUCCESS;
}
// CANN: the stream's tasks must be done before it is destroyed
inline aclError aclrtDestroyStream(aclrtStream s) {
    fg_twin_acl::Stream *p = fg_twin_acl::stream_of(s);
    if (p->done < p->work.size()) throw fg_twin_acl::Violation("aclrtDestroyStream of a stream with work not synchronised");
    fg_twin_acl::streams().erase(p);
    delete p;
    return ACL_SUCCESS;
}
inline aclError aclrtSynchronizeStream(aclrtStream s) {
    if (!s) return ACL_ERROR_INVALID_PARAM;
    fg_twin_acl::Stream *p = fg_twin_acl::stream_of(s);
    p->run(p->work.size());
    return ACL_SUCCESS;
}

// events: recorded on a stream, complete once the stream has run the work queued before them
namespace fg_twin_acl {
struct Event {
    Stream *stream = nullptr;
    size_t at = 0;  // the stream's work up to here comes first
    bool complete = true;
};
inline std::set<Event *> &events() { static std::set<Event *> e; return e; }
inline Event *event_of(aclrtEvent e) {
    Event *p = (Event *)e;
    if (!events().count(p)) throw Violation("an event that aclrtCreateEvent did not make (or destroyed)");
    return p;
}
}  // namespace fg_twin_acl
inline aclError aclrtCreateEvent(aclrtEvent *e) {
    if (fg_twin_acl::state() < 2 || !e) return ACL_ERROR_INVALID_PARAM;
    fg_twin_acl::Event *p = new fg_twin_acl::Event;
    fg_twin_acl::events().insert(p);
    *e = p;
    return ACL_SUCCESS;
}
inline aclError aclrtDestroyEvent(aclrtEvent e) {
    fg_twin_acl::Event *p = fg_twin_acl::event_of(e);
    fg_twin_acl::events().erase(p);
    delete p;
    return ACL_SUCCESS;
}
inline aclError aclrtRecordEvent(aclrtEvent e, aclrtStream s) {
    fg_twin_acl::Event *p = fg_twin_acl::event_of(e);
    fg_twin_acl::Stream *st = fg_twin_acl::stream_of(s);
    p->complete = false;
    st->work.push_back([p] { if (fg_twin_acl::events().count(p)) p->complete = true; });
    p->stream = st;
    p->at = st->work.size();
    return ACL_SUCCESS;
}
inline aclError aclrtQueryEventStatus(aclrtEvent e, aclrtEventRecordedStatus *status) {
    if (!status) return ACL_ERROR_INVALID_PARAM;
    *status = fg_twin_acl::event_of(e)->complete ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
    return ACL_SUCCESS;
}
inline aclError aclrtSynchronizeEvent(aclrtEvent e) {
    fg_twin_acl::Event *p = fg_twin_acl::event_of(e);
    if (!p->complete) p->stream->run(p->at);
    return ACL_SUCCESS;
}
inline aclError aclrtMalloc(void **p, size_t size, aclrtMemMallocPolicy) {
    if (fg_twin_acl::state() < 2 || p == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
    char *m = (char *)std::aligned_alloc(64, (size + 63) / 64 * 64);  // 64-byte aligned, as CANN's
    if (!m) return ACL_ERROR_BAD_ALLOC;
    std::memset(m, 0xA5, size);  // device memory starts as garbage: nothing may rely on zeros
    fg_twin_acl::allocations()[m] = size;
    *p = m;
    return ACL_SUCCESS;
}
inline aclError aclrtFree(void *p) {
    auto &m = fg_twin_acl::allocations();
    auto it = m.find((char *)p);
    if (it == m.end()) return ACL_ERROR_INVALID_PARAM;
    std::free(p);
    m.erase(it);
    return ACL_SUCCESS;
}
namespace fg_twin_acl {
// CANN's aclrtMemcpy and aclrtMemcpyAsync take the kinds up to ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE and
// return ACL_ERROR_INVALID_PARAM for any other (hicann/runtime src/acl/aclrt_impl/memory.cpp); the twin
// runs the four with a stated direction and refuses the two it does not model
inline aclError check_kind(aclrtMemcpyKind kind, const char *call) {
    if (kind == ACL_MEMCPY_DEFAULT || kind == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE)
        throw Violation(std::string(call) + ": the twin does not model ACL_MEMCPY_DEFAULT or ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE");
    return kind >= ACL_MEMCPY_HOST_TO_HOST && kind <= ACL_MEMCPY_DEVICE_TO_DEVICE ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM;
}
}  // namespace fg_twin_acl
inline aclError aclrtMemcpy(void *dst, size_t dest_max, const void *src, size_t count, aclrtMemcpyKind kind) {
    if (fg_twin_acl::check_kind(kind, "aclrtMemcpy") != ACL_SUCCESS || count > dest_max) return ACL_ERROR_INVALID_PARAM;
    bool dst_dev = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    bool src_dev = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    if ((dst_dev && !fg_twin_acl::inside(dst, count)) || (src_dev && !fg_twin_acl::inside(src, count)))
        return ACL_ERROR_INVALID_PARAM;
    std::memcpy(dst, src, count);
    return ACL_SUCCESS;
}
// host memory for asynchronous copies (page-locked on a device), 64-byte aligned
inline aclError aclrtMallocHost(void **p, size_t size) {
    if (fg_twin_acl::state() < 2 || p == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
    char *m = (char *)std::aligned_alloc(64, (size + 63) / 64 * 64);
    if (!m) return ACL_ERROR_BAD_ALLOC;
    std::memset(m, 0x5A, size);
    fg_twin_acl::host_allocations()[m] = size;
    *p = m;
    return ACL_SUCCESS;
}
inline aclError aclrtFreeHost(void *p) {
    auto &m = fg_twin_acl::host_allocations();
    auto it = m.find((char *)p);
    if (it == m.end()) return ACL_ERROR_INVALID_PARAM;
    std::memset(p, 0xEE, it->second);  // what a copy still pending would read
    std::free(p);
    m.erase(it);
    return ACL_SUCCESS;
}
inline aclError aclrtMemcpyAsync(void *dst, size_t dest_max, const void *src, size_t count, aclrtMemcpyKind kind,
                                 aclrtStream stream) {
    using fg_twin_acl::Violation;
    if (fg_twin_acl::check_kind(kind, "aclrtMemcpyAsync") != ACL_SUCCESS || count > dest_max || !dst || !src)
        return ACL_ERROR_INVALID_PARAM;
    if (kind == ACL_MEMCPY_HOST_TO_HOST) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
    if (!fg_twin_acl::aligned(dst) || !fg_twin_acl::aligned(src))
        throw Violation("aclrtMemcpyAsync: source and destination must be 64-byte aligned");
    bool dst_dev = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    bool src_dev = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    if ((dst_dev && !fg_twin_acl::inside(dst, count)) || (src_dev && !fg_twin_acl::inside(src, count)))
        return ACL_ERROR_INVALID_PARAM;
    if ((!dst_dev && !fg_twin_acl::inside_host(dst, count)) || (!src_dev && !fg_twin_acl::inside_host(src, count)))
        throw Violation("aclrtMemcpyAsync: host memory not from aclrtMallocHost (CANN: unpredictable errors when the copy runs)");
    // the device reads the source when it runs the copy: it must be there, unchanged, until then
    std::vector<char> then;  // a host source as it was when the copy was queued
    if (!src_dev) then.assign((const char *)src, (const char *)src + count);
    fg_twin_acl::enqueue(stream, [=] {
        if ((!src_dev && !fg_twin_acl::inside_host(src, count)) || (src_dev && !fg_twin_acl::inside(src, count)))
            throw Violation("aclrtMemcpyAsync: the source was freed before the stream ran the copy");
        if (!src_dev && std::memcmp(src, then.data(), count) != 0)
            throw Violation("aclrtMemcpyAsync: the host source changed before the stream ran the copy");
        std::memcpy(dst, src, count);
    });
    return ACL_SUCCESS;
}

#endif
