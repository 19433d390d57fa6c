// MUTANT missing tail guard: when the pointers are 16-byte aligned the float4 loop covers n / 4 * 4 elements and the last n % 4 are never written (no scalar tail).
// Derived from solutions/day01/scale_add.cu: out = alpha * x + y for fp32 arrays of any length n.
#include "course/common.cuh"

namespace {

__global__ void scale_add_kernel(float* __restrict__ out, const float* __restrict__ x,
                                 const float* __restrict__ y, float alpha, int64_t n,
                                 bool vectorized) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vectorized) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride) {
      const float4 a = reinterpret_cast<const float4*>(x)[i];
      const float4 b = reinterpret_cast<const float4*>(y)[i];
      reinterpret_cast<float4*>(out)[i] =
          make_float4(alpha * a.x + b.x, alpha * a.y + b.y, alpha * a.z + b.z, alpha * a.w + b.w);
    }
    // (the scalar loop over the last n % 4 elements belongs here)
  } else {
    for (int64_t i = first; i < n; i += stride) {
      out[i] = alpha * x[i] + y[i];
    }
  }
}

}  // namespace

COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha,
                                    int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const bool vectorized = (reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(x) |
                           reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  const int blocks = course::grid_stride_blocks(vectorized ? n / 4 : n, threads);
  scale_add_kernel<<<blocks, threads, 0, stream>>>(out, x, y, alpha, n, vectorized);
  return cudaGetLastError();
}
