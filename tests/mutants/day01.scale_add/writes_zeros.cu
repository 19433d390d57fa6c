// MUTANT writes zeros: every element of out is written, but with 0 instead of alpha * x + y.
// Derived from solutions/day01/scale_add.cu: out = alpha * x + y for fp32 arrays of any length n.
#include "course/common.cuh"

namespace {

__global__ void scale_add_kernel(float* __restrict__ out, const float* __restrict__ x,
                                 const float* __restrict__ y, float alpha, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = 0.0f;
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
