// v2, ldmatrix on an XOR-swizzled layout: adds Day 9's swizzle to v1's tiles. Chunk c (16 bytes)
// of staged row r is stored at chunk c ^ ((r / 2) % 4): rows 2q and 2q + 1 share one 128-byte line
// of the 32 banks, and the 8 rows an 8 x 8 ldmatrix tile reads now land in 8 different groups of
// 4 banks (v1: in 2 groups, a 4-way conflict; ncu's LDSM wavefronts show it). The 16-byte stores
// stay conflict-free: a row's chunks are only permuted. Everything else is v1: the same 128 x 256
// block tile, 64 x 64 per warp, one buffer filled through registers, two barriers per K tile.
// Napkin math at 4096^3: 137 GFLOP; ldmatrix now takes 1 pass per 8 x 8 tile instead of 4, so the
// shared-memory reads per mma shrink 4x; the idle tensor cores during each K tile's loads remain.
//
// The swizzle is course/gemm_versions.cuh's Swizzled::slot (v3 and v4 keep it). The loop below is v1's,
// line for line: only `Layout` differs.
#include "course/gemm_versions.cuh"

namespace {
namespace gv = course::gemm_versions;

__global__ void __launch_bounds__(gv::THREADS, 1)
    gemm_swizzled_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                         const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  using Layout = gv::Swizzled;  // chunk c of row r at c ^ ((r / 2) % 4)
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

COURSE_EXPORT cudaError_t gemm_v2_swizzled_bf16(__nv_bfloat16* c, const __nv_bfloat16* a,
                                                const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k,
                                                cudaStream_t stream) {
  if (gv::bad_args(m, n, k, a, b, c, 4)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / gv::BN), static_cast<unsigned>(m / gv::BM));
  gemm_swizzled_kernel<<<grid, gv::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
