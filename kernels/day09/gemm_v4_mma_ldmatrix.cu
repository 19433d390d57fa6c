// v4, mma.sync with ldmatrix: adds ldmatrix.x4 (course::ldmatrix_x4) for the fragments. Where v3
// issued 16 LDS.32 per k step for a warp's 2 A and 4 B fragments, this issues 4 LDSM: each lane
// gives one row address and receives, for each of four 8 x 8 tiles, exactly the register the
// mma expects. The shared layout is still v3's plain one: rows of 64 bytes, so the 8 rows of 16
// bytes one 8 x 8 tile reads fall into only 2 of the 8 groups of 4 banks: 4-way conflicts (ncu
// shows them; v5 removes them). Napkin math at 4096^3: 137 GFLOP; fewer, wider shared loads.
//
// The tile shape, the staging, the ldmatrix loop and the store are course/mma_versions.cuh's
// (shared with v3 and v5): ldmatrix_gemm<Plain>, read there.
#include "course/mma_versions.cuh"

namespace {
namespace mv = course::mma_versions;

__global__ void __launch_bounds__(mv::THREADS)
    gemm_mma_ldmatrix_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                            const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  mv::ldmatrix_gemm<mv::Plain>(c, a, b, n, k);  // plain 64-byte rows
}

}  // namespace

COURSE_EXPORT cudaError_t gemm_v4_mma_ldmatrix_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                    int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (mv::bad_args(m, n, k, a, b, c)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / mv::TILE), static_cast<unsigned>(m / mv::TILE));
  gemm_mma_ldmatrix_kernel<<<grid, mv::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
