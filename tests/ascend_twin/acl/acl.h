// CPU TWIN of the ACL runtime (acl/acl.h) -- a test double, not CANN.
//
// The runtime calls a host program makes around an aclnn operator, with their documented meaning:
// device memory is host memory that the twin tracks (a free of an unknown pointer or a copy past an
// allocation is an error), a stream runs its work at once.  Kernels launched on a stream run on the
// AscendC twin (kernel_operator.h) before the launch returns.
#ifndef FG_ASCEND_TWIN_ACL_H
#define FG_ASCEND_TWIN_ACL_H

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>

typedef int aclError;
typedef void *aclrtStream;

static const aclError ACL_SUCCESS = 0;
static const aclError ACL_ERROR_INVALID_PARAM = 100000;
static const aclError ACL_ERROR_BAD_ALLOC = 200000;

typedef enum { ACL_MEM_MALLOC_HUGE_FIRST = 0, ACL_MEM_MALLOC_HUGE_ONLY = 1, ACL_MEM_MALLOC_NORMAL_ONLY = 2 } aclrtMemMallocPolicy;
typedef enum {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3
} aclrtMemcpyKind;
typedef enum {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_BF16 = 27
} aclDataType;
typedef enum { ACL_FORMAT_UNDEFINED = -1, ACL_FORMAT_NCHW = 0, ACL_FORMAT_NHWC = 1, ACL_FORMAT_ND = 2 } aclFormat;

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
}  // namespace fg_twin_acl

inline aclError aclInit(const char *) { fg_twin_acl::state() = 1; return ACL_SUCCESS; }
inline aclError aclFinalize() { fg_twin_acl::state() = 0; return ACL_SUCCESS; }
inline aclError aclrtSetDevice(int32_t id) {
    if (fg_twin_acl::state() < 1 || id != 0) return ACL_ERROR_INVALID_PARAM;
    fg_twin_acl::state() = 2;
    return ACL_SUCCESS;
}
inline aclError aclrtResetDevice(int32_t) { fg_twin_acl::state() = 1; return ACL_SUCCESS; }
inline aclError aclrtCreateStream(aclrtStream *s) {
    if (fg_twin_acl::state() < 2 || s == nullptr) return ACL_ERROR_INVALID_PARAM;
    *s = new int(0);
    return ACL_SUCCESS;
}
inline aclError aclrtDestroyStream(aclrtStream s) { delete (int *)s; return ACL_SUCCESS; }
inline aclError aclrtSynchronizeStream(aclrtStream s) { return s ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM; }
inline aclError aclrtMalloc(void **p, size_t size, aclrtMemMallocPolicy) {
    if (fg_twin_acl::state() < 2 || p == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
    char *m = (char *)std::malloc(size);
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
inline aclError aclrtMemcpy(void *dst, size_t dest_max, const void *src, size_t count, aclrtMemcpyKind kind) {
    if (count > dest_max) return ACL_ERROR_INVALID_PARAM;
    bool dst_dev = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    bool src_dev = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    if ((dst_dev && !fg_twin_acl::inside(dst, count)) || (src_dev && !fg_twin_acl::inside(src, count)))
        return ACL_ERROR_INVALID_PARAM;
    std::memcpy(dst, src, count);
    return ACL_SUCCESS;
}
inline aclError aclrtMemcpyAsync(void *dst, size_t dest_max, const void *src, size_t count, aclrtMemcpyKind kind,
                                 aclrtStream) {
    return aclrtMemcpy(dst, dest_max, src, count, kind);
}

#endif
