// v1, CUDA cores: the tiled GEMM every later version is measured against. C = A B^T with
// A [M, K], B [N, K] row-major, bf16 in and out, fp32 FMAs. A block stages a 64 x 16 slice of A
// and of B in shared memory (as fp32, k-major so that a warp's reads are broadcasts), then each
// of its 256 threads computes a 4 x 4 patch of the 64 x 64 tile of C from registers.
// Napkin math at 4096^3: 137 GFLOP. The H200's CUDA cores do 132 SMs x 128 FMA x 2 x ~1.98 GHz =
// ~67 TFLOP/s of fp32 at best; a kernel like this one reaches a fraction of that (~15-25 TFLOP/s),
// a few percent of the tensor cores' ~636 (mma.sync) to ~780 (cuBLAS) TFLOP/s.
//
//   a [M, K], b [N, K], c [M, N]   M, N multiples of 64, K a multiple of 16
#include "course/common.cuh"

namespace {
namespace v1 {  // the versions of a day build into one extension: names apart

constexpr int TILE = 64, BK = 16, THREADS = 256;  // 16 x 16 threads, 4 x 4 outputs each

__global__ void __launch_bounds__(THREADS)
    gemm_cuda_cores_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                           const __nv_bfloat16* __restrict__ b, int64_t n, int64_t k) {
  __shared__ float a_s[BK][TILE];  // (k, m): A's slice, transposed on the way in
  __shared__ float b_s[BK][TILE];  // (k, n)
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * TILE, n0 = static_cast<int64_t>(blockIdx.x) * TILE;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // this thread's rows 4 ty.., columns 4 tx..
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += BK) {
    // 64 x 16 elements of each operand, 4 per thread: consecutive threads read consecutive k.
    for (int i = threadIdx.x; i < TILE * BK; i += THREADS) {
      const int row = i / BK, kk = i % BK;
      a_s[kk][row] = __bfloat162float(a[(m0 + row) * k + k0 + kk]);
      b_s[kk][row] = __bfloat162float(b[(n0 + row) * k + k0 + kk]);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float ar[4], br[4];  // 4 + 4 shared loads feed 16 FMAs
#pragma unroll
      for (int i = 0; i < 4; ++i) ar[i] = a_s[kk][4 * ty + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) br[j] = b_s[kk][4 * tx + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) c[(m0 + 4 * ty + i) * n + n0 + 4 * tx + j] = __float2bfloat16_rn(acc[i][j]);
}

}  // namespace v1
}  // namespace

COURSE_EXPORT cudaError_t gemm_v1_cuda_cores_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                  int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || m % v1::TILE || n % v1::TILE || k % v1::BK) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / v1::TILE), static_cast<unsigned>(m / v1::TILE));
  v1::gemm_cuda_cores_kernel<<<grid, v1::THREADS, 0, stream>>>(c, a, b, n, k);
  return cudaGetLastError();
}
