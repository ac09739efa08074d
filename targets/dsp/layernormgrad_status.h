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
                               or block_size not a multiple of param_num */
    FG_LNG_ERR_CORES = 3,   /* core_mask names no core, or a core this part does not have */
    FG_LNG_ERR_NOMEM = 4,   /* no shared memory for the partial sums */
    FG_LNG_ERR_OVERLAP = 5  /* dx, dg or db shares memory with an input or another output */
};
#ifdef __cplusplus
extern "C" {
#endif
int fg_layernormgrad_status(void);
#ifdef __cplusplus
}
#endif

#endif
