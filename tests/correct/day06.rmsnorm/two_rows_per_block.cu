// CORRECT two rows per block (threadIdx.y picks the row, a missing second row still joins the barrier), the per-row reduction in a plain __device__ function with its own __shared__ array
// Day 6's RMSNorm with blocks of (threads, 2): each half of the block normalizes one row.
#include <cstdint>

#include "course/vec.cuh"
#include "course/warp.cuh"

namespace {

constexpr int MAX_THREADS_PER_ROW = 256;
constexpr int MAX_ITEMS = 8;
constexpr int ROWS_PER_BLOCK = 2;

}  // namespace

// Sum of v over the threads of this thread's row (threadIdx.y), handed to all of them. Every
// thread of the block must call it: it has a __syncthreads.
__device__ float row_sum(float v) {
  __shared__ float partials[ROWS_PER_BLOCK][MAX_THREADS_PER_ROW / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = course::warp_reduce_sum(v);
  if (lane == 0) partials[threadIdx.y][warp] = v;
  __syncthreads();
  return course::warp_reduce_sum(lane < warps ? partials[threadIdx.y][lane] : 0.0f);
}

namespace {

template <typename T, int ITEMS>
__global__ void __launch_bounds__(ROWS_PER_BLOCK * MAX_THREADS_PER_ROW)
rmsnorm_rows(T* __restrict__ out, const T* __restrict__ input, const T* __restrict__ weight, int64_t rows,
             int hidden, float eps, bool vectorized) {
  constexpr int VEC = course::vec_size_16B<T>();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * ROWS_PER_BLOCK + threadIdx.y;
  const bool live = row < rows;  // the last block may have one row only
  const T* x = input + (live ? row : 0) * hidden;
  T* y = out + (live ? row : 0) * hidden;
  const int tid = threadIdx.x, nt = blockDim.x;
  const T zero = course::from_float<T>(0.0f);
  const int num_vecs = hidden / VEC;

  course::vec_t<T, VEC> xs[ITEMS], ws[ITEMS];
  if (vectorized) {
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int v = it * nt + tid;
      if (live && v < num_vecs) {
        xs[it].load(x + v * VEC);
        ws[it].load(weight + v * VEC);
      } else {
        xs[it].fill(zero);
        ws[it].fill(zero);
      }
    }
  } else {
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int i = (it * VEC + j) * nt + tid;
        xs[it][j] = live && i < hidden ? x[i] : zero;
      }
    }
  }

  float sum_sq = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = course::to_float(xs[it][j]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(row_sum(sum_sq) / static_cast<float>(hidden) + eps);
  if (!live) return;  // after the barrier

#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    if (vectorized) {
      const int v = it * nt + tid;
      course::vec_t<T, VEC> ys;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        ys[j] = course::from_float<T>(course::to_float(xs[it][j]) * inv_rms * course::to_float(ws[it][j]));
      }
      if (v < num_vecs) ys.store(y + v * VEC);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int i = (it * VEC + j) * nt + tid;
        if (i < hidden) y[i] = course::from_float<T>(course::to_float(xs[it][j]) * inv_rms * course::to_float(weight[i]));
      }
    }
  }
}

template <typename T>
cudaError_t rmsnorm(T* out, const T* input, const T* weight, int64_t rows, int64_t hidden, float eps,
                    cudaStream_t stream) {
  constexpr int VEC = course::vec_size_16B<T>();
  if (rows < 0 || rows > INT32_MAX || hidden < 0) return cudaErrorInvalidValue;
  if (rows == 0 || hidden == 0) return cudaSuccess;
  const bool vectorized = hidden % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(weight) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t slots = (hidden + VEC - 1) / VEC;
  int items = 1;
  while (items < MAX_ITEMS && slots > int64_t{MAX_THREADS_PER_ROW} * items) items *= 2;
  const int64_t per_row = ((slots + items - 1) / items + 31) / 32 * 32;
  if (per_row > MAX_THREADS_PER_ROW) return cudaErrorInvalidValue;
  const dim3 block(static_cast<unsigned>(per_row), ROWS_PER_BLOCK);
  const unsigned grid = static_cast<unsigned>((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
  const int h = static_cast<int>(hidden);
  switch (items) {
    case 1: rmsnorm_rows<T, 1><<<grid, block, 0, stream>>>(out, input, weight, rows, h, eps, vectorized); break;
    case 2: rmsnorm_rows<T, 2><<<grid, block, 0, stream>>>(out, input, weight, rows, h, eps, vectorized); break;
    case 4: rmsnorm_rows<T, 4><<<grid, block, 0, stream>>>(out, input, weight, rows, h, eps, vectorized); break;
    default: rmsnorm_rows<T, 8><<<grid, block, 0, stream>>>(out, input, weight, rows, h, eps, vectorized); break;
  }
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t rmsnorm_fp16(__half* out, const __half* input, const __half* weight,
                                       int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  return rmsnorm(out, input, weight, rows, hidden, eps, stream);
}

COURSE_EXPORT cudaError_t rmsnorm_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                       const __nv_bfloat16* weight, int64_t rows, int64_t hidden,
                                       float eps, cudaStream_t stream) {
  return rmsnorm(out, input, weight, rows, hidden, eps, stream);
}
