// Your exercise: fill in the TODOs. Generated from solutions/day08/top_p_sampling.cu by `grader release` (stub-hash 933780f63836).
// Day 8 exercise: top-p (nucleus) sampling without sorting, one block per row (model: FlashInfer
// sampling.cuh, TopPSamplingFromProbKernel; written for this course, not copied).
//
//   probs   (batch, vocab) fp32    each row a distribution (sums to 1, entries >= 0)
//   top_p   (batch,)       fp32    in (0, 1]
//   tokens  (batch,)       int64   one token id per row, drawn from the row's nucleus
//
// The nucleus of a row: every token i with  sum_{j : p_j > p_i} p_j < top_p,  i.e. the smallest
// set of most probable tokens whose mass reaches top_p, together with every token tied with its
// least probable member (the set does not depend on how the vocabulary is ordered). The draw
// follows the nucleus renormalized: P(i) = p_i / (mass of the nucleus). With top_p = 1 that is
// every token of p > 0; with a tiny top_p it is the most probable token.
//
// No sort: a block draws a token from the tokens above a threshold `low` (at first all of them),
// then reads the row once more to add up the mass strictly above that token's probability
// (pivot_0) and above a second pivot halfway to `high`. If less than top_p lies above pivot_0,
// the token is in the nucleus and is kept (in exact arithmetic the draw then follows the
// renormalized nucleus: rejection sampling). Otherwise every token of probability <= pivot_0 is
// outside the nucleus, `low` rises to pivot_0 or pivot_1, and the block draws again from what is
// left. The interval (low, high] that holds the nucleus's smallest probability at least halves
// every round; a row usually needs one to three rounds.
//
// Random numbers: counter-based Philox (curand_kernel.h): subsequence = row, offset = `offset`,
// one 32-bit number per round. The same seed and offset give the same tokens; a caller advances
// the offset between calls (by more than the rounds a row can take).
//
// Napkin math, 128 x 128256 at top_p 0.9: the row is 513 KB, 66 MB for the batch, one block per
// row on 128 of the 132 SMs. A round reads part of the row (the draw stops where the running mass
// passes u) and then all of it (the pivot sums): about 1.5 row reads, ~100 MB, 25-30 us at
// ~3.5 TB/s; rows that take a second or third round set the kernel's time (the rest is from the
// L2). torch's sort + cumsum + mask + multinomial takes milliseconds.
// Target (grader/exercises/day08.py): >= 15x faster than torch sort + cumsum + mask + multinomial.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <curand_kernel.h>

#include "course/common.cuh"

namespace {

constexpr int THREADS = 512;  // one block per row; 16 warps keep enough loads in flight
constexpr int GROUP = 8;      // vectors per thread per step: 8 x 16 B in flight per thread

// Sums of the probabilities above pivot_0 and above pivot_1, reduced together.
struct PivotSums {
  float above0, above1;
};

struct AddPivotSums {
  __device__ __forceinline__ PivotSums operator()(const PivotSums& a, const PivotSums& b) const {
    return {a.above0 + b.above0, a.above1 + b.above1};
  }
};

using BlockScan = cub::BlockScan<float, THREADS, cub::BLOCK_SCAN_WARP_SCANS>;
using BlockReduce = cub::BlockReduce<PivotSums, THREADS>;

struct SharedState {
  union {  // CUB's scratch; one collective at a time, a barrier between two of them
    typename BlockScan::TempStorage scan;
    typename BlockReduce::TempStorage reduce;
  } cub;
  float u;          // this round's uniform draw, scaled to the mass above `low`
  int winner;       // the first thread (in scan order) whose elements reach u
  long long sampled;  // the token drawn this round
  PivotSums sums;   // broadcast of the block's pivot sums
};

// One step's worth of this thread's elements: vector k of the step is at
// base + (k * THREADS + threadIdx.x) * VEC (consecutive threads, consecutive vectors: coalesced).
// Elements past the end of the row read as 0, which no test below counts.
template <int VEC>
__device__ __forceinline__ void load_step(float (&v)[GROUP][VEC], const float* __restrict__ row,
                                          int64_t vocab, int64_t base) {
#pragma unroll
  for (int k = 0; k < GROUP; ++k) {
    const int64_t i = base + (static_cast<int64_t>(k) * THREADS + threadIdx.x) * VEC;
    if constexpr (VEC == 4) {
      // vocab % 4 == 0 on this path, so a vector is either wholly inside the row or wholly past it.
      const float4 f = i < vocab ? __ldg(reinterpret_cast<const float4*>(row + i)) : make_float4(0, 0, 0, 0);
      v[k][0] = f.x, v[k][1] = f.y, v[k][2] = f.z, v[k][3] = f.w;
    } else {
      v[k][0] = i < vocab ? __ldg(row + i) : 0.0f;
    }
  }
}

template <int VEC>
__device__ __forceinline__ int64_t token_id(int64_t base, int k, int j) {
  return base + (static_cast<int64_t>(k) * THREADS + threadIdx.x) * VEC + j;
}

template <int VEC>
__global__ void __launch_bounds__(THREADS)
    top_p_sampling_kernel(int64_t* __restrict__ tokens, const float* __restrict__ probs,
                          const float* __restrict__ top_p, int64_t vocab, uint64_t seed, uint64_t offset) {
  constexpr int64_t STEP = static_cast<int64_t>(THREADS) * GROUP * VEC;  // elements per step
  __shared__ SharedState s;
  const int64_t row_id = blockIdx.x;
  const float* row = probs + row_id * vocab;  // (vocab,)
  const float p_top = top_p[row_id];
  // TODO: draw tokens[row_id] from the nucleus of `row` (see the header), without sorting.
  // Keep `low` (draw only from tokens with p > low; start at 0), `high` (start at 1) and `q`
  // (the mass above low; start at 1). Each round:
  // 1. Thread 0 draws u = curand_uniform(&state) * q from a curandStatePhilox4_32_10_t set up
  //    once with curand_init(seed, row_id, offset, &state), and shares it through `s.u`.
  // 2. Walk the row in steps of STEP elements (load_step): the masked values (p > low ? p : 0),
  //    this thread's sum, a BlockScan ExclusiveSum for its running mass and the step's total.
  //    In the step where the running mass reaches u, the first thread whose own elements reach
  //    it (atomicMin on s.winner) names the token. Only a token with p > low may be chosen:
  //    a float prefix sum is not monotonic. If rounding leaves u unreached, take the next such
  //    token, or the last one of the row.
  // 3. pivot_0 = row[token], pivot_1 = halfway to high; one more pass sums the probabilities
  //    above each (BlockReduce with AddPivotSums). If the sum above pivot_0 is < top_p, keep the
  //    token; else raise low to pivot_0 (if the sum above pivot_1 is < top_p: high = pivot_1)
  //    or to pivot_1, set q to the mass above the new low, and go again.
  // With top_p >= 1 the first draw is already in the nucleus.
  (void)row;
  (void)p_top;
}

}  // namespace

COURSE_EXPORT cudaError_t top_p_sampling(int64_t* tokens, const float* probs, const float* top_p, int64_t batch,
                                         int64_t vocab, int64_t seed, int64_t offset, cudaStream_t stream) {
  if (batch < 0 || batch > INT32_MAX || vocab < 1 || vocab > INT32_MAX) return cudaErrorInvalidValue;
  if (batch == 0) return cudaSuccess;
  // 16-byte loads when every row starts on a 16-byte boundary; one float per load otherwise.
  const bool vectorized = vocab % 4 == 0 && reinterpret_cast<uintptr_t>(probs) % 16 == 0;
  const auto grid = static_cast<unsigned>(batch);  // one block per row
  if (vectorized) {
    top_p_sampling_kernel<4><<<grid, THREADS, 0, stream>>>(tokens, probs, top_p, vocab, static_cast<uint64_t>(seed),
                                                           static_cast<uint64_t>(offset));
  } else {
    top_p_sampling_kernel<1><<<grid, THREADS, 0, stream>>>(tokens, probs, top_p, vocab, static_cast<uint64_t>(seed),
                                                           static_cast<uint64_t>(offset));
  }
  return cudaGetLastError();
}
