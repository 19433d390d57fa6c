// Warp shuffle demo: the butterfly (xor) pattern step by step, the same sum through PTX and
// through the CUDA intrinsic, and two fp16 sums per shuffle by punning a half2 to 32 bits.
// Not a performance kernel: the notebook reads its SASS and runs it on a few warps.
//
//   butterfly_trace_kernel     one warp: after each of the 5 steps, which lane each lane read
//                              from and the running sum it holds
//   warp_sum_ptx_kernel        one warp per 32 floats, through course::shfl_xor (inline PTX)
//   warp_sum_intrinsic_kernel  the same through __shfl_xor_sync (course::warp_reduce_sum)
//   warp_sum_half2_kernel      one warp per 32 half2 pairs: both sums in 5 shuffles, not 10
#include "course/math.cuh"
#include "course/warp.cuh"

namespace {

constexpr int LANES = 32;

// values (32,) fp32; source_lane (5, 32) int32; running_sum (5, 32) fp32
__global__ void butterfly_trace_kernel(int32_t* __restrict__ source_lane, float* __restrict__ running_sum,
                                       const float* __restrict__ values) {
  const int lane = threadIdx.x;
  float v = values[lane];
  int step = 0;
#pragma unroll
  for (int lane_mask = LANES / 2; lane_mask > 0; lane_mask /= 2, ++step) {
    // Shuffle the lane number itself, to see who answered: lane ^ lane_mask.
    source_lane[step * LANES + lane] = static_cast<int32_t>(course::shfl_xor(static_cast<uint32_t>(lane), lane_mask));
    v += course::shfl_xor(v, lane_mask);
    running_sum[step * LANES + lane] = v;  // the sum of 2^(step + 1) lanes' values
  }
}

// x (num_warps * 32,) fp32; out (num_warps,) fp32
__global__ void warp_sum_ptx_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t num_warps) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / LANES;
  if (warp >= num_warps) return;  // whole warps leave together (blockDim is a multiple of 32)
  float v = x[warp * LANES + threadIdx.x % LANES];
#pragma unroll
  for (int lane_mask = LANES / 2; lane_mask > 0; lane_mask /= 2) v += course::shfl_xor(v, lane_mask);
  if (threadIdx.x % LANES == 0) out[warp] = v;
}

__global__ void warp_sum_intrinsic_kernel(float* __restrict__ out, const float* __restrict__ x,
                                          int64_t num_warps) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / LANES;
  if (warp >= num_warps) return;
  const float v = course::warp_reduce_sum(x[warp * LANES + threadIdx.x % LANES]);
  if (threadIdx.x % LANES == 0) out[warp] = v;
}

// x (num_warps, 32) half2 pairs = (num_warps, 64) fp16; out (num_warps, 2) fp16: the sums of
// the even and of the odd elements. One 32-bit shuffle carries both halves of a pair.
__global__ void warp_sum_half2_kernel(__half* __restrict__ out, const __half* __restrict__ x,
                                      int64_t num_warps) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / LANES;
  if (warp >= num_warps) return;
  const int lane = threadIdx.x % LANES;
  const __half2* pairs = reinterpret_cast<const __half2*>(x + warp * 2 * LANES);  // 4-byte aligned
  __half2 v = pairs[lane];
#pragma unroll
  for (int lane_mask = LANES / 2; lane_mask > 0; lane_mask /= 2) {
    v = __hadd2(v, course::shfl_xor(v, lane_mask));  // half2 -> uint32 -> SHFL -> half2, then HADD2
  }
  if (lane == 0) reinterpret_cast<__half2*>(out)[warp] = v;
}

unsigned blocks_for_warps(int64_t num_warps) {
  return static_cast<unsigned>(course::ceil_div<int64_t>(num_warps * LANES, 256));
}

}  // namespace

COURSE_EXPORT cudaError_t butterfly_trace(int32_t* source_lane, float* running_sum, const float* values,
                                          cudaStream_t stream) {
  butterfly_trace_kernel<<<1, LANES, 0, stream>>>(source_lane, running_sum, values);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t warp_sum_ptx(float* out, const float* x, int64_t num_warps, cudaStream_t stream) {
  if (num_warps == 0) return cudaSuccess;
  warp_sum_ptx_kernel<<<blocks_for_warps(num_warps), 256, 0, stream>>>(out, x, num_warps);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t warp_sum_intrinsic(float* out, const float* x, int64_t num_warps, cudaStream_t stream) {
  if (num_warps == 0) return cudaSuccess;
  warp_sum_intrinsic_kernel<<<blocks_for_warps(num_warps), 256, 0, stream>>>(out, x, num_warps);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t warp_sum_half2(__half* out, const __half* x, int64_t num_warps, cudaStream_t stream) {
  if (num_warps == 0) return cudaSuccess;
  warp_sum_half2_kernel<<<blocks_for_warps(num_warps), 256, 0, stream>>>(out, x, num_warps);
  return cudaGetLastError();
}
