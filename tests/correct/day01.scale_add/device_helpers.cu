// CORRECT plain __device__ helpers (neither static nor inline), one in an anonymous namespace and one at file scope; blocks of 128 threads
// Day 1: out = alpha * x + y, written as the CUDA tutorials teach it: the arithmetic and the
// index math in small __device__ functions, which nvcc inlines into the kernel.
#include "course/common.cuh"

// At file scope, external linkage: nvcc also gives it a host stub (never called).
__device__ float axpy(float a, float x, float y) { return a * x + y; }

namespace {

__device__ int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__global__ void scale_add_kernel(float* __restrict__ out, const float* __restrict__ x,
                                 const float* __restrict__ y, float alpha, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = global_thread_index(); i < n; i += stride) {
    out[i] = axpy(alpha, x[i], y[i]);
  }
}

}  // namespace

COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha,
                                    int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 128;
  const int blocks = course::grid_stride_blocks(n, threads, 16);  // 16 blocks of 128 per SM: 2048 threads
  scale_add_kernel<<<blocks, threads, 0, stream>>>(out, x, y, alpha, n);
  return cudaGetLastError();
}
