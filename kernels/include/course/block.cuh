// course/block.cuh: reductions across all threads of a block, in three levels.
//
//   level 1  each warp reduces its 32 values with register shuffles     (course/warp.cuh)
//   level 2  lane 0 of every warp writes its warp's result to shared memory, one float per warp
//   level 3  after __syncthreads, every warp reads the (at most 32) partials and reduces them
//            with shuffles again, so every thread of the block ends up holding the result
//
// For a block of 1024 threads that is 5 + 5 shuffle steps and two barriers, where a tree in
// shared memory needs a barrier per halving step (10). FlashInfer's norm.cuh does the same,
// except that only warp 0 reduces the partials and broadcasts the result through shared
// memory, which is what its second barrier is for. Here every warp repeats the cheap level-3
// reduction, so the result arrives in registers; the second barrier only makes the function
// safe to call again.
//
// Rules for the caller:
//   * a 1-D block whose size is a multiple of 32 (the shuffles use the full-warp mask, so
//     every lane of every warp must be present), at most 1024 threads (at most 32 partials);
//   * every thread of the block calls it, with no thread returned early (it has __syncthreads).
// It may be called any number of times in a row: the second barrier keeps a later call from
// overwriting the partials while a slow warp is still reading them.
#pragma once

#include "course/warp.cuh"

namespace course {

namespace block_detail {

struct SumOp {
  static __device__ __forceinline__ float identity() { return 0.0f; }
  static __device__ __forceinline__ float warp_reduce(float v) { return warp_reduce_sum(v); }
};

struct MaxOp {
  static __device__ __forceinline__ float identity() { return -INFINITY; }
  static __device__ __forceinline__ float warp_reduce(float v) { return warp_reduce_max(v); }
};

template <typename OP>
__device__ __forceinline__ float block_reduce(float v) {
  // One slot per warp. A __shared__ variable inside a function is a single array per block
  // (per OP), shared by every call: hence the barrier at the end.
  __shared__ float partials[WARP_SIZE];
  const int lane = threadIdx.x % WARP_SIZE;
  const int warp = threadIdx.x / WARP_SIZE;
  const int num_warps = blockDim.x / WARP_SIZE;

  v = OP::warp_reduce(v);              // level 1: every lane holds its warp's result
  if (lane == 0) partials[warp] = v;   // level 2: one float per warp
  __syncthreads();                     // every partial is written before anyone reads one
  v = lane < num_warps ? partials[lane] : OP::identity();
  v = OP::warp_reduce(v);              // level 3: every warp reduces the partials itself
  __syncthreads();                     // every warp has read the partials: a next call may write
  return v;
}

}  // namespace block_detail

// Sum of `v` over all threads of the block; every thread gets the result.
__device__ __forceinline__ float block_reduce_sum(float v) {
  return block_detail::block_reduce<block_detail::SumOp>(v);
}

// Maximum of `v` over all threads of the block; every thread gets the result.
__device__ __forceinline__ float block_reduce_max(float v) {
  return block_detail::block_reduce<block_detail::MaxOp>(v);
}

}  // namespace course
