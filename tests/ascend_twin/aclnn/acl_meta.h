// CPU TWIN of aclnn's meta definitions (aclnn/acl_meta.h) -- a test double, not CANN.
// aclTensor with its view (shape, strides, offset), data type, format and storage; the public
// accessors an operator's host code reads it with; aclIntArray and aclBoolArray with their create,
// destroy and size calls (their elements are read through opdev/common_types.h); aclnnStatus.
// The status codes are not here: CANN defines them in opdev/op_errno.h (installed under
// include/aclnn/), so code that uses them must include that header and have include/aclnn on its
// include path, as with CANN.
#ifndef FG_ASCEND_TWIN_ACL_META_H
#define FG_ASCEND_TWIN_ACL_META_H

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "acl/acl_base.h"  // as CANN's: the types and enums, not the runtime calls (acl/acl.h)

// hicann/opbase include/nnopbase/aclnn/acl_meta.h: aclnnStatus and its constant OK, at global scope
typedef int32_t aclnnStatus;
constexpr aclnnStatus OK = 0;
namespace fg_twin_aclnn {
constexpr aclnnStatus OK = 0, NULLPTR = 161001;  // the twin's own returns (op_errno.h's values)
}

// CANN's executor is its own class (opdev/op_executor.h, built into libopapi): to a program it is
// opaque, and an operator's host code that defines a struct of that name clashes with CANN's.  The
// twin defines it, so such a definition fails to compile here too.
struct aclOpExecutor {
    int fg_twin_cann_owns_this_type;
};
typedef struct aclOpExecutor aclOpExecutor;

struct aclTensor {
    std::vector<int64_t> view, strides, storage;
    int64_t offset;
    aclDataType dtype;
    aclFormat format;
    void *data;
};

inline aclTensor *aclCreateTensor(const int64_t *view_dims, uint64_t view_dims_num, aclDataType data_type,
                                  const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storage_dims,
                                  uint64_t storage_dims_num, void *tensor_data) {
    aclTensor *t = new aclTensor;
    t->view.assign(view_dims, view_dims + view_dims_num);
    t->strides.assign(stride, stride + view_dims_num);
    t->storage.assign(storage_dims, storage_dims + storage_dims_num);
    t->offset = offset;
    t->dtype = data_type;
    t->format = format;
    t->data = tensor_data;
    return t;
}
inline aclnnStatus aclDestroyTensor(const aclTensor *t) { delete t; return fg_twin_aclnn::OK; }

inline aclnnStatus aclGetViewShape(const aclTensor *t, int64_t **dims, uint64_t *n) {
    if (!t || !dims || !n) return fg_twin_aclnn::NULLPTR;
    *n = t->view.size();
    *dims = new int64_t[t->view.size() + 1];
    for (size_t i = 0; i < t->view.size(); ++i) (*dims)[i] = t->view[i];
    return fg_twin_aclnn::OK;
}
inline aclnnStatus aclGetViewStrides(const aclTensor *t, int64_t **strides, uint64_t *n) {
    if (!t || !strides || !n) return fg_twin_aclnn::NULLPTR;
    *n = t->strides.size();
    *strides = new int64_t[t->strides.size() + 1];
    for (size_t i = 0; i < t->strides.size(); ++i) (*strides)[i] = t->strides[i];
    return fg_twin_aclnn::OK;
}
inline aclnnStatus aclGetViewOffset(const aclTensor *t, int64_t *offset) {
    if (!t || !offset) return fg_twin_aclnn::NULLPTR;
    *offset = t->offset;
    return fg_twin_aclnn::OK;
}
inline aclnnStatus aclGetDataType(const aclTensor *t, aclDataType *dtype) {
    if (!t || !dtype) return fg_twin_aclnn::NULLPTR;
    *dtype = t->dtype;
    return fg_twin_aclnn::OK;
}
inline aclnnStatus aclGetRawTensorAddr(const aclTensor *t, void **addr) {
    if (!t || !addr) return fg_twin_aclnn::NULLPTR;
    *addr = t->data;
    return fg_twin_aclnn::OK;
}

// aclIntArray / aclBoolArray: CANN declares them opaque here and defines the classes (Size(),
// operator[], GetData()) in opdev/common_types.h, which an operator's host code includes to read them
class aclIntArray;
class aclBoolArray;

namespace fg_twin_aclnn {
template <typename T>
class Array {
  public:
    Array(const T *v, uint64_t n) : v_(new T[n ? n : 1]), n_(n) {
        for (uint64_t i = 0; i < n; ++i) v_[i] = v[i];
    }
    ~Array() { delete[] v_; }
    Array(const Array &) = delete;
    Array &operator=(const Array &) = delete;
    uint64_t Size() const { return n_; }
    const T *GetData() const { return v_; }
    T operator[](uint64_t i) const {
        if (i >= n_) throw std::out_of_range("aclIntArray/aclBoolArray: element past the end");
        return v_[i];
    }

  private:
    T *v_;
    uint64_t n_;
};
}  // namespace fg_twin_aclnn

class aclIntArray : public fg_twin_aclnn::Array<int64_t> {
    using Array::Array;
};
class aclBoolArray : public fg_twin_aclnn::Array<bool> {
    using Array::Array;
};

// aclTensorList: like the arrays, opaque to a program; CANN defines the class (Size(), operator[],
// GetData()) in opdev/common_types.h.  The list holds the tensors' addresses, not copies.
struct aclTensorList {
    aclTensorList(const aclTensor *const *value, uint64_t size) : v_(value, value + size) {}
    uint64_t Size() const { return v_.size(); }
    const aclTensor *operator[](uint64_t i) const {
        if (i >= v_.size()) throw std::out_of_range("aclTensorList: element past the end");
        return v_[i];
    }
    const aclTensor *const *GetData() const { return v_.data(); }

  private:
    std::vector<const aclTensor *> v_;
};
inline aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size) {
    return (value || !size) ? new aclTensorList(value, size) : nullptr;
}
inline aclnnStatus aclDestroyTensorList(const aclTensorList *a) { delete a; return fg_twin_aclnn::OK; }
inline aclnnStatus aclGetTensorListSize(const aclTensorList *a, uint64_t *size) {
    if (!a || !size) return fg_twin_aclnn::NULLPTR;
    *size = a->Size();
    return fg_twin_aclnn::OK;
}

inline aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size) {
    return (value || !size) ? new aclIntArray(value, size) : nullptr;
}
inline aclBoolArray *aclCreateBoolArray(const bool *value, uint64_t size) {
    return (value || !size) ? new aclBoolArray(value, size) : nullptr;
}
inline aclnnStatus aclDestroyIntArray(const aclIntArray *a) { delete a; return fg_twin_aclnn::OK; }
inline aclnnStatus aclDestroyBoolArray(const aclBoolArray *a) { delete a; return fg_twin_aclnn::OK; }
inline aclnnStatus aclGetIntArraySize(const aclIntArray *a, uint64_t *size) {
    if (!a || !size) return fg_twin_aclnn::NULLPTR;
    *size = a->Size();
    return fg_twin_aclnn::OK;
}
inline aclnnStatus aclGetBoolArraySize(const aclBoolArray *a, uint64_t *size) {
    if (!a || !size) return fg_twin_aclnn::NULLPTR;
    *size = a->Size();
    return fg_twin_aclnn::OK;
}

#endif
