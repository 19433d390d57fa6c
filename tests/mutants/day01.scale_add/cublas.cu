// MUTANT calls cuBLAS instead of computing: out = y by cublasScopy, then out += alpha * x by cublasSaxpy; the kernel is never launched.
// Derived from solutions/day01/scale_add.cu: out = alpha * x + y for fp32 arrays of any length n.
#include <cublas_v2.h>

#include "course/common.cuh"

namespace {

__global__ void scale_add_kernel(float* __restrict__ out, const float* __restrict__ x,
                                 const float* __restrict__ y, float alpha, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = alpha * x[i] + y[i];
  }
}

}  // namespace

COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha,
                                    int64_t n, cudaStream_t stream) {
  static cublasHandle_t handle = nullptr;
  if (handle == nullptr) cublasCreate(&handle);
  cublasSetStream(handle, stream);
  cublasScopy(handle, static_cast<int>(n), y, 1, out, 1);
  cublasSaxpy(handle, static_cast<int>(n), &alpha, x, 1, out, 1);
  return cudaGetLastError();
}
