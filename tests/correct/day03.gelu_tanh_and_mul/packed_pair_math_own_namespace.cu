// CORRECT the conversions done two at a time (__half22float2 / __float22half2_rn, __bfloat1622float2 / __float22bfloat162_rn) picked with if constexpr, __forceinline__ helpers in a namespace of the learner's own, #define'd constants, a constexpr function and static_asserts
// Day 3: out = gelu_tanh(x1) * x2 with course::ptx_tanh and 16-byte loads; each 16-byte vector is
// read as four packed pairs, converted with one instruction per pair.
#include <cstdint>
#include <type_traits>

#include "course/math.cuh"
#include "course/vec.cuh"

#define GELU_K0 0.7978845608028654f  // sqrt(2 / pi)
#define GELU_K1 0.044715f
#define MAX_THREADS 1024

namespace gelu_ops {

template <typename T>
using pair_t = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;

template <typename T>
__device__ __forceinline__ float2 to_float2(pair_t<T> p) {
  if constexpr (std::is_same_v<T, __half>) return __half22float2(p);
  else return __bfloat1622float2(p);
}

template <typename T>
__device__ __forceinline__ pair_t<T> from_float2(float2 f) {
  if constexpr (std::is_same_v<T, __half>) return __float22half2_rn(f);
  else return __float22bfloat162_rn(f);
}

__device__ __forceinline__ float gelu_tanh(float v) {
  const float inner = v * fmaf(GELU_K0 * GELU_K1, v * v, GELU_K0);
  const float half_v = 0.5f * v;
  return fmaf(half_v, course::ptx_tanh(inner), half_v);
}

constexpr int threads_for(int64_t work) {
  return static_cast<int>(work < MAX_THREADS ? (work + 31) / 32 * 32 : MAX_THREADS);
}
static_assert(threads_for(1) == 32 && threads_for(1000) == 1024 && threads_for(1 << 20) == MAX_THREADS);

}  // namespace gelu_ops

namespace {

template <typename T>
__global__ void gelu_tanh_and_mul_kernel(T* __restrict__ out, const T* __restrict__ input, int64_t d,
                                         bool vectorized) {
  using namespace gelu_ops;
  using pair = pair_t<T>;
  constexpr int VEC = course::vec_size_16B<T>();
  constexpr int PAIRS = VEC / 2;
  static_assert(sizeof(pair) * PAIRS == sizeof(course::vec_t<T, VEC>), "a vector is PAIRS packed pairs");
  const int64_t row = blockIdx.x;
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
      const pair* ap = reinterpret_cast<const pair*>(a.data);
      const pair* bp = reinterpret_cast<const pair*>(b.data);
      pair* rp = reinterpret_cast<pair*>(r.data);
#pragma unroll
      for (int p = 0; p < PAIRS; ++p) {
        const float2 g = to_float2<T>(ap[p]);
        const float2 u = to_float2<T>(bp[p]);
        rp[p] = from_float2<T>(make_float2(gelu_tanh(g.x) * u.x, gelu_tanh(g.y) * u.y));
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
  const int threads = gelu_ops::threads_for(vectorized ? d / VEC : d);
  gelu_tanh_and_mul_kernel<T><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(out, input, d, vectorized);
  return cudaGetLastError();
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
