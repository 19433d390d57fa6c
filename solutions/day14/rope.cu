// Day 14 exercise: rotary position embedding applied in place to q and k
// (model: FlashInfer include/flashinfer/pos_enc.cuh, BatchQKApplyRotaryPosIdsKernel).
//
//   q          [tokens, qo_heads, head_dim]   row of token t at q + t * q_stride (in place)
//   k          [tokens, kv_heads, head_dim]   row of token t at k + t * k_stride (in place)
//   positions  [tokens] int32                 the position of each token in its sequence
//
// HF Llama's non-interleaved ("rotate half") form: pair i of every head is (x[i], x[i + d/2]),
// turned by the angle positions[t] * rope_theta^(-2i/d) (course/rope.cuh). The strides let q and
// k be slices of one fused qkv projection, rotated where they lie, with no copy.
//
// Memory-bound: every element of q and k is read once and written once; the angles are
// computed once per token and pair and reused for every head a block rotates (8 of Llama 3 8B's
// 40 by default: ROPE_MAX_HEADS_PER_BLOCK, below), so the sincosf work is a fraction of an
// instruction per element. Napkin math for bf16, 32768 tokens, 32 + 8
// heads of 128: 2 * 2 B * 32768 * 40 * 128 = 671 MB; at an H200's ~4.2 TB/s that is ~160 us. A decode
// step rotates 1-64 tokens: 20 KB - 1.3 MB, a few us at most, so there the launcher spreads the
// heads over more blocks instead.
// Target (grader/exercises/day14.py): @TARGET@.
#include "course/rope.cuh"
#include "course/vec.cuh"

namespace {

// The two knobs, as benchmarks/variant_sweep measured them on the H200 (32768 tokens, ratio to a
// copy; reports/variant-sweep-day10-day13-day14.*): 4 heads a step, all 40 heads a block:
// 0.895-0.903x; 8 a step: 0.907-0.916x; 8 heads a block: 0.914-0.928x (2048 blocks of 40 heads
// leave the last wave uneven: 15 or 16 blocks an SM); both: 0.921-0.930x.
#ifndef ROPE_HEADS_PER_STEP
#define ROPE_HEADS_PER_STEP 8  // heads loaded before any is stored: 16 loads in flight per thread
#endif
#ifndef ROPE_MAX_HEADS_PER_BLOCK
#define ROPE_MAX_HEADS_PER_BLOCK 8  // a block rotates at most 8 heads of its tokens
#endif
constexpr int ROPE_THREADS = 128;

// One thread's share of one token: VEC pairs, elements [c VEC, c VEC + VEC) of the first half of
// every head in [head_begin, head_end) and their partners half = d/2 elements later. A head h <
// qo_heads is q's head h, the others are k's heads h - qo_heads.
// VEC 8: 16-byte loads (rows and pointers aligned, half a multiple of 8); VEC 1: one element.
template <typename T, int VEC>
__device__ __forceinline__ void rope_token(T* q_row, T* k_row, int32_t pos, int c, int half, int qo_heads,
                                           int head_begin, int head_end, float log2_theta) {
  // BEGIN SOLUTION
  // STUB: // TODO: rotate this thread's pairs i = c * VEC + j (j < VEC) of every head in [head_begin, head_end).
  // STUB: // 1. The angles, once: for each j, cos and sin of pair c * VEC + j at position `pos`
  // STUB: //    (course::rope_turns with head_dim = 2 * half, then course::rope_cos_sin), in registers.
  // STUB: // 2. For each head h, its row is q_row + h * 2 * half (h < qo_heads) or k_row + (h - qo_heads)
  // STUB: //    * 2 * half. Load the VEC elements at c * VEC and the VEC at half + c * VEC
  // STUB: //    (course::vec_t<T, VEC>), rotate each pair in fp32 (course::rope_rotate) and store both
  // STUB: //    back, rounded once. Loading a few heads before storing any keeps more loads in flight.
  // The angles of this thread's pairs: computed once, used for every head.
  float cs[VEC], sn[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    course::rope_cos_sin(pos, course::rope_turns(c * VEC + j, 2 * half, log2_theta), &cs[j], &sn[j]);
  }
  for (int h0 = head_begin; h0 < head_end; h0 += ROPE_HEADS_PER_STEP) {
    // Loads of up to ROPE_HEADS_PER_STEP heads first (independent, all in flight), then the math
    // and the stores: a loop that stored each head before loading the next would wait on one
    // memory latency per head.
    course::vec_t<T, VEC> lo[ROPE_HEADS_PER_STEP], hi[ROPE_HEADS_PER_STEP];
    T* row[ROPE_HEADS_PER_STEP];
#pragma unroll
    for (int s = 0; s < ROPE_HEADS_PER_STEP; ++s) {
      const int h = h0 + s;
      row[s] = h < qo_heads ? q_row + static_cast<int64_t>(h) * 2 * half
                            : k_row + static_cast<int64_t>(h - qo_heads) * 2 * half;
      if (h < head_end) {
        lo[s].load(row[s] + c * VEC);
        hi[s].load(row[s] + half + c * VEC);
      }
    }
#pragma unroll
    for (int s = 0; s < ROPE_HEADS_PER_STEP; ++s) {
      if (h0 + s < head_end) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          float x = course::to_float(lo[s][j]), y = course::to_float(hi[s][j]);
          course::rope_rotate(x, y, cs[j], sn[j]);
          lo[s][j] = course::from_float<T>(x);
          hi[s][j] = course::from_float<T>(y);
        }
        lo[s].store(row[s] + c * VEC);
        hi[s].store(row[s] + half + c * VEC);
      }
    }
  }
  // END SOLUTION
}

// A token's threads_per_token = half / VEC threads cover its heads; a block holds ROPE_THREADS /
// threads_per_token tokens (a few threads idle when that does not divide). blockIdx.y picks a
// slice of the heads: the launcher splits them when there are too few tokens to fill the GPU.
template <typename T>
__global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(T* __restrict__ q, T* __restrict__ k, const int32_t* __restrict__ positions, int64_t tokens,
                int qo_heads, int kv_heads, int head_dim, int64_t q_stride, int64_t k_stride,
                float log2_theta, int heads_per_block, bool vectorized) {
  constexpr int VEC = course::vec_size_16B<T>();  // 8 halves = 16 bytes
  const int half = head_dim / 2;
  const int threads_per_token = vectorized ? half / VEC : half;
  const int tokens_per_block = ROPE_THREADS / threads_per_token;
  const int local = static_cast<int>(threadIdx.x) / threads_per_token;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * tokens_per_block + local;
  if (local >= tokens_per_block || t >= tokens) return;
  const int c = static_cast<int>(threadIdx.x) % threads_per_token;  // which VEC (or 1) pairs of each head
  const int head_begin = static_cast<int>(blockIdx.y) * heads_per_block;
  const int head_end = min(head_begin + heads_per_block, qo_heads + kv_heads);
  T* q_row = q + t * q_stride;  // (qo_heads, head_dim) of token t
  T* k_row = k + t * k_stride;  // (kv_heads, head_dim)
  if (vectorized) {
    rope_token<T, VEC>(q_row, k_row, positions[t], c, half, qo_heads, head_begin, head_end, log2_theta);
  } else {
    rope_token<T, 1>(q_row, k_row, positions[t], c, half, qo_heads, head_begin, head_end, log2_theta);
  }
}

template <typename T>
cudaError_t launch_rope(T* q, T* k, const int32_t* positions, int64_t tokens, int64_t qo_heads, int64_t kv_heads,
                        int64_t head_dim, int64_t q_stride, int64_t k_stride, float rope_theta,
                        cudaStream_t stream) {
  if (tokens == 0 || qo_heads + kv_heads == 0) return cudaSuccess;
  // Pairs (i, i + d/2) need an even head_dim; a token's threads must fit in one block.
  if (head_dim % 2 != 0 || head_dim / 2 > ROPE_THREADS || tokens < 0 || qo_heads < 0 || kv_heads < 0 ||
      !(rope_theta > 1.0f)) {
    return cudaErrorInvalidValue;
  }
  constexpr int VEC = course::vec_size_16B<T>();  // 8 halves = 16 bytes
  const int64_t half = head_dim / 2;
  // 16-byte loads need every half-row 16-byte aligned: half a multiple of VEC, both strides
  // multiples of VEC, and both base pointers aligned (a slice of a fused qkv can start anywhere).
  const bool vectorized = half % VEC == 0 && q_stride % VEC == 0 && k_stride % VEC == 0 &&
                          reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(k) % 16 == 0;
  const int threads_per_token = static_cast<int>(vectorized ? half / VEC : half);
  const int64_t tokens_per_block = ROPE_THREADS / threads_per_token;
  const int64_t blocks_x = course::ceil_div<int64_t>(tokens, tokens_per_block);
  // Few tokens (a decode step): split the heads over blockIdx.y so that ~4 blocks per SM run,
  // each computing its own (cheap) angles. Many tokens: ROPE_MAX_HEADS_PER_BLOCK heads a block.
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int heads = static_cast<int>(qo_heads + kv_heads);
  const int64_t want_y = course::ceil_div<int64_t>(4 * static_cast<int64_t>(sms), blocks_x);
  const int splits = static_cast<int>(want_y < heads ? (want_y > 1 ? want_y : 1) : heads);
  const int heads_per_block = min(course::ceil_div(heads, splits), ROPE_MAX_HEADS_PER_BLOCK);
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(course::ceil_div(heads, heads_per_block)));
  const float log2_theta = static_cast<float>(log2(static_cast<double>(rope_theta)));
  rope_kernel<T><<<grid, ROPE_THREADS, 0, stream>>>(q, k, positions, tokens, static_cast<int>(qo_heads),
                                                    static_cast<int>(kv_heads), static_cast<int>(head_dim), q_stride,
                                                    k_stride, log2_theta, heads_per_block, vectorized);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t rope_fp16(__half* q, __half* k, const int32_t* positions, int64_t tokens,
                                    int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t q_stride,
                                    int64_t k_stride, float rope_theta, cudaStream_t stream) {
  return launch_rope(q, k, positions, tokens, qo_heads, kv_heads, head_dim, q_stride, k_stride, rope_theta, stream);
}

COURSE_EXPORT cudaError_t rope_bf16(__nv_bfloat16* q, __nv_bfloat16* k, const int32_t* positions, int64_t tokens,
                                    int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t q_stride,
                                    int64_t k_stride, float rope_theta, cudaStream_t stream) {
  return launch_rope(q, k, positions, tokens, qo_heads, kv_heads, head_dim, q_stride, k_stride, rope_theta, stream);
}
