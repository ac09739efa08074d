// CPU TWIN of opdev/common_types.h -- a test double, not CANN.  CANN installs it as
// <CANN>/include/aclnn/opdev/common_types.h (included as "opdev/common_types.h", with include/aclnn on
// the include path): the classes behind aclIntArray and aclBoolArray (Size(), operator[],
// GetData()), which the twin defines with aclnn/acl_meta.h.
#ifndef FG_ASCEND_TWIN_OPDEV_COMMON_TYPES_H
#define FG_ASCEND_TWIN_OPDEV_COMMON_TYPES_H
#include "aclnn/aclnn_base.h"
#endif
