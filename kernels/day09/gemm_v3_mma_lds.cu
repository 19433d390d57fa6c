// v3, mma.sync with plain shared loads: adds PTX mma.sync m16n8k16 (course/mma.cuh) in place of
// WMMA, so the register layout is ours to know and use. The same 64 x 64 block tile and 4 warps
// of 32 x 32 as v2, but each warp now holds 2 x 4 accumulator tiles of 16 x 8 and builds every
// fragment register itself, one 32-bit shared load (two bf16 of neighbouring k) per register:
// 4 loads per A fragment, 2 per B fragment, 16 LDS per 8 mma. The unpadded 64-byte rows also
// put the 8 rows a load touches in the same banks twice over: 4-way bank conflicts (ncu).
// Napkin math at 4096^3: 137 GFLOP; the fragment loads, not the tensor cores, limit it here.
//
// The tile shape, the staging and the store are course/mma_versions.cuh's (shared with v4, v5).
#include "course/mma_versions.cuh"

namespace {
namespace mv = course::mma_versions;

__global__ void __launch_bounds__(mv::THREADS)
    gemm_mma_lds_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                        const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  constexpr int BK = mv::BK;
  __shared__ __align__(16) uint32_t a_s[mv::TILE][BK / 2];  // (m, k / 2): two bf16 per word
  __shared__ __align__(16) uint32_t b_s[mv::TILE][BK / 2];  // (n, k / 2)
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * mv::TILE, n0 = static_cast<int64_t>(blockIdx.x) * mv::TILE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 2 * 32, wn = warp % 2 * 32;  // this warp's 32 x 32
  const int group = lane / 4, pair = lane % 4;       // see course/mma.cuh
  float acc[2][4][4] = {};                           // (m16 tiles, n8 tiles, C fragment)
  for (int64_t k0 = 0; k0 < k; k0 += BK) {
    mv::stage_tiles<mv::Plain>(a_s, b_s, a, b, m0, n0, k, k0);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      const int w = (kk + 2 * pair) / 2;  // the word holding k = kk + 2 pair, kk + 2 pair + 1
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // a[0..3] = (row group | group + 8) x (k 2 pair | 2 pair + 8)
        const int r = wm + 16 * i + group;
        af[i][0] = a_s[r][w];
        af[i][1] = a_s[r + 8][w];
        af[i][2] = a_s[r][w + 4];
        af[i][3] = a_s[r + 8][w + 4];
      }
#pragma unroll
      for (int t = 0; t < 4; ++t) {  // b[0..1] = column n = group, k 2 pair | 2 pair + 8
        bf[t][0] = b_s[wn + 8 * t + group][w];
        bf[t][1] = b_s[wn + 8 * t + group][w + 4];
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int t = 0; t < 4; ++t) course::mma_m16n8k16<__nv_bfloat16>(acc[i][t], af[i], bf[t]);
    }
    __syncthreads();
  }
  mv::store_warp_tile(c, acc, m0, n0, wm, wn, n, lane);
}

}  // namespace

COURSE_EXPORT cudaError_t gemm_v3_mma_lds_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                               int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (mv::bad_args(m, n, k, a, b, c)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / mv::TILE), static_cast<unsigned>(m / mv::TILE));
  gemm_mma_lds_kernel<<<grid, mv::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
