// CORRECT blocks of 64 x 4 threads (16 unit rows per thread), a 2-D grid with a grid-stride loop over tile rows, std::min on the host, __restrict__ entry points
// Day 4's transpose with another launch shape: blockIdx.x walks tile columns, blockIdx.y (and a loop)
// tile rows; each thread moves one unit column of 16 unit rows, so as many bytes are in flight.
#include <algorithm>
#include <cstdint>

#include "course/common.cuh"

namespace {

constexpr int TILE = 64;
constexpr int TX = 64;             // two warps side by side span a tile row
constexpr int TY = 4;              // 4 rows of threads: 256 per block
constexpr int ROWS = TILE / TY;    // 16 unit rows per thread
constexpr int MAX_GRID_Y = 65535;  // gridDim.y's limit; the kernel loops past it

template <typename W, int E>
__global__ void __launch_bounds__(TX * TY)
transpose_2d(W* __restrict__ out, const W* __restrict__ inp, int64_t urows, int64_t ucols) {
  constexpr int PAD = 4 / sizeof(W);  // a tile row is a multiple of 128 bytes plus one bank word
  __shared__ W tile[E][TILE][TILE + PAD];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * TILE;
  const int64_t tile_rows = (urows + TILE - 1) / TILE;

  for (int64_t tr = blockIdx.y; tr < tile_rows; tr += gridDim.y) {
    const int64_t row0 = tr * TILE;
    W v[ROWS][E];
    const int64_t c_in = col0 + tx;
    // Walk a pointer down the tile instead of recomputing 64-bit offsets for every row.
    const W* src = inp + E * (row0 + ty) * ucols + c_in;
    const int64_t src_step = E * TY * ucols;
    const int rows_left = static_cast<int>(min(urows - row0 - ty, int64_t{TILE}));  // rows of mine inside
#pragma unroll
    for (int i = 0; i < ROWS; ++i, src += src_step) {
      const bool ok = i * TY < rows_left && c_in < ucols;
#pragma unroll
      for (int e = 0; e < E; ++e) v[i][e] = ok ? src[e * ucols] : W(0);
    }
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
      if constexpr (E == 2) {
        // (a, b) over (c, d) -> (a, c) and (b, d): the unit's columns
        const uint32_t first = __byte_perm(v[i][0], v[i][1], 0x5410);
        const uint32_t second = __byte_perm(v[i][0], v[i][1], 0x7632);
        v[i][0] = first;
        v[i][1] = second;
      }
#pragma unroll
      for (int e = 0; e < E; ++e) tile[e][ty + i * TY][tx] = v[i][e];
    }
    __syncthreads();
    const int64_t c_out = row0 + tx;  // out unit column
    W* dst = out + E * (col0 + ty) * urows + c_out;
    const int64_t dst_step = E * TY * urows;
    const int out_rows_left = static_cast<int>(min(ucols - col0 - ty, int64_t{TILE}));
#pragma unroll
    for (int i = 0; i < ROWS; ++i, dst += dst_step) {
      if (i * TY < out_rows_left && c_out < urows) {
#pragma unroll
        for (int e = 0; e < E; ++e) dst[e * urows] = tile[e][tx][ty + i * TY];
      }
    }
    __syncthreads();  // the tile is read before the next tile row overwrites it
  }
}

template <typename W, int E>
cudaError_t launch(W* out, const W* inp, int64_t urows, int64_t ucols, cudaStream_t stream) {
  const int64_t tiles_c = course::ceil_div<int64_t>(ucols, TILE);
  const int64_t tiles_r = course::ceil_div<int64_t>(urows, TILE);
  if (tiles_c > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tiles_c), static_cast<unsigned>(std::min<int64_t>(tiles_r, MAX_GRID_Y)));
  transpose_2d<W, E><<<grid, dim3(TX, TY), 0, stream>>>(out, inp, urows, ucols);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t transpose_fp32(float* __restrict__ out, const float* __restrict__ inp, int64_t rows,
                                         int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return launch<uint32_t, 1>(reinterpret_cast<uint32_t*>(out), reinterpret_cast<const uint32_t*>(inp), rows, cols,
                             stream);
}

COURSE_EXPORT cudaError_t transpose_fp16(__half* __restrict__ out, const __half* __restrict__ inp, int64_t rows,
                                         int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool words = rows % 2 == 0 && cols % 2 == 0 && reinterpret_cast<uintptr_t>(inp) % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (words) {
    return launch<uint32_t, 2>(reinterpret_cast<uint32_t*>(out), reinterpret_cast<const uint32_t*>(inp), rows / 2,
                               cols / 2, stream);
  }
  return launch<uint16_t, 1>(reinterpret_cast<uint16_t*>(out), reinterpret_cast<const uint16_t*>(inp), rows, cols,
                             stream);
}
