// CORRECT every reduction through cooperative_groups: cg::reduce over tiled_partition<32> tiles with cg::plus / cg::greater, the block's partials indexed by meta_group_rank() and separated by block.sync()
// Day 5's reference softmax (warp per row, block per row, two-pass online rows) with its warp and
// block reductions written with the cooperative groups API instead of raw shuffles.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "course/vec.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int WARPS_PER_BLOCK = 4;                      // warp-per-row path: 4 rows per block
constexpr int64_t WARP_MAX_COLS = 1024;                 // up to here a warp holds the row (32 per lane)
constexpr int BLOCK_ELEMS = 16;                         // block-per-row path: elements per thread
constexpr int MAX_THREADS = 1024;
constexpr int64_t MAX_COLS = MAX_THREADS * BLOCK_ELEMS;  // 16384: longest row held in registers
constexpr int ONLINE_THREADS = 1024;                    // longer rows: a block of 1024 threads, two passes

// A 32-thread tile's reduction (cg::reduce: a shfl_xor butterfly; every lane gets the result).
template <bool IS_MAX>
__device__ __forceinline__ float tile_reduce(const cg::thread_block_tile<32>& tile, float v) {
  if constexpr (IS_MAX) return cg::reduce(tile, v, cg::greater<float>());
  else return cg::reduce(tile, v, cg::plus<float>());
}

// The block's: each tile's lane 0 parks its result in shared memory, block.sync(), then every
// tile reduces the partials itself. A separate `partials` array per call (the kernels have two).
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float v, float* partials /* (32,) */) {
  const cg::thread_block block = cg::this_thread_block();
  const cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
  v = tile_reduce<IS_MAX>(tile, v);
  if (tile.thread_rank() == 0) partials[tile.meta_group_rank()] = v;
  block.sync();
  v = tile.thread_rank() < tile.meta_group_size() ? partials[tile.thread_rank()] : (IS_MAX ? -INFINITY : 0.0f);
  return tile_reduce<IS_MAX>(tile, v);
}

// Max and sum over the threads that share a row: one tile, or the whole block.
template <bool WARP_PER_ROW>
__device__ __forceinline__ float row_max(float v, float* partials) {
  if constexpr (WARP_PER_ROW) return tile_reduce<true>(cg::tiled_partition<32>(cg::this_thread_block()), v);
  else return block_reduce<true>(v, partials);
}

template <bool WARP_PER_ROW>
__device__ __forceinline__ float row_sum(float v, float* partials) {
  if constexpr (WARP_PER_ROW) return tile_reduce<false>(cg::tiled_partition<32>(cg::this_thread_block()), v);
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
  const int threads_per_row = WARP_PER_ROW ? 32 : blockDim.x;
  const int t = WARP_PER_ROW ? threadIdx.x % 32 : threadIdx.x;  // rank within the row
  const int64_t row = WARP_PER_ROW
      ? static_cast<int64_t>(blockIdx.x) * WARPS_PER_BLOCK + threadIdx.x / 32
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

template <typename T, int VEC, int NV, bool WARP_PER_ROW>
cudaError_t launch(T* out, const T* x, int64_t rows, int64_t cols, int64_t blocks, int threads,
                   cudaStream_t stream) {
  softmax_kernel<T, VEC, NV, WARP_PER_ROW><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      out, x, rows, cols);
  return cudaGetLastError();
}

// Choose how to share a row, at launch: rows of up to 1024 elements go to one warp each (8 or 32
// elements per lane: the register array's size is a compile-time constant, so there is one
// kernel per size), rows of up to 16384 to one block each (16 elements per thread, up to 1024
// threads), longer rows to the two-pass online kernel (a block of 1024 threads each).
template <typename T, int VEC>
cudaError_t dispatch(T* out, const T* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (cols <= WARP_MAX_COLS) {
    const int64_t blocks = course::ceil_div<int64_t>(rows, WARPS_PER_BLOCK);
    const int threads = WARPS_PER_BLOCK * 32;
    if (cols <= 8 * 32) return launch<T, VEC, 8 / VEC, true>(out, x, rows, cols, blocks, threads, stream);
    return launch<T, VEC, 32 / VEC, true>(out, x, rows, cols, blocks, threads, stream);
  }
  if (cols > MAX_COLS) {  // too long for registers: read the row twice
    softmax_online_kernel<T, VEC><<<static_cast<unsigned>(rows), ONLINE_THREADS, 0, stream>>>(out, x, cols);
    return cudaGetLastError();
  }
  constexpr int NV = BLOCK_ELEMS / VEC;
  const int64_t needed = course::ceil_div<int64_t>(cols / VEC, NV);  // threads with NV vectors each
  const int threads = static_cast<int>(course::ceil_div<int64_t>(needed, 32) * 32);
  return launch<T, VEC, NV, false>(out, x, rows, cols, rows, threads, stream);
}

template <typename T>
cudaError_t launch_softmax(T* out, const T* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  // int vector indices (with room for the block's stride past the end), grid.x
  if (cols > (int64_t{1} << 30) || rows > INT32_MAX) return cudaErrorInvalidValue;
  constexpr int VEC = course::vec_size_16B<T>();  // 8 halves or 4 floats: 16 bytes
  // 16-byte loads need every row start 16-byte aligned: cols a multiple of VEC and both base
  // pointers aligned (a tensor slice can start anywhere). Otherwise one element per load.
  const bool vectorized = cols % VEC == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out) % 16 == 0;
  return vectorized ? dispatch<T, VEC>(out, x, rows, cols, stream) : dispatch<T, 1>(out, x, rows, cols, stream);
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
