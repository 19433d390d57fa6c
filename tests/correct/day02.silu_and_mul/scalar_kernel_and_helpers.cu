// CORRECT a scalar kernel for unaligned rows beside the vectorized one (no LDG.E.128 in it), and plain __device__ helpers
// Day 2: out = silu(x1) * x2 row by row. Two kernels instead of one with a flag: the launcher
// picks the 16-byte kernel when every row is 16-byte aligned, the one-element kernel otherwise.
#include "course/vec.cuh"

// At file scope, external linkage (nvcc gives it a host stub that is never called).
__device__ float silu_mul(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

namespace {

__device__ float activate(float g, float u) { return silu_mul(g, u); }

// Rows of d elements, d % VEC == 0 and 16-byte aligned pointers: every load is 16 bytes.
template <typename T>
__global__ void silu_and_mul_vec_kernel(T* __restrict__ out, const T* __restrict__ input, int64_t d) {
  constexpr int VEC = course::vec_size_16B<T>();
  const int64_t row = blockIdx.x;
  const T* x1 = input + row * 2 * d;
  const T* x2 = x1 + d;
  T* y = out + row * d;
  for (int64_t v = threadIdx.x; v < d / VEC; v += blockDim.x) {
    course::vec_t<T, VEC> a, b, r;
    a.load(x1 + v * VEC);
    b.load(x2 + v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      r[j] = course::from_float<T>(activate(course::to_float(a[j]), course::to_float(b[j])));
    }
    r.store(y + v * VEC);
  }
}

// Any d, any alignment: one element per thread and step, still coalesced.
template <typename T>
__global__ void silu_and_mul_scalar_kernel(T* __restrict__ out, const T* __restrict__ input, int64_t d) {
  const int64_t row = blockIdx.x;
  const T* x1 = input + row * 2 * d;
  const T* x2 = x1 + d;
  T* y = out + row * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    y[i] = course::from_float<T>(activate(course::to_float(x1[i]), course::to_float(x2[i])));
  }
}

int threads_for(int64_t work_per_row) {
  return static_cast<int>(work_per_row < 1024 ? (work_per_row + 31) / 32 * 32 : 1024);
}

template <typename T>
cudaError_t launch_silu_and_mul(T* out, const T* input, int64_t num_tokens, int64_t d, cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return cudaSuccess;
  constexpr int VEC = course::vec_size_16B<T>();
  const bool aligned = d % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const unsigned rows = static_cast<unsigned>(num_tokens);
  if (aligned) {
    silu_and_mul_vec_kernel<T><<<rows, threads_for(d / VEC), 0, stream>>>(out, input, d);
  } else {
    silu_and_mul_scalar_kernel<T><<<rows, threads_for(d), 0, stream>>>(out, input, d);
  }
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t silu_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens,
                                            int64_t d, cudaStream_t stream) {
  return launch_silu_and_mul(out, input, num_tokens, d, stream);
}

COURSE_EXPORT cudaError_t silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                            int64_t num_tokens, int64_t d, cudaStream_t stream) {
  return launch_silu_and_mul(out, input, num_tokens, d, stream);
}
