// CORRECT the butterfly through cooperative_groups: tiled_partition<32>(this_thread_block()) and thread_block_tile::shfl_xor, the warp's row from meta_group_rank(), -inf from libcu++'s cuda::std::numeric_limits
// Day 3's warp reduction, one warp (a 32-thread tile) per row, 16-byte loads four deep.
#include <cooperative_groups.h>
#include <cstdint>
#include <cuda/std/limits>

#include "course/vec.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int WARPS_PER_BLOCK = 8;
constexpr int UNROLL = 4;
using warp_t = cg::thread_block_tile<32>;

__device__ __forceinline__ float tile_sum(const warp_t& warp, float v) {
#pragma unroll
  for (int mask = warp.size() / 2; mask > 0; mask /= 2) v += warp.shfl_xor(v, mask);
  return v;
}

__device__ __forceinline__ float tile_max(const warp_t& warp, float v) {
#pragma unroll
  for (int mask = warp.size() / 2; mask > 0; mask /= 2) v = fmaxf(v, warp.shfl_xor(v, mask));
  return v;
}

__global__ void warp_reduce_rows_kernel(float* __restrict__ row_sum, float* __restrict__ row_max,
                                        const float* __restrict__ input, int64_t rows, int64_t cols,
                                        bool vectorized) {
  const cg::thread_block block = cg::this_thread_block();
  const warp_t warp = cg::tiled_partition<32>(block);
  const int lane = warp.thread_rank();
  const int64_t row = static_cast<int64_t>(block.group_index().x) * WARPS_PER_BLOCK + warp.meta_group_rank();
  if (row >= rows) return;  // whole tiles leave together
  const float* x = input + row * cols;

  float sum = 0.0f;
  float mx = -cuda::std::numeric_limits<float>::infinity();
  int64_t done = 0;
  if (vectorized) {
    const int64_t num_vecs = cols / 4;
    int64_t v = lane;
    for (; v + (UNROLL - 1) * 32 < num_vecs; v += UNROLL * 32) {
      course::vec_t<float, 4> q[UNROLL];
#pragma unroll
      for (int k = 0; k < UNROLL; ++k) q[k].load(x + (v + k * 32) * 4);
#pragma unroll
      for (int k = 0; k < UNROLL; ++k) {
        sum += (q[k][0] + q[k][1]) + (q[k][2] + q[k][3]);
        mx = fmaxf(mx, fmaxf(fmaxf(q[k][0], q[k][1]), fmaxf(q[k][2], q[k][3])));
      }
    }
    for (; v < num_vecs; v += 32) {
      course::vec_t<float, 4> q;
      q.load(x + v * 4);
      sum += (q[0] + q[1]) + (q[2] + q[3]);
      mx = fmaxf(mx, fmaxf(fmaxf(q[0], q[1]), fmaxf(q[2], q[3])));
    }
    done = num_vecs * 4;
  }
  for (int64_t i = done + lane; i < cols; i += 32) {
    sum += x[i];
    mx = fmaxf(mx, x[i]);
  }

  sum = tile_sum(warp, sum);
  mx = tile_max(warp, mx);
  if (lane == 0) {
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
  const int64_t blocks = (rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
  warp_reduce_rows_kernel<<<static_cast<unsigned>(blocks), WARPS_PER_BLOCK * 32, 0, stream>>>(
      row_sum, row_max, input, rows, cols, vectorized);
  return cudaGetLastError();
}
