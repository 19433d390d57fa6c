// v2 over v1: a grid-stride loop. The grid is capped at 8 blocks per SM (one full wave) and each
// thread steps through the array by the size of the whole grid, so any n works with any grid.
// Should match v1 for large n (~0.85-0.9x of a device copy, ~3.5 TB/s on an H200), with a grid of
// 1,056 blocks instead of n / 256, and no limit on n.
//
//   a, b, out  (n,) fp32
#include "course/common.cuh"

namespace {

constexpr int V2_THREADS = 256;  // 8 warps per block, as in v1

__global__ void vector_add_v2_kernel(float* __restrict__ out, const float* __restrict__ a,
                                     const float* __restrict__ b, int64_t n) {
  // Total number of threads in the grid: the distance from one of a thread's elements to its next.
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // Thread t handles t, t + stride, t + 2 * stride, ...: on every pass the warps of the grid
  // still read neighbouring addresses, which keeps the memory accesses coalesced (Day 2).
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = a[i] + b[i];
  }
}

}  // namespace

// The launcher a library would ship: the grid is chosen from the GPU, not from n.
COURSE_EXPORT cudaError_t vector_add_v2(float* out, const float* a, const float* b, int64_t n,
                                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int blocks = course::grid_stride_blocks(n, V2_THREADS);  // min(ceil(n / 256), 8 x SMs)
  vector_add_v2_kernel<<<blocks, V2_THREADS, 0, stream>>>(out, a, b, n);
  return cudaGetLastError();
}

// The same kernel with a grid of your choice: for experiments on how many blocks fill the GPU.
// The loop makes every grid correct, even a single block of a single thread.
COURSE_EXPORT cudaError_t vector_add_v2_grid(float* out, const float* a, const float* b, int64_t n,
                                             int blocks, int threads, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  // blocks < 1 or threads outside [1, 1024] are rejected by the launch itself (invalid configuration).
  vector_add_v2_kernel<<<blocks, threads, 0, stream>>>(out, a, b, n);
  return cudaGetLastError();
}
