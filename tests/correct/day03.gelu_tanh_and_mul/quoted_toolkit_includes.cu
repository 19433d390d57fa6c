// CORRECT CUDA toolkit and standard headers included with quotes ("cuda_fp16.h", "mma.h", "cuda_pipeline.h", "cooperative_groups.h", "cuda/barrier", "cstdint")
// Day 3's reference, GELU-tanh-and-mul, with the includes a learner copies from the CUDA samples.
#include "cuda_runtime.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include "cstdint"
#include "mma.h"
#include "cuda_pipeline.h"
#include "cooperative_groups.h"
#include "cuda/barrier"

#include "course/math.cuh"
#include "course/vec.cuh"

namespace {

constexpr float SQRT_2_OVER_PI = 0.7978845608028654f;
constexpr float GELU_CUBIC = 0.044715f;

template <typename T>
__global__ void gelu_tanh_and_mul_kernel(T* __restrict__ out, const T* __restrict__ input,
                                         int64_t d, bool vectorized) {
  // One block per token (row); the block's threads walk the row.
  constexpr int VEC = course::vec_size_16B<T>();  // 8 halves = 16 bytes
  const int64_t row = blockIdx.x;
  const T* x1 = input + row * 2 * d;  // (d,) gate half
  const T* x2 = x1 + d;               // (d,) up half
  T* y = out + row * d;               // (d,)

  // gelu_tanh in fp32, written so the compiler emits FMUL/FFMA and one MUFU.TANH:
  // the tanh argument is v * (k0 + k0 * 0.044715 * v^2), and 0.5 v (1 + t) = fma(0.5 v, t, 0.5 v).
  auto gelu_tanh = [](float v) {
    const float inner = v * fmaf(SQRT_2_OVER_PI * GELU_CUBIC, v * v, SQRT_2_OVER_PI);
    const float half_v = 0.5f * v;
    return fmaf(half_v, course::ptx_tanh(inner), half_v);
  };
  // `vectorized` implies d % VEC == 0 (see the launcher): the scalar loop below has work only on
  // rows that are not vectorized. Starting it at `done` keeps it right for any launcher.
  int64_t done = 0;
  if (vectorized) {
    // Main loop: per iteration each thread reads 16 bytes of each half and writes 16 bytes,
    // so a warp moves whole 128-byte lines per instruction.
    const int64_t num_vecs = d / VEC;
    for (int64_t v = threadIdx.x; v < num_vecs; v += blockDim.x) {
      course::vec_t<T, VEC> a, b, r;
      a.load(x1 + v * VEC);
      b.load(x2 + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        r[j] = course::from_float<T>(gelu_tanh(course::to_float(a[j])) * course::to_float(b[j]));
      }
      r.store(y + v * VEC);
    }
    done = num_vecs * VEC;
  }
  // Tail: the last d % VEC elements, or the whole row when rows are not 16-byte aligned
  // (d not a multiple of VEC, or a misaligned slice); one element per thread, coalesced.
  for (int64_t i = done + threadIdx.x; i < d; i += blockDim.x) {
    y[i] = course::from_float<T>(gelu_tanh(course::to_float(x1[i])) * course::to_float(x2[i]));
  }
}

template <typename T>
cudaError_t launch_gelu_tanh_and_mul(T* out, const T* input, int64_t num_tokens, int64_t d,
                                     cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return cudaSuccess;
  constexpr int VEC = course::vec_size_16B<T>();
  // 16-byte loads need every row start 16-byte aligned: d a multiple of VEC and both base
  // pointers aligned (a tensor slice can start anywhere).
  const bool vectorized = d % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t work_per_row = vectorized ? d / VEC : d;
  const int threads = static_cast<int>(work_per_row < 1024 ? (work_per_row + 31) / 32 * 32 : 1024);
  gelu_tanh_and_mul_kernel<T><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
      out, input, d, vectorized);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t gelu_tanh_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens,
                                                 int64_t d, cudaStream_t stream) {
  return launch_gelu_tanh_and_mul(out, input, num_tokens, d, stream);
}

COURSE_EXPORT cudaError_t gelu_tanh_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                                 int64_t num_tokens, int64_t d, cudaStream_t stream) {
  return launch_gelu_tanh_and_mul(out, input, num_tokens, d, stream);
}
