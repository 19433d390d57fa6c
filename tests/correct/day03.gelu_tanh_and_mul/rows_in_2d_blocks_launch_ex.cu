// CORRECT 2-D blocks (threadIdx.x along the row, threadIdx.y picks one of several short rows per block) launched through cudaLaunchKernelEx with a cudaLaunchConfig_t; a long row still gets a block of 1024 x 1
// Day 3: out = gelu_tanh(x1) * x2 with course::ptx_tanh and 16-byte loads. Rows of a few dozen
// vectors no longer leave most of a block's warps idle: a block of x * y threads takes y rows.
#include <cstdint>

#include "course/math.cuh"
#include "course/vec.cuh"

namespace {

constexpr float SQRT_2_OVER_PI = 0.7978845608028654f;
constexpr float GELU_CUBIC = 0.044715f;
constexpr int TARGET_BLOCK = 256;  // threads per block to aim for when rows are short

__device__ __forceinline__ float gelu_tanh(float v) {
  const float inner = v * fmaf(SQRT_2_OVER_PI * GELU_CUBIC, v * v, SQRT_2_OVER_PI);
  const float half_v = 0.5f * v;
  return fmaf(half_v, course::ptx_tanh(inner), half_v);
}

template <typename T>
__global__ void gelu_tanh_and_mul_kernel(T* __restrict__ out, const T* __restrict__ input,
                                         int64_t num_tokens, int64_t d, bool vectorized) {
  constexpr int VEC = course::vec_size_16B<T>();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (row >= num_tokens) return;  // the last block's spare rows (no barrier below)
  const T* x1 = input + row * 2 * d;
  const T* x2 = x1 + d;
  T* y = out + row * d;

  int64_t done = 0;
  if (vectorized) {
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
  for (int64_t i = done + threadIdx.x; i < d; i += blockDim.x) {
    y[i] = course::from_float<T>(gelu_tanh(course::to_float(x1[i])) * course::to_float(x2[i]));
  }
}

template <typename T>
cudaError_t launch(T* out, const T* input, int64_t num_tokens, int64_t d, cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return cudaSuccess;
  constexpr int VEC = course::vec_size_16B<T>();
  const bool vectorized = d % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t work = vectorized ? d / VEC : d;
  const int tx = static_cast<int>(work < 1024 ? (work + 31) / 32 * 32 : 1024);
  const int ty = tx >= TARGET_BLOCK ? 1 : TARGET_BLOCK / tx;  // rows per block

  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(tx, ty);
  config.gridDim = dim3(static_cast<unsigned>((num_tokens + ty - 1) / ty));
  config.stream = stream;
  return cudaLaunchKernelEx(&config, gelu_tanh_and_mul_kernel<T>, out, input, num_tokens, d, vectorized);
}

}  // namespace

COURSE_EXPORT cudaError_t gelu_tanh_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens,
                                                 int64_t d, cudaStream_t stream) {
  return launch(out, input, num_tokens, d, stream);
}

COURSE_EXPORT cudaError_t gelu_tanh_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                                 int64_t num_tokens, int64_t d, cudaStream_t stream) {
  return launch(out, input, num_tokens, d, stream);
}
