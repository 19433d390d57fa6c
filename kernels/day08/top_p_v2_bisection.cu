// Top-p v2: no sort, one block per row, a bisection for the nucleus's smallest probability, then
// one draw with a block scan. Adds: the nucleus found by value, not by position.
//
// Let above(x) = sum of the probabilities > x. It only falls as x grows, and the nucleus is every
// token with above(p_i) < top_p: the tokens with p_i >= tau, where tau is the smallest
// probability x with above(x) < top_p. Non-negative floats order like their bit patterns as
// integers, so a bisection over the 2^30 bit patterns between 0 and 1.0 finds tau exactly in 30
// steps, each one pass over the row and one cub::BlockReduce. Then the draw: u in (0, nucleus
// mass], a pass with cub::BlockScan, the first token of p >= tau whose running mass reaches u.
//
// Napkin math, 128 x 128256: 31 passes over a 513 KB row; after the first, the 66 MB batch is
// mostly in the 60 MB L2 (say ~8 TB/s): 31 x 66 MB / 8 TB/s ~ 250 us. No sort, but too many passes.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <curand_kernel.h>

#include "course/common.cuh"

namespace {

constexpr int V2_THREADS = 1024;

__global__ void __launch_bounds__(V2_THREADS)
    top_p_bisection_kernel(int64_t* __restrict__ tokens, const float* __restrict__ probs,
                           const float* __restrict__ top_p, int64_t vocab, uint64_t seed, uint64_t offset) {
  using BlockReduce = cub::BlockReduce<float, V2_THREADS>;
  using BlockScan = cub::BlockScan<float, V2_THREADS, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ union {
    typename BlockReduce::TempStorage reduce;
    typename BlockScan::TempStorage scan;
  } scratch;
  __shared__ float shared_sum;
  __shared__ int winner;
  const int64_t row_id = blockIdx.x;
  const float* row = probs + row_id * vocab;  // (vocab,)
  const float p_top = top_p[row_id];

  // Sum of the probabilities > x (strict) or >= x, over the block; every thread gets it.
  auto mass = [&](float x, bool inclusive) {
    float mine = 0.0f;
    for (int64_t i = threadIdx.x; i < vocab; i += V2_THREADS) {
      const float p = row[i];
      mine += (inclusive ? p >= x : p > x) ? p : 0.0f;
    }
    const float total = BlockReduce(scratch.reduce).Sum(mine);
    if (threadIdx.x == 0) shared_sum = total;
    __syncthreads();
    const float result = shared_sum;
    __syncthreads();
    return result;
  };

  // tau's bit pattern in (lo, hi]: above(1.0) = 0 < top_p, so hi = bits(1.0) qualifies.
  // With top_p >= 1, every p > 0 is in: tau is the smallest positive float.
  uint32_t lo = 0, hi = __float_as_uint(1.0f);
  if (p_top >= 1.0f) hi = 1;
  while (hi - lo > 1) {  // invariant: above(float(lo)) >= top_p > above(float(hi))
    const uint32_t mid = lo + (hi - lo) / 2;
    if (mass(__uint_as_float(mid), false) < p_top) hi = mid;
    else lo = mid;
  }
  const float tau = __uint_as_float(hi);
  const float nucleus_mass = mass(tau, true);

  // The draw: the first token of p >= tau whose running mass (in row order) reaches u.
  curandStatePhilox4_32_10_t rng;
  curand_init(seed, row_id, offset, &rng);  // every thread draws the same u
  const float u = curand_uniform(&rng) * nucleus_mass;
  if (threadIdx.x == 0) winner = V2_THREADS;
  float passed = 0.0f;
  int64_t token = -1;
  for (int64_t base = 0; base < vocab; base += V2_THREADS) {
    const int64_t i = base + threadIdx.x;
    const float p = i < vocab && row[i] >= tau ? row[i] : 0.0f;
    float incl, tile_total;
    BlockScan(scratch.scan).InclusiveSum(p, incl, tile_total);
    if (p > 0.0f && passed + incl >= u) atomicMin(&winner, static_cast<int>(threadIdx.x));
    __syncthreads();
    if (winner < V2_THREADS) {
      token = base + winner;
      break;
    }
    passed += tile_total;
  }
  if (token < 0) {  // rounding left u unreached: the last token of the nucleus
    for (token = vocab - 1; token > 0 && !(row[token] >= tau); --token) {
    }
  }
  if (threadIdx.x == 0) tokens[row_id] = token;
}

}  // namespace

COURSE_EXPORT cudaError_t top_p_v2_bisection(int64_t* tokens, const float* probs, const float* top_p, int64_t batch,
                                             int64_t vocab, int64_t seed, int64_t offset, cudaStream_t stream) {
  if (batch == 0) return cudaSuccess;
  top_p_bisection_kernel<<<static_cast<unsigned>(batch), V2_THREADS, 0, stream>>>(
      tokens, probs, top_p, vocab, static_cast<uint64_t>(seed), static_cast<uint64_t>(offset));
  return cudaGetLastError();
}
