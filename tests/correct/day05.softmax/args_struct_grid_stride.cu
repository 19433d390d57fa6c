// CORRECT kernel arguments in a struct passed by value, a grid-stride loop over rows with the grid sized from a static cached SM count, exp written as exp2f((x - m) * log2 e)
// Day 5's softmax, restructured: the register paths loop over rows (a warp or a block keeps
// taking the next row), the grid is a few waves of the GPU instead of one block per row group.
#include <algorithm>
#include <cstdint>

#include "course/vec.cuh"
#include "course/warp.cuh"

namespace {

using course::WARP_SIZE;

constexpr int WARPS_PER_BLOCK = 4;
constexpr int64_t WARP_MAX_COLS = 1024;
constexpr int BLOCK_ELEMS = 16;
constexpr int64_t MAX_COLS = 1024 * BLOCK_ELEMS;  // 16384
constexpr int ONLINE_THREADS = 1024;
constexpr float LOG2E = 1.4426950408889634f;

template <typename T>
struct Args {
  T* out;
  const T* x;
  int64_t rows;
  int64_t cols;
};

// e^(v) as 2^(v log2 e); exactly 0 for v = -inf
__device__ __forceinline__ float exp_of(float v) { return exp2f(v * LOG2E); }

template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float v, float* partials) {
  const int lane = threadIdx.x % WARP_SIZE;
  const int warps = blockDim.x / WARP_SIZE;
  v = IS_MAX ? course::warp_reduce_max(v) : course::warp_reduce_sum(v);
  if (lane == 0) partials[threadIdx.x / WARP_SIZE] = v;
  __syncthreads();
  v = lane < warps ? partials[lane] : (IS_MAX ? -INFINITY : 0.0f);
  return IS_MAX ? course::warp_reduce_max(v) : course::warp_reduce_sum(v);
}

// WARP_PER_ROW: warp w of the grid takes rows w, w + all warps, ...; otherwise block b takes
// rows b, b + gridDim.x, ... Each thread holds NV vectors of VEC elements of the current row.
template <typename T, int VEC, int NV, bool WARP_PER_ROW>
__global__ void __launch_bounds__(WARP_PER_ROW ? WARPS_PER_BLOCK * 32 : 1024)
softmax_rows(const Args<T> a) {
  __shared__ float max_partials[32], sum_partials[32];
  const int per_row = WARP_PER_ROW ? WARP_SIZE : blockDim.x;
  const int t = WARP_PER_ROW ? threadIdx.x % WARP_SIZE : threadIdx.x;
  const int64_t first = WARP_PER_ROW
      ? static_cast<int64_t>(blockIdx.x) * WARPS_PER_BLOCK + threadIdx.x / WARP_SIZE
      : static_cast<int64_t>(blockIdx.x);
  const int64_t step = WARP_PER_ROW ? static_cast<int64_t>(gridDim.x) * WARPS_PER_BLOCK : gridDim.x;
  const int nvec = static_cast<int>(a.cols / VEC);

  for (int64_t row = first; row < a.rows; row += step) {  // uniform over the warp (or the block)
    const T* xr = a.x + row * a.cols;
    T* yr = a.out + row * a.cols;
    float v[NV][VEC];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int i = t + k * per_row;
      course::vec_t<T, VEC> in;
      in.fill(course::from_float<T>(-INFINITY));
      if (i < nvec) in.load(xr + i * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        v[k][j] = course::to_float(in[j]);
        m = fmaxf(m, v[k][j]);
      }
    }
    m = WARP_PER_ROW ? course::warp_reduce_max(m) : block_reduce<true>(m, max_partials);
    const float shift = m == -INFINITY ? 0.0f : m;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        v[k][j] = exp_of(v[k][j] - shift);
        s += v[k][j];
      }
    }
    s = WARP_PER_ROW ? course::warp_reduce_sum(s) : block_reduce<false>(s, sum_partials);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int i = t + k * per_row;
      course::vec_t<T, VEC> o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = course::from_float<T>(v[k][j] * inv);
      if (i < nvec) o.store(yr + i * VEC);
    }
    if constexpr (!WARP_PER_ROW) __syncthreads();  // partials are free again before the next row
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(ONLINE_THREADS) softmax_long_rows(const Args<T> a) {
  __shared__ float max_partials[32], sum_partials[32];
  const T* xr = a.x + static_cast<int64_t>(blockIdx.x) * a.cols;
  T* yr = a.out + static_cast<int64_t>(blockIdx.x) * a.cols;
  const int nvec = static_cast<int>(a.cols / VEC);

  float m = -INFINITY, s = 0.0f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
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
      s *= exp_of(m - mv);
      m = mv;
    }
    if (m != -INFINITY) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += exp_of(v[j] - m);
    }
  }
  const float row_m = block_reduce<true>(m, max_partials);
  const float row_s = block_reduce<false>(m == -INFINITY ? 0.0f : s * exp_of(m - row_m), sum_partials);
  const float shift = row_m == -INFINITY ? 0.0f : row_m;
  const float inv = row_s > 0.0f ? 1.0f / row_s : 0.0f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    course::vec_t<T, VEC> in, o;
    in.load(xr + static_cast<int64_t>(i) * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = course::from_float<T>(exp_of(course::to_float(in[j]) - shift) * inv);
    o.store(yr + static_cast<int64_t>(i) * VEC);
  }
}

int multiprocessors() {
  static const int sms = [] {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 1;
  }();
  return sms;
}

template <typename T, int VEC>
cudaError_t dispatch(const Args<T>& a, cudaStream_t stream) {
  const int64_t sms = multiprocessors();
  if (a.cols <= WARP_MAX_COLS) {
    const int64_t needed = course::ceil_div<int64_t>(a.rows, WARPS_PER_BLOCK);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(needed, sms * 32));
    if (a.cols <= 8 * WARP_SIZE) softmax_rows<T, VEC, 8 / VEC, true><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(a);
    else softmax_rows<T, VEC, 32 / VEC, true><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(a);
  } else if (a.cols > MAX_COLS) {
    softmax_long_rows<T, VEC><<<static_cast<unsigned>(a.rows), ONLINE_THREADS, 0, stream>>>(a);
  } else {
    constexpr int NV = BLOCK_ELEMS / VEC;
    const int64_t needed = course::ceil_div<int64_t>(a.cols / VEC, NV);
    const int threads = static_cast<int>(course::ceil_div<int64_t>(needed, WARP_SIZE) * WARP_SIZE);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(a.rows, sms * 16));
    softmax_rows<T, VEC, NV, false><<<blocks, threads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t run(T* out, const T* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols > (int64_t{1} << 30) || rows > INT32_MAX) return cudaErrorInvalidValue;
  constexpr int VEC = course::vec_size_16B<T>();
  const Args<T> a{out, x, rows, cols};
  const bool vectorized = cols % VEC == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out) % 16 == 0;
  return vectorized ? dispatch<T, VEC>(a, stream) : dispatch<T, 1>(a, stream);
}

}  // namespace

COURSE_EXPORT cudaError_t softmax_fp32(float* out, const float* x, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  return run(out, x, rows, cols, stream);
}

COURSE_EXPORT cudaError_t softmax_fp16(__half* out, const __half* x, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  return run(out, x, rows, cols, stream);
}

COURSE_EXPORT cudaError_t softmax_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  return run(out, x, rows, cols, stream);
}
