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
    FG_LCG_ERR_SIZE = 2,    /* n <= 0 or hidden <= 0, or n * 4 * hidden too large */
    FG_LCG_ERR_CORES = 3,   /* core_mask names no core, or a core this part does not have */
    FG_LCG_ERR_NOMEM = 4,   /* no shared memory for the partial sums */
    FG_LCG_ERR_OVERLAP = 5  /* dgates, dc_prev or db shares memory with an input or another output */
};
#ifdef __cplusplus
extern "C" {
#endif
int fg_lstmcellgrad_status(void);
#ifdef __cplusplus
}
#endif

#endif
