// CPU TWIN of opdev/op_errno.h -- a test double, not CANN.  CANN installs it as
// <CANN>/include/aclnn/opdev/op_errno.h; code includes it as "opdev/op_errno.h" with include/aclnn on
// its include path.  The aclnn status codes, with CANN's values.
#ifndef FG_ASCEND_TWIN_OPDEV_OP_ERRNO_H
#define FG_ASCEND_TWIN_OPDEV_OP_ERRNO_H
#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_RUNTIME_ERROR 361001
#define ACLNN_ERR_INNER 561000
#define ACLNN_ERR_INNER_CREATE_EXECUTOR 561101
#define ACLNN_ERR_INNER_NOT_TRANS_EXECUTOR 561102
#define ACLNN_ERR_INNER_NULLPTR 561103
#endif
