// CORRECT angles by the learner's own exact turn reduction then the fast __sincosf on [-pi, pi], the kernel templated on the vector width (two kernels, the launcher picks one), the rotation as FMAs, the SM count cached in static locals, fprintf(stderr) on a launch error
// Rotary position embedding (Llama's rotate-half form) applied in place to q and k; q and k may be slices of one qkv.
#include <cstdio>

#include "course/common.cuh"
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
constexpr float kTwoPi = 6.283185307179586f;

// Turns per position of pair i, theta^(-2i/d) / (2 pi), as exp2 of one exponent: log2(2 pi) folded in.
__device__ __forceinline__ float turns_per_position(int i, int head_dim, float log2_theta) {
  return exp2f(-static_cast<float>(2 * i) / static_cast<float>(head_dim) * log2_theta - 2.6514961294723187f);
}

// cos and sin of pos * turns full turns. The whole turns are dropped exactly first (an FMA gives the product's
// rounding error back), so the fast __sincosf only ever sees an angle in [-pi, pi], where it is accurate to ~2^-21.4.
__device__ __forceinline__ void angle_cos_sin(int32_t pos, float turns, float& c, float& s) {
  const float p = static_cast<float>(pos);
  const float whole = p * turns;
  const float err = fmaf(p, turns, -whole);
  const float frac = (whole - rintf(whole)) + err;
  __sincosf(kTwoPi * frac, &s, &c);
}

// One thread's share of one token: VEC pairs, elements [c VEC, c VEC + VEC) of the first half of
// every head in [head_begin, head_end) and their partners half = d/2 elements later. A head h <
// qo_heads is q's head h, the others are k's heads h - qo_heads.
// VEC 8: 16-byte loads (rows and pointers aligned, half a multiple of 8); VEC 1: one element.
template <typename T, int VEC>
__device__ __forceinline__ void rope_token(T* q_row, T* k_row, int32_t pos, int c, int half, int qo_heads,
                                           int head_begin, int head_end, float log2_theta) {
  // The angles of this thread's pairs: computed once, used for every head.
  float cs[VEC], sn[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    angle_cos_sin(pos, turns_per_position(c * VEC + j, 2 * half, log2_theta), cs[j], sn[j]);
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
          const float x = course::to_float(lo[s][j]), y = course::to_float(hi[s][j]);
          lo[s][j] = course::from_float<T>(fmaf(x, cs[j], -y * sn[j]));
          hi[s][j] = course::from_float<T>(fmaf(y, cs[j], x * sn[j]));
        }
        lo[s].store(row[s] + c * VEC);
        hi[s].store(row[s] + half + c * VEC);
      }
    }
  }
}

// A token's threads_per_token = half / VEC threads cover its heads; a block holds ROPE_THREADS /
// threads_per_token tokens (a few threads idle when that does not divide). blockIdx.y picks a
// slice of the heads: the launcher splits them when there are too few tokens to fill the GPU.
// VEC = 8: the 16-byte kernel; VEC = 1: the one for unaligned rows.
template <typename T, int VEC>
__global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(T* __restrict__ q, T* __restrict__ k, const int32_t* __restrict__ positions, int64_t tokens,
                int qo_heads, int kv_heads, int head_dim, int64_t q_stride, int64_t k_stride,
                float log2_theta, int heads_per_block) {
  const int half = head_dim / 2;
  const int threads_per_token = half / VEC;
  const int tokens_per_block = ROPE_THREADS / threads_per_token;
  const int local = static_cast<int>(threadIdx.x) / threads_per_token;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * tokens_per_block + local;
  if (local >= tokens_per_block || t >= tokens) return;
  const int c = static_cast<int>(threadIdx.x) % threads_per_token;  // which VEC (or 1) pairs of each head
  const int head_begin = static_cast<int>(blockIdx.y) * heads_per_block;
  const int head_end = min(head_begin + heads_per_block, qo_heads + kv_heads);
  T* q_row = q + t * q_stride;  // (qo_heads, head_dim) of token t
  T* k_row = k + t * k_stride;  // (kv_heads, head_dim)
  rope_token<T, VEC>(q_row, k_row, positions[t], c, half, qo_heads, head_begin, head_end, log2_theta);
}

// The SM count of the current device, asked once.
int sm_count() {
  static int cached_device = -1;
  static int cached_sms = 0;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  if (device != cached_device) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cached_sms = sms > 0 ? sms : 132;
    cached_device = device;
  }
  return cached_sms;
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
  const int sms = sm_count();
  const int heads = static_cast<int>(qo_heads + kv_heads);
  const int64_t want_y = course::ceil_div<int64_t>(4 * static_cast<int64_t>(sms), blocks_x);
  const int splits = static_cast<int>(want_y < heads ? (want_y > 1 ? want_y : 1) : heads);
  const int heads_per_block = min(course::ceil_div(heads, splits), ROPE_MAX_HEADS_PER_BLOCK);
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(course::ceil_div(heads, heads_per_block)));
  const float log2_theta = static_cast<float>(log2(static_cast<double>(rope_theta)));
  if (vectorized) {
    rope_kernel<T, VEC><<<grid, ROPE_THREADS, 0, stream>>>(q, k, positions, tokens, static_cast<int>(qo_heads),
                                                           static_cast<int>(kv_heads), static_cast<int>(head_dim),
                                                           q_stride, k_stride, log2_theta, heads_per_block);
  } else {
    rope_kernel<T, 1><<<grid, ROPE_THREADS, 0, stream>>>(q, k, positions, tokens, static_cast<int>(qo_heads),
                                                         static_cast<int>(kv_heads), static_cast<int>(head_dim),
                                                         q_stride, k_stride, log2_theta, heads_per_block);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fprintf(stderr, "rope: launch of (%u, %u) blocks failed: %s\n", grid.x, grid.y, cudaGetErrorString(err));
  return err;
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
