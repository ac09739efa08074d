// ---- the grid barrier of the persistent kernels (fusedgrad targets/cuda_grid_sync.cuh)
// A counter every block's thread 0 increments on arrival; the last to arrive sets it back to zero and
// then advances the generation, which the others wait on.  The generation is read before arriving, so
// a waiter cannot miss the advance; the counter is zero again after every barrier, so the state is the
// same at the start of every launch (no reset between launches, whatever the grid size).  The fences
// order each block's global stores before its arrival and the other blocks' loads after their wait
// (CUDA C++ Programming Guide, "Memory Fence Functions").  The atomics touch only the barrier's two
// words, never the arithmetic.  One state per module: launches of one module's persistent kernels run
// one at a time (one stream), as the full LSTM issues them.
__device__ unsigned int fg_grid_barrier_count = 0;
__device__ unsigned int fg_grid_barrier_generation = 0;
static __device__ __forceinline__ int fg_grid_sync(unsigned int blocks) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    volatile unsigned int* generation = &fg_grid_barrier_generation;
    unsigned int seen = *generation;
    __threadfence();
    if (atomicAdd(&fg_grid_barrier_count, 1u) == blocks - 1u) {
      atomicExch(&fg_grid_barrier_count, 0u);
      __threadfence();
      atomicAdd(&fg_grid_barrier_generation, 1u);
    } else {
      while (*generation == seen) {
        __nanosleep(32);
      }
    }
    __threadfence();
  }
  __syncthreads();
  return 0;
}
// ---- end of the grid barrier
