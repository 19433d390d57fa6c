// Your exercise: fill in the TODOs (about 68 lines). Generated from solutions/day05/softmax.cu by `grader release` (stub-hash c22350900ebf).
// Day 5 exercise: row softmax for fp32, fp16 and bf16, rows of 1 to 262144 elements (models:
// FlashInfer norm.cuh, where QKRMSNormKernel gives a row to a warp and RMSNormKernel gives it to
// a block; sampling.cuh's OnlineSoftmaxFusedKernel for long rows and for how a softmax treats
// -inf). Rows of up to 16384 elements are read from memory once and written once; longer rows
// (vocabularies: 32000 to 256000 logits) do not fit in a block's registers and are read twice.
//
//   x, out  (rows, cols)   out[r, c] = exp(x[r, c] - m_r) / sum_k exp(x[r, k] - m_r),
//                          m_r = max_k x[r, k]: subtracting it keeps every exp in (0, 1]
//
// Masking, the attention convention: an entry of -inf gets probability exactly 0, and a row
// whose entries are all -inf (a query that attends to nothing) comes out as all zeros, where
// torch.softmax returns NaN. +inf and NaN inputs are out of scope.
//
// Memory-bound: per element one read and one write and a handful of flops. Napkin math for
// fp16, 16384 rows x 4096: 2 * 2 B * 16384 * 4096 = 268 MB, ~64 us at ~4.2 TB/s.
// Target (grader/exercises/day05.py), for rows of 1024 to 8192: >= 0.85x device-to-device copy (GB/s).
//
// Long rows (cols > 16384) take an online softmax, a block of 1024 threads per row: pass 1
// reads the row once, keeping per thread a running max m and a sum s of exp(x - m) that is
// rescaled by exp(m_old - m_new) whenever m grows; the block combines the (m, s) pairs; pass
// 2 reads the row again and writes exp(x - M) / S. Napkin math for bf16, 256 rows x 151936
// (Qwen2's vocabulary): 78 MB per pass over x, 3 x 78 MB = 233 MB, ~55 us at ~4.2 TB/s (less
// where the second read still finds the row in the 60 MB L2).
#include "course/vec.cuh"
#include "course/warp.cuh"

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

  // TODO: write out[row, :] = softmax(x[row, :]), reading the row from memory once.
  //  1. Load this thread's NV vectors i = t + k * threads_per_row (those with i < nvec)
  //     with course::vec_t<T, VEC> into a float register array; slots past the row hold
  //     -inf. Keep the thread's max.
  //  2. m = row_max<WARP_PER_ROW>(thread max, max_partials). If m is -inf the row is
  //     fully masked: subtract 0 instead, so that no -inf - (-inf) = NaN appears.
  //  3. e = __expf(x - m) for every slot, kept in registers; s = row_sum<...>(thread sum).
  //  4. Store e / s with vec_t stores, or zeros where s == 0 (a fully masked row).
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

  // TODO: out[row, :] = softmax(x[row, :]) for a row too long for registers, in two passes
  // over vectors i = threadIdx.x + k * blockDim.x (i < nvec), loaded with course::vec_t<T, VEC>.
  //  1. Online pass: keep a running max m (start -inf) and s = sum of exp(x - m) over the
  //     vectors seen so far. When a vector's max mv exceeds m, first rescale s *= exp(m - mv),
  //     then m = mv. Add nothing while m is still -inf (every entry so far was -inf).
  //  2. M = row_max<false>(m, max_partials); each thread's s rescaled by exp(m - M) (0 where
  //     m is -inf); S = row_sum<false>(that, sum_partials). Every thread must call both.
  //  3. Second pass: store exp(x - M) / S, shifting by 0 instead of M when the row is fully
  //     masked (M = -inf), and storing zeros where S == 0.
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
    const int threads = WARPS_PER_BLOCK * course::WARP_SIZE;
    if (cols <= 8 * course::WARP_SIZE) return launch<T, VEC, 8 / VEC, true>(out, x, rows, cols, blocks, threads, stream);
    return launch<T, VEC, 32 / VEC, true>(out, x, rows, cols, blocks, threads, stream);
  }
  if (cols > MAX_COLS) {  // too long for registers: read the row twice
    softmax_online_kernel<T, VEC><<<static_cast<unsigned>(rows), ONLINE_THREADS, 0, stream>>>(out, x, cols);
    return cudaGetLastError();
  }
  constexpr int NV = BLOCK_ELEMS / VEC;
  const int64_t needed = course::ceil_div<int64_t>(cols / VEC, NV);  // threads with NV vectors each
  const int threads = static_cast<int>(course::ceil_div<int64_t>(needed, course::WARP_SIZE) * course::WARP_SIZE);
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
