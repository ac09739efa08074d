/* fusedgrad DSP library: the fixed part of layernormgrad.c's entry points
 * (targets/dsp/layernormgrad_entry.h), included once, by layernormgrad.c: eps, the last call's
 * status (per thread in a hosted build) and the check of the arguments.
 */
#ifndef LAYERNORMGRAD_ENTRY_H
#define LAYERNORMGRAD_ENTRY_H
#include "fg_dsp_entry.h"
#include "layernormgrad_status.h"

#ifndef FG_LNG_EPS
#define FG_LNG_EPS 1e-5f
#endif
static FG_DSP_THREAD_LOCAL int fg_status = FG_LNG_OK;

int fg_layernormgrad_status(void) { return fg_status; }

static inline int fg_check(const void *x, const void *dy, const void *var, const void *mean, const void *gamma,
                           const void *dx, const void *dg, const void *db, int param_num, int param_size,
                           int block_num, int block_size, size_t elem) {
    const void *ptr[8];
    size_t bytes[8];
    if (!x || !dy || !var || !mean || !gamma || !dx || !dg || !db) {
        return FG_LNG_ERR_NULL;
    }
    if (!fg_sizes_ok(param_size, param_num, elem) || block_num <= 0 || block_size <= 0 ||
        (long long)block_num * block_size != (long long)param_num * param_size || block_size % param_num != 0) {
        return FG_LNG_ERR_SIZE;
    }
    ptr[0] = x; ptr[1] = dy; ptr[2] = var; ptr[3] = mean; ptr[4] = gamma; ptr[5] = dx; ptr[6] = dg; ptr[7] = db;
    bytes[0] = bytes[1] = bytes[5] = elem * (size_t)param_num * (size_t)param_size;
    bytes[2] = bytes[3] = elem * (size_t)param_size;
    bytes[4] = bytes[6] = bytes[7] = elem * (size_t)param_num;
    return fg_overlap(ptr, bytes, 5, 3) ? FG_LNG_ERR_OVERLAP : FG_LNG_OK;
}

#endif
