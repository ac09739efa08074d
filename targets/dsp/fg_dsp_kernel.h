/* fusedgrad DSP library: what the printed kernels call (targets/dsp/fg_dsp_kernel.h).
 *
 * lowering.c_emitter prints TVM's floordiv/floormod as fg_floordiv/fg_floormod and tanhf as
 * fg_tanhf; outside the library's spmd kernels it allocates intermediate buffers too large for the
 * stack with FG_DSP_ALLOC/FREE.  A kernel file defines FG_USE_<helper> for each helper it calls
 * before including this: nothing else is compiled into it.
 */
#ifndef FG_DSP_KERNEL_H
#define FG_DSP_KERNEL_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* intermediate buffers too large for the stack (the library's spmd kernels have none: theirs are in
 * the workspace) */
#if defined(FG_USE_HEAP) && !defined(FG_DSP_ALLOC)
#include <stdlib.h>
#define FG_DSP_ALLOC(n) malloc(n)
#define FG_DSP_FREE(p) free(p)
#endif

#ifdef FG_USE_FLOORDIV
static inline int32_t fg_floordiv(int32_t a, int32_t b) {
    int32_t q = a / b;
    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
#endif
#ifdef FG_USE_FLOORMOD
static inline int32_t fg_floormod(int32_t a, int32_t b) {
    int32_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
#endif
#ifdef FG_USE_TANHF
/* e^z for z <= 0: z = k ln2 + r (Cody-Waite), e^r by Cephes' degree-6 polynomial (about 1 ulp),
 * times 2^k built in the exponent bits.  Branch-free, so a compiler vectorises it; NaN stays NaN.
 * Below -87, where e^z < 2^-125, z is clamped: tanh cannot tell the difference. */
union fg_f32 {
    float f;
    uint32_t u;
};
static inline float fg_exp_nonpos(float z) {
    union fg_f32 t, scale;
    float k, r, p;
    z = z < -87.0f ? -87.0f : z;
    t.f = z * 1.44269504088896341f + 12582912.0f; /* round(z / ln2) in the low mantissa bits */
    k = t.f - 12582912.0f;
    r = z - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    scale.u = (t.u - 0x4b400000u + 127u) << 23; /* 2^k, k in [-126, 0] */
    return p * scale.f;
}
/* tanh by TVM's rule for llvm, (1 - e) / (1 + e) with e = exp(-2|x|) and x's sign (so it never
 * overflows), with the exponential above: no libm, vectorisable; tanh(-0) = -0, +-inf give +-1 */
static inline float fg_tanhf(float x) {
    union fg_f32 a, t;
    uint32_t sign;
    float e;
    a.f = x;
    sign = a.u & 0x80000000u;
    a.u &= 0x7fffffffu; /* |x|, in bits: no libm even where builtins are off (-ffreestanding) */
    e = fg_exp_nonpos(-2.0f * a.f);
    t.f = (1.0f - e) / (1.0f + e);
    t.u |= sign;
    return t.f;
}
#endif /* FG_USE_TANHF */

#endif
