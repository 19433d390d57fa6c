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
// The tile shape, the staged loop and the store are course/gemm_versions.cuh's (shared with v2-v4):
// staged_gemm<Plain>, read there.
#include "course/gemm_versions.cuh"

namespace {
namespace gv = course::gemm_versions;

__global__ void __launch_bounds__(gv::THREADS, 1)
    gemm_register_tiling_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                                const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  gv::staged_gemm<gv::Plain>(c, a, b, n, k);  // unswizzled 64-byte rows
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
