// MUTANT writes only part of the output: one element per thread and no grid-stride loop, but the grid is capped (8 blocks per SM), so elements past blocks * threads (n = 1,000,003 on an H200) are never written.
// Derived from solutions/day01/scale_add.cu: out = alpha * x + y for fp32 arrays of any length n.
#include "course/common.cuh"

namespace {

__global__ void scale_add_kernel(float* __restrict__ out, const float* __restrict__ x,
                                 const float* __restrict__ y, float alpha, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = alpha * x[i] + y[i];
  }
}

}  // namespace

COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha,
                                    int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const int blocks = course::grid_stride_blocks(n, threads);  // at most 8 blocks per SM
  scale_add_kernel<<<blocks, threads, 0, stream>>>(out, x, y, alpha, n);
  return cudaGetLastError();
}
