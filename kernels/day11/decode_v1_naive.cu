// Day 11, v1: naive decode attention, three passes over global memory.
// One block per (request, query head) over contiguous K, V [batch, len, kv_heads, head_dim] (bf16):
// pass 1 writes every score to a workspace in global memory, then the block finds their max and sum,
// pass 3 reads V and the scores again. Each query head reads its KV head's K and V by itself, so a
// group of 4 query heads reads the same bytes 4 times (from L2, if it still holds them).
// Napkin math (batch 64 x 4096, 32 / 8 heads, head_dim 128): KV 1.07 GB, but read 4x by the query
// heads and the scores written and read back: expect well under 0.25x of a copy of the KV bytes.
#include "course/block.cuh"
#include "course/common.cuh"

namespace {

constexpr int V1_THREADS = 128;

__global__ void __launch_bounds__(V1_THREADS)
    decode_naive_kernel(__nv_bfloat16* __restrict__ o, const __nv_bfloat16* __restrict__ q,
                        const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                        float* __restrict__ scores, int len, int qo_heads, int kv_heads, int head_dim, float sm_scale) {
  const int qh = blockIdx.x, b = blockIdx.y, h = qh / (qo_heads / kv_heads);
  const __nv_bfloat16* qr = q + (static_cast<int64_t>(b) * qo_heads + qh) * head_dim;
  float* sr = scores + (static_cast<int64_t>(b) * qo_heads + qh) * len;  // (len,)
  // Pass 1: one thread per token, a whole dot product each (uncoalesced: neighbours read rows
  // kv_heads * head_dim apart).
  float mx = -INFINITY;
  for (int t = threadIdx.x; t < len; t += V1_THREADS) {
    const __nv_bfloat16* kr = k + ((static_cast<int64_t>(b) * len + t) * kv_heads + h) * head_dim;
    float s = 0.0f;
    for (int i = 0; i < head_dim; ++i) s += course::to_float(qr[i]) * course::to_float(kr[i]);
    sr[t] = s * sm_scale;
    mx = fmaxf(mx, s * sm_scale);
  }
  mx = course::block_reduce_max(mx);
  // Pass 2: the softmax's denominator.
  float sum = 0.0f;
  for (int t = threadIdx.x; t < len; t += V1_THREADS) sum += __expf(sr[t] - mx);
  sum = course::block_reduce_sum(sum);
  // Pass 3: one thread per output dimension, every token's weight read back from global memory.
  for (int i = threadIdx.x; i < head_dim; i += V1_THREADS) {
    float acc = 0.0f;
    for (int t = 0; t < len; ++t)
      acc += __expf(sr[t] - mx) * course::to_float(v[((static_cast<int64_t>(b) * len + t) * kv_heads + h) * head_dim + i]);
    o[(static_cast<int64_t>(b) * qo_heads + qh) * head_dim + i] = course::from_float<__nv_bfloat16>(acc / sum);
  }
}

}  // namespace

// scores: a workspace of batch * qo_heads * len floats.
COURSE_EXPORT cudaError_t decode_v1_naive_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                               const __nv_bfloat16* v, float* scores, int64_t batch, int64_t len,
                                               int64_t qo_heads, int64_t kv_heads, int64_t head_dim, float sm_scale,
                                               cudaStream_t stream) {
  if (batch < 1 || len < 1 || kv_heads < 1 || qo_heads % kv_heads != 0) return cudaErrorInvalidValue;
  decode_naive_kernel<<<dim3(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch)), V1_THREADS, 0, stream>>>(
      o, q, k, v, scores, static_cast<int>(len), static_cast<int>(qo_heads), static_cast<int>(kv_heads),
      static_cast<int>(head_dim), sm_scale);
  return cudaGetLastError();
}
