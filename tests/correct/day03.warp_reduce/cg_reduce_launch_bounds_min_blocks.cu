// CORRECT the warp's reduction by cg::reduce(tile, v, cg::plus<float>()) and cg::greater<float>() (a shfl_xor butterfly inside cooperative_groups), __launch_bounds__(256, 2), the per-lane loop over float4s unrolled by #pragma unroll 4 instead of a hand-written load batch
// Day 3's warp reduction, one warp per row, with the combining done by the library's reduce.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cstdint>

#include "course/vec.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int WARPS_PER_BLOCK = 8;
constexpr int THREADS = WARPS_PER_BLOCK * 32;

__global__ void __launch_bounds__(THREADS, 2)
    warp_reduce_rows_kernel(float* __restrict__ row_sum, float* __restrict__ row_max,
                            const float* __restrict__ input, int64_t rows, int64_t cols, bool vectorized) {
  const auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  const int lane = warp.thread_rank();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * WARPS_PER_BLOCK + warp.meta_group_rank();
  if (row >= rows) return;
  const float* x = input + row * cols;

  float sum = 0.0f;
  float mx = -INFINITY;
  int64_t done = 0;
  if (vectorized) {
    const float4* xv = reinterpret_cast<const float4*>(x);
    const int64_t num_vecs = cols / 4;
#pragma unroll 4
    for (int64_t v = lane; v < num_vecs; v += 32) {
      const float4 q = xv[v];
      sum += (q.x + q.y) + (q.z + q.w);
      mx = fmaxf(mx, fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)));
    }
    done = num_vecs * 4;
  }
  for (int64_t i = done + lane; i < cols; i += 32) {
    sum += x[i];
    mx = fmaxf(mx, x[i]);
  }

  sum = cg::reduce(warp, sum, cg::plus<float>());
  mx = cg::reduce(warp, mx, cg::greater<float>());
  if (warp.thread_rank() == 0) {
    row_sum[row] = sum;
    row_max[row] = mx;
  }
}

}  // namespace

COURSE_EXPORT cudaError_t warp_reduce_rows(float* row_sum, float* row_max, const float* input,
                                           int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (cols <= 0) return cudaErrorInvalidValue;
  const bool vectorized = cols % 4 == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0;
  const unsigned blocks = static_cast<unsigned>((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
  warp_reduce_rows_kernel<<<blocks, THREADS, 0, stream>>>(row_sum, row_max, input, rows, cols, vectorized);
  return cudaGetLastError();
}
