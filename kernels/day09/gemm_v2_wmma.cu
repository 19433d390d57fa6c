// v2, WMMA: adds the tensor cores through CUDA's C++ API (nvcuda::wmma, <mma.h>). A block of 4
// warps stages 64 x 32 slices of A and B in shared memory (16-byte loads, rows padded by 16 bytes);
// each warp computes 32 x 32 of the 64 x 64 tile of C as 2 x 2 fragments of 16 x 16 x 16
// (load_matrix_sync, mma_sync), then stores them through shared memory, because a WMMA
// fragment's element-to-lane mapping is unspecified: the API hides which lane holds what.
// It compiles to the same HMMA.16816.F32.BF16 as mma.sync, with its own loads from shared memory.
// Napkin math at 4096^3: 137 GFLOP. With 64 x 64 tiles and no overlap of loads and math, expect
// a few times v1 and well below mma.sync's ~636 TFLOP/s (to measure in the notebook).
//
//   a [M, K], b [N, K], c [M, N]   bf16; M, N multiples of 64, K a multiple of 32
#include <mma.h>

#include "course/common.cuh"

namespace {
namespace v2 {  // the versions of a day build into one extension: names apart

using namespace nvcuda;

constexpr int TILE = 64, BK = 32, PITCH = BK + 8, THREADS = 128;  // PITCH: 80-byte rows

__global__ void __launch_bounds__(THREADS)
    gemm_wmma_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                     const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  __shared__ __align__(32) __nv_bfloat16 a_s[TILE][PITCH];  // (m, k)
  __shared__ __align__(32) __nv_bfloat16 b_s[TILE][PITCH];  // (n, k): B^T column-major
  __shared__ __align__(32) float out_s[4][16][16];          // one fragment per warp, on its way out
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * TILE, n0 = static_cast<int64_t>(blockIdx.x) * TILE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 2 * 32, wn = warp % 2 * 32;  // this warp's 32 x 32
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < k; k0 += BK) {
    for (int v = threadIdx.x; v < TILE * BK / 8; v += THREADS) {  // 16-byte chunks, 4 per row
      const int row = v / (BK / 8), col = v % (BK / 8) * 8;
      *reinterpret_cast<uint4*>(&a_s[row][col]) = *reinterpret_cast<const uint4*>(a + (m0 + row) * k + k0 + col);
      *reinterpret_cast<uint4*>(&b_s[row][col]) = *reinterpret_cast<const uint4*>(b + (n0 + row) * k + k0 + col);
    }
    __syncthreads();
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &a_s[wm + 16 * i][kk], PITCH);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &b_s[wn + 16 * j][kk], PITCH);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(&out_s[warp][0][0], acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int t = lane; t < 256; t += 32) {
        c[(m0 + wm + 16 * i + t / 16) * n + n0 + wn + 16 * j + t % 16] = __float2bfloat16_rn(out_s[warp][t / 16][t % 16]);
      }
      __syncwarp();
    }
  }
}

}  // namespace v2
}  // namespace

COURSE_EXPORT cudaError_t gemm_v2_wmma_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                            int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || m % v2::TILE || n % v2::TILE || k % v2::BK) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / v2::TILE), static_cast<unsigned>(m / v2::TILE));
  v2::gemm_wmma_kernel<<<grid, v2::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
