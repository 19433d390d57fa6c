// The fixed problem of Day 10's kernel versions (kernels/day10/gemm_v1..v4) and the pieces they
// share, so that each version's file holds what it adds and no more (as Day 7's versions share
// course/skinny_versions.cuh): the 128 x 256 block tile of 8 warps of 64 x 64, the staged layouts
// (v1's plain rows, v2's swizzle), one k step's ldmatrix fragments and mma, the copy of a K tile
// into a cp.async ring stage (v3, v4), the store of a warp's accumulators (v1-v3) and the launchers'
// argument check. Each version's main loop is in its own file.
//
//   a [M, K], b [N, K], c [M, N]   bf16; M a multiple of 128, N of 256, K of 32; 16-byte aligned
#pragma once

#include "course/async.cuh"
#include "course/mma.cuh"

namespace course {
namespace gemm_versions {

constexpr int BM = 128, BN = 256, BK = 32;           // block tile of C, K step
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // 64 x 64 of C per warp
constexpr int MT = WM / 16, NT = WN / 8;             // 4 x 8 mma tiles per warp
constexpr int CH = BK / 8, KSTEPS = BK / 16;         // 16-byte chunks per staged row, k steps per K tile
constexpr int A_CHUNKS = BM * CH, STAGE_CHUNKS = (BM + BN) * CH;  // one stage: A's tile, then B's
constexpr int A_LOADS = BM * CH / THREADS, B_LOADS = BN * CH / THREADS;  // chunks per thread: 2, 4

// Where chunk `chunk` (0-3, 16 bytes each) of staged row `row` lives, in 16-byte units.
// v1: plain rows of 64 bytes; the 8 rows an 8 x 8 ldmatrix tile reads fall in 2 groups of 4 banks.
struct Plain {
  __device__ __forceinline__ static int slot(int row, int chunk) { return row * CH + chunk; }
};
// v2 on: permuted within the row by the row's pair number, so 8 consecutive rows cover all 8 groups
// of 4 banks (rows 2q and 2q + 1 share one 128-byte line of the 32 banks).
struct Swizzled {
  __device__ __forceinline__ static int slot(int row, int chunk) { return row * CH + (chunk ^ ((row >> 1) & 3)); }
};

// The A and B fragments of k step `ks` of the staged tile (sa: BM rows of A, sb: BN rows of B) for
// the warp whose 64 x 64 of C starts at (wm, wn).
template <class Layout>
__device__ __forceinline__ void load_fragments(uint32_t (&af)[MT][4], uint32_t (&bf)[NT / 2][4], const uint4* sa,
                                               const uint4* sb, int wm, int wn, int lane, int ks) {
#pragma unroll
  for (int i = 0; i < MT; ++i)  // rows 0-15 of the m16 tile, k 0-7 (lanes 0-15) | 8-15 (16-31)
    ldmatrix_x4(af[i], &sa[Layout::slot(wm + 16 * i + lane % 16, 2 * ks + lane / 16)]);
#pragma unroll
  for (int j = 0; j < NT / 2; ++j)  // n 0-7 | 8-15 of two n8 tiles, k 0-7 | 8-15: b[0..1] of each
    ldmatrix_x4(bf[j], &sb[Layout::slot(wn + 16 * j + lane % 8 + lane / 16 * 8, 2 * ks + lane / 8 % 2)]);
}

// One k step: the warp's 4 x 8 mma tiles from its fragments.
__device__ __forceinline__ void mma_step(float (&acc)[MT][NT][4], const uint32_t (&af)[MT][4],
                                         const uint32_t (&bf)[NT / 2][4]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint32_t bt[2] = {bf[j / 2][j % 2 * 2], bf[j / 2][j % 2 * 2 + 1]};
      mma_m16n8k16<__nv_bfloat16>(acc[i][j], af[i], bt);
    }
}

// Every k step of one staged K tile, fragments loaded just before their mma (v4 loads the next
// step's while this one's run).
template <class Layout>
__device__ __forceinline__ void mma_tile(float (&acc)[MT][NT][4], const uint4* sa, const uint4* sb, int wm, int wn,
                                         int lane) {
#pragma unroll
  for (int ks = 0; ks < KSTEPS; ++ks) {
    uint32_t af[MT][4], bf[NT / 2][4];
    load_fragments<Layout>(af, bf, sa, sb, wm, wn, lane, ks);
    mma_step(acc, af, bf);
  }
}

// K tile t of A and B (block rows m0, n0) into `stage` (STAGE_CHUNKS chunks, swizzled) with 16-byte
// cp.async copies, .cg (into L2 only: other blocks, not this SM, reuse them); consecutive threads
// copy consecutive chunks of a row.
__device__ __forceinline__ void issue_tile(uint4* stage, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m0,
                                           int64_t n0, int64_t k, int t) {
  uint4* sb = stage + A_CHUNKS;
  const int64_t k0 = static_cast<int64_t>(t) * BK;
#pragma unroll
  for (int i = 0; i < A_LOADS; ++i) {
    const int v = threadIdx.x + i * THREADS, row = v / CH, ch = v % CH;
    cp_async<16, CacheHint::cg>(&stage[Swizzled::slot(row, ch)], a + (m0 + row) * k + k0 + ch * 8);
  }
#pragma unroll
  for (int i = 0; i < B_LOADS; ++i) {
    const int v = threadIdx.x + i * THREADS, row = v / CH, ch = v % CH;
    cp_async<16, CacheHint::cg>(&sb[Swizzled::slot(row, ch)], b + (n0 + row) * k + k0 + ch * 8);
  }
}

// The warp's 64 x 64 of C straight from its accumulators: lane (group, pair) writes 2 neighbours of
// rows group and group + 8 of each mma tile (see course/mma.cuh); v4 stages C in shared memory instead.
__device__ __forceinline__ void store_warp_tile(__nv_bfloat16* c, const float (&acc)[MT][NT][4], int64_t m0,
                                                int64_t n0, int wm, int wn, int64_t n, int lane) {
  const int group = lane / 4, pair = lane % 4;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      __nv_bfloat16* dst = c + (m0 + wm + 16 * i + group) * n + n0 + wn + 8 * j + 2 * pair;
      *reinterpret_cast<uint32_t*>(dst) = pack2<__nv_bfloat16>(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<uint32_t*>(dst + 8 * n) = pack2<__nv_bfloat16>(acc[i][j][2], acc[i][j][3]);
    }
}

// The launchers' check: shapes multiples of the block tile, A and B 16-byte aligned, C aligned to
// `c_align` bytes (4 for the 2-element stores of store_warp_tile, 16 for v4's row copies).
inline bool bad_args(int64_t m, int64_t n, int64_t k, const void* a, const void* b, const void* c, int c_align) {
  return m <= 0 || n <= 0 || k <= 0 || m % BM || n % BN || k % BK || reinterpret_cast<uintptr_t>(a) % 16 ||
         reinterpret_cast<uintptr_t>(b) % 16 || reinterpret_cast<uintptr_t>(c) % c_align;
}

}  // namespace gemm_versions
}  // namespace course
