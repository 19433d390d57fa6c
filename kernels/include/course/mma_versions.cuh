// The fixed problem of Day 9's tensor-core versions v3-v5 (kernels/day09/gemm_v3..v5) and the
// pieces they share, so that each version's file holds what it adds (as Day 10's versions share
// course/gemm_versions.cuh): a 64 x 64 block tile of 4 warps of 32 x 32, K staged 32 at a time as
// rows of 16 words (two bf16 each) in one shared buffer per operand; the staged layouts (plain
// rows, v5's swizzle); the store of a warp's 2 x 4 accumulator tiles. Each version's k loop is in
// its own file.
//
//   a [M, K], b [N, K], c [M, N]   bf16; M, N multiples of 64, K a multiple of 32
#pragma once

#include "course/mma.cuh"

namespace course {
namespace mma_versions {

constexpr int TILE = 64, BK = 32, THREADS = 128;

// The word (of 4 bytes) where 16-byte chunk `chunk` (0-3) of staged row `row` starts.
// v3, v4: plain 64-byte rows; an 8 x 8 ldmatrix tile's 8 rows fall in 2 of the 8 groups of 4 banks.
struct Plain {
  __device__ __forceinline__ static int word(int, int chunk) { return chunk * 4; }
};
// v5: chunks permuted within the row by the row's pair number, so rows 2q and 2q + 1 (one 128-byte
// line of the 32 banks) use chunk positions c ^ q: 8 consecutive rows cover all 8 groups of 4 banks.
struct Swizzled {
  __device__ __forceinline__ static int word(int row, int chunk) { return (chunk ^ ((row >> 1) & 3)) * 4; }
};

// K tile k0 of A and B (block rows m0, n0) into a_s, b_s: 16-byte chunks, 4 per row.
template <class Layout>
__device__ __forceinline__ void stage_tiles(uint32_t (&a_s)[TILE][BK / 2], uint32_t (&b_s)[TILE][BK / 2],
                                            const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m0, int64_t n0,
                                            int64_t k, int64_t k0) {
  for (int v = threadIdx.x; v < TILE * BK / 8; v += THREADS) {
    const int row = v / (BK / 8), chunk = v % (BK / 8), col = chunk * 8;
    *reinterpret_cast<uint4*>(&a_s[row][Layout::word(row, chunk)]) =
        *reinterpret_cast<const uint4*>(a + (m0 + row) * k + k0 + col);
    *reinterpret_cast<uint4*>(&b_s[row][Layout::word(row, chunk)]) =
        *reinterpret_cast<const uint4*>(b + (n0 + row) * k + k0 + col);
  }
}

// The warp's 32 x 32 of C (at wm, wn in the block tile) from its 2 x 4 accumulator tiles.
__device__ __forceinline__ void store_warp_tile(__nv_bfloat16* c, const float (&acc)[2][4][4], int64_t m0, int64_t n0,
                                                int wm, int wn, int64_t n, int lane) {
  const int group = lane / 4, pair = lane % 4;  // see course/mma.cuh
  for (int i = 0; i < 2; ++i) {
    for (int t = 0; t < 4; ++t) {  // c[0..1]: row group, columns 2 pair, 2 pair + 1; c[2..3]: row group + 8
      __nv_bfloat16* dst = c + (m0 + wm + 16 * i + group) * n + n0 + wn + 8 * t + 2 * pair;
      *reinterpret_cast<uint32_t*>(dst) = pack2<__nv_bfloat16>(acc[i][t][0], acc[i][t][1]);
      *reinterpret_cast<uint32_t*>(dst + 8 * n) = pack2<__nv_bfloat16>(acc[i][t][2], acc[i][t][3]);
    }
  }
}

// The launchers' check: shapes multiples of the tiles, A and B 16-byte aligned, C 4-byte aligned.
inline bool bad_args(int64_t m, int64_t n, int64_t k, const void* a, const void* b, const void* c) {
  return m <= 0 || n <= 0 || k <= 0 || m % TILE || n % TILE || k % BK || reinterpret_cast<uintptr_t>(a) % 16 ||
         reinterpret_cast<uintptr_t>(b) % 16 || reinterpret_cast<uintptr_t>(c) % 4;
}

}  // namespace mma_versions
}  // namespace course
