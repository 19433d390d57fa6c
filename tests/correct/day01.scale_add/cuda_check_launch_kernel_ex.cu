// CORRECT a CUDA_CHECK-style macro that returns the first failing runtime call's error, the launch through cudaLaunchKernelEx with a cudaLaunchConfig_t, #define'd launch constants, __launch_bounds__(256, 2) and __builtin_expect on the empty case
// Day 1: out = alpha * x + y with a grid-stride loop, launched the way the CUDA 12 programming
// guide shows extensible launches: a config struct instead of the <<<...>>> syntax.
#include <cstdint>
#include <cuda_runtime.h>

#include "course/common.cuh"

#define SCALE_ADD_THREADS 256
#define SCALE_ADD_BLOCKS_PER_SM 8

// Return the error of a failing runtime call from the enclosing launcher.
#define CUDA_CHECK(call)                         \
  do {                                           \
    const cudaError_t err_ = (call);             \
    if (err_ != cudaSuccess) return err_;        \
  } while (0)

namespace {

__global__ void __launch_bounds__(SCALE_ADD_THREADS, 2)
    scale_add_kernel(float* __restrict__ out, const float* __restrict__ x,
                     const float* __restrict__ y, float alpha, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = alpha * x[i] + y[i];
  }
}

}  // namespace

COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha,
                                    int64_t n, cudaStream_t stream) {
  if (__builtin_expect(n <= 0, 0)) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;

  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  const int64_t needed = (n + SCALE_ADD_THREADS - 1) / SCALE_ADD_THREADS;
  const int64_t cap = static_cast<int64_t>(sms) * SCALE_ADD_BLOCKS_PER_SM;

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(needed < cap ? needed : cap));
  config.blockDim = dim3(SCALE_ADD_THREADS);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = nullptr;
  config.numAttrs = 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, scale_add_kernel, out, x, y, alpha, n));
  return cudaSuccess;
}
