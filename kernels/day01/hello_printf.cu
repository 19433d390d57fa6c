// hello_printf: every thread of a tiny grid says who it is, with printf from the device.
// Not a bandwidth kernel: device printf goes through a buffer that the host prints at the next
// synchronisation; use it on tiny grids for debugging, never in a timed kernel.
#include <cstdio>

#include "course/common.cuh"

namespace {

// The SM this thread's block runs on, read from the %smid special register with one line of
// inline PTX (Day 3 explains asm). The scheduler picks the SM; the same block may land elsewhere
// on the next launch.
__device__ __forceinline__ unsigned current_sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__global__ void whoami_kernel(int print_every) {
  // The same four numbers every kernel starts from: where am I, and how big is everything.
  const unsigned global = blockIdx.x * blockDim.x + threadIdx.x;  // a tiny grid: 32 bits suffice
  const unsigned warp = threadIdx.x / warpSize;  // a warp is 32 consecutive threads of one block
  const unsigned lane = threadIdx.x % warpSize;  // position inside the warp
  if (threadIdx.x % print_every != 0) return;    // keep the output readable for bigger blocks
  printf("block %u of %u | thread %3u of %3u | global %4u | warp %u lane %2u | SM %3u\n",
         blockIdx.x, gridDim.x, threadIdx.x, blockDim.x, global, warp, lane, current_sm_id());
}

}  // namespace

COURSE_EXPORT cudaError_t whoami(int blocks, int threads, int print_every, cudaStream_t stream) {
  if (print_every < 1) return cudaErrorInvalidValue;  // the kernel divides by it
  whoami_kernel<<<blocks, threads, 0, stream>>>(print_every);
  return cudaGetLastError();
}
