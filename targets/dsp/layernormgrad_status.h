/* fusedgrad DSP library: the LayerNorm backward's status codes (targets/dsp/layernormgrad_status.h).
 *
 * The vendor's entry points return nothing: after a call, fg_layernormgrad_status() says whether it
 * ran (FG_LNG_OK) or why it wrote nothing; the _r entry points return the code.  Included by
 * layernormgrad.h.
 */
#ifndef LAYERNORMGRAD_STATUS_H
#define LAYERNORMGRAD_STATUS_H

enum {
    FG_LNG_OK = 0,          /* ran */
    FG_LNG_ERR_NULL = 1,    /* a pointer argument is NULL */
    FG_LNG_ERR_SIZE = 2,    /* param_num/param_size <= 0, block_num*block_size != param_num*param_size,
                               block_size not a multiple of param_num, or the sizes too large:
                               (param_size + 64) * (param_num + 64) must stay below 2^31 and
                               fit size_t in bytes */
    FG_LNG_ERR_CORES = 3,   /* core_mask names no core, or a core this part does not have */
    FG_LNG_ERR_NOMEM = 4,   /* no shared memory for the workspace (_s, _p) */
    FG_LNG_ERR_OVERLAP = 5, /* dx, dg or db shares memory with an input or another output */
    FG_LNG_ERR_WORKSPACE = 6 /* the caller's workspace (_w entry points) is NULL or smaller than the
                                  call needs (the _workspace query says how large) */
};
#ifdef __cplusplus
extern "C" {
#endif
int fg_layernormgrad_status(void);
#ifdef __cplusplus
}
#endif

#endif
