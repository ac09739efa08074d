// CPU TWIN of the Ascend910B's floating-point overflow mode -- part of the test double, not CANN.
//
// CANN's runtime documents two modes for the results of floating-point computation (hicann/runtime
// include/external/acl/acl_rt.h :280-284, the enum; docs/zh/api_ref/25-02_Enumerations.md :1376-1395):
//   ACL_RT_OVERFLOW_MODE_SATURATION = 0  a result that is Inf becomes a very large value (+-MAX), a
//                                        result that is NaN becomes 0; kept only for old versions
//   ACL_RT_OVERFLOW_MODE_INFNAN     = 1  Inf and NaN kept, IEEE 754 -- the default on Atlas A2
//                                        (Ascend910B) and A3 (25-02_Enumerations.md :1383, :1391)
// aclrtSetDeviceSatMode sets the device's mode, and it applies to the streams created on the device
// after the call, not to those created before (docs/zh/api_ref/04_device_management.md :666-701,
// acl_rt.h :3151); aclrtGetDeviceSatMode reads the device's mode (04_device_management.md :719-760,
// acl_rt.h :3161).  On the core the mode is the control register's bit CTRL[48] on __NPU_ARCH__ 2201:
// 1 Inf/NaN, 0 saturation (asc-devkit impl/basic_api/kernel_utils_base.h :185-197, AscendCUtils::
// SetOverflow).  Mmad's documentation says the same of the Cube: non-saturation mode keeps inf/nan
// outputs, saturation mode turns an inf output into +-MAX and a nan output into 0 (asc-devkit
// docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/Mmad计算/Mmad.md :317-331), and adds that Mmad
// should get no NaN input, which may otherwise raise an execution error (Mmad.md :329).
//
// The twin: the device's mode starts as INFNAN (or as FG_TWIN_SAT_MODE says: "saturation" or
// "infnan", a device some earlier program set); a stream takes the device's mode when it is created
// (acl/acl.h) and its work runs under it; Mmad (fg_twin_cube.h) passes its inputs through as they are,
// counting the NaN ones (mmad_nan_inputs: what CANN says to avoid), and in saturation mode saturates
// each result it writes to L0C.
#ifndef FG_ASCEND_TWIN_OVERFLOW_H
#define FG_ASCEND_TWIN_OVERFLOW_H

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#ifndef FG_TWIN_ACL_FLOAT_OVERFLOW_MODE
#define FG_TWIN_ACL_FLOAT_OVERFLOW_MODE
// acl_rt.h :280-284
typedef enum aclrtFloatOverflowMode {
    ACL_RT_OVERFLOW_MODE_SATURATION = 0,
    ACL_RT_OVERFLOW_MODE_INFNAN,
    ACL_RT_OVERFLOW_MODE_UNDEF,
} aclrtFloatOverflowMode;
#endif

namespace fg_twin_overflow {
// the device's mode (aclrtSetDeviceSatMode / aclrtGetDeviceSatMode)
inline aclrtFloatOverflowMode &device_mode() {
    static aclrtFloatOverflowMode m = [] {
        const char *e = std::getenv("FG_TWIN_SAT_MODE");
        return e && std::strcmp(e, "saturation") == 0 ? ACL_RT_OVERFLOW_MODE_SATURATION : ACL_RT_OVERFLOW_MODE_INFNAN;
    }();
    return m;
}
// the mode of the work running now: its stream's (acl/acl.h sets it as a stream runs; a kernel launched
// with no stream, as the twin's own tests do, runs under the device's)
inline aclrtFloatOverflowMode *&running_mode() { static aclrtFloatOverflowMode *m = nullptr; return m; }
inline aclrtFloatOverflowMode current() { return running_mode() ? *running_mode() : device_mode(); }

// Mmad inputs that were NaN, since the process started (Mmad.md :329: to be avoided)
inline uint64_t &mmad_nan_inputs() { static uint64_t n = 0; return n; }

// an Mmad input element as the Cube reads it: as it is, IEEE (neither mode is documented to change inputs)
inline float mmad_input(float v) {
    if (std::isnan(v)) ++mmad_nan_inputs();
    return v;
}
// an Mmad result as it goes to L0C (float): in saturation mode Inf -> +-FLT_MAX and NaN -> 0
inline float mmad_output(float v) {
    if (current() != ACL_RT_OVERFLOW_MODE_SATURATION) return v;
    return std::isnan(v) ? 0.0f : std::isinf(v) ? (v > 0 ? FLT_MAX : -FLT_MAX) : v;
}
}  // namespace fg_twin_overflow

#endif
