// CPU TWIN of opdev/common_types.h -- a test double, not CANN: the classes behind aclIntArray and
// aclBoolArray (Size(), operator[], GetData()), defined with the twin's aclnn/aclnn_base.h.
#ifndef FG_ASCEND_TWIN_OPDEV_COMMON_TYPES_H
#define FG_ASCEND_TWIN_OPDEV_COMMON_TYPES_H
#include "aclnn/aclnn_base.h"
#endif
