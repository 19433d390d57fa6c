// CUB's collectives, one small kernel each: what a warp or a block can do together in one call.
// CUB (in the CUDA toolkit: #include <cub/cub.cuh>) is a library of templates, compiled into your
// kernel like your own code: no library call at run time, no torch. Each collective needs its
// scratch space, `TempStorage`, in shared memory, sized for the warp or block it was instantiated
// for; a barrier must separate two collectives that reuse the same TempStorage.
//
//   cub::WarpReduce<float>                 a row per warp: shuffles, like course::warp_reduce_sum
//   cub::BlockReduce<float, THREADS>       a row per block: warp reductions + shared memory
//   cub::BlockRadixSort<float, THREADS, ITEMS, int>   a short row sorted in one block (pairs)
//
// Napkin math: the reductions read each row once; 128 x 128256 fp32 is 66 MB, ~20 us at 3.5 TB/s.
// The block sort holds THREADS * ITEMS keys in registers and shared memory: 2048 here.
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

#include "course/common.cuh"

namespace {

constexpr int ROWS_PER_BLOCK = 8;            // warp_reduce_rows: 8 rows per block of 256 threads
constexpr int REDUCE_THREADS = 512;
constexpr int SORT_THREADS = 256;   // block_radix_sort_rows: 256 threads x 8 keys = 2048 per row
constexpr int SORT_ITEMS = 8;

// out[r] = sum of x[r, :], one warp per row. Each lane folds a strided share of the row, then
// WarpReduce combines the 32 partial sums (the result is valid in lane 0).
__global__ void __launch_bounds__(ROWS_PER_BLOCK * 32)
    warp_reduce_rows_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t rows, int64_t cols) {
  using WarpReduce = cub::WarpReduce<float>;
  __shared__ typename WarpReduce::TempStorage scratch[ROWS_PER_BLOCK];  // one per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * ROWS_PER_BLOCK + warp;
  if (row >= rows) return;  // a whole warp leaves: the others do not need it
  float v = 0.0f;
  for (int64_t i = lane; i < cols; i += 32) v += x[row * cols + i];
  const float total = WarpReduce(scratch[warp]).Sum(v);
  if (lane == 0) out[row] = total;
}

// The same with a block per row: BlockReduce = warp reductions, one value per warp in shared
// memory, and a last warp reduction (Day 6's three levels, written for you).
__global__ void __launch_bounds__(REDUCE_THREADS)
    block_reduce_rows_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t cols) {
  using BlockReduce = cub::BlockReduce<float, REDUCE_THREADS>;
  __shared__ typename BlockReduce::TempStorage scratch;
  const float* row = x + static_cast<int64_t>(blockIdx.x) * cols;  // (cols,)
  float v = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += REDUCE_THREADS) v += row[i];
  const float total = BlockReduce(scratch).Sum(v);  // valid in thread 0 only
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

// Sort each row (cols <= 2048) in descending order, keeping the token ids beside the values:
// keys (probabilities) and values (ids) in a "blocked" arrangement, thread t holding items
// t * ITEMS ... t * ITEMS + ITEMS - 1. Slots past the row hold -1, which sorts last.
__global__ void __launch_bounds__(SORT_THREADS)
    block_radix_sort_rows_kernel(float* __restrict__ sorted, int* __restrict__ ids, const float* __restrict__ x,
                                 int64_t cols) {
  using BlockSort = cub::BlockRadixSort<float, SORT_THREADS, SORT_ITEMS, int>;
  __shared__ typename BlockSort::TempStorage scratch;
  const int64_t row = blockIdx.x;
  float keys[SORT_ITEMS];
  int vals[SORT_ITEMS];
#pragma unroll
  for (int k = 0; k < SORT_ITEMS; ++k) {
    const int i = threadIdx.x * SORT_ITEMS + k;
    keys[k] = i < cols ? x[row * cols + i] : -1.0f;
    vals[k] = i;
  }
  BlockSort(scratch).SortDescending(keys, vals);  // 32-bit keys: 4 passes of 8 bits (LSD radix)
#pragma unroll
  for (int k = 0; k < SORT_ITEMS; ++k) {
    const int i = threadIdx.x * SORT_ITEMS + k;
    if (i < cols) {
      sorted[row * cols + i] = keys[k];
      ids[row * cols + i] = vals[k];
    }
  }
}

}  // namespace

COURSE_EXPORT cudaError_t warp_reduce_rows(float* out, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(course::ceil_div<int64_t>(rows, ROWS_PER_BLOCK));
  warp_reduce_rows_kernel<<<blocks, ROWS_PER_BLOCK * 32, 0, stream>>>(out, x, rows, cols);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t block_reduce_rows(float* out, const float* x, int64_t rows, int64_t cols,
                                            cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  block_reduce_rows_kernel<<<static_cast<unsigned>(rows), REDUCE_THREADS, 0, stream>>>(out, x, cols);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t block_radix_sort_rows(float* sorted, int* ids, const float* x, int64_t rows, int64_t cols,
                                                cudaStream_t stream) {
  if (cols > SORT_THREADS * SORT_ITEMS) return cudaErrorInvalidValue;  // one block holds the row
  if (rows == 0) return cudaSuccess;
  block_radix_sort_rows_kernel<<<static_cast<unsigned>(rows), SORT_THREADS, 0, stream>>>(sorted, ids, x, cols);
  return cudaGetLastError();
}
