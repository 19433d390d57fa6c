// CORRECT cub and curand_kernel.h included with quotes; long* for int64_t*, std::int64_t, CUstream_st* for cudaStream_t
// Day 8's reference sampler with toolkit headers in quotes and its entry point written another way.
#include "cub/block/block_reduce.cuh"
#include "cub/block/block_scan.cuh"
#include "curand_kernel.h"

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
  curandStatePhilox4_32_10_t rng;
  if (threadIdx.x == 0) curand_init(seed, row_id, offset, &rng);  // subsequence = row: rows independent
  float low = 0.0f, high = 1.0f;  // the nucleus's smallest probability lies in (low, high]
  float q = 1.0f;                 // mass of the tokens with p > low
  int64_t token = 0;
  for (;;) {
    // ---- Draw one token from {p > low}, renormalized: invert its running mass at u in (0, q].
    // The running mass may follow any fixed order of the tokens: here thread by thread within a
    // step (thread t's GROUP * VEC elements, then thread t + 1's), steps in row order.
    if (threadIdx.x == 0) {
      s.u = curand_uniform(&rng) * q;
      s.winner = THREADS;
    }
    __syncthreads();
    const float u = s.u;
    float passed = 0.0f;  // mass of the steps already walked
    bool done = false;
    for (int64_t base = 0; base < vocab && !done; base += STEP) {
      float v[GROUP][VEC];
      load_step<VEC>(v, row, vocab, base);
      float mine = 0.0f;
#pragma unroll
      for (int k = 0; k < GROUP; ++k) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) mine += v[k][j] > low ? v[k][j] : 0.0f;
      }
      float before, step_total;
      BlockScan(s.cub.scan).ExclusiveSum(mine, before, step_total);  // step_total: in every thread
      __syncthreads();  // the scan's scratch is reused by the next step
      if (passed + step_total >= u) {  // the same decision in every thread
        // Walk my elements; the first one whose running mass reaches u is my candidate.
        float acc = passed + before;
        int hit = -1;  // k * VEC + j of the candidate
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
    if (!done) {  // rare: u beyond the row's rounded mass. Take the last token with p > low.
      if (threadIdx.x == 0) s.sampled = -1;
      __syncthreads();
      long long last = -1;
      for (int64_t i = threadIdx.x; i < vocab; i += THREADS) {
        if (row[i] > low) last = i;
      }
      if (last >= 0) atomicMax(&s.sampled, last);
      __syncthreads();
    }
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
#pragma unroll
      for (int k = 0; k < GROUP; ++k) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          mine.above0 += v[k][j] > pivot0 ? v[k][j] : 0.0f;
          mine.above1 += v[k][j] > pivot1 ? v[k][j] : 0.0f;
        }
      }
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
}

}  // namespace

COURSE_EXPORT cudaError_t top_p_sampling(long* tokens, const float* probs, const float* top_p, std::int64_t batch,
                                         std::int64_t vocab, std::int64_t seed, std::int64_t offset, CUstream_st* stream) {
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
