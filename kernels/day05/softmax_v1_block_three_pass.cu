// v1, block per row, three passes: the textbook softmax. One block of 256 threads per row walks
// the row three times (the max, the sum of exp, the output), one 4-byte element per thread per
// step, and combines the threads' partial results through a shared-memory tree with a
// __syncthreads at each of its 8 levels. The second and third reads of a row mostly come from
// the L2, but they still cost load instructions, L2 bandwidth and time. Expect it far below the
// copy for short rows (most of the 256 threads have nothing to do); where the re-reads stay in
// the L2 (rows of 2048-4096 floats) it came close, 0.95x, on the H100 of reports/gpu-notebooks.json.
//
//   x, out  (rows, cols) fp32, any cols      out[r, :] = softmax(x[r, :])
#include "course/common.cuh"

namespace {

constexpr int V1_THREADS = 256;

// Tree reduction through shared memory: halve the active threads at every level, with a
// barrier between levels because each level reads what the previous one wrote.
template <bool IS_MAX>
__device__ float block_tree_reduce(float v, float* smem /* (V1_THREADS,) */) {
  smem[threadIdx.x] = v;
  __syncthreads();
#pragma unroll
  for (int half = V1_THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float other = smem[threadIdx.x + half];
      smem[threadIdx.x] = IS_MAX ? fmaxf(smem[threadIdx.x], other) : smem[threadIdx.x] + other;
    }
    __syncthreads();
  }
  const float result = smem[0];
  __syncthreads();  // everyone has read smem[0] before the next reduction overwrites it
  return result;
}

__global__ void softmax_three_pass_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t cols) {
  __shared__ float smem[V1_THREADS];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;  // (cols,) this block's row
  float* yr = out + static_cast<int64_t>(blockIdx.x) * cols;       // (cols,)

  float m = -INFINITY;  // pass 1: the row max, so that every exp below is <= 1
  for (int64_t c = threadIdx.x; c < cols; c += V1_THREADS) m = fmaxf(m, xr[c]);
  m = block_tree_reduce<true>(m, smem);

  float s = 0.0f;  // pass 2: reads the row again for the sum of exp(x - m)
  for (int64_t c = threadIdx.x; c < cols; c += V1_THREADS) s += __expf(xr[c] - m);
  s = block_tree_reduce<false>(s, smem);

  const float inv = 1.0f / s;  // pass 3: a third read, recomputing each exp, and the write
  for (int64_t c = threadIdx.x; c < cols; c += V1_THREADS) yr[c] = __expf(xr[c] - m) * inv;
}

}  // namespace

COURSE_EXPORT cudaError_t softmax_v1_three_pass(float* out, const float* x, int64_t rows, int64_t cols,
                                                cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (rows > INT32_MAX) return cudaErrorInvalidValue;  // one block per row
  softmax_three_pass_kernel<<<static_cast<unsigned>(rows), V1_THREADS, 0, stream>>>(out, x, cols);
  return cudaGetLastError();
}
