/* The scalar conversions of every kernel file (the dialect's casts, lowering.c_dialect's FgCast):
 * static_cast, except that the scalar unit of Ascend910B converts bfloat16_t only through AscendC's
 * ToFloat / ToBfloat16 (kernel_scalar_convert.h).  Once per translation unit, which may hold several
 * kernel files (lowering/ascend/kernels.py puts it in each; this comment is not copied). */
#ifndef FG_SCALAR_CASTS
#define FG_SCALAR_CASTS
template <typename To, typename From>
__aicore__ inline To FgCast(From v) { return static_cast<To>(v); }
template <>
__aicore__ inline float FgCast<float, bfloat16_t>(bfloat16_t v) { return AscendC::ToFloat(v); }
template <>
__aicore__ inline bfloat16_t FgCast<bfloat16_t, float>(float v) { return AscendC::ToBfloat16(v); }
#endif
