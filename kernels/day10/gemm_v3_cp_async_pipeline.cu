// v3, a multi-stage cp.async pipeline: adds Day 7's ring of shared-memory stages to v2. The K
// tiles of A and B go straight from global to shared memory with 16-byte cp.async copies
// (LDGSTS, course/async.cuh), STAGES = 4 tiles deep: while the warps multiply tile t, tiles
// t + 1 .. t + 3 are on their way, so the tensor cores no longer idle through each load. One
// barrier per K tile does two jobs: after it, tile t has landed for every thread, and every warp
// is done with tile t - 1, whose stage the next copy overwrites. Four stages of (128 + 256) x 32
// bf16 are 96 KB: more than the 48 KB a block gets by default, so the launcher raises the limit
// with cudaFuncSetAttribute and the kernel takes dynamic shared memory.
// Napkin math at 4096^3: 137 GFLOP; with loads overlapped, the ldmatrix -> mma chain of each
// warp is what remains exposed (v4 overlaps that too).
//
//   a [M, K], b [N, K], c [M, N]   bf16; M a multiple of 128, N of 256, K of 32; 16-byte aligned
#include "course/async.cuh"
#include "course/mma.cuh"

namespace {
namespace v3 {  // the versions of a day build into one extension: names apart

constexpr int BM = 128, BN = 256, BK = 32, STAGES = 4;  // block tile, K step, ring depth
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;      // 64 x 64 of C per warp
constexpr int MT = WM / 16, NT = WN / 8;                 // 4 x 8 mma tiles per warp
constexpr int CH = BK / 8;                               // 16-byte chunks per staged row
constexpr int A_CHUNKS = BM * CH, STAGE_CHUNKS = (BM + BN) * CH;  // one stage: A's tile, then B's
constexpr int A_LOADS = BM * CH / THREADS, B_LOADS = BN * CH / THREADS;
constexpr int SMEM = STAGES * STAGE_CHUNKS * 16;         // 96 KB

__device__ __forceinline__ int slot(int row, int chunk) { return row * CH + (chunk ^ ((row >> 1) & 3)); }

__global__ void __launch_bounds__(THREADS, 1)
    gemm_cp_async_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                         const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  extern __shared__ __align__(128) uint4 smem[];  // (STAGES, BM + BN, BK) in 16-byte chunks
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;
  const int tiles = static_cast<int>(k / BK);

  // Tile t into stage t % STAGES: .cg (L2 only), because other blocks, not this SM, reuse it.
  auto issue_tile = [&](int t) {
    uint4* sa = smem + (t % STAGES) * STAGE_CHUNKS;
    uint4* sb = sa + A_CHUNKS;
    const int64_t k0 = static_cast<int64_t>(t) * BK;
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      const int v = threadIdx.x + i * THREADS, row = v / CH, ch = v % CH;
      course::cp_async<16, course::CacheHint::cg>(&sa[slot(row, ch)], a + (m0 + row) * k + k0 + ch * 8);
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      const int v = threadIdx.x + i * THREADS, row = v / CH, ch = v % CH;
      course::cp_async<16, course::CacheHint::cg>(&sb[slot(row, ch)], b + (n0 + row) * k + k0 + ch * 8);
    }
  };

  // Prologue: STAGES - 1 tiles in flight, one commit group each (empty groups keep the count).
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < tiles) issue_tile(t);
    course::cp_async_commit();
  }
  float acc[MT][NT][4] = {};
  for (int t = 0; t < tiles; ++t) {
    course::cp_async_wait<STAGES - 2>();  // my copies of tile t have landed (3 newer may fly)
    __syncthreads();                      // ... everyone's; and nobody still reads tile t - 1
    if (t + STAGES - 1 < tiles) issue_tile(t + STAGES - 1);  // into tile t - 1's stage
    course::cp_async_commit();
    const uint4* sa = smem + (t % STAGES) * STAGE_CHUNKS;
    const uint4* sb = sa + A_CHUNKS;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t af[MT][4], bf[NT / 2][4];
#pragma unroll
      for (int i = 0; i < MT; ++i)
        course::ldmatrix_x4(af[i], &sa[slot(wm + 16 * i + lane % 16, 2 * ks + lane / 16)]);
#pragma unroll
      for (int j = 0; j < NT / 2; ++j)
        course::ldmatrix_x4(bf[j], &sb[slot(wn + 16 * j + lane % 8 + lane / 16 * 8, 2 * ks + lane / 8 % 2)]);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint32_t bt[2] = {bf[j / 2][j % 2 * 2], bf[j / 2][j % 2 * 2 + 1]};
          course::mma_m16n8k16<__nv_bfloat16>(acc[i][j], af[i], bt);
        }
    }
  }
  course::cp_async_wait<0>();  // no copy left in flight (the trailing groups are empty)
  const int group = lane / 4, pair = lane % 4;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      __nv_bfloat16* dst = c + (m0 + wm + 16 * i + group) * n + n0 + wn + 8 * j + 2 * pair;
      *reinterpret_cast<uint32_t*>(dst) = course::pack2<__nv_bfloat16>(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<uint32_t*>(dst + 8 * n) = course::pack2<__nv_bfloat16>(acc[i][j][2], acc[i][j][3]);
    }
}

}  // namespace v3
}  // namespace

COURSE_EXPORT cudaError_t gemm_v3_cp_async_pipeline_bf16(__nv_bfloat16* c, const __nv_bfloat16* a,
                                                         const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k,
                                                         cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || m % v3::BM || n % v3::BN || k % v3::BK) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16 || reinterpret_cast<uintptr_t>(c) % 4)
    return cudaErrorInvalidValue;
  static bool attr_set = false;  // more than 48 KB of dynamic shared memory is asked for once
  if (!attr_set) {
    const cudaError_t err = cudaFuncSetAttribute(v3::gemm_cp_async_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, v3::SMEM);
    if (err != cudaSuccess) return err;
    attr_set = true;
  }
  const dim3 grid(static_cast<unsigned>(n / v3::BN), static_cast<unsigned>(m / v3::BM));
  v3::gemm_cp_async_kernel<<<grid, v3::THREADS, v3::SMEM, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
