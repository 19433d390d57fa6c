// v5, ldmatrix on a swizzled layout: adds an XOR swizzle of the 16-byte chunks of each shared row
// (the layout FlashInfer's permuted_smem.cuh builds for 128-byte rows, here for 64-byte ones).
// Chunk c of row r is stored at chunk c ^ ((r / 2) % 4). An 8 x 8 tile's 8 rows, which v4 read
// from 2 groups of banks, now land in 8 different groups: no bank conflicts for ldmatrix, and
// none for the 16-byte stores either (a row's chunks are only permuted). The index arithmetic is
// a shift, an AND and an XOR per address. Napkin math at 4096^3: 137 GFLOP, as v4; conflict-free
// shared loads (ncu: 0 extra wavefronts).
//
// The swizzle is course/mma_versions.cuh's Swizzled::word; the tile shape, the staging, the
// ldmatrix loop and the store are shared with v4: ldmatrix_gemm<Swizzled>, read there.
#include "course/mma_versions.cuh"

namespace {
namespace mv = course::mma_versions;

__global__ void __launch_bounds__(mv::THREADS)
    gemm_mma_swizzled_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                            const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  mv::ldmatrix_gemm<mv::Swizzled>(c, a, b, n, k);  // chunk c of row r at c ^ ((r / 2) % 4)
}

}  // namespace

COURSE_EXPORT cudaError_t gemm_v5_mma_swizzled_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                    int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (mv::bad_args(m, n, k, a, b, c)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / mv::TILE), static_cast<unsigned>(m / mv::TILE));
  gemm_mma_swizzled_kernel<<<grid, mv::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
