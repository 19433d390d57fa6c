// CORRECT angles as HF/FlashInfer compute them, sincosf(pos * exp2f(-2i/d log2 theta)) in a plain __device__ helper (no exact turn reduction), kernel arguments in a struct passed by value, uint4 loads through a union instead of course::vec_t
// Rotary position embedding (Llama's rotate-half form) applied in place to q and k.
#include <cstdint>

#include "course/common.cuh"

#define HEADS_PER_STEP 8   // heads loaded before any is stored
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

// cos and sin of pair i's angle at position pos: pos * theta^(-2i/d)
__device__ void pair_cos_sin(int32_t pos, int i, int head_dim, float log2_theta, float* c, float* s) {
  const float inv_freq = exp2f(-static_cast<float>(2 * i) / static_cast<float>(head_dim) * log2_theta);
  sincosf(static_cast<float>(pos) * inv_freq, s, c);
}

template <typename T, int N>
union Chunk {
  uint4 raw;  // N == 8: 16 bytes
  T v[N];
};

template <typename T, int N>
struct Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ void load_n(Pack<T, N>& p, const T* src) {
  if constexpr (N == 8) {
    Chunk<T, 8> u;
    u.raw = *reinterpret_cast<const uint4*>(src);
#pragma unroll
    for (int j = 0; j < 8; ++j) p.v[j] = u.v[j];
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) p.v[j] = src[j];
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_n(T* dst, const Pack<T, N>& p) {
  if constexpr (N == 8) {
    Chunk<T, 8> u;
#pragma unroll
    for (int j = 0; j < 8; ++j) u.v[j] = p.v[j];
    *reinterpret_cast<uint4*>(dst) = u.raw;
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[j] = p.v[j];
  }
}

template <typename T, int N>
__device__ __forceinline__ void rotate_token(const RopeArgs& a, T* q_row, T* k_row, int32_t pos, int c, int head_begin,
                                             int head_end) {
  const int half = a.head_dim / 2;
  float cs[N], sn[N];
#pragma unroll
  for (int j = 0; j < N; ++j) pair_cos_sin(pos, c * N + j, a.head_dim, a.log2_theta, &cs[j], &sn[j]);

  for (int h0 = head_begin; h0 < head_end; h0 += HEADS_PER_STEP) {
    Pack<T, N> x1[HEADS_PER_STEP], x2[HEADS_PER_STEP];
    T* row[HEADS_PER_STEP];
#pragma unroll
    for (int s = 0; s < HEADS_PER_STEP; ++s) {
      const int h = h0 + s;
      row[s] = h < a.qo_heads ? q_row + static_cast<int64_t>(h) * a.head_dim
                              : k_row + static_cast<int64_t>(h - a.qo_heads) * a.head_dim;
      if (h < head_end) {
        load_n<T, N>(x1[s], row[s] + c * N);
        load_n<T, N>(x2[s], row[s] + half + c * N);
      }
    }
#pragma unroll
    for (int s = 0; s < HEADS_PER_STEP; ++s) {
      if (h0 + s < head_end) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float x = course::to_float(x1[s].v[j]), y = course::to_float(x2[s].v[j]);
          x1[s].v[j] = course::from_float<T>(x * cs[j] - y * sn[j]);
          x2[s].v[j] = course::from_float<T>(y * cs[j] + x * sn[j]);
        }
        store_n<T, N>(row[s] + c * N, x1[s]);
        store_n<T, N>(row[s] + half + c * N, x2[s]);
      }
    }
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
    rotate_token<T, 8>(a, q_row, k_row, pos, c, head_begin, head_end);
  } else {
    rotate_token<T, 1>(a, q_row, k_row, pos, c, head_begin, head_end);
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
