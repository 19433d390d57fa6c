// v4, XOR-swizzled tile: instead of padding, store element (i, j) of the tile at column j ^ i of
// row i. The tile stays TILE x TILE = 32 x 32 words (no wasted word, rows stay aligned, which
// matters once accesses are 16 bytes wide), and XOR with the row index is a permutation of the
// 32 columns within each row. A warp writing row i hits banks tx ^ i (all different); a warp
// reading column i of row tx hits banks i ^ tx (all different). Both conflict-free, like v3.
// Expect the same bandwidth as v3: the two layouts do the same shared-memory work.
//
//   inp  (rows, cols) fp32, row-major
//   out  (cols, rows) fp32, row-major: out[c][r] = inp[r][c]
//   tile (TILE, TILE) fp32 in shared memory: tile[i][j ^ i] = inp[row0 + i][col0 + j]
#include "course/common.cuh"

namespace {
namespace v4 {

constexpr int TILE = 32;  // a power of two: j ^ i stays inside [0, TILE)
constexpr int BLOCK_ROWS = 8;

__global__ void transpose_swizzled_kernel(float* __restrict__ out, const float* __restrict__ inp,
                                          int64_t rows, int64_t cols) {
  __shared__ float tile[TILE][TILE];  // (TILE, TILE), columns permuted per row by XOR
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * TILE;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;

  // Global -> shared: element (i, tx) goes to tile[i][tx ^ i]; bank tx ^ i, distinct per lane.
#pragma unroll
  for (int k = 0; k < TILE; k += BLOCK_ROWS) {
    const int i = ty + k;
    if (row0 + i < rows && col0 + tx < cols) tile[i][tx ^ i] = inp[(row0 + i) * cols + col0 + tx];
  }
  __syncthreads();  // every warp reads words that other warps wrote
  // Shared -> global: element (tx, i) of the tile is at tile[tx][i ^ tx]; bank i ^ tx.
#pragma unroll
  for (int k = 0; k < TILE; k += BLOCK_ROWS) {
    const int i = ty + k;
    if (col0 + i < cols && row0 + tx < rows) out[(col0 + i) * rows + row0 + tx] = tile[tx][i ^ tx];
  }
}

}  // namespace v4
}  // namespace

COURSE_EXPORT cudaError_t transpose_v4_swizzled(float* out, const float* inp, int64_t rows, int64_t cols,
                                                cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t tiles_r = course::ceil_div<int64_t>(rows, v4::TILE);
  if (tiles_r > 65535) return cudaErrorInvalidValue;  // gridDim.y is at most 65535
  const dim3 grid(static_cast<unsigned>(course::ceil_div<int64_t>(cols, v4::TILE)), static_cast<unsigned>(tiles_r));
  v4::transpose_swizzled_kernel<<<grid, dim3(v4::TILE, v4::BLOCK_ROWS), 0, stream>>>(out, inp, rows, cols);
  return cudaGetLastError();
}
