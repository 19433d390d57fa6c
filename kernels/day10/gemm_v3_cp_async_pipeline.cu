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
// The tile shape, the copy of a K tile into a stage (issue_tile), the k steps and the store are
// course/gemm_versions.cuh's; this file adds the ring.
#include "course/gemm_versions.cuh"

namespace {
namespace gv = course::gemm_versions;

namespace v3 {
constexpr int STAGES = 4;                                  // ring depth
constexpr int SMEM = STAGES * gv::STAGE_CHUNKS * 16;       // 96 KB
}  // namespace v3

__global__ void __launch_bounds__(gv::THREADS, 1)
    gemm_cp_async_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                         const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  constexpr int STAGES = v3::STAGES;
  extern __shared__ __align__(128) uint4 smem[];  // (STAGES, BM + BN, BK) in 16-byte chunks
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * gv::BM, n0 = static_cast<int64_t>(blockIdx.x) * gv::BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / gv::WARPS_N * gv::WM, wn = warp % gv::WARPS_N * gv::WN;
  const int tiles = static_cast<int>(k / gv::BK);
  auto stage = [&](int t) { return smem + (t % STAGES) * gv::STAGE_CHUNKS; };  // tile t's stage

  // Prologue: STAGES - 1 tiles in flight, one commit group each (empty groups keep the count).
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < tiles) gv::issue_tile(stage(t), a, b, m0, n0, k, t);
    course::cp_async_commit();
  }
  float acc[gv::MT][gv::NT][4] = {};
  for (int t = 0; t < tiles; ++t) {
    course::cp_async_wait<STAGES - 2>();  // my copies of tile t have landed (2 newer may fly)
    __syncthreads();                      // ... everyone's; and nobody still reads tile t - 1
    if (t + STAGES - 1 < tiles) gv::issue_tile(stage(t + STAGES - 1), a, b, m0, n0, k, t + STAGES - 1);
    course::cp_async_commit();            // (into tile t - 1's stage)
    gv::mma_tile<gv::Swizzled>(acc, stage(t), stage(t) + gv::A_CHUNKS, wm, wn, lane);
  }
  course::cp_async_wait<0>();  // no copy left in flight (the trailing groups are empty)
  gv::store_warp_tile(c, acc, m0, n0, wm, wn, n, lane);
}

}  // namespace

COURSE_EXPORT cudaError_t gemm_v3_cp_async_pipeline_bf16(__nv_bfloat16* c, const __nv_bfloat16* a,
                                                         const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k,
                                                         cudaStream_t stream) {
  if (gv::bad_args(m, n, k, a, b, c, 4)) return cudaErrorInvalidValue;
  static bool attr_set = false;  // more than 48 KB of dynamic shared memory is asked for once
  if (!attr_set) {
    const cudaError_t err =
        cudaFuncSetAttribute(gemm_cp_async_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v3::SMEM);
    if (err != cudaSuccess) return err;
    attr_set = true;
  }
  const dim3 grid(static_cast<unsigned>(n / gv::BN), static_cast<unsigned>(m / gv::BM));
  gemm_cp_async_kernel<<<grid, gv::THREADS, v3::SMEM, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
