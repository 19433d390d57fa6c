// Warp scan: an inclusive prefix sum across the 32 lanes of a warp with __shfl_up_sync
// (Kogge-Stone: 5 steps, in step s every lane adds the value 2^s lanes below it), then a
// row cumsum that walks its row 32 elements at a time and carries the running total from
// lane 31 into the next chunk. A demonstration of the pattern, not a fast scan (Day 8 uses
// CUB's): one 4-byte access per lane and a chain of shuffles per chunk, so expect it well
// below the copy.
//
//   x, out  (rows, cols) int32 or fp32       out[r, c] = x[r, 0] + ... + x[r, c]
#include "course/warp.cuh"

namespace {

constexpr int SCAN_WARPS_PER_BLOCK = 8;  // one row per warp, 8 rows per block of 256 threads

// Inclusive scan over the lanes: lane i returns v_0 + v_1 + ... + v_i.
template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v) {
  const int lane = threadIdx.x % course::WARP_SIZE;
#pragma unroll
  for (int offset = 1; offset < course::WARP_SIZE; offset *= 2) {
    // Every lane executes the shuffle (the full mask says all 32 take part); lanes below
    // `offset` receive their own value back and ignore it, they have no partner below.
    const T below = __shfl_up_sync(course::FULL_MASK, v, offset);
    if (lane >= offset) v += below;
  }
  return v;
}

template <typename T>
__global__ void warp_cumsum_rows_kernel(T* __restrict__ out, const T* __restrict__ x,
                                        int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % course::WARP_SIZE;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * SCAN_WARPS_PER_BLOCK + threadIdx.x / course::WARP_SIZE;
  if (row >= rows) return;  // the whole warp leaves together: no shuffle loses a partner
  const T* xr = x + row * cols;  // (cols,)
  T* yr = out + row * cols;      // (cols,)
  T carry = 0;                   // total of the row's earlier chunks, the same in every lane
  for (int64_t base = 0; base < cols; base += course::WARP_SIZE) {
    const int64_t c = base + lane;
    // Lanes past the end of the row scan a 0. The loop bound is the same for the whole
    // warp, so all 32 lanes reach every shuffle.
    const T s = warp_inclusive_scan(c < cols ? xr[c] : T(0)) + carry;
    if (c < cols) yr[c] = s;
    carry = __shfl_sync(course::FULL_MASK, s, course::WARP_SIZE - 1);  // lane 31: the chunk's total
  }
}

template <typename T>
cudaError_t launch_warp_cumsum_rows(T* out, const T* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t blocks = course::ceil_div<int64_t>(rows, SCAN_WARPS_PER_BLOCK);
  warp_cumsum_rows_kernel<T><<<static_cast<unsigned>(blocks), SCAN_WARPS_PER_BLOCK * course::WARP_SIZE,
                               0, stream>>>(out, x, rows, cols);
  return cudaGetLastError();
}

}  // namespace

// Integers first: their sums are exact, so the result must equal torch.cumsum bit for bit.
COURSE_EXPORT cudaError_t warp_cumsum_rows_i32(int32_t* out, const int32_t* x, int64_t rows, int64_t cols,
                                               cudaStream_t stream) {
  return launch_warp_cumsum_rows(out, x, rows, cols, stream);
}

// Floats: the scan adds in a different order than a sequential cumsum, so expect rounding
// differences of a few ulp of the running total.
COURSE_EXPORT cudaError_t warp_cumsum_rows_f32(float* out, const float* x, int64_t rows, int64_t cols,
                                               cudaStream_t stream) {
  return launch_warp_cumsum_rows(out, x, rows, cols, stream);
}
