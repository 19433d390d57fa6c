// Day 11, v3: + FlashInfer's decode layout. One block per (request, KV head) of (16, 4, 2) threads: 16
// lanes over head_dim (16-byte loads), the GQA group's 4 query heads, 2 token groups. K and V come from
// DRAM once for the group (v2: once per query head); a score is a reduction over 16 lanes (4 SHFL.BFLY
// steps), and a lane scores CHUNK = 8 tokens, then rescales its state once (v2: a division per token).
// Napkin math (batch 64 x 4096, 1.07 GB read once): ~65 instructions per token and thread, 4 warps per
// 16 tokens (8 KB): ~0.25 warp instructions per byte, ~80% of an H100's issue (132 SMs x 4 x 1.75 GHz)
// at 3 TB/s. But a thread's loads and its math take turns: its 16 loads go out together, it waits, then
// it computes with nothing in flight. 512 blocks are ~4 per SM (5 fit: 96 registers), 32 KB a round;
// a round is ~0.8 us of waiting plus ~1.2 us of issue (16 warps x ~525 instructions on 4 schedulers):
// ~16 bytes/ns where an SM needs ~23 for 3 TB/s, so ~0.7x the read, a little more where rounds
// overlap. Batch 1 x 32768: 8 blocks, one per SM, each 8 KB per ~1 us (0.7 wait, 0.3 math): ~0.02x.
#include "course/decode_versions.cuh"

namespace decode_v3 {  // the versions of a day build into one extension: names apart

using namespace decode_versions;  // the shared problem and pieces: course/decode_versions.cuh

constexpr int BDZ = 2;                       // token groups: 16 x 4 x 2 = 128 threads (FlashInfer's for group 4)
constexpr int CHUNK = 8;                     // tokens a group takes per step, all loaded before any is used
constexpr int THREADS = BDX * GROUP * BDZ;

__global__ void __launch_bounds__(THREADS)
    decode_gqa_lanes_kernel(__nv_bfloat16* __restrict__ o, const __nv_bfloat16* __restrict__ q,
                            const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v, int len,
                            int kv_heads, float scale_log2) {
  const int h = blockIdx.x, b = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const int64_t qh = static_cast<int64_t>(b) * kv_heads * GROUP + h * GROUP + ty;  // row of q and o
  float qf[VEC];
  load_q(qf, q + qh * HEAD_DIM + tx * VEC, scale_log2);
  // Token t's row of KV head h is t token slots (kv_heads rows of HEAD_DIM) past token 0's.
  const int64_t stride = static_cast<int64_t>(kv_heads) * HEAD_DIM;
  const int64_t first = (static_cast<int64_t>(b) * len * kv_heads + h) * HEAD_DIM + tx * VEC;
  LaneState st;
  st.init();
  // Group tz takes tokens tz * CHUNK .. + CHUNK - 1 of every step of BDZ * CHUNK (one warp's lanes all
  // share tz, so the shuffles see the same trip count).
  for (int t0 = tz * CHUNK; t0 < len; t0 += BDZ * CHUNK) {
    Lanes kr[CHUNK], vr[CHUNK];  // 16 independent 16-byte loads in flight before the first use
#pragma unroll
    for (int j = 0; j < CHUNK; ++j) {
      // Past the end, the last token again (no branch; an L1 hit): finite, and masked in add_chunk.
      const int64_t t = min(t0 + j, len - 1);
      kr[j].load(k + first + t * stride);
      vr[j].load(v + first + t * stride);
    }
    st.add_chunk(qf, kr, vr, len - t0);  // 8 scores, one rescale, o += p v (tokens >= len weigh 0)
  }
  merge_token_groups<BDZ>(st);  // the 2 groups' states, into tz = 0
  if (tz == 0) st.store(o + qh * HEAD_DIM + tx * VEC);
}

}  // namespace decode_v3

// Contiguous K, V [batch, len, kv_heads, 128], bf16; qo_heads = 4 kv_heads (the group is compiled in).
COURSE_EXPORT cudaError_t decode_v3_gqa_lanes_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                   const __nv_bfloat16* v, int64_t batch, int64_t len,
                                                   int64_t qo_heads, int64_t kv_heads, float sm_scale,
                                                   cudaStream_t stream) {
  using namespace decode_v3;
  if (batch < 1 || batch > 65535 || len < 1 || kv_heads < 1 || qo_heads != GROUP * kv_heads)
    return cudaErrorInvalidValue;
  decode_gqa_lanes_kernel<<<dim3(static_cast<unsigned>(kv_heads), static_cast<unsigned>(batch)),
                            dim3(BDX, GROUP, BDZ), 0, stream>>>(o, q, k, v, static_cast<int>(len),
                                                                static_cast<int>(kv_heads), sm_scale * course::LOG2E);
  return cudaGetLastError();
}
