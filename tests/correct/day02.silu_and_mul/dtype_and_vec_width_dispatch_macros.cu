// CORRECT one untyped launcher with learner-written AT_DISPATCH-style macros: an enum class dtype switched to a `using scalar_t`, and the vector width (8, 4, 2 or 1 elements) switched to a compile-time VEC from the widest alignment the rows share
// Day 2: out = silu(x1) * x2. Each row is moved in vectors of the widest width that divides d and
// the pointers' alignment: 16-byte loads on aligned rows, 8/4/2-byte ones otherwise, never a tail.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "course/vec.cuh"

enum class DType { kHalf, kBFloat16 };

#define DISPATCH_HALF_TYPES(DTYPE, ...)                         \
  [&]() -> cudaError_t {                                        \
    switch (DTYPE) {                                            \
      case DType::kHalf: {                                      \
        using scalar_t = __half;                                \
        return __VA_ARGS__();                                   \
      }                                                         \
      case DType::kBFloat16: {                                  \
        using scalar_t = __nv_bfloat16;                         \
        return __VA_ARGS__();                                   \
      }                                                         \
    }                                                           \
    return cudaErrorInvalidValue;                               \
  }()

#define DISPATCH_VEC_SIZE(WIDTH, ...)                           \
  [&]() -> cudaError_t {                                        \
    switch (WIDTH) {                                            \
      case 8: { constexpr int VEC = 8; return __VA_ARGS__(); }  \
      case 4: { constexpr int VEC = 4; return __VA_ARGS__(); }  \
      case 2: { constexpr int VEC = 2; return __VA_ARGS__(); }  \
      default: { constexpr int VEC = 1; return __VA_ARGS__(); } \
    }                                                           \
  }()

namespace {

template <typename T, int VEC>
__global__ void silu_and_mul_kernel(T* __restrict__ out, const T* __restrict__ input, int64_t d) {
  const int64_t row = blockIdx.x;
  const T* x1 = input + row * 2 * d;
  const T* x2 = x1 + d;
  T* y = out + row * d;
  const int64_t num_vecs = d / VEC;  // the launcher picks VEC | d: no tail
  for (int64_t v = threadIdx.x; v < num_vecs; v += blockDim.x) {
    course::vec_t<T, VEC> a, b, r;
    a.load(x1 + v * VEC);
    b.load(x2 + v * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float g = course::to_float(a[j]);
      const float u = course::to_float(b[j]);
      r[j] = course::from_float<T>(g / (1.0f + __expf(-g)) * u);
    }
    r.store(y + v * VEC);
  }
}

// The widest vector (in elements of `elem_bytes`, at most 16 bytes) that every row start meets.
int vec_width(const void* out, const void* input, int64_t d, int elem_bytes) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(input);
  for (int width = 16 / elem_bytes; width > 1; width /= 2) {
    if (d % width == 0 && addr % (width * elem_bytes) == 0) return width;
  }
  return 1;
}

cudaError_t silu_and_mul_launch(DType dtype, void* out, const void* input, int64_t num_tokens, int64_t d,
                                cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return cudaSuccess;
  const int width = vec_width(out, input, d, 2);
  return DISPATCH_HALF_TYPES(dtype, [&] {
    return DISPATCH_VEC_SIZE(width, [&] {
      const int64_t work = d / VEC;
      const int threads = static_cast<int>(work < 1024 ? (work + 31) / 32 * 32 : 1024);
      silu_and_mul_kernel<scalar_t, VEC><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
          static_cast<scalar_t*>(out), static_cast<const scalar_t*>(input), d);
      return cudaGetLastError();
    });
  });
}

}  // namespace

COURSE_EXPORT cudaError_t silu_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens,
                                            int64_t d, cudaStream_t stream) {
  return silu_and_mul_launch(DType::kHalf, out, input, num_tokens, d, stream);
}

COURSE_EXPORT cudaError_t silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                            int64_t num_tokens, int64_t d, cudaStream_t stream) {
  return silu_and_mul_launch(DType::kBFloat16, out, input, num_tokens, d, stream);
}
