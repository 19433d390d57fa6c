// v2, shared-memory transpose: adds a TILE x TILE tile in shared memory, so that both global
// accesses are coalesced. A warp reads a tile row from `inp` (128 contiguous bytes) into a row of
// the tile, the block waits at __syncthreads, then the warp reads a tile *column* and writes it
// as a row of `out` (128 contiguous bytes again). The column read is the catch: the 32 words of
// a tile column are TILE = 32 words apart, all in the same bank, so the read is a 32-way bank
// conflict, served in 32 shared-memory cycles instead of 1. Expect it to beat v1 but stay far
// from the copy bandwidth: the shared-memory pipe, not DRAM, sets its pace.
//
//   inp  (rows, cols) fp32, row-major
//   out  (cols, rows) fp32, row-major: out[c][r] = inp[r][c]
//   tile (TILE, TILE) fp32 in shared memory: tile[i][j] = inp[row0 + i][col0 + j]
#include "course/common.cuh"

namespace {
namespace v2 {

constexpr int TILE = 32;
constexpr int BLOCK_ROWS = 8;

__global__ void transpose_shared_kernel(float* __restrict__ out, const float* __restrict__ inp,
                                        int64_t rows, int64_t cols) {
  __shared__ float tile[TILE][TILE];  // (TILE, TILE): word i * 32 + j sits in bank j
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * TILE;  // the tile's first row of inp
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * TILE;  // the tile's first column of inp
  const int tx = threadIdx.x, ty = threadIdx.y;

  // Global -> shared: lane tx reads inp[row0 + i][col0 + tx], a coalesced row, and writes
  // tile[i][tx], 32 consecutive words in 32 different banks.
#pragma unroll
  for (int k = 0; k < TILE; k += BLOCK_ROWS) {
    const int i = ty + k;
    if (row0 + i < rows && col0 + tx < cols) tile[i][tx] = inp[(row0 + i) * cols + col0 + tx];
  }
  // Every warp is about to read words that *other* warps wrote: wait until all have.
  __syncthreads();
  // Shared -> global: row col0 + i of out is column i of the tile. Lane tx reads tile[tx][i]:
  // words tx * 32 + i, every one in bank i. 32-way conflict.
#pragma unroll
  for (int k = 0; k < TILE; k += BLOCK_ROWS) {
    const int i = ty + k;
    if (col0 + i < cols && row0 + tx < rows) out[(col0 + i) * rows + row0 + tx] = tile[tx][i];
  }
}

}  // namespace v2
}  // namespace

COURSE_EXPORT cudaError_t transpose_v2_shared(float* out, const float* inp, int64_t rows, int64_t cols,
                                              cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t tiles_r = course::ceil_div<int64_t>(rows, v2::TILE);
  if (tiles_r > 65535) return cudaErrorInvalidValue;  // gridDim.y is at most 65535
  const dim3 grid(static_cast<unsigned>(course::ceil_div<int64_t>(cols, v2::TILE)), static_cast<unsigned>(tiles_r));
  v2::transpose_shared_kernel<<<grid, dim3(v2::TILE, v2::BLOCK_ROWS), 0, stream>>>(out, inp, rows, cols);
  return cudaGetLastError();
}
