// course/warp.cuh: reductions across the 32 lanes of a warp, through register shuffles.
// The butterfly (xor) pattern leaves the result in every lane after log2(32) = 5 steps,
// with no shared memory and no __syncthreads. Day 3 writes the same with PTX
// (shfl.sync.bfly); Days 5 and 6 build softmax and RMSNorm on these.
#pragma once

#include "course/common.cuh"

namespace course {

constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int WARP_SIZE = 32;

// Sum of `v` over the lanes of the warp; every lane gets the result.
__device__ __forceinline__ float warp_reduce_sum(float v) {
#pragma unroll
  for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(FULL_MASK, v, offset);
  }
  return v;
}

// Maximum of `v` over the lanes of the warp; every lane gets the result.
__device__ __forceinline__ float warp_reduce_max(float v) {
#pragma unroll
  for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
  }
  return v;
}

}  // namespace course
