// CORRECT separate warp-per-row and block-per-row kernels, the block's size a template parameter picked by a runtime switch; 8 rows per block on the warp path; block reductions in plain __device__ functions
// Day 5's softmax written as three kernels: a warp per row, a block of THREADS per row (THREADS
// known at compile time), and the two-pass online kernel for rows past 16384.
#include <cstdint>

#include "course/vec.cuh"
#include "course/warp.cuh"

constexpr int ROWS_PER_BLOCK = 8;   // warp path: 8 warps, one row each
constexpr int ELEMS = 16;           // block path: elements per thread
constexpr int ONLINE = 1024;        // threads of the two-pass kernel

// Block-wide max and sum: shuffles in each warp, one partial per warp in shared memory, then
// every warp reduces the partials. Each call gets its own `partials` array.
__device__ float block_max(float v, float* partials) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = course::warp_reduce_max(v);
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  return course::warp_reduce_max(lane < warps ? partials[lane] : -INFINITY);
}

__device__ float block_sum(float v, float* partials) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = course::warp_reduce_sum(v);
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  return course::warp_reduce_sum(lane < warps ? partials[lane] : 0.0f);
}

namespace {

// Up to 1024 columns: one warp per row, NV vectors of VEC per lane.
template <typename T, int VEC, int NV>
__global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
softmax_warp(T* __restrict__ out, const T* __restrict__ x, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * ROWS_PER_BLOCK + (threadIdx.x >> 5);
  if (row >= rows) return;  // a whole warp leaves
  const T* xr = x + row * cols;
  T* yr = out + row * cols;
  const int nvec = static_cast<int>(cols / VEC);

  float v[NV][VEC];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int i = lane + 32 * k;
    course::vec_t<T, VEC> in;
    in.fill(course::from_float<T>(-INFINITY));
    if (i < nvec) in.load(xr + i * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v[k][j] = course::to_float(in[j]);
      m = fmaxf(m, v[k][j]);
    }
  }
  m = course::warp_reduce_max(m);
  const float shift = m == -INFINITY ? 0.0f : m;  // fully masked row: every exp is 0
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v[k][j] = __expf(v[k][j] - shift);
      s += v[k][j];
    }
  }
  s = course::warp_reduce_sum(s);
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int i = lane + 32 * k;
    course::vec_t<T, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = course::from_float<T>(v[k][j] * inv);
    if (i < nvec) o.store(yr + i * VEC);
  }
}

// 1025 to 16384 columns: one block of THREADS per row, ELEMS elements per thread in registers.
template <typename T, int VEC, int THREADS>
__global__ void __launch_bounds__(THREADS)
softmax_block(T* __restrict__ out, const T* __restrict__ x, int64_t cols) {
  constexpr int NV = ELEMS / VEC;
  __shared__ float max_partials[32], sum_partials[32];
  const int t = threadIdx.x;
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  T* yr = out + static_cast<int64_t>(blockIdx.x) * cols;
  const int nvec = static_cast<int>(cols / VEC);

  float v[NV][VEC];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int i = t + k * THREADS;
    course::vec_t<T, VEC> in;
    in.fill(course::from_float<T>(-INFINITY));
    if (i < nvec) in.load(xr + i * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v[k][j] = course::to_float(in[j]);
      m = fmaxf(m, v[k][j]);
    }
  }
  m = block_max(m, max_partials);
  const float shift = m == -INFINITY ? 0.0f : m;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v[k][j] = __expf(v[k][j] - shift);
      s += v[k][j];
    }
  }
  s = block_sum(s, sum_partials);
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int i = t + k * THREADS;
    course::vec_t<T, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = course::from_float<T>(v[k][j] * inv);
    if (i < nvec) o.store(yr + i * VEC);
  }
}

// Longer rows: running max and rescaled sum in one pass, the output in a second.
template <typename T, int VEC>
__global__ void __launch_bounds__(ONLINE)
softmax_online(T* __restrict__ out, const T* __restrict__ x, int64_t cols) {
  __shared__ float max_partials[32], sum_partials[32];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  T* yr = out + static_cast<int64_t>(blockIdx.x) * cols;
  const int nvec = static_cast<int>(cols / VEC);

  float m = -INFINITY, s = 0.0f;
  for (int i = threadIdx.x; i < nvec; i += ONLINE) {
    course::vec_t<T, VEC> in;
    in.load(xr + static_cast<int64_t>(i) * VEC);
    float v[VEC];
    float mv = -INFINITY;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v[j] = course::to_float(in[j]);
      mv = fmaxf(mv, v[j]);
    }
    if (mv > m) {
      s *= __expf(m - mv);
      m = mv;
    }
    if (m != -INFINITY) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += __expf(v[j] - m);
    }
  }
  const float row_m = block_max(m, max_partials);
  const float row_s = block_sum(m == -INFINITY ? 0.0f : s * __expf(m - row_m), sum_partials);
  const float shift = row_m == -INFINITY ? 0.0f : row_m;
  const float inv = row_s > 0.0f ? 1.0f / row_s : 0.0f;
  for (int i = threadIdx.x; i < nvec; i += ONLINE) {
    course::vec_t<T, VEC> in, o;
    in.load(xr + static_cast<int64_t>(i) * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = course::from_float<T>(__expf(course::to_float(in[j]) - shift) * inv);
    o.store(yr + static_cast<int64_t>(i) * VEC);
  }
}

template <typename T, int VEC>
cudaError_t dispatch(T* out, const T* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (cols <= 1024) {
    const unsigned blocks = static_cast<unsigned>((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    if (cols <= 256) softmax_warp<T, VEC, 8 / VEC><<<blocks, ROWS_PER_BLOCK * 32, 0, stream>>>(out, x, rows, cols);
    else softmax_warp<T, VEC, 32 / VEC><<<blocks, ROWS_PER_BLOCK * 32, 0, stream>>>(out, x, rows, cols);
  } else if (cols > 1024 * ELEMS) {
    softmax_online<T, VEC><<<static_cast<unsigned>(rows), ONLINE, 0, stream>>>(out, x, cols);
  } else {
    // The smallest block that holds the row at ELEMS per thread.
    const unsigned grid = static_cast<unsigned>(rows);
    switch (cols <= 128 * ELEMS ? 128 : cols <= 256 * ELEMS ? 256 : cols <= 512 * ELEMS ? 512 : 1024) {
      case 128: softmax_block<T, VEC, 128><<<grid, 128, 0, stream>>>(out, x, cols); break;
      case 256: softmax_block<T, VEC, 256><<<grid, 256, 0, stream>>>(out, x, cols); break;
      case 512: softmax_block<T, VEC, 512><<<grid, 512, 0, stream>>>(out, x, cols); break;
      default: softmax_block<T, VEC, 1024><<<grid, 1024, 0, stream>>>(out, x, cols); break;
    }
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t softmax(T* out, const T* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols > (int64_t{1} << 30) || rows > INT32_MAX) return cudaErrorInvalidValue;
  constexpr int VEC = 16 / sizeof(T);
  const bool vec_ok = cols % VEC == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(out) % 16 == 0;
  return vec_ok ? dispatch<T, VEC>(out, x, rows, cols, stream) : dispatch<T, 1>(out, x, rows, cols, stream);
}

}  // namespace

COURSE_EXPORT cudaError_t softmax_fp32(float* out, const float* x, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  return softmax(out, x, rows, cols, stream);
}

COURSE_EXPORT cudaError_t softmax_fp16(__half* out, const __half* x, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  return softmax(out, x, rows, cols, stream);
}

COURSE_EXPORT cudaError_t softmax_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  return softmax(out, x, rows, cols, stream);
}
