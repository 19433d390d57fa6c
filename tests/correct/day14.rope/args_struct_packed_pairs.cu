// CORRECT kernel arguments in a struct passed by value (q and k as void*), raw uint4 loads whose 32-bit words are converted two at a time (__half22float2 / __bfloat1622float2, __floats2half2_rn / __floats2bfloat162_rn) through a traits struct, the angles in a plain __device__ helper around course::rope_cos_sin
// Rotary position embedding (Llama's rotate-half form) applied in place to q and k.
#include <cstdint>
#include <cstring>

#include "course/rope.cuh"

#define HEADS_PER_STEP 8  // heads loaded before any is stored
#define MAX_HEADS_PER_BLOCK 8
#define BLOCK 128

struct RopeArgs {
  void* q;
  void* k;
  const int32_t* positions;
  int64_t tokens;
  int64_t q_stride, k_stride;
  int qo_heads, kv_heads, head_dim;
  int heads_per_block;
  float log2_theta;
  bool vec16;
};

// Two 16-bit values in one 32-bit word <-> two floats.
template <typename T>
struct Packed;
template <>
struct Packed<__half> {
  static __device__ __forceinline__ float2 unpack(uint32_t w) {
    __half2 h;
    memcpy(&h, &w, 4);
    return __half22float2(h);
  }
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    uint32_t w;
    memcpy(&w, &h, 4);
    return w;
  }
};
template <>
struct Packed<__nv_bfloat16> {
  static __device__ __forceinline__ float2 unpack(uint32_t w) {
    __nv_bfloat162 h;
    memcpy(&h, &w, 4);
    return __bfloat1622float2(h);
  }
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    uint32_t w;
    memcpy(&w, &h, 4);
    return w;
  }
};

// cos and sin of pair i's angle at position pos: pos * theta^(-2i/d), reduced to a fraction of a turn first
__device__ void pair_cos_sin(int32_t pos, int i, int head_dim, float log2_theta, float* c, float* s) {
  course::rope_cos_sin(pos, course::rope_turns(i, head_dim, log2_theta), c, s);
}

// Pairs (lo.x, hi.x) and (lo.y, hi.y) of one 32-bit word each, turned by angles 0 and 1.
template <typename T>
__device__ __forceinline__ void turn_word(uint32_t& lo, uint32_t& hi, float c0, float s0, float c1, float s1) {
  const float2 x = Packed<T>::unpack(lo), y = Packed<T>::unpack(hi);
  lo = Packed<T>::pack(x.x * c0 - y.x * s0, x.y * c1 - y.y * s1);
  hi = Packed<T>::pack(y.x * c0 + x.x * s0, y.y * c1 + x.y * s1);
}

// 8 pairs per thread: half-rows of 16 bytes.
template <typename T>
__device__ __forceinline__ void rotate_token_vec(const RopeArgs& a, T* q_row, T* k_row, int32_t pos, int c,
                                                 int head_begin, int head_end) {
  const int half = a.head_dim / 2;
  float cs[8], sn[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) pair_cos_sin(pos, c * 8 + j, a.head_dim, a.log2_theta, &cs[j], &sn[j]);

  for (int h0 = head_begin; h0 < head_end; h0 += HEADS_PER_STEP) {
    uint4 lo[HEADS_PER_STEP], hi[HEADS_PER_STEP];
    T* row[HEADS_PER_STEP];
#pragma unroll
    for (int s = 0; s < HEADS_PER_STEP; ++s) {
      const int h = h0 + s;
      row[s] = h < a.qo_heads ? q_row + static_cast<int64_t>(h) * a.head_dim
                              : k_row + static_cast<int64_t>(h - a.qo_heads) * a.head_dim;
      if (h < head_end) {
        lo[s] = *reinterpret_cast<const uint4*>(row[s] + c * 8);
        hi[s] = *reinterpret_cast<const uint4*>(row[s] + half + c * 8);
      }
    }
#pragma unroll
    for (int s = 0; s < HEADS_PER_STEP; ++s) {
      if (h0 + s < head_end) {
        turn_word<T>(lo[s].x, hi[s].x, cs[0], sn[0], cs[1], sn[1]);
        turn_word<T>(lo[s].y, hi[s].y, cs[2], sn[2], cs[3], sn[3]);
        turn_word<T>(lo[s].z, hi[s].z, cs[4], sn[4], cs[5], sn[5]);
        turn_word<T>(lo[s].w, hi[s].w, cs[6], sn[6], cs[7], sn[7]);
        *reinterpret_cast<uint4*>(row[s] + c * 8) = lo[s];
        *reinterpret_cast<uint4*>(row[s] + half + c * 8) = hi[s];
      }
    }
  }
}

// One pair per thread: rows or pointers not 16-byte aligned, or half not a multiple of 8.
template <typename T>
__device__ __forceinline__ void rotate_token_scalar(const RopeArgs& a, T* q_row, T* k_row, int32_t pos, int i,
                                                    int head_begin, int head_end) {
  const int half = a.head_dim / 2;
  float cs, sn;
  pair_cos_sin(pos, i, a.head_dim, a.log2_theta, &cs, &sn);
  for (int h = head_begin; h < head_end; ++h) {
    T* row = h < a.qo_heads ? q_row + static_cast<int64_t>(h) * a.head_dim
                            : k_row + static_cast<int64_t>(h - a.qo_heads) * a.head_dim;
    const float x = course::to_float(row[i]), y = course::to_float(row[half + i]);
    row[i] = course::from_float<T>(x * cs - y * sn);
    row[half + i] = course::from_float<T>(y * cs + x * sn);
  }
}

template <typename T>
__global__ void __launch_bounds__(BLOCK) rope_inplace(const RopeArgs a) {
  const int half = a.head_dim / 2;
  const int per_token = a.vec16 ? half / 8 : half;  // threads per token
  const int tokens_here = BLOCK / per_token;
  const int local = threadIdx.x / per_token;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * tokens_here + local;
  if (local >= tokens_here || t >= a.tokens) return;
  const int c = threadIdx.x % per_token;
  const int head_begin = blockIdx.y * a.heads_per_block;
  const int head_end = min(head_begin + a.heads_per_block, a.qo_heads + a.kv_heads);
  T* q_row = static_cast<T*>(a.q) + t * a.q_stride;
  T* k_row = static_cast<T*>(a.k) + t * a.k_stride;
  const int32_t pos = a.positions[t];
  if (a.vec16) {
    rotate_token_vec<T>(a, q_row, k_row, pos, c, head_begin, head_end);
  } else {
    rotate_token_scalar<T>(a, q_row, k_row, pos, c, head_begin, head_end);
  }
}

template <typename T>
cudaError_t rope(T* q, T* k, const int32_t* positions, int64_t tokens, int64_t qo_heads, int64_t kv_heads,
                 int64_t head_dim, int64_t q_stride, int64_t k_stride, float rope_theta, cudaStream_t stream) {
  if (tokens == 0 || qo_heads + kv_heads == 0) return cudaSuccess;
  if (tokens < 0 || qo_heads < 0 || kv_heads < 0 || head_dim % 2 != 0 || head_dim / 2 > BLOCK || !(rope_theta > 1.0f))
    return cudaErrorInvalidValue;
  RopeArgs a;
  a.q = q;
  a.k = k;
  a.positions = positions;
  a.tokens = tokens;
  a.q_stride = q_stride;
  a.k_stride = k_stride;
  a.qo_heads = static_cast<int>(qo_heads);
  a.kv_heads = static_cast<int>(kv_heads);
  a.head_dim = static_cast<int>(head_dim);
  a.log2_theta = static_cast<float>(log2(static_cast<double>(rope_theta)));
  a.vec16 = (head_dim / 2) % 8 == 0 && q_stride % 8 == 0 && k_stride % 8 == 0 &&
            reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(k) % 16 == 0;
  const int per_token = static_cast<int>(a.vec16 ? head_dim / 16 : head_dim / 2);
  const int64_t blocks_x = (tokens + BLOCK / per_token - 1) / (BLOCK / per_token);

  // few tokens: split the heads over blockIdx.y so the GPU has ~4 blocks per SM
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (sms <= 0) sms = 132;
  const int heads = a.qo_heads + a.kv_heads;
  int64_t splits = (4 * static_cast<int64_t>(sms) + blocks_x - 1) / blocks_x;
  if (splits < 1) splits = 1;
  if (splits > heads) splits = heads;
  int hpb = static_cast<int>((heads + splits - 1) / splits);
  if (hpb > MAX_HEADS_PER_BLOCK) hpb = MAX_HEADS_PER_BLOCK;
  a.heads_per_block = hpb;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>((heads + hpb - 1) / hpb));
  rope_inplace<T><<<grid, BLOCK, 0, stream>>>(a);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t rope_fp16(__half* q, __half* k, const int32_t* positions, int64_t tokens,
                                    int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t q_stride,
                                    int64_t k_stride, float rope_theta, cudaStream_t stream) {
  return rope(q, k, positions, tokens, qo_heads, kv_heads, head_dim, q_stride, k_stride, rope_theta, stream);
}

COURSE_EXPORT cudaError_t rope_bf16(__nv_bfloat16* q, __nv_bfloat16* k, const int32_t* positions, int64_t tokens,
                                    int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t q_stride,
                                    int64_t k_stride, float rope_theta, cudaStream_t stream) {
  return rope(q, k, positions, tokens, qo_heads, kv_heads, head_dim, q_stride, k_stride, rope_theta, stream);
}
