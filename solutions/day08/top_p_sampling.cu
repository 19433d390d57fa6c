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
// Target (grader/exercises/day08.py): @TARGET@.
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

// The start of a round, in every thread (it holds a barrier): thread 0, the only one whose Philox
// state is set up, draws u in (0, scale] (curand_uniform is in (0, 1]) and shares it through s.u;
// it also resets s.winner to THREADS ("no thread yet") for the draw pass's atomicMin.
__device__ __forceinline__ float draw_uniform(SharedState& s, curandStatePhilox4_32_10_t& rng, float scale) {
  if (threadIdx.x == 0) {
    s.u = curand_uniform(&rng) * scale;
    s.winner = THREADS;
  }
  __syncthreads();
  return s.u;
}

// The sum of this thread's elements of a step (load_step's v) that are above `threshold`, added in
// the order k, j: in the draw pass, this thread's share of the mass above low.
template <int VEC>
__device__ __forceinline__ float sum_above(const float (&v)[GROUP][VEC], float threshold) {
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < GROUP; ++k) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) sum += v[k][j] > threshold ? v[k][j] : 0.0f;
  }
  return sum;
}

// The pivot pass's two sums in one sweep of a step: this thread's elements above pivot0 added to
// sums.above0, those above pivot1 to sums.above1, in the order k, j. No barrier: the block's sums
// are reduced once, after the last step.
template <int VEC>
__device__ __forceinline__ void add_above_pivots(PivotSums& sums, const float (&v)[GROUP][VEC], float pivot0,
                                                 float pivot1) {
#pragma unroll
  for (int k = 0; k < GROUP; ++k) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      sums.above0 += v[k][j] > pivot0 ? v[k][j] : 0.0f;
      sums.above1 += v[k][j] > pivot1 ? v[k][j] : 0.0f;
    }
  }
}

// The draw pass inside one thread: from `acc`, the running mass before this thread's elements,
// add its elements above `low` in the order k, j (sum_above's order); the first one at which the
// running mass reaches u is this thread's candidate, returned as k * VEC + j (-1: none). Only an
// element above low may be the candidate: the running mass can step down by an ulp (a float
// prefix sum is not monotonic), and a token of p <= low must never be drawn.
template <int VEC>
__device__ __forceinline__ int first_reaching(const float (&v)[GROUP][VEC], float low, float acc, float u) {
  int hit = -1;
#pragma unroll
  for (int k = 0; k < GROUP; ++k) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if (hit < 0 && v[k][j] > low) {
        acc += v[k][j];
        if (acc >= u) hit = k * VEC + j;
      }
    }
  }
  return hit;
}

// The draw's fallback, rare: rounding left u above every running mass of the row. s.sampled
// becomes the last token of the row with p > low (the largest id: atomicMax), or -1 where there is
// none. Called by every thread (barriers); s.sampled is readable on return.
__device__ __forceinline__ void last_above(SharedState& s, const float* row, int64_t vocab, float low) {
  if (threadIdx.x == 0) s.sampled = -1;
  __syncthreads();
  long long last = -1;
  for (int64_t i = threadIdx.x; i < vocab; i += THREADS) {
    if (row[i] > low) last = i;
  }
  if (last >= 0) atomicMax(&s.sampled, last);
  __syncthreads();
}

// On sm_120 ptxas's default allocation aims at two blocks of 512 per SM, 64 registers, and VEC = 4
// spills: one block per SM asked for lets it keep its loads in registers (other GPUs do unasked).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define TOP_P_LAUNCH_BOUNDS __launch_bounds__(THREADS, 1)
#else
#define TOP_P_LAUNCH_BOUNDS __launch_bounds__(THREADS)
#endif

template <int VEC>
__global__ void TOP_P_LAUNCH_BOUNDS
    top_p_sampling_kernel(int64_t* __restrict__ tokens, const float* __restrict__ probs,
                          const float* __restrict__ top_p, int64_t vocab, uint64_t seed, uint64_t offset) {
  constexpr int64_t STEP = static_cast<int64_t>(THREADS) * GROUP * VEC;  // elements per step
  __shared__ SharedState s;
  const int64_t row_id = blockIdx.x;
  const float* row = probs + row_id * vocab;  // (vocab,)
  const float p_top = top_p[row_id];
  // BEGIN SOLUTION
  // STUB: // TODO: draw tokens[row_id] from the nucleus of `row` (see the header), without sorting.
  // STUB: // 1. curandStatePhilox4_32_10_t rng, initialized in thread 0 only (the only one that draws) with
  // STUB: //    curand_init(seed, row_id, offset, &rng): subsequence = row, so rows are independent;
  // STUB: //    float low = 0, high = 1 (the nucleus's smallest probability lies in (low, high]), q = 1 (the
  // STUB: //    mass of the tokens with p > low), int64_t token. Then rounds, steps 2 to 5, until one stops:
  // STUB: // 2. Draw from {p > low} renormalized: const float u = draw_uniform(s, rng, q). Walk the row in
  // STUB: //    steps (base = 0, STEP, 2 STEP, ... < vocab), stopping after the step that names the token;
  // STUB: //    `passed` is the mass of the steps before. Each step:
  // STUB: //    a. float v[GROUP][VEC]; load_step<VEC>(v, row, vocab, base); mine = sum_above<VEC>(v, low).
  // STUB: //    b. BlockScan(s.cub.scan).ExclusiveSum(mine, before, step_total): the mass of the threads
  // STUB: //       before this one, and the step's, in every thread; then __syncthreads() (scratch reused).
  // STUB: //    c. If passed + step_total >= u (true in every thread or in none): hit = first_reaching<VEC>(v,
  // STUB: //       low, passed + before, u); a thread with hit >= 0 calls atomicMin(&s.winner, threadIdx.x)
  // STUB: //       (the first in scan order wins: the same token on every run); __syncthreads(); the winner
  // STUB: //       writes s.sampled = token_id<VEC>(base, hit / VEC, hit % VEC); the token is named if
  // STUB: //       s.winner < THREADS (else rounding left u unreached: go on); __syncthreads().
  // STUB: //    d. passed += step_total.
  // STUB: //    If no step named it: last_above(s, row, vocab, low).
  // STUB: // 3. token = s.sampled. Stop if token < 0 (no p > low) or p_top >= 1 (every draw is in the nucleus).
  // STUB: // 4. The test, one full pass: pivot0 = row[token], pivot1 = 0.5f * (pivot0 + high), or high if that
  // STUB: //    is not above pivot0. Every step into one PivotSums mine{0, 0}: load_step, then
  // STUB: //    add_above_pivots<VEC>(mine, v, pivot0, pivot1). Then
  // STUB: //    BlockReduce(s.cub.reduce).Reduce(mine, AddPivotSums{}) (valid in thread 0), shared through
  // STUB: //    s.sums: thread 0 writes it, __syncthreads(), all read it, __syncthreads() (s.sums and the
  // STUB: //    scratch are written again next round).
  // STUB: // 5. If sums.above0 < p_top: the token is in the nucleus, stop. Else every token of p <= pivot0 is
  // STUB: //    out: if sums.above1 < p_top, low = pivot0, high = pivot1, q = sums.above0; else low = pivot1,
  // STUB: //    q = sums.above1. Stop if !(low < high) (rounding: cannot happen in exact arithmetic).
  // STUB: // 6. Thread 0 writes tokens[row_id] = token.
  // STUB: (void)row;
  // STUB: (void)p_top;
  curandStatePhilox4_32_10_t rng;
  if (threadIdx.x == 0) curand_init(seed, row_id, offset, &rng);  // subsequence = row: rows independent
  float q = 1.0f;                 // mass of the tokens with p > low
  float high = 1.0f, low = 0.0f;  // the nucleus's smallest probability lies in (low, high]
  int64_t token = 0;
  for (;;) {
    // ---- Draw one token from {p > low}, renormalized: invert its running mass at u in (0, q].
    // The running mass may follow any fixed order of the tokens: here thread by thread within a
    // step (thread t's GROUP * VEC elements, then thread t + 1's), steps in row order.
    const float u = draw_uniform(s, rng, q);
    float passed = 0.0f;  // mass of the steps already walked
    bool done = false;
    for (int64_t base = 0; base < vocab && !done; base += STEP) {
      float v[GROUP][VEC];
      load_step<VEC>(v, row, vocab, base);
      const float mine = sum_above<VEC>(v, low);
      float before, step_total;
      BlockScan(s.cub.scan).ExclusiveSum(mine, before, step_total);  // step_total: in every thread
      __syncthreads();  // the scan's scratch is reused by the next step
      if (passed + step_total >= u) {  // the same decision in every thread
        const int hit = first_reaching<VEC>(v, low, passed + before, u);  // k * VEC + j, or -1
        // Rounding can let two threads reach u (the scan adds in another order than a thread
        // does): the first in scan order wins, the same one on every run.
        if (hit >= 0) atomicMin(&s.winner, static_cast<int>(threadIdx.x));
        __syncthreads();
        if (static_cast<int>(threadIdx.x) == s.winner) s.sampled = token_id<VEC>(base, hit / VEC, hit % VEC);
        done = s.winner < THREADS;  // none: rounding left u unreached; the next valid token takes it
        __syncthreads();
      }
      passed += step_total;
    }
    if (!done) last_above(s, row, vocab, low);  // rare: u beyond the row's rounded mass
    token = s.sampled;
    if (token < 0) break;      // no token with p > low at all: not a distribution (rows sum to 1)
    if (p_top >= 1.0f) break;  // the nucleus is every token with p > 0: any draw is in it

    // ---- Is the token in the nucleus? Sum the mass above pivot_0 (and above pivot_1).
    const float pivot0 = row[token];
    float pivot1 = 0.5f * (pivot0 + high);
    if (!(pivot1 > pivot0)) pivot1 = high;  // pivot_0 and high adjacent floats: nothing between
    PivotSums mine{0.0f, 0.0f};
    for (int64_t base = 0; base < vocab; base += STEP) {
      float v[GROUP][VEC];
      load_step<VEC>(v, row, vocab, base);  // every load of the step issued before any add
      add_above_pivots<VEC>(mine, v, pivot0, pivot1);
    }
    const PivotSums total = BlockReduce(s.cub.reduce).Reduce(mine, AddPivotSums{});  // valid in thread 0
    if (threadIdx.x == 0) s.sums = total;
    __syncthreads();
    const PivotSums sums = s.sums;
    __syncthreads();  // s.sums and the CUB scratch are written again next round
    if (sums.above0 < p_top) break;  // less than top_p lies above the token: it is in the nucleus
    if (sums.above1 < p_top) {       // pivot_1 is in the nucleus: tau in (pivot_0, pivot_1]
      low = pivot0;
      high = pivot1;
      q = sums.above0;
    } else {                         // pivot_1 is outside too: tau in (pivot_1, high]
      low = pivot1;
      q = sums.above1;
    }
    if (!(low < high)) break;  // cannot happen in exact arithmetic; ends the loop in any case
  }
  if (threadIdx.x == 0) tokens[row_id] = token;
  // END SOLUTION
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
