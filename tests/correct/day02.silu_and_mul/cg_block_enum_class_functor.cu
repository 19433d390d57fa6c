// CORRECT the block's threads through cooperative_groups (this_thread_block(): thread_rank, num_threads, group_index), the load path an enum class template parameter chosen with if constexpr, and SiLU-and-mul as a struct with a __host__ __device__ member function
// Day 2: out = silu(x1) * x2, one block per token; Access::kVector moves 16 bytes per load,
// Access::kScalar one element (rows that are not 16-byte aligned).
#include <cooperative_groups.h>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "course/vec.cuh"

namespace cg = cooperative_groups;

namespace {

enum class Access : int { kScalar = 0, kVector = 1 };

struct SiluAndMul {
  __host__ __device__ __forceinline__ float operator()(float g, float u) const {
#ifdef __CUDA_ARCH__
    return g / (1.0f + __expf(-g)) * u;
#else
    return g / (1.0f + expf(-g)) * u;
#endif
  }
};

template <typename T, Access ACCESS, typename Op>
__global__ void gated_kernel(T* __restrict__ out, const T* __restrict__ input, int64_t d, Op op) {
  const cg::thread_block block = cg::this_thread_block();
  const int64_t row = block.group_index().x;
  const int64_t tid = block.thread_rank();
  const int64_t nthreads = block.num_threads();
  const T* x1 = input + row * 2 * d;
  const T* x2 = x1 + d;
  T* y = out + row * d;

  int64_t done = 0;
  if constexpr (ACCESS == Access::kVector) {
    constexpr int VEC = course::vec_size_16B<T>();
    const int64_t num_vecs = d / VEC;
    for (int64_t v = tid; v < num_vecs; v += nthreads) {
      course::vec_t<T, VEC> a, b, r;
      a.load(x1 + v * VEC);
      b.load(x2 + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        r[j] = course::from_float<T>(op(course::to_float(a[j]), course::to_float(b[j])));
      }
      r.store(y + v * VEC);
    }
    done = num_vecs * VEC;
  }
  for (int64_t i = done + tid; i < d; i += nthreads) {  // the tail, or every element (kScalar)
    y[i] = course::from_float<T>(op(course::to_float(x1[i]), course::to_float(x2[i])));
  }
}

template <typename T>
cudaError_t launch(T* out, const T* input, int64_t num_tokens, int64_t d, cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return cudaSuccess;
  constexpr int VEC = course::vec_size_16B<T>();
  const bool aligned = d % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t work = aligned ? d / VEC : d;
  const int threads = static_cast<int>(work < 1024 ? (work + 31) / 32 * 32 : 1024);
  const unsigned blocks = static_cast<unsigned>(num_tokens);
  if (aligned) {
    gated_kernel<T, Access::kVector><<<blocks, threads, 0, stream>>>(out, input, d, SiluAndMul{});
  } else {
    gated_kernel<T, Access::kScalar><<<blocks, threads, 0, stream>>>(out, input, d, SiluAndMul{});
  }
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t silu_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens,
                                            int64_t d, cudaStream_t stream) {
  return launch(out, input, num_tokens, d, stream);
}

COURSE_EXPORT cudaError_t silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                            int64_t num_tokens, int64_t d, cudaStream_t stream) {
  return launch(out, input, num_tokens, d, stream);
}
