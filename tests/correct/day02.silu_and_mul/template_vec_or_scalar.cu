// CORRECT vector or scalar chosen at compile time: one template kernel instantiated twice (VEC 8 and VEC 1)
// Day 2: out = silu(x1) * x2. The kernel moves VEC elements per access; the launcher
// instantiates it with 16-byte vectors for aligned rows and with VEC = 1 for the others.
#include "course/vec.cuh"

namespace {

template <typename T, int VEC>
__global__ void silu_and_mul_kernel(T* __restrict__ out, const T* __restrict__ input, int64_t d) {
  const int64_t row = blockIdx.x;
  const T* x1 = input + row * 2 * d;  // (d,) gate half
  const T* x2 = x1 + d;               // (d,) up half
  T* y = out + row * d;               // (d,)
  // d % VEC == 0 (the launcher's choice): whole vectors cover the row
  for (int64_t v = threadIdx.x; v < d / VEC; v += blockDim.x) {
    course::vec_t<T, VEC> a, b, r;
    a.load(x1 + v * VEC);
    b.load(x2 + v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float g = course::to_float(a[j]);
      r[j] = course::from_float<T>(g / (1.0f + __expf(-g)) * course::to_float(b[j]));
    }
    r.store(y + v * VEC);
  }
}

template <typename T, int VEC>
cudaError_t launch(T* out, const T* input, int64_t num_tokens, int64_t d, cudaStream_t stream) {
  const int64_t work = d / VEC;
  const int threads = static_cast<int>(work < 1024 ? (work + 31) / 32 * 32 : 1024);
  silu_and_mul_kernel<T, VEC><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(out, input, d);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_silu_and_mul(T* out, const T* input, int64_t num_tokens, int64_t d, cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return cudaSuccess;
  constexpr int VEC = course::vec_size_16B<T>();
  const bool aligned = d % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 16 == 0;
  return aligned ? launch<T, VEC>(out, input, num_tokens, d, stream) : launch<T, 1>(out, input, num_tokens, d, stream);
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
