// v1, shared-memory and register tiling: Day 9's ldmatrix + mma.sync GEMM, grown to the tile
// shape fast GEMMs use. A block of 8 warps computes a 128 x 256 tile of C; each warp keeps 64 x 64
// of it in registers (4 x 8 mma tiles of 16 x 8: 128 fp32 accumulators per lane). Per k step of 16
// a warp issues 4 ldmatrix.x4 for A and 4 for B and then 32 mma: 8 shared loads per 32 mma, where
// Day 9's 32 x 32 warp tiles needed 4 per 8. And per K tile of 32 a block stages (128 + 256) x 32
// elements for 2 x 128 x 256 x 32 flops: 85 flops per byte staged (Day 9's 64 x 64 tiles: 32).
// Still plain: one shared buffer per operand, filled through registers with 16-byte loads, two
// barriers per K tile, unswizzled 64-byte rows (ldmatrix 4-way bank conflicts: v2 removes them).
// Napkin math at 4096^3: 137 GFLOP; mma.sync's ceiling on an H200 is ~636 TFLOP/s (0.22 ms).
// Expect well under half of that: every K tile waits for global memory with the tensor cores idle.
//
//   a [M, K], b [N, K], c [M, N]   bf16; M a multiple of 128, N of 256, K of 32; 16-byte aligned
#include "course/mma.cuh"

namespace {
namespace v1 {  // the versions of a day build into one extension: names apart

constexpr int BM = 128, BN = 256, BK = 32;           // block tile of C, K step
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // 64 x 64 of C per warp
constexpr int MT = WM / 16, NT = WN / 8;             // 4 x 8 mma tiles per warp
constexpr int CH = BK / 8;                           // 16-byte chunks per staged row
constexpr int A_LOADS = BM * CH / THREADS, B_LOADS = BN * CH / THREADS;  // chunks per thread: 2, 4

__global__ void __launch_bounds__(THREADS, 1)
    gemm_register_tiling_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                                const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  __shared__ __align__(128) uint4 a_s[BM * CH];  // (BM, BK) as 16-byte chunks, row-major: 8 KB
  __shared__ __align__(128) uint4 b_s[BN * CH];  // (BN, BK): 16 KB
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;  // this warp's 64 x 64
  float acc[MT][NT][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += BK) {
    // Consecutive threads copy consecutive chunks of a row: a warp reads 8 rows x 64 bytes.
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      const int v = threadIdx.x + i * THREADS, row = v / CH, ch = v % CH;
      a_s[v] = *reinterpret_cast<const uint4*>(a + (m0 + row) * k + k0 + ch * 8);
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      const int v = threadIdx.x + i * THREADS, row = v / CH, ch = v % CH;
      b_s[v] = *reinterpret_cast<const uint4*>(b + (n0 + row) * k + k0 + ch * 8);
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t af[MT][4], bf[NT / 2][4];
#pragma unroll
      for (int i = 0; i < MT; ++i)  // rows 0-15 of the m16 tile, k 0-7 (lanes 0-15) | 8-15 (16-31)
        course::ldmatrix_x4(af[i], &a_s[(wm + 16 * i + lane % 16) * CH + 2 * ks + lane / 16]);
#pragma unroll
      for (int j = 0; j < NT / 2; ++j)  // n 0-7 | 8-15 of two n8 tiles, k 0-7 | 8-15: b[0..1] of each
        course::ldmatrix_x4(bf[j], &b_s[(wn + 16 * j + lane % 8 + lane / 16 * 8) * CH + 2 * ks + lane / 8 % 2]);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint32_t bt[2] = {bf[j / 2][j % 2 * 2], bf[j / 2][j % 2 * 2 + 1]};
          course::mma_m16n8k16<__nv_bfloat16>(acc[i][j], af[i], bt);
        }
    }
    __syncthreads();  // every warp done reading before the next tile is stored
  }
  const int group = lane / 4, pair = lane % 4;  // see course/mma.cuh
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) {  // c[0..1]: row group, columns 2 pair, 2 pair + 1; c[2..3]: row group + 8
      __nv_bfloat16* dst = c + (m0 + wm + 16 * i + group) * n + n0 + wn + 8 * j + 2 * pair;
      *reinterpret_cast<uint32_t*>(dst) = course::pack2<__nv_bfloat16>(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<uint32_t*>(dst + 8 * n) = course::pack2<__nv_bfloat16>(acc[i][j][2], acc[i][j][3]);
    }
}

}  // namespace v1
}  // namespace

COURSE_EXPORT cudaError_t gemm_v1_register_tiling_bf16(__nv_bfloat16* c, const __nv_bfloat16* a,
                                                       const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k,
                                                       cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || m % v1::BM || n % v1::BN || k % v1::BK) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16 || reinterpret_cast<uintptr_t>(c) % 4)
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / v1::BN), static_cast<unsigned>(m / v1::BM));
  v1::gemm_register_tiling_kernel<<<grid, v1::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
