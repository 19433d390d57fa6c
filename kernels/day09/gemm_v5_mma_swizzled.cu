// v5, ldmatrix on a swizzled layout: adds an XOR swizzle of the 16-byte chunks of each shared row
// (the layout FlashInfer's permuted_smem.cuh builds for 128-byte rows, here for 64-byte ones).
// Chunk c of row r is stored at chunk c ^ ((r / 2) % 4). An 8 x 8 tile's 8 rows, which v4 read
// from 2 groups of banks, now land in 8 different groups: no bank conflicts for ldmatrix, and
// none for the 16-byte stores either (a row's chunks are only permuted). The index arithmetic is
// a shift, an AND and an XOR per address. Napkin math at 4096^3: 137 GFLOP, as v4; conflict-free
// shared loads (ncu: 0 extra wavefronts).
//
//   a [M, K], b [N, K], c [M, N]   bf16; M, N multiples of 64, K a multiple of 32
#include "course/mma.cuh"

namespace {
namespace v5 {  // the versions of a day build into one extension: names apart

constexpr int TILE = 64, BK = 32, THREADS = 128;

// The word (of 4 bytes) where 16-byte chunk `chunk` (0-3) of row `row` starts: chunks are
// permuted within the row by the row's pair number, so rows 2q and 2q + 1 (one 128-byte line of
// the 32 banks) use chunk positions c ^ q: 8 consecutive rows cover all 8 groups of 4 banks.
__device__ __forceinline__ int swizzled(int row, int chunk) { return (chunk ^ ((row >> 1) & 3)) * 4; }

__global__ void __launch_bounds__(THREADS)
    gemm_mma_swizzled_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                        const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  __shared__ __align__(16) uint32_t a_s[TILE][BK / 2];  // (m, k / 2): two bf16 per word, chunks swizzled
  __shared__ __align__(16) uint32_t b_s[TILE][BK / 2];  // (n, k / 2), chunks swizzled
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * TILE, n0 = static_cast<int64_t>(blockIdx.x) * TILE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 2 * 32, wn = warp % 2 * 32;  // this warp's 32 x 32
  float acc[2][4][4] = {};                           // (m16 tiles, n8 tiles, C fragment)
  for (int64_t k0 = 0; k0 < k; k0 += BK) {
    for (int v = threadIdx.x; v < TILE * BK / 8; v += THREADS) {  // 16-byte chunks, 4 per row
      const int row = v / (BK / 8), col = v % (BK / 8) * 8;
      *reinterpret_cast<uint4*>(&a_s[row][swizzled(row, col / 8)]) = *reinterpret_cast<const uint4*>(a + (m0 + row) * k + k0 + col);
      *reinterpret_cast<uint4*>(&b_s[row][swizzled(row, col / 8)]) = *reinterpret_cast<const uint4*>(b + (n0 + row) * k + k0 + col);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[2][4], bf[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // lanes 0-15: rows 0-15 at k kk, lanes 16-31: at kk + 8 -> a[0..3]
        const int row = wm + 16 * i + lane % 16;
        course::ldmatrix_x4(af[i], &a_s[row][swizzled(row, kk / 8 + lane / 16)]);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {  // tiles (n 0-7 | 8-15) x (k kk | kk + 8) -> b[0..1] of n8 tiles 2j, 2j+1
        const int row = wn + 16 * j + lane % 8 + lane / 16 * 8;
        course::ldmatrix_x4(bf[j], &b_s[row][swizzled(row, kk / 8 + lane / 8 % 2)]);
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
  const int group = lane / 4, pair = lane % 4;  // see course/mma.cuh
  for (int i = 0; i < 2; ++i) {
    for (int t = 0; t < 4; ++t) {  // c[0..1]: row group, columns 2 pair, 2 pair + 1; c[2..3]: row group + 8
      __nv_bfloat16* dst = c + (m0 + wm + 16 * i + group) * n + n0 + wn + 8 * t + 2 * pair;
      *reinterpret_cast<uint32_t*>(dst) = course::pack2<__nv_bfloat16>(acc[i][t][0], acc[i][t][1]);
      *reinterpret_cast<uint32_t*>(dst + 8 * n) = course::pack2<__nv_bfloat16>(acc[i][t][2], acc[i][t][3]);
    }
  }
}

}  // namespace v5
}  // namespace

COURSE_EXPORT cudaError_t gemm_v5_mma_swizzled_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                               int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || m % v5::TILE || n % v5::TILE || k % v5::BK) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16 || reinterpret_cast<uintptr_t>(c) % 4)
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / v5::TILE), static_cast<unsigned>(m / v5::TILE));
  v5::gemm_mma_swizzled_kernel<<<grid, v5::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
