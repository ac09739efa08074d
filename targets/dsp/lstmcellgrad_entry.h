/* fusedgrad DSP library: the fixed part of lstmcellgrad.c's entry points
 * (targets/dsp/lstmcellgrad_entry.h), included once, by lstmcellgrad.c: the last call's status
 * (per thread in a hosted build).
 */
#ifndef LSTMCELLGRAD_ENTRY_H
#define LSTMCELLGRAD_ENTRY_H
#include "fg_dsp_entry.h"
#include "lstmcellgrad_status.h"

static FG_DSP_THREAD_LOCAL int fg_lcg_status = FG_LCG_OK;

int fg_lstmcellgrad_status(void) { return fg_lcg_status; }

#endif
