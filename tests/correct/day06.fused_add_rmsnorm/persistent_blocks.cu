// CORRECT persistent blocks for aligned rows: a grid-stride loop over rows, the grid sized by cudaOccupancyMaxActiveBlocksPerMultiprocessor and a static cached SM count; the row's work in a __device__ function template shared with a one-row-per-block scalar kernel
// Day 6's fused add + RMSNorm. Aligned rows: as many blocks as fit on the GPU at once, each
// walking rows blockIdx.x, blockIdx.x + gridDim.x, ... Other rows: one block per row, one
// element per load. Every row is still read and written once, from registers.
#include <algorithm>
#include <cstdint>

#include "course/block.cuh"
#include "course/vec.cuh"

namespace {

constexpr int MAX_THREADS = 256;
constexpr int MAX_ITEMS = 8;

}  // namespace

// One row: h = x + r rounded to T into r, then x = h * rsqrt(mean(h^2) + eps) * w. Every thread
// of the block calls it (it has the block's barriers).
template <typename T, int ITEMS, bool VECTORIZED>
__device__ void fused_row(T* x, T* r, const T* weight, int hidden,
                          float eps) {
  constexpr int VEC = course::vec_size_16B<T>();
  using Vec = course::vec_t<T, VEC>;
  const T zero = course::from_float<T>(0.0f);
  const int num_vecs = hidden / VEC;
  Vec xs[ITEMS], hs[ITEMS], ws[ITEMS];

  if constexpr (VECTORIZED) {
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int v = it * blockDim.x + threadIdx.x;
      if (v < num_vecs) {
        xs[it].load(x + v * VEC);
        hs[it].load(r + v * VEC);
        ws[it].load(weight + v * VEC);
      } else {
        xs[it].fill(zero);
        hs[it].fill(zero);
        ws[it].fill(zero);
      }
    }
  } else {
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int i = (it * VEC + j) * blockDim.x + threadIdx.x;
        xs[it][j] = i < hidden ? x[i] : zero;
        hs[it][j] = i < hidden ? r[i] : zero;
      }
    }
  }

  float sum_sq = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      hs[it][j] = course::from_float<T>(course::to_float(xs[it][j]) + course::to_float(hs[it][j]));
      const float h = course::to_float(hs[it][j]);
      sum_sq += h * h;
    }
    if constexpr (VECTORIZED) {
      const int v = it * blockDim.x + threadIdx.x;
      if (v < num_vecs) hs[it].store(r + v * VEC);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int i = (it * VEC + j) * blockDim.x + threadIdx.x;
        if (i < hidden) r[i] = hs[it][j];
      }
    }
  }

  // course::block_reduce_sum ends with a barrier, so the next row may reuse its partials.
  const float inv_rms = rsqrtf(course::block_reduce_sum(sum_sq) / static_cast<float>(hidden) + eps);

#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    if constexpr (VECTORIZED) {
      const int v = it * blockDim.x + threadIdx.x;
      Vec ys;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        ys[j] = course::from_float<T>(course::to_float(hs[it][j]) * inv_rms * course::to_float(ws[it][j]));
      }
      if (v < num_vecs) ys.store(x + v * VEC);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int i = (it * VEC + j) * blockDim.x + threadIdx.x;
        if (i < hidden) x[i] = course::from_float<T>(course::to_float(hs[it][j]) * inv_rms * course::to_float(weight[i]));
      }
    }
  }
}

namespace {

// 16-byte rows: a block keeps taking rows until none are left.
template <typename T, int ITEMS>
__global__ void __launch_bounds__(MAX_THREADS)
fused_rows_persistent(T* __restrict__ input, T* __restrict__ residual, const T* __restrict__ weight, int64_t rows,
                      int hidden, float eps) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    fused_row<T, ITEMS, true>(input + row * hidden, residual + row * hidden, weight, hidden, eps);
  }
}

// Any other row: one block each.
template <typename T, int ITEMS>
__global__ void __launch_bounds__(MAX_THREADS)
fused_row_per_block(T* __restrict__ input, T* __restrict__ residual, const T* __restrict__ weight, int hidden,
                    float eps) {
  const int64_t row = blockIdx.x;
  fused_row<T, ITEMS, false>(input + row * hidden, residual + row * hidden, weight, hidden, eps);
}

int sm_count() {
  static int sms = 0;  // asked once
  if (sms == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (sms <= 0) sms = 1;
  }
  return sms;
}

template <typename T, int ITEMS>
cudaError_t launch(T* input, T* residual, const T* weight, int64_t rows, int hidden, float eps, bool vectorized,
                   int threads, cudaStream_t stream) {
  if (!vectorized) {
    fused_row_per_block<T, ITEMS><<<static_cast<unsigned>(rows), threads, 0, stream>>>(input, residual, weight,
                                                                                       hidden, eps);
    return cudaGetLastError();
  }
  int per_sm = 0;
  const cudaError_t err =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_rows_persistent<T, ITEMS>, threads, 0);
  if (err != cudaSuccess) return err;
  const int64_t resident = static_cast<int64_t>(sm_count()) * std::max(per_sm, 1);
  const unsigned blocks = static_cast<unsigned>(std::min(rows, resident));
  fused_rows_persistent<T, ITEMS><<<blocks, threads, 0, stream>>>(input, residual, weight, rows, hidden, eps);
  return cudaGetLastError();
}

template <typename T>
cudaError_t fused_add_rmsnorm(T* input, T* residual, const T* weight, int64_t rows, int64_t hidden, float eps,
                              cudaStream_t stream) {
  constexpr int VEC = course::vec_size_16B<T>();
  if (rows < 0 || rows > INT32_MAX || hidden < 0) return cudaErrorInvalidValue;
  if (rows == 0 || hidden == 0) return cudaSuccess;
  const bool vectorized = hidden % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(residual) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(weight) % 16 == 0;
  const int64_t slots = course::ceil_div<int64_t>(hidden, VEC);
  int items = 1;
  while (items < MAX_ITEMS && slots > int64_t{MAX_THREADS} * items) items *= 2;
  const int64_t threads = course::ceil_div<int64_t>(course::ceil_div<int64_t>(slots, items), 32) * 32;
  if (threads > MAX_THREADS) return cudaErrorInvalidValue;
  const int h = static_cast<int>(hidden), t = static_cast<int>(threads);
  switch (items) {
    case 1: return launch<T, 1>(input, residual, weight, rows, h, eps, vectorized, t, stream);
    case 2: return launch<T, 2>(input, residual, weight, rows, h, eps, vectorized, t, stream);
    case 4: return launch<T, 4>(input, residual, weight, rows, h, eps, vectorized, t, stream);
    default: return launch<T, 8>(input, residual, weight, rows, h, eps, vectorized, t, stream);
  }
}

}  // namespace

COURSE_EXPORT cudaError_t fused_add_rmsnorm_fp16(__half* input, __half* residual, const __half* weight,
                                                 int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  return fused_add_rmsnorm(input, residual, weight, rows, hidden, eps, stream);
}

COURSE_EXPORT cudaError_t fused_add_rmsnorm_bf16(__nv_bfloat16* input, __nv_bfloat16* residual,
                                                 const __nv_bfloat16* weight, int64_t rows, int64_t hidden,
                                                 float eps, cudaStream_t stream) {
  return fused_add_rmsnorm(input, residual, weight, rows, hidden, eps, stream);
}
