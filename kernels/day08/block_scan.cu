// A block-wide inclusive scan written by hand, next to cub::BlockScan doing the same: each
// kernel computes out[r, :] = cumsum(x[r, :]) with one block of 512 threads per row, a tile of
// 512 x 4 elements at a time, the running total carried from tile to tile.
//
// By hand (Day 5's warp scan, one level up): every thread adds its 4 elements in order; a warp
// scan (__shfl_up_sync, 5 steps) of the thread totals; lane 31 of each warp writes its warp's
// total to shared memory; one barrier; warp 0 scans the 16 warp totals; a barrier; each thread
// adds the totals of the warps before it and of the tiles before this one.
// CUB's BLOCK_SCAN_WARP_SCANS does the same steps; its default, BLOCK_SCAN_RAKING, lets one warp
// scan the threads' totals serially through shared memory. The callback `TileCarry` hands CUB the
// running total of the earlier tiles and receives this tile's total.
//
// Napkin math: read once, write once: 128 x 32768 fp32 = 2 x 16.8 MB, ~10 us at 3.5 TB/s; with a
// scan and two barriers per 8 KB tile, expect well under the copy's bandwidth.
#include <cub/block/block_scan.cuh>

#include "course/common.cuh"

namespace {

constexpr int SCAN_THREADS = 512;
constexpr int SCAN_ITEMS = 4;                 // consecutive elements per thread: one float4
constexpr int SCAN_TILE = SCAN_THREADS * SCAN_ITEMS;    // 2048 elements per step
constexpr int SCAN_WARPS = SCAN_THREADS / 32;

// Inclusive scan of v over the 32 lanes (Kogge-Stone, 5 steps).
__device__ __forceinline__ float warp_inclusive_scan_f32(float v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const float below = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += below;
  }
  return v;
}

// Exclusive scan of one value per thread over the block; `total` gets the block's sum.
__device__ __forceinline__ float block_exclusive_scan(float v, float& total, float* warp_sums /* (SCAN_WARPS,) */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float incl = warp_inclusive_scan_f32(v);
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {  // scan the warp totals in place (SCAN_WARPS <= 32)
    const float w = lane < SCAN_WARPS ? warp_sums[lane] : 0.0f;
    const float w_incl = warp_inclusive_scan_f32(w);
    if (lane < SCAN_WARPS) warp_sums[lane] = w_incl;
  }
  __syncthreads();
  const float before_warp = warp == 0 ? 0.0f : warp_sums[warp - 1];
  total = warp_sums[SCAN_WARPS - 1];
  __syncthreads();  // warp_sums is written again by the next call
  return before_warp + incl - v;
}

__device__ __forceinline__ void load_scan_tile(float (&v)[SCAN_ITEMS], const float* row, int64_t cols, int64_t i) {
#pragma unroll
  for (int j = 0; j < SCAN_ITEMS; ++j) v[j] = i + j < cols ? row[i + j] : 0.0f;
}

__global__ void __launch_bounds__(SCAN_THREADS)
    cumsum_rows_handwritten_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t cols) {
  __shared__ float warp_sums[SCAN_WARPS];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;  // (cols,)
  float* dst = out + static_cast<int64_t>(blockIdx.x) * cols;
  float carry = 0.0f;  // sum of the tiles before this one
  for (int64_t base = 0; base < cols; base += SCAN_TILE) {
    const int64_t i = base + static_cast<int64_t>(threadIdx.x) * SCAN_ITEMS;  // my first element
    float v[SCAN_ITEMS];
    load_scan_tile(v, row, cols, i);
    float mine = 0.0f;
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; ++j) mine += v[j];
    float tile_total;
    float acc = carry + block_exclusive_scan(mine, tile_total, warp_sums);
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; ++j) {
      acc += v[j];
      if (i + j < cols) dst[i + j] = acc;
    }
    carry += tile_total;
  }
}

// CUB's callback: called by the first warp with this tile's total; returns what comes before it.
struct TileCarry {
  float running;
  __device__ float operator()(float tile_total) {
    const float before = running;
    running += tile_total;
    return before;
  }
};

template <cub::BlockScanAlgorithm ALGO>
__global__ void __launch_bounds__(SCAN_THREADS)
    cumsum_rows_cub_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t cols) {
  using BlockScan = cub::BlockScan<float, SCAN_THREADS, ALGO>;
  __shared__ typename BlockScan::TempStorage scratch;
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * cols;
  TileCarry carry{0.0f};
  for (int64_t base = 0; base < cols; base += SCAN_TILE) {
    const int64_t i = base + static_cast<int64_t>(threadIdx.x) * SCAN_ITEMS;
    float v[SCAN_ITEMS], s[SCAN_ITEMS];
    load_scan_tile(v, row, cols, i);
    BlockScan(scratch).InclusiveSum(v, s, carry);  // SCAN_ITEMS per thread, "blocked" arrangement
    __syncthreads();  // the scratch is reused by the next tile
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; ++j) {
      if (i + j < cols) dst[i + j] = s[j];
    }
  }
}

}  // namespace

COURSE_EXPORT cudaError_t cumsum_rows_handwritten(float* out, const float* x, int64_t rows, int64_t cols,
                                                  cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  cumsum_rows_handwritten_kernel<<<static_cast<unsigned>(rows), SCAN_THREADS, 0, stream>>>(out, x, cols);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t cumsum_rows_cub_warp_scans(float* out, const float* x, int64_t rows, int64_t cols,
                                                     cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  cumsum_rows_cub_kernel<cub::BLOCK_SCAN_WARP_SCANS><<<static_cast<unsigned>(rows), SCAN_THREADS, 0, stream>>>(out, x, cols);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t cumsum_rows_cub_raking(float* out, const float* x, int64_t rows, int64_t cols,
                                                 cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  cumsum_rows_cub_kernel<cub::BLOCK_SCAN_RAKING><<<static_cast<unsigned>(rows), SCAN_THREADS, 0, stream>>>(out, x, cols);
  return cudaGetLastError();
}
