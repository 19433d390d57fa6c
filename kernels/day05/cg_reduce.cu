// Cooperative groups: the warp reductions of course/warp.cuh written against a
// cg::thread_block_tile<TILE>, a group of TILE consecutive lanes (TILE = 1, 2, 4, ..., 32).
// cg::reduce(tile, v, cg::plus<float>()) compiles to the same butterfly of shuffles
// (SHFL.BFLY, log2(TILE) steps); for 32-bit integers over a whole warp, sm_80 and later do it
// in one instruction (REDUX.SUM). A tile narrower than a warp lets one warp work on
// 32 / TILE short rows at once. Row sums read each element once: expect the read bandwidth
// near the copy when TILE lanes fit the row (and far below when most lanes idle).
//
//   x    (rows, cols) fp32
//   out  (rows,) fp32 row sums, or int32 counts of x > threshold
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "course/common.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int CG_THREADS = 256;

// One row per tile of TILE lanes: 256 / TILE rows per block.
template <int TILE>
__global__ void row_sum_tiles_kernel(float* __restrict__ out, const float* __restrict__ x,
                                     int64_t rows, int64_t cols) {
  const cg::thread_block_tile<TILE> tile = cg::tiled_partition<TILE>(cg::this_thread_block());
  // meta_group_rank: which tile of the block this is; meta_group_size: tiles per block.
  const int64_t row = static_cast<int64_t>(blockIdx.x) * tile.meta_group_size() + tile.meta_group_rank();
  if (row >= rows) return;  // a whole tile leaves; its reduce only ever waits for its own lanes
  const float* xr = x + row * cols;  // (cols,)
  float v = 0.0f;
  // Lane k of the tile takes elements k, k + TILE, ...: neighbouring lanes, neighbouring
  // addresses, and neighbouring tiles hold neighbouring rows, so a warp's loads stay contiguous.
  for (int64_t c = tile.thread_rank(); c < cols; c += TILE) v += xr[c];
  v = cg::reduce(tile, v, cg::plus<float>());  // every lane of the tile gets the row sum
  if (tile.thread_rank() == 0) out[row] = v;
}

// Integer counting over a full warp: cg::reduce becomes the REDUX.SUM instruction.
__global__ void row_count_above_kernel(int32_t* __restrict__ out, const float* __restrict__ x,
                                       int64_t rows, int64_t cols, float threshold) {
  const cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
  const int64_t row = static_cast<int64_t>(blockIdx.x) * warp.meta_group_size() + warp.meta_group_rank();
  if (row >= rows) return;
  const float* xr = x + row * cols;  // (cols,)
  int n = 0;
  for (int64_t c = warp.thread_rank(); c < cols; c += 32) n += xr[c] > threshold;
  n = cg::reduce(warp, n, cg::plus<int>());
  if (warp.thread_rank() == 0) out[row] = n;
}

template <int TILE>
cudaError_t launch_row_sum_tiles(float* out, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = course::ceil_div<int64_t>(rows, CG_THREADS / TILE);
  row_sum_tiles_kernel<TILE><<<static_cast<unsigned>(blocks), CG_THREADS, 0, stream>>>(out, x, rows, cols);
  return cudaGetLastError();
}

}  // namespace

// One entry point per tile width: 4 and 8 lanes per row for short rows, a full warp for long ones.
COURSE_EXPORT cudaError_t row_sum_tile4(float* out, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  return launch_row_sum_tiles<4>(out, x, rows, cols, stream);
}

COURSE_EXPORT cudaError_t row_sum_tile8(float* out, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  return launch_row_sum_tiles<8>(out, x, rows, cols, stream);
}

COURSE_EXPORT cudaError_t row_sum_tile32(float* out, const float* x, int64_t rows, int64_t cols,
                                         cudaStream_t stream) {
  return launch_row_sum_tiles<32>(out, x, rows, cols, stream);
}

COURSE_EXPORT cudaError_t row_count_above(int32_t* out, const float* x, int64_t rows, int64_t cols, float threshold,
                                          cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = course::ceil_div<int64_t>(rows, CG_THREADS / 32);
  row_count_above_kernel<<<static_cast<unsigned>(blocks), CG_THREADS, 0, stream>>>(out, x, rows, cols, threshold);
  return cudaGetLastError();
}
