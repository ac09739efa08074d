/* fusedgrad DSP library: the LSTM-cell backward's status codes (targets/dsp/lstmcellgrad_status.h).
 *
 * The vendor's entry points return nothing: after a call, fg_lstmcellgrad_status() says whether it
 * ran (FG_LCG_OK) or why it wrote nothing; the _r entry points return the code.  Included by
 * lstmcellgrad.h.
 */
#ifndef LSTMCELLGRAD_STATUS_H
#define LSTMCELLGRAD_STATUS_H

enum {
    FG_LCG_OK = 0,          /* ran */
    FG_LCG_ERR_NULL = 1,    /* cx, cy, storage, dgates, dc_prev (or db with has_bias) is NULL */
    FG_LCG_ERR_SIZE = 2,    /* n <= 0 or hidden <= 0, or the sizes too large: (n + 64) *
                               (4 * hidden + 64) must stay below 2^31 and fit size_t in bytes */
    FG_LCG_ERR_CORES = 3,   /* core_mask names no core, or a core this part does not have */
    FG_LCG_ERR_NOMEM = 4,   /* no shared memory for the workspace (_s, _p) */
    FG_LCG_ERR_OVERLAP = 5, /* dgates, dc_prev or db shares memory with an input or another output */
    FG_LCG_ERR_WORKSPACE = 6 /* the caller's workspace (_w entry points) is NULL or smaller than the
                                  call needs (the _workspace query says how large) */
};
#ifdef __cplusplus
extern "C" {
#endif
int fg_lstmcellgrad_status(void);
#ifdef __cplusplus
}
#endif

#endif
