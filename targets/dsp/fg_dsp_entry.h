/* fusedgrad DSP library: what every op's entry points share (targets/dsp/fg_dsp_entry.h).
 *
 * The workspace layout, the size limits, the status word's storage, the core-mask checks and the
 * overlap check of the entry points.
 */
#ifndef FG_DSP_ENTRY_H
#define FG_DSP_ENTRY_H
#include <stddef.h>
#include <stdint.h>

#include "fg_dsp_port.h"

/* The workspace: every buffer in it starts on a 64-byte boundary, from a base on one.  A call's
 * workspace is asked for FG_WS_SLACK bytes more than its buffers take, so any address will do. */
#define FG_WS_ALIGN(n) (((size_t)(n) + 63u) & ~(size_t)63u)
#define FG_WS_ALIGN_LL(n) (((unsigned long long)(n) + 63u) & ~63ull)
#define FG_WS_SLACK 63u

static inline char *fg_ws_base(void *ws) {
    return (char *)ws + (64u - (unsigned)((uintptr_t)ws % 64u)) % 64u;
}

/* How far the kernels' 32-bit index arithmetic reaches past the arrays: they round rows and
 * columns up to their blocks and size a block of up to 32 rows at once (a DMA window). */
#define FG_PAD 64

/* 1 when a kernel over rows x cols elements (cols: an array's whole row, e.g. 4 * hidden) keeps
 * every index in int32_t, (rows + FG_PAD) * (cols + FG_PAD) < 2^31, and its arrays' byte counts
 * in size_t, which has 32 bits on many parts.  Each side is bounded before the product is taken. */
static inline int fg_sizes_ok(long long rows, long long cols, size_t elem) {
    unsigned long long padded;
    if (rows <= 0 || cols <= 0 || rows > 0x7fffffffLL || cols > 0x7fffffffLL) {
        return 0;
    }
    padded = (unsigned long long)(rows + FG_PAD) * (unsigned long long)(cols + FG_PAD);
    return padded <= 0x7fffffffull && padded * elem <= (unsigned long long)SIZE_MAX;
}

/* The status word the void entry points leave for fg_<op>_status(): one per thread where the C
 * library has threads (a hosted build), else one for the program (a port may define
 * FG_DSP_THREAD_LOCAL itself).  A caller that needs its own call's status wherever it runs uses the
 * _r entry points, which return it. */
#ifndef FG_DSP_THREAD_LOCAL
#if __STDC_HOSTED__ && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define FG_DSP_THREAD_LOCAL _Thread_local
#elif __STDC_HOSTED__ && defined(__GNUC__)
#define FG_DSP_THREAD_LOCAL __thread
#else
#define FG_DSP_THREAD_LOCAL
#endif
#endif

/* 1 when core_mask names at least one core and only cores this part has */
static inline int fg_mask_ok(int core_mask) {
    int n = fg_dsp_core_count();
    return core_mask != 0 && (n >= 31 || ((unsigned)core_mask >> n) == 0u);
}

/* the cores core_mask names (fg_mask_ok(core_mask) holds) */
static inline int fg_mask_cores(int core_mask) {
    int n = 0;
    unsigned m = (unsigned)core_mask;
    for (; m != 0u; m &= m - 1u) {
        ++n;
    }
    return n;
}

/* 1 when one of the n_out arrays after the first n_in (the outputs) shares a byte with any other
 * array; NULL arrays take no memory.  The kernels' pointers are restrict: this keeps them honest. */
static inline int fg_overlap(const void *const *ptr, const size_t *bytes, int n_in, int n_out) {
    int i, j;
    for (i = n_in; i < n_in + n_out; ++i) {
        uintptr_t a = (uintptr_t)ptr[i];
        for (j = 0; j < n_in + n_out; ++j) {
            uintptr_t b = (uintptr_t)ptr[j];
            if (j != i && ptr[i] && ptr[j] && bytes[i] && bytes[j] && a < b + bytes[j] && b < a + bytes[i]) {
                return 1;
            }
        }
    }
    return 0;
}

#ifdef FG_USE_VALUES_OK
/* 1 when each of the n values v[k] lies in lo .. hi and, where non_increasing, none exceeds the one
 * before it (the integer inputs of TensorSpec.bounded_by / non_increasing) */
static inline int fg_values_ok(const int32_t *v, int32_t n, int32_t lo, int32_t hi, int non_increasing) {
    int32_t k;
    for (k = 0; k < n; ++k) {
        if (v[k] < lo || v[k] > hi || (non_increasing && k > 0 && v[k] > v[k - 1])) {
            return 0;
        }
    }
    return 1;
}
#endif

#endif
