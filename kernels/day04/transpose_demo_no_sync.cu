// Demo, v3 without its __syncthreads: the padded transpose with the barrier removed, and nothing
// else changed. Each warp writes 4 rows of the tile and then reads 4 columns, and every column
// holds words that all 8 warps wrote. Without the barrier a warp can read a word before the
// warp that owns it has stored it, and gets whatever the shared memory held: a previous tile's
// data. Whether and where that happens depends on timing, so the number of wrong elements
// changes from run to run (and can be 0 on a lucky run). Do not use it for anything but this.
//
//   inp  (rows, cols) fp32, row-major
//   out  (cols, rows) fp32, row-major: out[c][r] = inp[r][c], except where the race hits
#include "course/common.cuh"

namespace {
namespace nosync {

constexpr int TILE = 32;
constexpr int BLOCK_ROWS = 8;

__global__ void transpose_no_sync_kernel(float* __restrict__ out, const float* __restrict__ inp,
                                         int64_t rows, int64_t cols) {
  __shared__ float tile[TILE][TILE + 1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * TILE;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;

  // Warp ty writes tile rows ty, ty + 8, ty + 16, ty + 24 ...
#pragma unroll
  for (int k = 0; k < TILE; k += BLOCK_ROWS) {
    const int i = ty + k;
    if (row0 + i < rows && col0 + tx < cols) tile[i][tx] = inp[(row0 + i) * cols + col0 + tx];
  }
  // ... and, with no barrier here, reads rows 0..31 of a column right away: 28 of those 32
  // words belong to the other 7 warps, which may not have stored them yet (a read-after-write
  // race between warps).
#pragma unroll
  for (int k = 0; k < TILE; k += BLOCK_ROWS) {
    const int i = ty + k;
    if (col0 + i < cols && row0 + tx < rows) out[(col0 + i) * rows + row0 + tx] = tile[tx][i];
  }
}

}  // namespace nosync
}  // namespace

COURSE_EXPORT cudaError_t transpose_no_sync(float* out, const float* inp, int64_t rows, int64_t cols,
                                            cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t tiles_r = course::ceil_div<int64_t>(rows, nosync::TILE);
  if (tiles_r > 65535) return cudaErrorInvalidValue;  // gridDim.y is at most 65535
  const dim3 grid(static_cast<unsigned>(course::ceil_div<int64_t>(cols, nosync::TILE)),
                  static_cast<unsigned>(tiles_r));
  nosync::transpose_no_sync_kernel<<<grid, dim3(nosync::TILE, nosync::BLOCK_ROWS), 0, stream>>>(
      out, inp, rows, cols);
  return cudaGetLastError();
}
