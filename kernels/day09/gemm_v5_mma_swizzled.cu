// v5, ldmatrix on a swizzled layout: adds an XOR swizzle of the 16-byte chunks of each shared row
// (the layout FlashInfer's permuted_smem.cuh builds for 128-byte rows, here for 64-byte ones).
// Chunk c of row r is stored at chunk c ^ ((r / 2) % 4). An 8 x 8 tile's 8 rows, which v4 read
// from 2 groups of banks, now land in 8 different groups: no bank conflicts for ldmatrix, and
// none for the 16-byte stores either (a row's chunks are only permuted). The index arithmetic is
// a shift, an AND and an XOR per address. Napkin math at 4096^3: 137 GFLOP, as v4; conflict-free
// shared loads (ncu: 0 extra wavefronts).
//
// The swizzle is course/mma_versions.cuh's Swizzled::word; the tile shape, the staging and the store
// are shared with v3 and v4. The k loop below is v4's, line for line: only `Layout` differs.
#include "course/mma_versions.cuh"

namespace {
namespace mv = course::mma_versions;

__global__ void __launch_bounds__(mv::THREADS)
    gemm_mma_swizzled_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                            const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  using Layout = mv::Swizzled;  // chunk c of row r at c ^ ((r / 2) % 4)
  __shared__ __align__(16) uint32_t a_s[mv::TILE][mv::BK / 2];  // (m, k / 2): two bf16 per word
  __shared__ __align__(16) uint32_t b_s[mv::TILE][mv::BK / 2];  // (n, k / 2)
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * mv::TILE, n0 = static_cast<int64_t>(blockIdx.x) * mv::TILE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 2 * 32, wn = warp % 2 * 32;  // this warp's 32 x 32
  float acc[2][4][4] = {};                          // (m16 tiles, n8 tiles, C fragment)
  for (int64_t k0 = 0; k0 < k; k0 += mv::BK) {
    mv::stage_tiles<Layout>(a_s, b_s, a, b, m0, n0, k, k0);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < mv::BK; kk += 16) {
      uint32_t af[2][4], bf[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // lanes 0-15: rows 0-15 at k kk, lanes 16-31: at kk + 8 -> a[0..3]
        const int row = wm + 16 * i + lane % 16;
        course::ldmatrix_x4(af[i], &a_s[row][Layout::word(row, kk / 8 + lane / 16)]);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {  // tiles (n 0-7 | 8-15) x (k kk | kk + 8) -> b[0..1] of n8 tiles 2j, 2j+1
        const int row = wn + 16 * j + lane % 8 + lane / 16 * 8;
        course::ldmatrix_x4(bf[j], &b_s[row][Layout::word(row, kk / 8 + lane / 8 % 2)]);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const uint32_t bt[2] = {bf[t / 2][t % 2 * 2], bf[t / 2][t % 2 * 2 + 1]};
          course::mma_m16n8k16<__nv_bfloat16>(acc[i][t], af[i], bt);
        }
    }
    __syncthreads();
  }
  mv::store_warp_tile(c, acc, m0, n0, wm, wn, n, lane);
}

}  // namespace

COURSE_EXPORT cudaError_t gemm_v5_mma_swizzled_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                    int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (mv::bad_args(m, n, k, a, b, c)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / mv::TILE), static_cast<unsigned>(m / mv::TILE));
  gemm_mma_swizzled_kernel<<<grid, mv::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
