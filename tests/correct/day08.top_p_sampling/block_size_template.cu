// CORRECT the block size a template parameter (128 for short rows, 512 for long ones) picked by a runtime switch, CUB's types as alias templates on it, __launch_bounds__ through a function-like macro of NT
// Day 8's reference sampler with its block size chosen per call instead of fixed.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <curand_kernel.h>

#include "course/common.cuh"

namespace {

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

// The block size NT is a template parameter: CUB's collectives and the shared state follow it.
template <int NT>
using BlockScan = cub::BlockScan<float, NT, cub::BLOCK_SCAN_WARP_SCANS>;
template <int NT>
using BlockReduce = cub::BlockReduce<PivotSums, NT>;

template <int NT>
struct SharedState {
  union {  // CUB's scratch; one collective at a time, a barrier between two of them
    typename BlockScan<NT>::TempStorage scan;
    typename BlockReduce<NT>::TempStorage reduce;
  } cub;
  float u;          // this round's uniform draw, scaled to the mass above `low`
  int winner;       // the first thread (in scan order) whose elements reach u
  long long sampled;  // the token drawn this round
  PivotSums sums;   // broadcast of the block's pivot sums
};

// One step's worth of this thread's elements: vector k of the step is at
// base + (k * THREADS + threadIdx.x) * VEC (consecutive threads, consecutive vectors: coalesced).
// Elements past the end of the row read as 0, which no test below counts.
template <int NT, int VEC>
__device__ __forceinline__ void load_step(float (&v)[GROUP][VEC], const float* __restrict__ row,
                                          int64_t vocab, int64_t base) {
#pragma unroll
  for (int k = 0; k < GROUP; ++k) {
    const int64_t i = base + (static_cast<int64_t>(k) * NT + threadIdx.x) * VEC;
    if constexpr (VEC == 4) {
      // vocab % 4 == 0 on this path, so a vector is either wholly inside the row or wholly past it.
      const float4 f = i < vocab ? __ldg(reinterpret_cast<const float4*>(row + i)) : make_float4(0, 0, 0, 0);
      v[k][0] = f.x, v[k][1] = f.y, v[k][2] = f.z, v[k][3] = f.w;
    } else {
      v[k][0] = i < vocab ? __ldg(row + i) : 0.0f;
    }
  }
}

template <int NT, int VEC>
__device__ __forceinline__ int64_t token_id(int64_t base, int k, int j) {
  return base + (static_cast<int64_t>(k) * NT + threadIdx.x) * VEC + j;
}

// The start of a round, in every thread (it holds a barrier): thread 0, the only one whose Philox
// state is set up, draws u in (0, scale] (curand_uniform is in (0, 1]) and shares it through s.u;
// it also resets s.winner to THREADS ("no thread yet") for the draw pass's atomicMin.
template <int NT>
__device__ float draw_uniform(SharedState<NT>& s, curandStatePhilox4_32_10_t& rng, float scale) {
  if (threadIdx.x == 0) {
    s.u = curand_uniform(&rng) * scale;
    s.winner = NT;
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
template <int NT>
__device__ void last_above(SharedState<NT>& s, const float* row, int64_t vocab, float low) {
  if (threadIdx.x == 0) s.sampled = -1;
  __syncthreads();
  long long last = -1;
  for (int64_t i = threadIdx.x; i < vocab; i += NT) {
    if (row[i] > low) last = i;
  }
  if (last >= 0) atomicMax(&s.sampled, last);
  __syncthreads();
}

// On sm_120 ptxas's default allocation aims at two blocks of 512 per SM, 64 registers, and VEC = 4
// spills: one block per SM asked for lets it keep its loads in registers (other GPUs do unasked).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define TOP_P_LAUNCH_BOUNDS(nt) __launch_bounds__(nt, 1)
#else
#define TOP_P_LAUNCH_BOUNDS(nt) __launch_bounds__(nt)
#endif

template <int NT, int VEC>
__global__ void TOP_P_LAUNCH_BOUNDS(NT)
    top_p_sampling_kernel(int64_t* __restrict__ tokens, const float* __restrict__ probs,
                          const float* __restrict__ top_p, int64_t vocab, uint64_t seed, uint64_t offset) {
  constexpr int64_t STEP = static_cast<int64_t>(NT) * GROUP * VEC;  // elements per step
  __shared__ SharedState<NT> s;
  const int64_t row_id = blockIdx.x;
  const float* row = probs + row_id * vocab;  // (vocab,)
  const float p_top = top_p[row_id];
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
      load_step<NT, VEC>(v, row, vocab, base);
      const float mine = sum_above<VEC>(v, low);
      float before, step_total;
      BlockScan<NT>(s.cub.scan).ExclusiveSum(mine, before, step_total);  // step_total: in every thread
      __syncthreads();  // the scan's scratch is reused by the next step
      if (passed + step_total >= u) {  // the same decision in every thread
        const int hit = first_reaching<VEC>(v, low, passed + before, u);  // k * VEC + j, or -1
        // Rounding can let two threads reach u (the scan adds in another order than a thread
        // does): the first in scan order wins, the same one on every run.
        if (hit >= 0) atomicMin(&s.winner, static_cast<int>(threadIdx.x));
        __syncthreads();
        if (static_cast<int>(threadIdx.x) == s.winner) s.sampled = token_id<NT, VEC>(base, hit / VEC, hit % VEC);
        done = s.winner < NT;  // none: rounding left u unreached; the next valid token takes it
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
      load_step<NT, VEC>(v, row, vocab, base);  // every load of the step issued before any add
      add_above_pivots<VEC>(mine, v, pivot0, pivot1);
    }
    const PivotSums total = BlockReduce<NT>(s.cub.reduce).Reduce(mine, AddPivotSums{});  // valid in thread 0
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
}

template <int NT>
cudaError_t launch(int64_t* tokens, const float* probs, const float* top_p, int64_t batch, int64_t vocab,
                   uint64_t seed, uint64_t offset, bool vectorized, cudaStream_t stream) {
  const auto grid = static_cast<unsigned>(batch);  // one block per row
  if (vectorized) top_p_sampling_kernel<NT, 4><<<grid, NT, 0, stream>>>(tokens, probs, top_p, vocab, seed, offset);
  else top_p_sampling_kernel<NT, 1><<<grid, NT, 0, stream>>>(tokens, probs, top_p, vocab, seed, offset);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t top_p_sampling(int64_t* tokens, const float* probs, const float* top_p, int64_t batch,
                                         int64_t vocab, int64_t seed, int64_t offset, cudaStream_t stream) {
  if (batch < 0 || batch > INT32_MAX || vocab < 1 || vocab > INT32_MAX) return cudaErrorInvalidValue;
  if (batch == 0) return cudaSuccess;
  const bool vectorized = vocab % 4 == 0 && reinterpret_cast<uintptr_t>(probs) % 16 == 0;
  const auto s = static_cast<uint64_t>(seed), o = static_cast<uint64_t>(offset);
  // Short rows: a block of 128 threads covers up to 4096 elements a step; long rows get 512.
  switch (vocab <= 4096 ? 128 : 512) {
    case 128: return launch<128>(tokens, probs, top_p, batch, vocab, s, o, vectorized, stream);
    default: return launch<512>(tokens, probs, top_p, batch, vocab, s, o, vectorized, stream);
  }
}
