// CORRECT an XOR-swizzled shared tile instead of a padded one (no padding column), the same loads and stores
// Day 4 exercise: a conflict-free matrix transpose, fp32 and fp16, any shape.
//
//   inp  (rows, cols)  row-major
//   out  (cols, rows)  row-major, out[c][r] = inp[r][c]
//
// A transpose is a copy in another order: every element is read once and written once. Napkin
// math for fp32 8192 x 8192: 2 x 268 MB = 537 MB; at ~4.2 TB/s (an H200's copy) that is
// ~128 us, with no shared-memory bank conflicts.
// Target (grader/exercises/day04.py): @TARGET@.
//
// Design. A block of 32 x 8 threads moves one TILE x TILE tile of *units* through shared
// memory: coalesced rows in, a barrier, coalesced rows out. TILE = 64 gives each thread 16
// units to load before it waits (Day 2's lesson: enough bytes in flight). A unit is what one
// thread moves per row, kept as E 32-bit or 16-bit words W, one per element row:
//   fp32              E = 1, W = uint32_t: one element (a transpose only moves bits)
//   fp16, even shape  E = 2, W = uint32_t: a 2 x 2 block of halves, two words, transposed in
//                     registers, so that global and shared memory only see 4-byte words
//   fp16, otherwise   E = 1, W = uint16_t: one half (odd rows or columns, or a pointer that
//                     is not 4-byte aligned: rows of pairs would not start on a word)
// Viewed in words, `inp` is (E * urows, ucols) and `out` is (E * ucols, urows), with
// urows = rows / E and ucols = cols / E units.
#include "course/common.cuh"

namespace {

constexpr int TILE = 64;       // units per tile side
constexpr int THREADS_X = 32;  // one warp spans 32 units of a tile row
constexpr int THREADS_Y = 8;   // 8 warps: 256 threads per block
constexpr int ROWS_PER_THREAD = TILE / THREADS_Y;  // 8
constexpr int COLS_PER_THREAD = TILE / THREADS_X;  // 2

// The swizzled column of unit column c in tile row r: the XOR moves whole 4-byte bank words (two
// 2-byte units at a time), so that 32 rows of one column land in 32 banks.
template <typename W>
__device__ __forceinline__ int swz(int c, int r) { return c ^ ((r % 32) * static_cast<int>(4 / sizeof(W))); }

// Turn a unit's E row words into its E column words, in registers. For E = 2 the unit is
//   w[0] = (a, b)   row 0, low half first (little-endian: a is at the lower address)
//   w[1] = (c, d)   row 1
// and its columns are (a, c) and (b, d): PRMT picks 2 of the 8 bytes of (w[0], w[1]).
template <int E, typename W>
__device__ __forceinline__ void transpose_unit(W (&w)[E]) {
  if constexpr (E == 2) {
    const uint32_t col0 = __byte_perm(w[0], w[1], 0x5410);  // bytes 0,1 of w[0], 0,1 of w[1]: (a, c)
    const uint32_t col1 = __byte_perm(w[0], w[1], 0x7632);  // bytes 2,3 of w[0], 2,3 of w[1]: (b, d)
    w[0] = col0;
    w[1] = col1;
  }
}

template <typename W, int E>
__global__ void __launch_bounds__(THREADS_X * THREADS_Y)
transpose_kernel(W* __restrict__ out, const W* __restrict__ inp, int64_t urows, int64_t ucols) {
  // One block per tile, tiles numbered row by row over the (urows, ucols) unit matrix.
  const int64_t tiles_c = course::ceil_div<int64_t>(ucols, TILE);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) / tiles_c * TILE;  // first unit row of inp
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) % tiles_c * TILE;  // first unit column of inp
  const int tx = threadIdx.x, ty = threadIdx.y;

  // No padding: unit (r, c) of the tile is stored at column swz<W>(c, r), an XOR swizzle. A warp's
  // tile row (fixed r) still covers 32 distinct columns; a tile column (fixed c, r = tx + 32 j) lands
  // in 32 distinct bank words.
  __shared__ W tile[E][TILE][TILE];

  // 1. Global -> registers: lane tx reads unit column col0 + tx + 32 * j, so a warp reads 32
  //    consecutive words of one row (128 bytes for 4-byte words). All loads first.
  W v[ROWS_PER_THREAD][COLS_PER_THREAD][E];
#pragma unroll
  for (int i = 0; i < ROWS_PER_THREAD; ++i) {
#pragma unroll
    for (int j = 0; j < COLS_PER_THREAD; ++j) {
      const int64_t r = row0 + ty + i * THREADS_Y, c = col0 + tx + j * THREADS_X;
      const bool inside = r < urows && c < ucols;  // edge tiles stick out of the matrix
#pragma unroll
      for (int e = 0; e < E; ++e) v[i][j][e] = inside ? inp[(E * r + e) * ucols + c] : W(0);
    }
  }
  // 2. Registers -> shared: each unit transposed in registers, then a tile row written by a
  //    warp: consecutive words, conflict-free. Units outside the matrix are stored as zeros
  //    and never read back.
#pragma unroll
  for (int i = 0; i < ROWS_PER_THREAD; ++i) {
#pragma unroll
    for (int j = 0; j < COLS_PER_THREAD; ++j) {
      transpose_unit<E>(v[i][j]);
#pragma unroll
      for (int e = 0; e < E; ++e) tile[e][ty + i * THREADS_Y][swz<W>(tx + j * THREADS_X, ty + i * THREADS_Y)] = v[i][j][e];
    }
  }
  // Each warp now reads units that the other seven warps stored.
  __syncthreads();
  // 3. Shared -> global: out unit row col0 + ty + 8 * i is tile column ty + 8 * i. Lane tx
  //    reads tile row tx + 32 * j of it: offset (tx + 32 j) * (TILE + PAD) + ..., bank tx + const.
  //    It writes 32 consecutive words of one out row.
#pragma unroll
  for (int i = 0; i < ROWS_PER_THREAD; ++i) {
#pragma unroll
    for (int j = 0; j < COLS_PER_THREAD; ++j) {
      const int64_t r = col0 + ty + i * THREADS_Y, c = row0 + tx + j * THREADS_X;
      if (r < ucols && c < urows) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
          out[(E * r + e) * urows + c] = tile[e][tx + j * THREADS_X][swz<W>(ty + i * THREADS_Y, tx + j * THREADS_X)];
        }
      }
    }
  }
}

// The launch: one block per tile, a 1-D grid (2^31 - 1 blocks; gridDim.y would stop at 65535).
template <typename W, int E>
cudaError_t launch_transpose(W* out, const W* inp, int64_t urows, int64_t ucols, cudaStream_t stream) {
  const int64_t tiles = course::ceil_div<int64_t>(urows, TILE) * course::ceil_div<int64_t>(ucols, TILE);
  if (tiles > 0x7fffffff) return cudaErrorInvalidValue;
  transpose_kernel<W, E><<<static_cast<unsigned>(tiles), dim3(THREADS_X, THREADS_Y), 0, stream>>>(
      out, inp, urows, ucols);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t transpose_fp32(float* out, const float* inp, int64_t rows, int64_t cols,
                                         cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return launch_transpose<uint32_t, 1>(reinterpret_cast<uint32_t*>(out),
                                       reinterpret_cast<const uint32_t*>(inp), rows, cols, stream);
}

COURSE_EXPORT cudaError_t transpose_fp16(__half* out, const __half* inp, int64_t rows, int64_t cols,
                                         cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  // Pairs of halves as one 4-byte word need even rows and columns (every row of words starts
  // 4-byte aligned) and 4-byte-aligned base pointers (a tensor slice can start anywhere).
  const bool pairs = rows % 2 == 0 && cols % 2 == 0 && reinterpret_cast<uintptr_t>(inp) % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (pairs) {
    return launch_transpose<uint32_t, 2>(reinterpret_cast<uint32_t*>(out),
                                         reinterpret_cast<const uint32_t*>(inp), rows / 2, cols / 2, stream);
  }
  return launch_transpose<uint16_t, 1>(reinterpret_cast<uint16_t*>(out),
                                       reinterpret_cast<const uint16_t*>(inp), rows, cols, stream);
}
