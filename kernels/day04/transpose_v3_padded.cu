// v3, padded tile: adds one unused word at the end of every tile row, tile[TILE][TILE + 1].
// A row is now 33 words long, so the words of a tile column are 33 apart: word tx * 33 + i sits
// in bank (tx + i) % 32, a different bank for every lane. The column read becomes conflict-free
// (one shared-memory cycle), and the row write stays conflict-free. Cost: 32 words of shared
// memory per tile. Expect a large step up from v2, most of the way to the copy bandwidth.
//
//   inp  (rows, cols) fp32, row-major
//   out  (cols, rows) fp32, row-major: out[c][r] = inp[r][c]
//   tile (TILE, TILE + 1) fp32 in shared memory: tile[i][j] = inp[row0 + i][col0 + j], column
//        TILE is padding that is never read
#include "course/common.cuh"

namespace {
namespace v3 {

constexpr int TILE = 32;
constexpr int BLOCK_ROWS = 8;

__global__ void transpose_padded_kernel(float* __restrict__ out, const float* __restrict__ inp,
                                        int64_t rows, int64_t cols) {
  __shared__ float tile[TILE][TILE + 1];  // (TILE, TILE + 1): word i * 33 + j in bank (i + j) % 32
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * TILE;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;

  // Global -> shared, as in v2: tile[i][tx] is 32 consecutive words, banks (i + tx) % 32.
#pragma unroll
  for (int k = 0; k < TILE; k += BLOCK_ROWS) {
    const int i = ty + k;
    if (row0 + i < rows && col0 + tx < cols) tile[i][tx] = inp[(row0 + i) * cols + col0 + tx];
  }
  __syncthreads();  // every warp reads words that other warps wrote
  // Shared -> global, as in v2: lane tx reads tile[tx][i], word tx * 33 + i, bank (tx + i) % 32.
#pragma unroll
  for (int k = 0; k < TILE; k += BLOCK_ROWS) {
    const int i = ty + k;
    if (col0 + i < cols && row0 + tx < rows) out[(col0 + i) * rows + row0 + tx] = tile[tx][i];
  }
}

}  // namespace v3
}  // namespace

COURSE_EXPORT cudaError_t transpose_v3_padded(float* out, const float* inp, int64_t rows, int64_t cols,
                                              cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t tiles_r = course::ceil_div<int64_t>(rows, v3::TILE);
  if (tiles_r > 65535) return cudaErrorInvalidValue;  // gridDim.y is at most 65535
  const dim3 grid(static_cast<unsigned>(course::ceil_div<int64_t>(cols, v3::TILE)), static_cast<unsigned>(tiles_r));
  v3::transpose_padded_kernel<<<grid, dim3(v3::TILE, v3::BLOCK_ROWS), 0, stream>>>(out, inp, rows, cols);
  return cudaGetLastError();
}
