// v1, naive transpose: each thread copies inp[r][c] to out[c][r] straight through global memory.
// Reads are coalesced (a warp reads 32 neighbouring floats of one row: one 128-byte line), but
// writes are strided: the warp's 32 stores land in 32 different rows of `out`, `rows` floats
// apart, 32 sectors for 128 useful bytes. Expect well below the copy bandwidth on an H200
// (the L2 merges some partial sectors before they reach DRAM, so not the 1/8 of Day 2).
//
//   inp  (rows, cols) fp32, row-major
//   out  (cols, rows) fp32, row-major: out[c][r] = inp[r][c]
//   block (TILE, BLOCK_ROWS) = (32, 8) threads covers a TILE x TILE tile, TILE / BLOCK_ROWS
//   = 4 elements per thread: all four versions share this grid and differ only inside it.
#include "course/common.cuh"

namespace {
namespace v1 {

constexpr int TILE = 32;       // tile side: one warp spans one tile row
constexpr int BLOCK_ROWS = 8;  // 8 warps per block, each takes every 8th row of the tile

__global__ void transpose_naive_kernel(float* __restrict__ out, const float* __restrict__ inp,
                                       int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * TILE + threadIdx.x;   // column of inp
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * TILE + threadIdx.y;  // first row of inp
  if (c >= cols) return;  // the last tile column may stick out of the matrix
#pragma unroll
  for (int k = 0; k < TILE; k += BLOCK_ROWS) {
    const int64_t r = r0 + k;
    // Lane tx reads inp[r][c0 + tx] (consecutive) and writes out[c0 + tx][r]: `rows` apart.
    if (r < rows) out[c * rows + r] = inp[r * cols + c];
  }
}

}  // namespace v1
}  // namespace

COURSE_EXPORT cudaError_t transpose_v1_naive(float* out, const float* inp, int64_t rows, int64_t cols,
                                             cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t tiles_r = course::ceil_div<int64_t>(rows, v1::TILE);
  if (tiles_r > 65535) return cudaErrorInvalidValue;  // gridDim.y is at most 65535
  const dim3 grid(static_cast<unsigned>(course::ceil_div<int64_t>(cols, v1::TILE)), static_cast<unsigned>(tiles_r));
  v1::transpose_naive_kernel<<<grid, dim3(v1::TILE, v1::BLOCK_ROWS), 0, stream>>>(out, inp, rows, cols);
  return cudaGetLastError();
}
