// What Day 7's kernel versions (kernels/day07/skinny_v*.cu) share, so that each version's file
// holds only what it adds: the fixed problem they solve, where a chunk of a staged tile lives
// (XOR-swizzled rows for cp.async, padded rows for bulk copies), one warp's tensor-core product of a
// staged tile, how a block's two k halves meet to store y, and v2's cp.async tile copy (v3 and v4
// reuse it as it is). Not used by the exercise, whose kernel handles every shape.
//
//   x [M, K], weight [N, K], y [M, N] bf16/fp16; M <= 16, N % 32 == 0, K % 256 == 0, aligned
#pragma once

#include "course/async.cuh"
#include "course/mma.cuh"

namespace skinny {

// Units of 32 weight rows (one block each), k tiles of 256, up to 16 tokens; 4 warps = 2 row
// groups of 16 x 2 k halves.
constexpr int ROWS = 32, K_TILE = 256, MTOK = 16, THREADS = 128, CHUNK = 8;
constexpr int CHUNKS_PER_ROW = K_TILE / CHUNK;

// Chunk c (16 bytes) of row r of a staged tile. Swizzled: rows of K_TILE elements, odd rows swap
// their 64-byte halves (no bank conflicts, see the notebook). Padded: rows 64 bytes longer, as a
// bulk copy (which writes a row as it is) needs; the 576-byte stride avoids conflicts too.
struct Swizzled {
  static constexpr int STRIDE = K_TILE;
  __device__ __forceinline__ static int at(int row, int chunk) { return row * STRIDE + ((chunk ^ ((row & 1) << 2)) * CHUNK); }
};
struct Padded {
  static constexpr int STRIDE = K_TILE + 32;
  __device__ __forceinline__ static int at(int row, int chunk) { return row * STRIDE + chunk * CHUNK; }
};

// One warp's share of a staged tile: weight rows 16 rg.. (sw), k half kh, tokens 0-7 and, if
// `two`, 8-15 (sx). Lane (g, t) reads 8 k values of rows g and g + 8 and of token g: the order of k
// inside a dot product does not matter, as long as the A and B fragments agree.
template <typename Layout, typename T>
__device__ __forceinline__ void warp_tile_mma(const T* sw, const T* sx, int rg, int kh, bool two, float (&acc)[2][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int s = 0; s < K_TILE / 64; ++s) {
    const int c = (kh * (K_TILE / 64) + s) * 4 + t;
    const uint4 w0 = *reinterpret_cast<const uint4*>(sw + Layout::at(rg * 16 + g, c));
    const uint4 w1 = *reinterpret_cast<const uint4*>(sw + Layout::at(rg * 16 + g + 8, c));
    const uint32_t a_lo[4] = {w0.x, w1.x, w0.y, w1.y}, a_hi[4] = {w0.z, w1.z, w0.w, w1.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !two) break;  // (a uniform branch: the whole warp skips tokens 8-15)
      const uint4 xv = *reinterpret_cast<const uint4*>(sx + Layout::at(h * 8 + g, c));
      const uint32_t b_lo[2] = {xv.x, xv.y}, b_hi[2] = {xv.z, xv.w};
      course::mma_m16n8k16<T>(acc[h], a_lo, b_lo);
      course::mma_m16n8k16<T>(acc[h], a_hi, b_hi);
    }
  }
}

// The two k halves meet in shared memory; k half 0 rounds once and stores y[m, n].
template <typename T>
__device__ void store_block(T* y, float (&acc)[2][4], int rg, int kh, int64_t M, int64_t N, int64_t n0) {
  __shared__ float red[2][32][8];
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if (kh == 1)
#pragma unroll
    for (int i = 0; i < 8; ++i) red[rg][lane][i] = acc[i / 4][i % 4];
  __syncthreads();
  if (kh == 0)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t n = n0 + rg * 16 + g + (i % 4 / 2) * 8, m = (i / 4) * 8 + 2 * t + i % 2;
      if (m < M) y[m * N + n] = course::from_float<T>(acc[i / 4][i % 4] + red[rg][lane][i]);
    }
}

// v2's copy: tile kt of this block's weight rows and of x into `stage` (swizzled, ROWS + MTOK rows)
// with 16-byte cp.async. The weight is read once (.cg: L2 only); x by every block (.ca: L1 too);
// x rows past M are zero-filled (the src-size 0 form reads nothing).
template <typename T>
__device__ __forceinline__ void load_tile_async(T* stage, const T* x, const T* w, int64_t M, int64_t K, int64_t n0,
                                                int kt) {
  const int64_t k0 = static_cast<int64_t>(kt) * K_TILE;
#pragma unroll
  for (int q = threadIdx.x; q < ROWS * CHUNKS_PER_ROW; q += THREADS) {
    const int r = q / CHUNKS_PER_ROW, c = q % CHUNKS_PER_ROW;
    course::cp_async<16, course::CacheHint::cg>(stage + Swizzled::at(r, c), w + (n0 + r) * K + k0 + c * CHUNK);
  }
#pragma unroll
  for (int q = threadIdx.x; q < MTOK * CHUNKS_PER_ROW; q += THREADS) {
    const int m = q / CHUNKS_PER_ROW, c = q % CHUNKS_PER_ROW;
    course::cp_async_zfill<16, course::CacheHint::ca>(stage + Swizzled::at(ROWS + m, c),
                                                      m < M ? x + m * K + k0 + c * CHUNK : x, m < M);
  }
}

// The versions' fast path only: what the exercise must also handle is refused here.
inline bool shape_ok(const void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K) {
  return M >= 1 && M <= 16 && N > 0 && N % ROWS == 0 && K > 0 && K % K_TILE == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 && y != nullptr;
}

}  // namespace skinny
