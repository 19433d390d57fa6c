// CORRECT the learner's own shfl.sync.bfly asm in plain __device__ functions, masks in ascending order 1..16, kernel arguments in a struct passed by value, __launch_bounds__ and raw float4 loads
// Row sum and row max, one warp per row. Written without course/math.cuh or course/vec.cuh.
#include <cstdint>
#include <cuda_runtime.h>

#include "course/common.cuh"

#define WARP_SIZE 32
#define ROWS_PER_BLOCK 8
#define THREADS (WARP_SIZE * ROWS_PER_BLOCK)
#define LOADS_IN_FLIGHT 4

struct ReduceArgs {
  float* row_sum;
  float* row_max;
  const float* x;
  int64_t rows;
  int64_t cols;
  bool use_float4;
};

// my own butterfly shuffle: lane i gets v from lane i ^ mask
__device__ float bfly(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 31, -1;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}

// butterfly in the other direction (1, 2, 4, 8, 16): the same five exchanges, every lane ends with the total
__device__ float warp_total(float v) {
#pragma unroll
  for (int mask = 1; mask < WARP_SIZE; mask <<= 1) v += bfly(v, mask);
  return v;
}

__device__ float warp_largest(float v) {
#pragma unroll
  for (int mask = 1; mask < WARP_SIZE; mask <<= 1) v = fmaxf(v, bfly(v, mask));
  return v;
}

__device__ void fold(float4 q, float& s, float& m) {
  s += (q.x + q.y) + (q.z + q.w);
  m = fmaxf(m, fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)));
}

__global__ void __launch_bounds__(THREADS) row_reduce(ReduceArgs a) {
  int lane = threadIdx.x & (WARP_SIZE - 1);
  int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
  if (row >= a.rows) return;  // whole warp
  const float* __restrict__ src = a.x + row * a.cols;

  float s = 0.f, m = -INFINITY;
  int64_t start = 0;
  if (a.use_float4) {
    const float4* __restrict__ v4 = reinterpret_cast<const float4*>(src);
    int64_t n4 = a.cols >> 2;
    int64_t i = lane;
    for (; i + (LOADS_IN_FLIGHT - 1) * WARP_SIZE < n4; i += LOADS_IN_FLIGHT * WARP_SIZE) {
      float4 q0 = v4[i];
      float4 q1 = v4[i + WARP_SIZE];
      float4 q2 = v4[i + 2 * WARP_SIZE];
      float4 q3 = v4[i + 3 * WARP_SIZE];
      fold(q0, s, m);
      fold(q1, s, m);
      fold(q2, s, m);
      fold(q3, s, m);
    }
    for (; i < n4; i += WARP_SIZE) fold(v4[i], s, m);
    start = n4 << 2;
  }
  for (int64_t j = start + lane; j < a.cols; j += WARP_SIZE) {
    float e = src[j];
    s += e;
    m = fmaxf(m, e);
  }

  s = warp_total(s);
  m = warp_largest(m);
  if (lane == 0) {
    a.row_sum[row] = s;
    a.row_max[row] = m;
  }
}

COURSE_EXPORT cudaError_t warp_reduce_rows(float* row_sum, float* row_max, const float* input,
                                           int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (cols < 1) return cudaErrorInvalidValue;
  ReduceArgs a;
  a.row_sum = row_sum;
  a.row_max = row_max;
  a.x = input;
  a.rows = rows;
  a.cols = cols;
  a.use_float4 = (cols % 4 == 0) && ((uintptr_t)input % 16 == 0);
  unsigned grid = (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
  row_reduce<<<grid, THREADS, 0, stream>>>(a);
  return cudaGetLastError();
}
