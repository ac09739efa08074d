/* fusedgrad DSP library: what every op's entry points share (targets/dsp/fg_dsp_entry.h).
 *
 * The workspace alignment, the status word's storage, the core-mask check and the overlap check of
 * the _s/_p entry points.
 */
#ifndef FG_DSP_ENTRY_H
#define FG_DSP_ENTRY_H
#include <stddef.h>
#include <stdint.h>

#include "fg_dsp_port.h"

#define FG_WS_ALIGN(n) (((size_t)(n) + 63u) & ~(size_t)63u)

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

#endif
