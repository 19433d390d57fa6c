// Day 11, v2: + online softmax in one pass, no scores in global memory, coalesced rows.
// One block of 4 warps per (request, query head). A warp takes one token at a time: each lane holds
// head_dim / 32 dimensions of q, the dot product is a warp reduction (5 SHFL.BFLY steps), and the warp
// updates its online-softmax state (course/attention.cuh: m, d and its share of o) by that token
// alone. Tokens go to the warps round robin; the 4 states merge in shared memory at the end. Still one
// block per *query* head: a group of 4 reads the same K, V 4 times.
// Napkin math (batch 64 x 4096, 1.07 GB of KV): a token costs a warp ~115 instructions (the reduction,
// two exponentials, and a division per element of o: the state keeps o normalised), so the group's 4
// query heads spend ~0.9 warp instructions per KV byte where an H100 issues ~0.3 per byte at 3 TB/s
// (132 SMs x 4 schedulers x 1.75 GHz): issue alone caps it near 0.3x. Latency caps it lower: V's load
// waits behind the score (it sits in the state update's branch), so a token costs a warp two round
// trips (~0.6 us each). 12 blocks per SM (37 registers) = 48 warps x 512 B per ~1.3 us, a quarter of
// it new bytes (the other query heads' reads of the same rows hit L2): ~0.6 TB/s, expect ~0.15-0.2x
// the read. Batch 1 x 32768: 32 blocks, one per SM, 4 warps each: ~0.005x.
#include "course/decode_versions.cuh"

namespace {

using namespace decode_versions;  // the shared problem and pieces: course/decode_versions.cuh

__global__ void __launch_bounds__(WARPS * 32)
    decode_online_kernel(__nv_bfloat16* __restrict__ o, const __nv_bfloat16* __restrict__ q,
                         const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v, int len,
                         int qo_heads, int kv_heads, float scale_log2) {
  const int qh = blockIdx.x, b = blockIdx.y, h = qh / (qo_heads / kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Row qv;
  qv.load(q + (static_cast<int64_t>(b) * qo_heads + qh) * HEAD_DIM + lane * PER_LANE);
  State st;
  st.init();
  for (int t = warp; t < len; t += WARPS) {  // add_token: the warp's dot product and state update
    const int64_t row = ((static_cast<int64_t>(b) * len + t) * kv_heads + h) * HEAD_DIM + lane * PER_LANE;
    add_token(st, qv, k + row, v + row, scale_log2);
  }
  merge_warps(st);  // the 4 warps' states, merged by warp 0
  if (warp == 0)
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i)
      o[(static_cast<int64_t>(b) * qo_heads + qh) * HEAD_DIM + lane * PER_LANE + i] =
          course::from_float<__nv_bfloat16>(st.o[i]);
}

}  // namespace

// Contiguous K, V [batch, len, kv_heads, 128], bf16.
COURSE_EXPORT cudaError_t decode_v2_online_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                const __nv_bfloat16* v, int64_t batch, int64_t len, int64_t qo_heads,
                                                int64_t kv_heads, float sm_scale, cudaStream_t stream) {
  if (batch < 1 || len < 1 || kv_heads < 1 || qo_heads % kv_heads != 0) return cudaErrorInvalidValue;
  decode_online_kernel<<<dim3(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch)), WARPS * 32, 0,
                         stream>>>(o, q, k, v, static_cast<int>(len), static_cast<int>(qo_heads),
                                   static_cast<int>(kv_heads), sm_scale * course::LOG2E);
  return cudaGetLastError();
}
