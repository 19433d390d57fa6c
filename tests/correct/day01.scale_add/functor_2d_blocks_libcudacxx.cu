// CORRECT the operation a struct with a __host__ __device__ member function passed to a generic grid-stride kernel template, 2-D blocks of 32 x 8 threads, #pragma unroll 4, libcu++ (cuda::std::int64_t, cuda::std::is_trivially_copyable_v), constexpr helpers and static_asserts
// Day 1: out = alpha * x + y. The kernel only walks the index space; what happens at an index is
// the functor's business (the pattern of thrust's and CUB's for_each).
#include <algorithm>
#include <cuda/std/cstdint>
#include <cuda/std/type_traits>
#include <cuda_runtime.h>

#include "course/common.cuh"

namespace {

using index_t = cuda::std::int64_t;

constexpr int BLOCK_X = 32;  // a warp across
constexpr int BLOCK_Y = 8;   // 8 warps down
constexpr int BLOCK_THREADS = BLOCK_X * BLOCK_Y;
constexpr int BLOCKS_PER_SM = 8;
static_assert(BLOCK_X == 32, "threadIdx.x must run along a warp so that accesses coalesce");
static_assert(BLOCK_THREADS <= 1024, "too many threads for one block");

constexpr index_t blocks_for(index_t n) { return (n + BLOCK_THREADS - 1) / BLOCK_THREADS; }

struct ScaleAdd {
  float alpha;
  float* __restrict__ out;
  const float* __restrict__ x;
  const float* __restrict__ y;

  __host__ __device__ void operator()(index_t i) const { out[i] = alpha * x[i] + y[i]; }
};
static_assert(cuda::std::is_trivially_copyable_v<ScaleAdd>, "kernel arguments are copied bytewise");

template <typename Op>
__global__ void for_each_index(Op op, index_t n) {
  // Flatten the 2-D block: thread (x, y) is number y * 32 + x, so a warp is one row of the block.
  const index_t tid = static_cast<index_t>(threadIdx.y) * blockDim.x + threadIdx.x;
  const index_t threads = static_cast<index_t>(blockDim.x) * blockDim.y;
  const index_t stride = threads * gridDim.x;
#pragma unroll 4
  for (index_t i = static_cast<index_t>(blockIdx.x) * threads + tid; i < n; i += stride) op(i);
}

}  // namespace

COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha,
                                    int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  int device = 0, sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const index_t blocks = std::min<index_t>(blocks_for(n), static_cast<index_t>(sms) * BLOCKS_PER_SM);
  const ScaleAdd op{alpha, out, x, y};
  for_each_index<<<static_cast<unsigned>(blocks), dim3(BLOCK_X, BLOCK_Y), 0, stream>>>(op, n);
  return cudaGetLastError();
}
