// Block reductions on their own: one block per row sums (or takes the maximum of) a row of
// any length with course::block_reduce_sum / block_reduce_max (warp shuffles -> shared
// memory -> warp shuffles). Not a bandwidth exercise: it is here to check the three-level
// reduction against torch for many block sizes and row lengths, and to read its SASS.
//
//   x    [rows, cols] fp32
//   out  [rows]       fp32   out[r] = sum (or max) of x[r, :]
#include "course/block.cuh"

namespace {

template <bool IS_MAX>
__global__ void block_reduce_rows_kernel(float* __restrict__ out, const float* __restrict__ x,
                                         int64_t cols) {
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;  // (cols,)
  // Level 0: each thread folds the elements it visits (blockDim.x apart: coalesced) into one
  // value. A thread that visits none keeps the identity, which changes nothing below.
  float v = IS_MAX ? -INFINITY : 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    v = IS_MAX ? fmaxf(v, row[i]) : v + row[i];
  }
  // Levels 1-3: every thread returns with the block's result; one of them writes it.
  v = IS_MAX ? course::block_reduce_max(v) : course::block_reduce_sum(v);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}

template <bool IS_MAX>
cudaError_t launch_block_reduce_rows(float* out, const float* x, int64_t rows, int64_t cols,
                                     int64_t threads, cudaStream_t stream) {
  // block_reduce_* needs whole warps and at most 32 of them.
  if (threads < 32 || threads > 1024 || threads % 32 != 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  block_reduce_rows_kernel<IS_MAX><<<static_cast<unsigned>(rows), static_cast<unsigned>(threads),
                                     0, stream>>>(out, x, cols);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t block_sum_rows(float* out, const float* x, int64_t rows, int64_t cols,
                                         int64_t threads, cudaStream_t stream) {
  return launch_block_reduce_rows<false>(out, x, rows, cols, threads, stream);
}

COURSE_EXPORT cudaError_t block_max_rows(float* out, const float* x, int64_t rows, int64_t cols,
                                         int64_t threads, cudaStream_t stream) {
  return launch_block_reduce_rows<true>(out, x, rows, cols, threads, stream);
}
