// MUTANT calls a torch op instead of computing: the launcher wraps the pointers in tensors and calls at::add_out; the kernel is never launched.
// Derived from solutions/day01/scale_add.cu: out = alpha * x + y for fp32 arrays of any length n.
#include <ATen/ATen.h>

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
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  at::Tensor o = at::from_blob(out, {n}, opts);
  at::add_out(o, at::from_blob(const_cast<float*>(y), {n}, opts),
              at::from_blob(const_cast<float*>(x), {n}, opts), alpha);
  return cudaSuccess;
}
