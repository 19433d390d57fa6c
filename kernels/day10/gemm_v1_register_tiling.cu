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
// The tile shape, the fragments of a k step (load_fragments), its mma (mma_step) and the store are
// course/gemm_versions.cuh's (shared with v2-v4); the loop over K tiles is below.
#include "course/gemm_versions.cuh"

namespace {
namespace gv = course::gemm_versions;

__global__ void __launch_bounds__(gv::THREADS, 1)
    gemm_register_tiling_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                                const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  using Layout = gv::Plain;  // unswizzled 64-byte rows: v2 changes only this
  __shared__ __align__(128) uint4 a_s[gv::BM * gv::CH];  // (BM, BK) as 16-byte chunks: 8 KB
  __shared__ __align__(128) uint4 b_s[gv::BN * gv::CH];  // (BN, BK): 16 KB
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * gv::BM, n0 = static_cast<int64_t>(blockIdx.x) * gv::BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / gv::WARPS_N * gv::WM, wn = warp % gv::WARPS_N * gv::WN;  // this warp's 64 x 64
  float acc[gv::MT][gv::NT][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += gv::BK) {
    // Consecutive threads copy consecutive chunks of a row: a warp reads 8 rows x 64 bytes.
#pragma unroll
    for (int i = 0; i < gv::A_LOADS; ++i) {
      const int v = threadIdx.x + i * gv::THREADS, row = v / gv::CH, ch = v % gv::CH;
      a_s[Layout::slot(row, ch)] = *reinterpret_cast<const uint4*>(a + (m0 + row) * k + k0 + ch * 8);
    }
#pragma unroll
    for (int i = 0; i < gv::B_LOADS; ++i) {
      const int v = threadIdx.x + i * gv::THREADS, row = v / gv::CH, ch = v % gv::CH;
      b_s[Layout::slot(row, ch)] = *reinterpret_cast<const uint4*>(b + (n0 + row) * k + k0 + ch * 8);
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < gv::KSTEPS; ++ks) {  // per k step of 16: 4 + 4 ldmatrix.x4, then 32 mma
      uint32_t af[gv::MT][4], bf[gv::NT / 2][4];
      gv::load_fragments<Layout>(af, bf, a_s, b_s, wm, wn, lane, ks);
      gv::mma_step(acc, af, bf);
    }
    __syncthreads();  // every warp done reading before the next tile is stored
  }
  gv::store_warp_tile(c, acc, m0, n0, wm, wn, n, lane);
}

}  // namespace

COURSE_EXPORT cudaError_t gemm_v1_register_tiling_bf16(__nv_bfloat16* c, const __nv_bfloat16* a,
                                                       const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k,
                                                       cudaStream_t stream) {
  if (gv::bad_args(m, n, k, a, b, c, 4)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / gv::BN), static_cast<unsigned>(m / gv::BM));
  gemm_register_tiling_kernel<<<grid, gv::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
