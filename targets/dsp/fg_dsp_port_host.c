/* fusedgrad DSP port: host implementation with POSIX threads (targets/dsp/fg_dsp_port_host.c). */
#define _POSIX_C_SOURCE 200809L
#include "fg_dsp_port.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef FG_DSP_HOST_CORES
#define FG_DSP_HOST_CORES 8
#endif

struct fg_dsp_sync {
    pthread_barrier_t barrier;
};

struct fg_dsp_task {
    void (*fn)(int, int, fg_dsp_sync_t *, void *);
    void *arg;
    fg_dsp_sync_t *sync;
    int rank, ncores;
};

int fg_dsp_core_count(void) { return FG_DSP_HOST_CORES; }

static void *fg_dsp_thread(void *p) {
    struct fg_dsp_task *t = (struct fg_dsp_task *)p;
    t->fn(t->rank, t->ncores, t->sync, t->arg);
    return NULL;
}

int fg_dsp_run(uint32_t core_mask, void (*fn)(int, int, fg_dsp_sync_t *, void *), void *arg) {
    struct fg_dsp_task tasks[FG_DSP_HOST_CORES];
    pthread_t threads[FG_DSP_HOST_CORES];
    fg_dsp_sync_t sync;
    int n = 0, k;
    for (k = 0; k < FG_DSP_HOST_CORES; ++k) {
        if (core_mask & (1u << k)) {
            ++n;
        }
    }
    if (n == 0 || pthread_barrier_init(&sync.barrier, NULL, (unsigned)n) != 0) {
        return -1;
    }
    for (k = 0; k < n; ++k) {
        tasks[k].fn = fn;
        tasks[k].arg = arg;
        tasks[k].sync = &sync;
        tasks[k].rank = k;
        tasks[k].ncores = n;
    }
    for (k = 1; k < n; ++k) {
        if (pthread_create(&threads[k], NULL, fg_dsp_thread, &tasks[k]) != 0) {
            abort(); /* the group cannot start: no partial result is ever returned */
        }
    }
    fg_dsp_thread(&tasks[0]);
    for (k = 1; k < n; ++k) {
        pthread_join(threads[k], NULL);
    }
    pthread_barrier_destroy(&sync.barrier);
    return 0;
}

void fg_dsp_barrier(fg_dsp_sync_t *sync) {
    if (sync != NULL) {
        pthread_barrier_wait(&sync->barrier);
    }
}

void *fg_dsp_alloc(size_t bytes) { return malloc(bytes); }

void fg_dsp_free(void *p) { free(p); }

/* Local memory: a host core reads shared memory as fast as any, so by default it has none and the
 * kernels read in place.  -DFG_DSP_HOST_LOCAL_BYTES=786432 (an MT-3000 AM) gives each core that much,
 * filled by memcpy: the DMA path of a DSP, run on a host. */
#ifndef FG_DSP_HOST_LOCAL_BYTES
#define FG_DSP_HOST_LOCAL_BYTES 0u
#endif

/* bytes copied by fg_dsp_dma_get since the program started (for tests and profiles) */
unsigned long long fg_dsp_host_dma_bytes = 0;
static pthread_mutex_t fg_dsp_dma_lock = PTHREAD_MUTEX_INITIALIZER;

size_t fg_dsp_local_bytes(void) { return FG_DSP_HOST_LOCAL_BYTES; }

void *fg_dsp_local_alloc(size_t bytes) { return bytes <= FG_DSP_HOST_LOCAL_BYTES ? malloc(bytes) : NULL; }

void fg_dsp_local_free(void *p) { free(p); }

void fg_dsp_dma_get(void *local, const void *shared, size_t bytes) {
    memcpy(local, shared, bytes);
    pthread_mutex_lock(&fg_dsp_dma_lock);
    fg_dsp_host_dma_bytes += bytes;
    pthread_mutex_unlock(&fg_dsp_dma_lock);
}

void fg_dsp_dma_wait(void) {}
