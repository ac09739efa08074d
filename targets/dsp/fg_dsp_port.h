/* fusedgrad DSP porting interface (targets/dsp/fg_dsp_port.h, copied into every chip's folder).
 *
 * The vendor runtime implements these functions.  On MT-3000-style parts they are:
 * - hthread group launch, and get_thread_id() for the rank;
 * - the group barrier;
 * - GSM/DDR allocation that every core of the group can address;
 * - the core's AM/SM scratch, with dma_p2p / dma_wait to fill it.
 * fg_dsp_port_host.c implements them with pthreads and memcpy for running on a host.
 *
 * Under _s (shared storage), a kernel copies the rows each core reads into that core's local
 * memory by DMA before computing on them, double-buffered (the next rows' copy runs while these are
 * computed), when fg_dsp_local_bytes() has room for both buffers; otherwise, and under _p, it reads
 * the arrays where they are.  Outputs are written where they are.
 */
#ifndef FG_DSP_PORT_H
#define FG_DSP_PORT_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_dsp_sync fg_dsp_sync_t;

/* Cores addressable by core_mask bits 0 .. fg_dsp_core_count() - 1. */
int fg_dsp_core_count(void);
/* Run fn(rank, ncores, sync, arg) on every core set in core_mask (ranks 0..ncores-1 in bit order)
 * and return when all have returned: 0 on success. */
int fg_dsp_run(uint32_t core_mask, void (*fn)(int rank, int ncores, fg_dsp_sync_t *sync, void *arg), void *arg);
/* Wait for every core of the current run (sync == NULL: a single core, no wait). */
void fg_dsp_barrier(fg_dsp_sync_t *sync);
/* Memory that every core of a run sees (shared storage); NULL when none is left. */
void *fg_dsp_alloc(size_t bytes);
void fg_dsp_free(void *p);
/* The calling core's local memory (AM/SM): its capacity in bytes for one kernel's staging buffers
 * (0: none), and allocation from it (NULL when it has no room). */
size_t fg_dsp_local_bytes(void);
void *fg_dsp_local_alloc(size_t bytes);
void fg_dsp_local_free(void *p);
/* Start copying bytes from shared memory into the calling core's local memory (dma_p2p); the
 * copies a core started are complete when its fg_dsp_dma_wait() returns (dma_wait). */
void fg_dsp_dma_get(void *local, const void *shared, size_t bytes);
void fg_dsp_dma_wait(void);

#ifdef __cplusplus
}
#endif
#endif
