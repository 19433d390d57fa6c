// Day 11, v3: + split-KV. v2 with one block per (request, query head) fills 132 SMs only when
// batch * qo_heads is large; batch 1 gives 32 blocks and most SMs idle. Here each request's tokens are
// split into `splits` ranges (grid.z), each block writes its state (o, lse = m + log2 d) to a
// workspace, and a second kernel merges the splits' states (FlashInfer cascade.cuh's MergeStates).
// How many: enough blocks for two per SM, splits = ceil(2 SMs / (batch * qo_heads)), at most 32.
// Napkin math (batch 1 x 32768, 32 query heads): 134 MB of KV read 4x; without splits 32 blocks on
// 132 SMs reach at most ~0.25x the copy; with 8-9 splits every SM has work.
#include "course/decode_versions.cuh"

namespace {

using namespace decode_versions;  // the shared problem and pieces: course/decode_versions.cuh

__global__ void __launch_bounds__(WARPS * 32)
    decode_split_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                        const __nv_bfloat16* __restrict__ v, float* __restrict__ workspace, int len, int qo_heads,
                        int kv_heads, float scale_log2) {
  const int qh = blockIdx.x, b = blockIdx.y, h = qh / (qo_heads / kv_heads);
  const int splits = gridDim.z, per_split = (len + splits - 1) / splits;  // this block: tokens t0 .. t1 - 1
  const int t0 = min(len, static_cast<int>(blockIdx.z) * per_split), t1 = min(len, t0 + per_split);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Row qv;
  qv.load(q + (static_cast<int64_t>(b) * qo_heads + qh) * HEAD_DIM + lane * PER_LANE);
  State st;
  st.init();
  for (int t = t0 + warp; t < t1; t += WARPS) {
    const int64_t row = ((static_cast<int64_t>(b) * len + t) * kv_heads + h) * HEAD_DIM + lane * PER_LANE;
    add_token(st, qv, k + row, v + row, scale_log2);
  }
  merge_warps(st);
  if (warp == 0) store_split(st, workspace, qo_heads);  // this split's state: o and its lse in base 2
}

}  // namespace

// Contiguous K, V [batch, len, kv_heads, 128], bf16; workspace: batch * splits * qo_heads * 129 floats, at most
// max(batch, 32) * qo_heads * 129 (batch * splits <= 32 whenever splits > 1).
COURSE_EXPORT cudaError_t decode_v3_split_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                const __nv_bfloat16* v, float* workspace, int64_t batch, int64_t len, int64_t qo_heads,
                                                int64_t kv_heads, float sm_scale, cudaStream_t stream) {
  if (batch < 1 || len < 1 || kv_heads < 1 || qo_heads % kv_heads != 0) return cudaErrorInvalidValue;
  const int64_t splits = split_count(batch, qo_heads);
  const dim3 grid(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch), static_cast<unsigned>(splits));
  decode_split_kernel<<<grid, WARPS * 32, 0, stream>>>(q, k, v, workspace, static_cast<int>(len),
                                                      static_cast<int>(qo_heads), static_cast<int>(kv_heads),
                                                      sm_scale * course::LOG2E);
  merge_states_kernel<__nv_bfloat16><<<dim3(grid.x, grid.y), 32, 0, stream>>>(o, workspace, static_cast<int>(qo_heads),
                                                               static_cast<int>(splits));
  return cudaGetLastError();
}
