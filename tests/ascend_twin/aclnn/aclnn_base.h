// CPU TWIN of aclnn/aclnn_base.h -- a test double, not CANN: as CANN's, it includes aclnn/acl_meta.h
// (the tensor and array types, aclnnStatus) and declares aclnnInit / aclnnFinalize; the status codes
// are in opdev/op_errno.h.
#ifndef FG_ASCEND_TWIN_ACLNN_BASE_H
#define FG_ASCEND_TWIN_ACLNN_BASE_H
#include "aclnn/acl_meta.h"
inline aclnnStatus aclnnInit(const char *) { return 0; }
inline aclnnStatus aclnnFinalize() { return 0; }
#endif
