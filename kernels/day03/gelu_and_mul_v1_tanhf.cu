// v1, GELU-tanh-and-mul with the CUDA math library's tanhf: Day 2's SiLU-and-mul kernel (one
// block per token, 16-byte loads) with the tanh form of GELU in place of SiLU. tanhf is
// accurate to a couple of ulp but is a software routine: about 20 instructions per call, two of
// them MUFU (count them in the notebook). Memory-bound anyway: expect it within a few percent
// of v2, ~0.9x of the copy bandwidth or better, and verify on the GPU.
//
//   input  [num_tokens, 2 * d]   gate half x1 = input[:, :d], up half x2 = input[:, d:]
//   out    [num_tokens, d]       out = gelu_tanh(x1) * x2
//   gelu_tanh(v) = 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3)))
//
// Kept short on purpose: d must be a multiple of 8 and both pointers 16-byte aligned (the
// launcher refuses anything else); the exercise handles every shape.
#include "course/vec.cuh"

namespace {

constexpr float GELU_K0 = 0.7978845608028654f;           // sqrt(2 / pi)
constexpr float GELU_K1 = 0.044715f * 0.7978845608028654f;  // 0.044715 sqrt(2 / pi)

// The tanh argument as v * (k0 + k1 v^2): three instructions (FMUL, FFMA, FMUL).
__device__ __forceinline__ float gelu_v1_tanhf(float v) {
  const float inner = v * fmaf(GELU_K1, v * v, GELU_K0);
  const float half_v = 0.5f * v;
  return fmaf(half_v, tanhf(inner), half_v);  // 0.5 v + 0.5 v tanh(...)
}

template <typename T>
__global__ void gelu_and_mul_v1_kernel(T* __restrict__ out, const T* __restrict__ input, int64_t d) {
  constexpr int VEC = course::vec_size_16B<T>();  // 8 halves = 16 bytes
  const int64_t row = blockIdx.x;
  const T* x1 = input + row * 2 * d;  // (d,) gate half
  const T* x2 = x1 + d;               // (d,) up half
  T* y = out + row * d;               // (d,)
  for (int64_t v = threadIdx.x; v < d / VEC; v += blockDim.x) {
    course::vec_t<T, VEC> a, b, r;
    a.load(x1 + v * VEC);
    b.load(x2 + v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      r[j] = course::from_float<T>(gelu_v1_tanhf(course::to_float(a[j])) * course::to_float(b[j]));
    }
    r.store(y + v * VEC);
  }
}

template <typename T>
cudaError_t launch_gelu_and_mul_v1(T* out, const T* input, int64_t num_tokens, int64_t d, cudaStream_t stream) {
  constexpr int VEC = course::vec_size_16B<T>();
  if (d % VEC != 0 || reinterpret_cast<uintptr_t>(input) % 16 || reinterpret_cast<uintptr_t>(out) % 16) {
    return cudaErrorInvalidValue;  // this version has no scalar path
  }
  if (num_tokens == 0 || d == 0) return cudaSuccess;
  const int64_t vecs = d / VEC;
  const int threads = static_cast<int>(vecs < 1024 ? (vecs + 31) / 32 * 32 : 1024);
  gelu_and_mul_v1_kernel<T><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(out, input, d);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t gelu_and_mul_v1_fp16(__half* out, const __half* input, int64_t num_tokens,
                                               int64_t d, cudaStream_t stream) {
  return launch_gelu_and_mul_v1(out, input, num_tokens, d, stream);
}

COURSE_EXPORT cudaError_t gelu_and_mul_v1_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                               int64_t num_tokens, int64_t d, cudaStream_t stream) {
  return launch_gelu_and_mul_v1(out, input, num_tokens, d, stream);
}
