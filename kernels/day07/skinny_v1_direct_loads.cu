// v1, direct loads: the starting point, no shared memory for the tiles. Each lane loads its own
// 16-byte pieces of two weight rows and of x straight into registers (LDG.E.128) and feeds the
// tensor cores; the loop is unrolled 4x so that four steps' loads are in flight per warp. A load's
// ~1 us of latency is hidden only by those registers and by other warps. Napkin math: 128 blocks
// x 4 warps x 4 steps x 1 KB = 2 MB in flight, about half of what ~3.8 TB/s x ~1 us needs.
//
//   x [M, K], weight [N, K], y [M, N] bf16/fp16; M <= 16, N % 32 == 0, K % 256 == 0, aligned
#include "course/skinny_versions.cuh"

// Its own namespace: build_day compiles the day's files as one translation unit.
namespace skinny_v1 {

using namespace skinny;  // the shared problem and helpers: course/skinny_versions.cuh

// Warps: 2 row groups of 16 rows x 2 k halves (even and odd 32-wide steps of K).
template <typename T>
__global__ void __launch_bounds__(THREADS) skinny_direct_kernel(T* y, const T* x, const T* w, int64_t M, int64_t N, int64_t K) {
  const int warp = threadIdx.x / 32, rg = warp % 2, kh = warp / 2;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * ROWS;
  const T* w0 = w + (n0 + rg * 16 + g) * K;  // (K,) weight row g of this warp's 16
  const T* w1 = w0 + 8 * K;                  // (K,) row g + 8
  const bool two = M > 8;
  float acc[2][4] = {};
#pragma unroll 4
  for (int64_t s = kh; s < K / 32; s += 2) {
    const int64_t k = s * 32 + t * CHUNK;  // this lane's 8 k values of the step
    const uint4 a0 = *reinterpret_cast<const uint4*>(w0 + k), a1 = *reinterpret_cast<const uint4*>(w1 + k);
    const uint32_t a_lo[4] = {a0.x, a1.x, a0.y, a1.y}, a_hi[4] = {a0.z, a1.z, a0.w, a1.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !two) break;  // (a uniform branch: the whole warp skips tokens 8-15)
      const int m = h * 8 + g;  // token; rows past M read as zeros
      const uint4 xv = m < M ? __ldg(reinterpret_cast<const uint4*>(x + m * K + k)) : make_uint4(0, 0, 0, 0);
      const uint32_t b_lo[2] = {xv.x, xv.y}, b_hi[2] = {xv.z, xv.w};
      course::mma_m16n8k16<T>(acc[h], a_lo, b_lo);
      course::mma_m16n8k16<T>(acc[h], a_hi, b_hi);
    }
  }
  store_block(y, acc, rg, kh, M, N, n0);
}

}  // namespace skinny_v1

COURSE_EXPORT cudaError_t skinny_v1_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                         int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  using namespace skinny_v1;
  if (!shape_ok(y, x, weight, M, N, K)) return cudaErrorInvalidValue;
  skinny_direct_kernel<<<static_cast<unsigned>(N / ROWS), THREADS, 0, stream>>>(y, x, weight, M, N, K);
  return cudaGetLastError();
}
