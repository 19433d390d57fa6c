// v3, block per row with the row in registers: adds a block-level step for rows too long for
// one warp's registers. Each thread keeps up to 16 floats (4 float4 loads), a block of
// ceil(cols / 16) threads rounded up to whole warps covers the row (up to 1024 threads,
// 16384 floats), and each reduction is two-level: butterfly shuffles inside every warp, the
// warps' results through shared memory, shuffles again (Day 6 takes this step apart). Still
// one read and one write per element. On the H100 of reports/gpu-notebooks.json: 0.99-1.01x of the copy for
// rows of 2048-16384 floats; for short rows a block is a single warp and v2's lighter warps win.
//
//   x, out  (rows, cols) fp32, cols % 4 == 0    thread t holds float4 vectors t, t + blockDim, ...
#include "course/vec.cuh"
#include "course/warp.cuh"

namespace {

constexpr int V3_VEC = 4;            // floats per 16-byte load
constexpr int V3_NV = 4;             // float4 vectors per thread: 16 floats
constexpr int V3_MAX_THREADS = 1024;

// Two-level reduction: every warp reduces its 32 values with shuffles, lane 0 of each warp
// parks the result in shared memory, and after one barrier every warp reduces those partials
// itself (so no second barrier is needed to hand the result out). course/block.cuh (Day 6) is
// the reusable version: a second barrier lets it be called again on the same shared array;
// here each of the two reductions gets its own array instead.
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float v, float* partials /* (32,) */) {
  const int lane = threadIdx.x % course::WARP_SIZE;
  const int warps = blockDim.x / course::WARP_SIZE;
  v = IS_MAX ? course::warp_reduce_max(v) : course::warp_reduce_sum(v);
  if (lane == 0) partials[threadIdx.x / course::WARP_SIZE] = v;
  __syncthreads();
  const float neutral = IS_MAX ? -INFINITY : 0.0f;
  v = lane < warps ? partials[lane] : neutral;
  return IS_MAX ? course::warp_reduce_max(v) : course::warp_reduce_sum(v);
}

__global__ void __launch_bounds__(V3_MAX_THREADS)
softmax_block_per_row_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t cols) {
  // Separate arrays for the two reductions: a fast warp may write its sum partial while a
  // slow one still reads the max partials.
  __shared__ float max_partials[32], sum_partials[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;  // (cols,)
  float* yr = out + static_cast<int64_t>(blockIdx.x) * cols;       // (cols,)
  const int nvec = static_cast<int>(cols / V3_VEC);  // at most 4096: int indices within the row

  float v[V3_NV][V3_VEC];  // (4, 4) this thread's share of the row
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < V3_NV; ++k) {
    const int i = threadIdx.x + k * blockDim.x;  // the block's k-th load: contiguous
    course::vec_t<float, V3_VEC> in;
    in.fill(-INFINITY);
    if (i < nvec) in.load(xr + i * V3_VEC);
#pragma unroll
    for (int j = 0; j < V3_VEC; ++j) {
      v[k][j] = in[j];
      m = fmaxf(m, in[j]);
    }
  }
  m = block_reduce<true>(m, max_partials);

  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < V3_NV; ++k) {
#pragma unroll
    for (int j = 0; j < V3_VEC; ++j) {
      v[k][j] = __expf(v[k][j] - m);
      s += v[k][j];
    }
  }
  const float inv = 1.0f / block_reduce<false>(s, sum_partials);

#pragma unroll
  for (int k = 0; k < V3_NV; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i >= nvec) continue;
    course::vec_t<float, V3_VEC> o;
#pragma unroll
    for (int j = 0; j < V3_VEC; ++j) o[j] = v[k][j] * inv;
    o.store(yr + i * V3_VEC);
  }
}

}  // namespace

COURSE_EXPORT cudaError_t softmax_v3_block_per_row(float* out, const float* x, int64_t rows, int64_t cols,
                                                   cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols % V3_VEC != 0 || cols > V3_MAX_THREADS * V3_NV * V3_VEC || rows > INT32_MAX ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  // Enough threads for V3_NV vectors each, in whole warps (the reduction assumes them).
  const int64_t needed = course::ceil_div<int64_t>(cols / V3_VEC, V3_NV);
  const int threads = static_cast<int>(course::ceil_div<int64_t>(needed, course::WARP_SIZE) * course::WARP_SIZE);
  softmax_block_per_row_kernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(out, x, cols);
  return cudaGetLastError();
}
