// Test-only kernel (the grader's own tests, tests/kinds/): a sampler, to prove the grader's
// latency target (x faster than torch's sort-based sampling, timed in the same run) and its
// statistical grading. One token per row drawn from probs[row, :] (rows sum to 1), with a
// counter-based generator (Philox from curand_kernel.h): the same seed and offset give the same
// tokens. One block per row: each thread sums a contiguous chunk, a block scan (cub::BlockScan)
// turns the chunk sums into their running totals, the thread whose chunk holds the uniform
// draw walks it. Napkin math at 128 x 128256: 66 MB read once, ~20 us at 3.5 TB/s.
#include <cub/block/block_scan.cuh>
#include <curand_kernel.h>

#include "course/common.cuh"

namespace {

constexpr int THREADS = 256;

__global__ void sample_kernel(int64_t* __restrict__ tokens, const float* __restrict__ probs, int64_t vocab,
                              uint64_t seed, uint64_t offset) {
  using Scan = cub::BlockScan<float, THREADS>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ float running[THREADS];  // running[t]: the sum of chunks 0..t (one copy, so bounds agree)
  __shared__ float target;
  const int64_t row = blockIdx.x;
  const float* p = probs + row * vocab;
  const int64_t per = course::ceil_div<int64_t>(vocab, THREADS);
  const int64_t lo = threadIdx.x * per;
  const int64_t hi = lo + per < vocab ? lo + per : vocab;
  float local = 0.0f;
  for (int64_t i = lo; i < hi; ++i) local += p[i];
  float inclusive;
  Scan(scan_storage).InclusiveSum(local, inclusive);
  running[threadIdx.x] = inclusive;
  if (threadIdx.x == 0) {
    curandStatePhilox4_32_10_t state;
    curand_init(seed, row, offset, &state);  // subsequence = row: rows draw independently
    target = curand_uniform(&state);          // in (0, 1]
  }
  __syncthreads();
  const float u = target * running[THREADS - 1];  // in (0, total]
  const float start = threadIdx.x == 0 ? 0.0f : running[threadIdx.x - 1];
  if (!(start < u && u <= running[threadIdx.x])) return;  // exactly one chunk holds u
  // Walk the chunk; only a token of nonzero probability may be chosen (rounding must not pick a 0).
  float acc = start;
  int64_t last = -1;
  for (int64_t i = lo; i < hi; ++i) {
    if (p[i] <= 0.0f) continue;
    acc += p[i];
    last = i;
    if (acc >= u) break;
  }
  tokens[row] = last;
}

}  // namespace

COURSE_EXPORT cudaError_t sample(int64_t* tokens, const float* probs, int64_t rows, int64_t vocab, int64_t seed,
                                 int64_t offset, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  sample_kernel<<<static_cast<unsigned>(rows), THREADS, 0, stream>>>(tokens, probs, vocab,
                                                                     static_cast<uint64_t>(seed),
                                                                     static_cast<uint64_t>(offset));
  return cudaGetLastError();
}
