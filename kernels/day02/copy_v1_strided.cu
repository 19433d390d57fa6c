// v1, strided copy: every element is copied exactly once, but the 32 threads of a warp touch
// addresses STRIDE floats apart, so one warp load spans up to 32 sectors instead of 4.
// Expect the coalesced bandwidth at STRIDE 1, then roughly 1/STRIDE of it up to STRIDE 8
// (every thread in its own 32-byte sector), and worse beyond: DRAM row misses and partly
// written sectors (about 1/23 of STRIDE 1 at STRIDE 32 on the H100 of reports/gpu-notebooks.json).
//
//   inp, out  (n,) fp32      element e = j * STRIDE + r is copied in pass r by thread j
#include "course/common.cuh"

namespace {

__global__ void copy_strided_kernel(float* __restrict__ out, const float* __restrict__ inp,
                                    int64_t n, int64_t stride) {
  // View the array as a (cols, STRIDE) matrix and walk it column by column: thread j of a
  // pass touches element j * STRIDE + r, so neighbouring threads are STRIDE * 4 bytes apart.
  // Equivalently, logical index t handles element (t % cols) * STRIDE + t / cols.
  const int64_t cols = course::ceil_div<int64_t>(n, stride);  // elements per pass
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = 0; r < stride; ++r) {
    // One pass touches one float in every STRIDE: the other STRIDE - 1 floats of each
    // sector are fetched again by later passes, unless the L2 still holds them.
    for (int64_t j = first; j < cols; j += step) {
      const int64_t e = j * stride + r;
      if (e < n) out[e] = inp[e];  // the last row of the matrix may be short
    }
  }
}

}  // namespace

COURSE_EXPORT cudaError_t copy_v1_strided(float* out, const float* inp, int64_t n, int64_t stride,
                                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (stride < 1) return cudaErrorInvalidValue;
  const int threads = 256;
  // Size the grid for one pass (n / STRIDE elements), at most 8 blocks per SM.
  const int blocks = course::grid_stride_blocks(course::ceil_div<int64_t>(n, stride), threads);
  copy_strided_kernel<<<blocks, threads, 0, stream>>>(out, inp, n, stride);
  return cudaGetLastError();
}
