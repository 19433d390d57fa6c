// Top-p v3: no sort and few passes: rejection sampling with two pivots (FlashInfer's
// TopPSamplingFromProbKernel, in this course's words). Adds: the nucleus is never computed.
//
// Each round draws a token from the tokens with p > low (at first all of them), renormalized,
// then reads the row once more for two sums: the mass above pivot_0 = p(token) and above
// pivot_1 = (pivot_0 + high) / 2. If less than top_p lies above the token, it is in the nucleus,
// and a draw accepted this way follows the nucleus renormalized (rejection sampling). Otherwise
// no token of p <= pivot_0 is in the nucleus: low rises to pivot_0, or to pivot_1 when that one
// is outside too (else high falls to pivot_1), and the block draws again from what is left. The
// interval (low, high] holding the nucleus's smallest probability halves every round.
//
// This version is the plain one: a block of 1024 threads reads the row 1024 floats at a time in
// row order, and the draw pass reduces every tile (to see whether u falls in it) and scans the
// one it falls in. That is ~125 barrier-separated tiles per pass for a 128256-token row: the
// loads of one tile wait for the reduction of the previous one. The exercise reads more per step.
//
// Napkin math, 128 x 128256 at top_p 0.9: ~1.5 passes of 513 KB per round, 1-3 rounds; each tile
// costs about one memory latency (~1 us) plus two block collectives: ~200 us at 125 tiles a pass.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <curand_kernel.h>

#include "course/common.cuh"

namespace {

constexpr int V3_THREADS = 1024;

struct PivotPair {
  float a, b;
};
struct AddPivotPair {
  __device__ PivotPair operator()(const PivotPair& x, const PivotPair& y) const { return {x.a + y.a, x.b + y.b}; }
};

__global__ void __launch_bounds__(V3_THREADS)
    top_p_rejection_kernel(int64_t* __restrict__ tokens, const float* __restrict__ probs,
                           const float* __restrict__ top_p, int64_t vocab, uint64_t seed, uint64_t offset) {
  using BlockReduce = cub::BlockReduce<float, V3_THREADS>;
  using BlockReduceTwo = cub::BlockReduce<PivotPair, V3_THREADS>;
  using BlockScan = cub::BlockScan<float, V3_THREADS, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ union {
    typename BlockReduce::TempStorage reduce;
    typename BlockReduceTwo::TempStorage reduce_two;
    typename BlockScan::TempStorage scan;
  } scratch;
  __shared__ float tile_sum;
  __shared__ PivotPair pivot_sums;
  __shared__ int winner;
  const int64_t row_id = blockIdx.x;
  const float* row = probs + row_id * vocab;  // (vocab,)
  const float p_top = top_p[row_id];
  curandStatePhilox4_32_10_t rng;
  curand_init(seed, row_id, offset, &rng);  // every thread draws the same numbers

  float low = 0.0f, high = 1.0f, q = 1.0f;
  int64_t token = -1;
  for (int round = 0; round < 64; ++round) {  // 64: far more than the halving needs in practice
    // ---- draw from {p > low}: u in (0, q], the first token (row order) whose running mass reaches it
    const float u = curand_uniform(&rng) * q;
    float passed = 0.0f;
    token = -1;
    for (int64_t base = 0; base < vocab && token < 0; base += V3_THREADS) {
      const int64_t i = base + threadIdx.x;
      const float p = i < vocab && row[i] > low ? row[i] : 0.0f;
      const float total = BlockReduce(scratch.reduce).Sum(p);
      if (threadIdx.x == 0) tile_sum = total;
      __syncthreads();
      const float tile_total = tile_sum;
      if (passed + tile_total >= u) {  // u falls in this tile (the same decision in every thread)
        float incl;
        BlockScan(scratch.scan).InclusiveSum(p, incl);
        if (threadIdx.x == 0) winner = V3_THREADS;
        __syncthreads();
        if (p > 0.0f && passed + incl >= u) atomicMin(&winner, static_cast<int>(threadIdx.x));
        __syncthreads();
        if (winner < V3_THREADS) token = base + winner;
      }
      passed += tile_total;
      __syncthreads();  // tile_sum and the scratch are written again
    }
    if (token < 0) {  // rounding left u unreached: the last token with p > low
      for (token = vocab - 1; token > 0 && !(row[token] > low); --token) {
      }
    }
    if (p_top >= 1.0f) break;
    // ---- the two sums: mass above pivot_0 and above pivot_1
    const float pivot0 = row[token];
    const float pivot1 = fmaxf(0.5f * (pivot0 + high), pivot0);
    PivotPair mine{0.0f, 0.0f};
    for (int64_t i = threadIdx.x; i < vocab; i += V3_THREADS) {
      const float p = row[i];
      mine.a += p > pivot0 ? p : 0.0f;
      mine.b += p > pivot1 ? p : 0.0f;
    }
    const PivotPair sums = BlockReduceTwo(scratch.reduce_two).Reduce(mine, AddPivotPair{});
    if (threadIdx.x == 0) pivot_sums = sums;
    __syncthreads();
    const PivotPair s = pivot_sums;
    __syncthreads();
    if (s.a < p_top) break;  // accepted: the token is in the nucleus
    if (s.b < p_top) {
      low = pivot0;
      high = pivot1;
      q = s.a;
    } else {
      low = pivot1;
      q = s.b;
    }
  }
  if (threadIdx.x == 0) tokens[row_id] = token;
}

}  // namespace

COURSE_EXPORT cudaError_t top_p_v3_rejection(int64_t* tokens, const float* probs, const float* top_p, int64_t batch,
                                             int64_t vocab, int64_t seed, int64_t offset, cudaStream_t stream) {
  if (batch == 0) return cudaSuccess;
  top_p_rejection_kernel<<<static_cast<unsigned>(batch), V3_THREADS, 0, stream>>>(
      tokens, probs, top_p, vocab, static_cast<uint64_t>(seed), static_cast<uint64_t>(offset));
  return cudaGetLastError();
}
