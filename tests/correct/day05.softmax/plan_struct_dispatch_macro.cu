// CORRECT a launch plan as an enum class and a struct with __host__ member functions (grid, block), the vector width picked by a learner's dispatch macro, a CUDA_CHECK macro with __builtin_expect, and #pragma once left at the top of the file
#pragma once
// Day 5's reference softmax kernels; the launcher rewritten: Plan::make decides the path once,
// a switch over the enum class launches the kernel for it.
#include <cstdint>

#include "course/vec.cuh"
#include "course/warp.cuh"

// Hand the failing call's error back to the caller.
#define CUDA_CHECK(expr)                                  \
  do {                                                    \
    cudaError_t status_ = (expr);                         \
    if (__builtin_expect(status_ != cudaSuccess, 0)) {    \
      return status_;                                     \
    }                                                     \
  } while (false)

// Pick the vector width (16 bytes, or one element) as a compile-time constant VEC.
#define DISPATCH_VEC_WIDTH(T, VECTORIZED, ...)                          \
  [&]() -> cudaError_t {                                                \
    if (VECTORIZED) {                                                   \
      constexpr int VEC = course::vec_size_16B<T>();                    \
      return __VA_ARGS__();                                             \
    }                                                                   \
    constexpr int VEC = 1;                                              \
    return __VA_ARGS__();                                               \
  }()

namespace {

constexpr int WARPS_PER_BLOCK = 4;                      // warp-per-row path: 4 rows per block
constexpr int64_t WARP_MAX_COLS = 1024;                 // up to here a warp holds the row (32 per lane)
constexpr int BLOCK_ELEMS = 16;                         // block-per-row path: elements per thread
constexpr int MAX_THREADS = 1024;
constexpr int64_t MAX_COLS = MAX_THREADS * BLOCK_ELEMS;  // 16384: longest row held in registers
constexpr int ONLINE_THREADS = 1024;                    // longer rows: a block of 1024 threads, two passes

// Two-level reduction over a block (Day 6 takes it apart): shuffles inside every warp, lane 0
// of each warp parks its result in shared memory, one barrier, then every warp reduces the
// partials itself, so that no second barrier is needed to hand the result out. Unlike the
// reusable course/block.cuh it needs a separate `partials` array per call: the kernel has two.
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float v, float* partials /* (32,) */) {
  const int lane = threadIdx.x % course::WARP_SIZE;
  const int warps = blockDim.x / course::WARP_SIZE;  // blockDim.x is a multiple of 32
  v = IS_MAX ? course::warp_reduce_max(v) : course::warp_reduce_sum(v);
  if (lane == 0) partials[threadIdx.x / course::WARP_SIZE] = v;
  __syncthreads();
  v = lane < warps ? partials[lane] : (IS_MAX ? -INFINITY : 0.0f);
  return IS_MAX ? course::warp_reduce_max(v) : course::warp_reduce_sum(v);
}

// Max and sum over every thread that holds a piece of the row: the 32 lanes of a warp
// (butterfly shuffles only), or the whole block (two levels). Every such thread gets the result.
template <bool WARP_PER_ROW>
__device__ __forceinline__ float row_max(float v, float* partials) {
  if constexpr (WARP_PER_ROW) return course::warp_reduce_max(v);
  else return block_reduce<true>(v, partials);
}

template <bool WARP_PER_ROW>
__device__ __forceinline__ float row_sum(float v, float* partials) {
  if constexpr (WARP_PER_ROW) return course::warp_reduce_sum(v);
  else return block_reduce<false>(v, partials);
}

// One kernel body, two ways to share a row: WARP_PER_ROW (a warp per row, 4 rows per block)
// or a block per row. Each thread keeps NV vectors of VEC elements in registers: vectors
// t, t + threads_per_row, t + 2 * threads_per_row, ... of its row.
template <typename T, int VEC, int NV, bool WARP_PER_ROW>
__global__ void __launch_bounds__(WARP_PER_ROW ? WARPS_PER_BLOCK * 32 : MAX_THREADS)
softmax_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t rows, int64_t cols) {
  // Block-per-row path only; separate arrays so that a fast warp can write its sum partial
  // while a slow one still reads the max partials.
  __shared__ float max_partials[32], sum_partials[32];
  const int threads_per_row = WARP_PER_ROW ? course::WARP_SIZE : blockDim.x;
  const int t = WARP_PER_ROW ? threadIdx.x % course::WARP_SIZE : threadIdx.x;  // rank within the row
  const int64_t row = WARP_PER_ROW
      ? static_cast<int64_t>(blockIdx.x) * WARPS_PER_BLOCK + threadIdx.x / course::WARP_SIZE
      : static_cast<int64_t>(blockIdx.x);
  if (row >= rows) return;  // only whole warps of the last block (warp path): no shuffle loses a lane
  const T* xr = x + row * cols;                   // (cols,)
  T* yr = out + row * cols;                       // (cols,)
  const int nvec = static_cast<int>(cols / VEC);  // whole vectors in the row (cols % VEC == 0)

  float v[NV][VEC];  // (NV, VEC) this thread's share of the row, in fp32
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int i = t + k * threads_per_row;  // the group's k-th load: contiguous across its threads
    course::vec_t<T, VEC> in;
    // A slot past the end of the row acts like a masked entry: -inf is neutral for the max,
    // and exp(-inf) = 0 adds nothing to the sum.
    in.fill(course::from_float<T>(-INFINITY));
    if (i < nvec) in.load(xr + i * VEC);  // one 16-byte load when VEC = 16 / sizeof(T)
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v[k][j] = course::to_float(in[j]);
      m = fmaxf(m, v[k][j]);
    }
  }
  m = row_max<WARP_PER_ROW>(m, max_partials);
  // A fully masked row has m = -inf, and x - m would be -inf - (-inf) = NaN. Subtracting 0
  // instead turns every entry into exp(-inf) = 0: the sum is 0 and the row is written as zeros.
  const float shift = m == -INFINITY ? 0.0f : m;

  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      // __expf is ex2.approx(x * log2(e)): a few ulp in fp32, and exactly +0 for -inf, so a
      // masked entry gets probability 0 exactly.
      v[k][j] = __expf(v[k][j] - shift);
      s += v[k][j];
    }
  }
  s = row_sum<WARP_PER_ROW>(s, sum_partials);
  // s >= 1 whenever the row has a finite entry (its maximum contributes exp(0) = 1).
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;

#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int i = t + k * threads_per_row;
    course::vec_t<T, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = course::from_float<T>(v[k][j] * inv);
    if (i < nvec) o.store(yr + i * VEC);
  }
}

// Rows longer than MAX_COLS: one block of ONLINE_THREADS per row, the row read twice. Thread t
// takes vectors t, t + blockDim.x, t + 2 * blockDim.x, ... of its row, in both passes: a warp
// reads 32 consecutive vectors (512 contiguous bytes when VEC = 16 / sizeof(T)) per iteration.
template <typename T, int VEC>
__global__ void __launch_bounds__(ONLINE_THREADS)
softmax_online_kernel(T* __restrict__ out, const T* __restrict__ x, int64_t cols) {
  __shared__ float max_partials[32], sum_partials[32];  // one slot per warp, per reduction
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;  // (cols,) this block's row
  T* yr = out + static_cast<int64_t>(blockIdx.x) * cols;      // (cols,)
  const int nvec = static_cast<int>(cols / VEC);              // whole vectors in the row

  // 1. Pass one, online: the row is read once while m and s follow it. s is always the sum of
  //    exp(x - m) over this thread's entries so far, so when m grows to mv the old terms are
  //    rescaled by exp(m - mv) <= 1: nothing overflows, whatever the logits.
  float m = -INFINITY;  // this thread's running max
  float s = 0.0f;       // sum of exp(x - m) over this thread's entries so far
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    course::vec_t<T, VEC> in;
    in.load(xr + static_cast<int64_t>(i) * VEC);
    float v[VEC];
    float mv = -INFINITY;  // this vector's max
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v[j] = course::to_float(in[j]);
      mv = fmaxf(mv, v[j]);
    }
    // A new running max: rescale the old terms first. While m is still -inf, s is 0 and
    // exp(-inf - mv) = 0 keeps it 0 (an all -inf vector never gets here: -inf > -inf is false).
    if (mv > m) {
      s *= __expf(m - mv);
      m = mv;
    }
    // With m = -inf every entry so far is -inf: x - m would be -inf - (-inf) = NaN, so add nothing.
    if (m != -INFINITY) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += __expf(v[j] - m);  // exp(-inf - m) = +0: a masked entry adds 0
    }
  }

  // 2. The row's max, then every thread's sum brought to that max and added up. A thread that
  //    saw only -inf entries (or none: more threads than vectors) contributes exactly 0.
  const float row_m = row_max<false>(m, max_partials);
  const float mine = m == -INFINITY ? 0.0f : s * __expf(m - row_m);  // m <= row_m: a factor <= 1
  const float row_s = row_sum<false>(mine, sum_partials);
  // The masking rule: a fully masked row has row_m = -inf; shifting by 0 turns every exp(-inf)
  // into 0, and row_s = 0 makes inv 0, so the row is written as zeros, never NaN.
  const float shift = row_m == -INFINITY ? 0.0f : row_m;
  const float inv = row_s > 0.0f ? 1.0f / row_s : 0.0f;  // row_s >= 1 when the row has a finite entry

  // 3. Pass two: the row again (from L2 where it is still there), each probability written once.
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    course::vec_t<T, VEC> in, o;
    in.load(xr + static_cast<int64_t>(i) * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = course::from_float<T>(__expf(course::to_float(in[j]) - shift) * inv);
    o.store(yr + static_cast<int64_t>(i) * VEC);
  }
}

// The launch plan: which kernel shares the row how, decided on the host once per call.
enum class Path { kWarpSmall, kWarpLarge, kBlock, kOnline };

struct Plan {
  Path path;
  int64_t rows;
  int64_t cols;

  __host__ static Plan make(int64_t rows, int64_t cols) {
    if (cols <= 8 * course::WARP_SIZE) return {Path::kWarpSmall, rows, cols};
    if (cols <= WARP_MAX_COLS) return {Path::kWarpLarge, rows, cols};
    if (cols <= MAX_COLS) return {Path::kBlock, rows, cols};
    return {Path::kOnline, rows, cols};
  }
  __host__ bool warp_per_row() const { return path == Path::kWarpSmall || path == Path::kWarpLarge; }
  __host__ dim3 grid() const {
    return dim3(static_cast<unsigned>(warp_per_row() ? course::ceil_div<int64_t>(rows, WARPS_PER_BLOCK) : rows));
  }
  // Threads per block; `vec`: elements per load.
  __host__ dim3 block(int vec) const {
    if (warp_per_row()) return dim3(WARPS_PER_BLOCK * course::WARP_SIZE);
    if (path == Path::kOnline) return dim3(ONLINE_THREADS);
    const int64_t needed = course::ceil_div<int64_t>(cols / vec, BLOCK_ELEMS / vec);
    return dim3(static_cast<unsigned>(course::ceil_div<int64_t>(needed, course::WARP_SIZE) * course::WARP_SIZE));
  }
};

template <typename T>
cudaError_t launch_softmax(T* out, const T* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols > (int64_t{1} << 30) || rows > INT32_MAX) return cudaErrorInvalidValue;
  constexpr int VEC16 = course::vec_size_16B<T>();
  const bool vectorized = cols % VEC16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const Plan plan = Plan::make(rows, cols);
  return DISPATCH_VEC_WIDTH(T, vectorized, [&] {
    const dim3 grid = plan.grid(), block = plan.block(VEC);
    switch (plan.path) {
      case Path::kWarpSmall:
        softmax_kernel<T, VEC, 8 / VEC, true><<<grid, block, 0, stream>>>(out, x, rows, cols);
        break;
      case Path::kWarpLarge:
        softmax_kernel<T, VEC, 32 / VEC, true><<<grid, block, 0, stream>>>(out, x, rows, cols);
        break;
      case Path::kBlock:
        softmax_kernel<T, VEC, BLOCK_ELEMS / VEC, false><<<grid, block, 0, stream>>>(out, x, rows, cols);
        break;
      case Path::kOnline:
        softmax_online_kernel<T, VEC><<<grid, block, 0, stream>>>(out, x, cols);
        break;
    }
    CUDA_CHECK(cudaGetLastError());
    return cudaSuccess;
  });
}

}  // namespace

COURSE_EXPORT cudaError_t softmax_fp32(float* out, const float* x, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  return launch_softmax(out, x, rows, cols, stream);
}

COURSE_EXPORT cudaError_t softmax_fp16(__half* out, const __half* x, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  return launch_softmax(out, x, rows, cols, stream);
}

COURSE_EXPORT cudaError_t softmax_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, int64_t rows, int64_t cols,
                                       cudaStream_t stream) {
  return launch_softmax(out, x, rows, cols, stream);
}
