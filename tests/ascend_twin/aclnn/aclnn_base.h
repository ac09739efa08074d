// CPU TWIN of aclnn's base definitions (aclnn/aclnn_base.h) -- a test double, not CANN.
// aclTensor with its view (shape, strides, offset), data type, format and storage; the public
// accessors an operator's host code reads it with; the aclnnStatus codes.
#ifndef FG_ASCEND_TWIN_ACLNN_BASE_H
#define FG_ASCEND_TWIN_ACLNN_BASE_H

#include <cstdint>
#include <vector>

#include "acl/acl.h"

typedef int32_t aclnnStatus;
static const aclnnStatus ACLNN_SUCCESS = 0;
static const aclnnStatus ACLNN_ERR_PARAM_NULLPTR = 161001;
static const aclnnStatus ACLNN_ERR_PARAM_INVALID = 161002;
static const aclnnStatus ACLNN_ERR_INNER = 561000;

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
inline aclnnStatus aclDestroyTensor(const aclTensor *t) { delete t; return ACLNN_SUCCESS; }

inline aclnnStatus aclGetViewShape(const aclTensor *t, int64_t **dims, uint64_t *n) {
    if (!t || !dims || !n) return ACLNN_ERR_PARAM_NULLPTR;
    *n = t->view.size();
    *dims = new int64_t[t->view.size() + 1];
    for (size_t i = 0; i < t->view.size(); ++i) (*dims)[i] = t->view[i];
    return ACLNN_SUCCESS;
}
inline aclnnStatus aclGetViewStrides(const aclTensor *t, int64_t **strides, uint64_t *n) {
    if (!t || !strides || !n) return ACLNN_ERR_PARAM_NULLPTR;
    *n = t->strides.size();
    *strides = new int64_t[t->strides.size() + 1];
    for (size_t i = 0; i < t->strides.size(); ++i) (*strides)[i] = t->strides[i];
    return ACLNN_SUCCESS;
}
inline aclnnStatus aclGetViewOffset(const aclTensor *t, int64_t *offset) {
    if (!t || !offset) return ACLNN_ERR_PARAM_NULLPTR;
    *offset = t->offset;
    return ACLNN_SUCCESS;
}
inline aclnnStatus aclGetDataType(const aclTensor *t, aclDataType *dtype) {
    if (!t || !dtype) return ACLNN_ERR_PARAM_NULLPTR;
    *dtype = t->dtype;
    return ACLNN_SUCCESS;
}
inline aclnnStatus aclGetRawTensorAddr(const aclTensor *t, void **addr) {
    if (!t || !addr) return ACLNN_ERR_PARAM_NULLPTR;
    *addr = t->data;
    return ACLNN_SUCCESS;
}

#endif
