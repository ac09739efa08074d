/* fusedgrad DSP library: the half type (targets/dsp/fg_half.h).
 *
 * fg_half is the toolchain's IEEE binary16 type when it has one (FG_HALF_TYPE when defined, else
 * _Float16, else ARM's __fp16).  A toolchain without one gets a 16-bit struct holding the binary16
 * bits (also chosen by defining FG_HALF_SOFT): no arithmetic on it by mistake.  The vendor's
 * entry points are declared with it; `half` names it too, unless FG_HALF_NO_ALIAS is defined: for
 * a vendor SDK that declares its own `half` (with -DFG_HALF_TYPE=half the two are one type).
 *
 * The kernels compute in float; fg_half_to_float and fg_half_from_float convert exactly as IEEE 754
 * does (round to nearest even, NaN stays NaN, overflow gives infinity), in one of two ways with the
 * same results, chosen by what the compiler says of its target:
 * - the compiler's own conversions, where the target converts half in hardware: x86 with F16C
 *   (__F16C__), ARM with half-precision conversions (__ARM_FP bit 1, e.g. every AArch64 part);
 * - otherwise integer operations on the bits, which any C compiler vectorises (a compiler without
 *   those instructions calls a library routine per element for its own: 7x slower on x86-64).
 * Measured on a Zen 5 host with gcc 12 (docs/BENCHMARKS.md): with F16C the compiler's conversions
 * run both ops 2.4-3.7x faster than the integer ones.  -DFG_HALF_NATIVE_CONVERT or
 * -DFG_HALF_INT_CONVERT chooses regardless.
 */
#ifndef FG_HALF_H
#define FG_HALF_H
#include <stdint.h>

#if defined(FG_HALF_TYPE) && !defined(FG_HALF_SOFT)
typedef FG_HALF_TYPE fg_half;
#define FG_HALF_NATIVE 1
#elif defined(__FLT16_MAX__) && !defined(FG_HALF_SOFT)
__extension__ typedef _Float16 fg_half; /* the toolchain's IEEE binary16 */
#define FG_HALF_NATIVE 1
#elif defined(__ARM_FP16_FORMAT_IEEE) && !defined(FG_HALF_SOFT)
__extension__ typedef __fp16 fg_half;
#define FG_HALF_NATIVE 1
#else
typedef struct {
    uint16_t bits; /* IEEE binary16 */
} fg_half;
#endif
#ifndef FG_HALF_NO_ALIAS
typedef fg_half half;
#endif

#if defined(FG_HALF_NATIVE) && !defined(FG_HALF_NATIVE_CONVERT) && !defined(FG_HALF_INT_CONVERT) && \
    (defined(__F16C__) || (defined(__ARM_FP) && (__ARM_FP & 2)))
#define FG_HALF_NATIVE_CONVERT 1
#endif

#if defined(FG_HALF_NATIVE) && defined(FG_HALF_NATIVE_CONVERT) && !defined(FG_HALF_INT_CONVERT)
static inline float fg_half_to_float(fg_half h) { return (float)h; }
static inline fg_half fg_half_from_float(float f) { return (fg_half)f; }
#else
#ifdef FG_HALF_NATIVE
union fg_half_u16 {
    fg_half h;
    uint16_t bits;
};
#define FG_HALF_BITS(h, out) do { union fg_half_u16 fg_hb_; fg_hb_.h = (h); (out) = fg_hb_.bits; } while (0)
#define FG_HALF_MAKE(b, out) do { union fg_half_u16 fg_hb_; fg_hb_.bits = (uint16_t)(b); (out) = fg_hb_.h; } while (0)
#else
#define FG_HALF_BITS(h, out) ((out) = (h).bits)
#define FG_HALF_MAKE(b, out) ((out).bits = (uint16_t)(b))
#endif
union fg_half_f32 {
    float f;
    uint32_t u;
};

/* Branch-free (a compiler vectorises both), exact, and right under flush-to-zero too: no step
 * computes with a subnormal float. */
static inline float fg_half_to_float(fg_half h) {
    union fg_half_f32 norm, sub;
    uint32_t b, em, sign;
    FG_HALF_BITS(h, b);
    em = b & 0x7fffu;
    sign = (b & 0x8000u) << 16;
    norm.u = (em << 13) + 0x38000000u; /* rebias the exponent: 127 - 15 = 112 */
    uint32_t is_sub = 0u - (uint32_t)(em < 0x400u);
    norm.u |= 0x7f800000u & (0u - (uint32_t)(em >= 0x7c00u)); /* infinity, NaN (payload kept) */
    sub.f = (float)(int32_t)em * 5.9604644775390625e-8f;       /* zero, subnormal: em * 2^-24, exact */
    norm.u = (sub.u & is_sub) | (norm.u & ~is_sub) | sign;
    return norm.f;
}

static inline fg_half fg_half_from_float(float f) {
    union fg_half_f32 v, sub;
    uint32_t a, sign, norm, rest, bits, is_norm, is_inf, is_nan;
    fg_half h;
    v.f = f;
    sign = (v.u >> 16) & 0x8000u;
    a = v.u & 0x7fffffffu;
    norm = (a - 0x38000000u) >> 13; /* normal: drop 13 mantissa bits, ties to even */
    rest = a & 0x1fffu;
    norm += (rest > 0x1000u) | ((rest == 0x1000u) & norm);
    v.u = a;
    sub.f = v.f * 16777216.0f + 8388608.0f; /* below 2^-14: |f| * 2^24 rounded to an integer, ties to even */
    is_norm = 0u - (uint32_t)(a >= 0x38800000u);
    is_inf = 0u - (uint32_t)(a >= 0x477ff000u); /* 65520 and above: infinity */
    is_nan = 0u - (uint32_t)(a > 0x7f800000u);  /* NaN: quiet, top payload bits kept */
    bits = ((sub.u - 0x4b000000u) & ~is_norm) | (norm & is_norm);
    bits = (bits & ~is_inf) | (0x7c00u & is_inf);
    bits = (bits & ~is_nan) | ((0x7e00u | ((a >> 13) & 0x3ffu)) & is_nan);
    FG_HALF_MAKE(sign | bits, h);
    return h;
}
#endif

#endif
