// v2, ldmatrix on an XOR-swizzled layout: adds Day 9's swizzle to v1's tiles. Chunk c (16 bytes)
// of staged row r is stored at chunk c ^ ((r / 2) % 4): rows 2q and 2q + 1 share one 128-byte line
// of the 32 banks, and the 8 rows an 8 x 8 ldmatrix tile reads now land in 8 different groups of
// 4 banks (v1: in 2 groups, a 4-way conflict; ncu's LDSM wavefronts show it). The 16-byte stores
// stay conflict-free: a row's chunks are only permuted. Everything else is v1: the same 128 x 256
// block tile, 64 x 64 per warp, one buffer filled through registers, two barriers per K tile.
// Napkin math at 4096^3: 137 GFLOP; ldmatrix now takes 1 pass per 8 x 8 tile instead of 4, so the
// shared-memory reads per mma shrink 4x; the idle tensor cores during each K tile's loads remain.
//
// The swizzle is course/gemm_versions.cuh's Swizzled::slot (v3 and v4 keep it); the tile shape, the
// staged loop and the store are shared with v1: staged_gemm<Swizzled>, read there.
#include "course/gemm_versions.cuh"

namespace {
namespace gv = course::gemm_versions;

__global__ void __launch_bounds__(gv::THREADS, 1)
    gemm_swizzled_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                         const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  gv::staged_gemm<gv::Swizzled>(c, a, b, n, k);  // chunk c of row r at c ^ ((r / 2) % 4)
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
