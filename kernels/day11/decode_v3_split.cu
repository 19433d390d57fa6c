// Day 11, v3: + split-KV. v2 with one block per (request, query head) fills 132 SMs only when
// batch * qo_heads is large; batch 1 gives 32 blocks and most SMs idle. Here each request's tokens are
// split into `splits` ranges (grid.z), each block writes its state (o, lse = m + log2 d) to a
// workspace, and a second kernel merges the splits' states (FlashInfer cascade.cuh's MergeStates).
// How many: enough blocks for two per SM, splits = ceil(2 SMs / (batch * qo_heads)), at most 32.
// Napkin math (batch 1 x 32768, 32 query heads): 134 MB of KV read 4x; without splits 32 blocks on
// 132 SMs reach at most ~0.25x the copy; with 8-9 splits every SM has work.
#include "course/attention.cuh"
#include "course/vec.cuh"
#include "course/math.cuh"
#include "course/warp.cuh"

namespace {

constexpr int V3_WARPS = 4;
constexpr int V3_HEAD_DIM = 128;
constexpr int V3_PER_LANE = V3_HEAD_DIM / 32;  // 4 bf16 = 8 bytes per lane per row

__global__ void __launch_bounds__(V3_WARPS * 32)
    decode_split_kernel(__nv_bfloat16* __restrict__ o, const __nv_bfloat16* __restrict__ q,
                         const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                         float* __restrict__ workspace, int len, int qo_heads, int kv_heads, float scale_log2) {
  const int qh = blockIdx.x, b = blockIdx.y, h = qh / (qo_heads / kv_heads);
  const int splits = gridDim.z, per_split = (len + splits - 1) / splits;
  const int t0 = min(len, static_cast<int>(blockIdx.z) * per_split), t1 = min(len, t0 + per_split);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  course::vec_t<__nv_bfloat16, V3_PER_LANE> qv;
  qv.load(q + (static_cast<int64_t>(b) * qo_heads + qh) * V3_HEAD_DIM + lane * V3_PER_LANE);
  course::softmax_state<V3_PER_LANE> st;
  st.init();
  for (int t = t0 + warp; t < t1; t += V3_WARPS) {
    const int64_t row = ((static_cast<int64_t>(b) * len + t) * kv_heads + h) * V3_HEAD_DIM + lane * V3_PER_LANE;
    course::vec_t<__nv_bfloat16, V3_PER_LANE> kv, vv;
    kv.load(k + row);
    vv.load(v + row);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < V3_PER_LANE; ++i) s += course::to_float(qv[i]) * course::to_float(kv[i]);
    s = course::warp_reduce_sum(s) * scale_log2;
    float vf[V3_PER_LANE];
#pragma unroll
    for (int i = 0; i < V3_PER_LANE; ++i) vf[i] = course::to_float(vv[i]);
    st.merge(vf, s, 1.0f);  // a state of one token: o = v, m = s, d = 1
  }
  // The 4 warps' states, merged by warp 0.
  __shared__ float o_s[V3_WARPS][V3_HEAD_DIM], m_s[V3_WARPS], d_s[V3_WARPS];
#pragma unroll
  for (int i = 0; i < V3_PER_LANE; ++i) o_s[warp][lane * V3_PER_LANE + i] = st.o[i];
  if (lane == 0) {
    m_s[warp] = st.m;
    d_s[warp] = st.d;
  }
  __syncthreads();
  if (warp == 0) {
    for (int w = 1; w < V3_WARPS; ++w) {
      float ow[V3_PER_LANE];
#pragma unroll
      for (int i = 0; i < V3_PER_LANE; ++i) ow[i] = o_s[w][lane * V3_PER_LANE + i];
      st.merge(ow, m_s[w], d_s[w]);
    }
    // This split's state: o (normalised) and lse in base 2, at partial (b, split, qh).
    const int64_t i0 = (static_cast<int64_t>(b) * splits + blockIdx.z) * qo_heads + qh;
#pragma unroll
    for (int i = 0; i < V3_PER_LANE; ++i) workspace[i0 * V3_HEAD_DIM + lane * V3_PER_LANE + i] = st.o[i];
    if (lane == 0) workspace[static_cast<int64_t>(gridDim.y) * splits * qo_heads * V3_HEAD_DIM + i0] = st.lse2();
  }
}

// One warp per (query head, request): merge the splits' states in order.
__global__ void __launch_bounds__(32)
    merge_states_kernel(__nv_bfloat16* __restrict__ o, const float* __restrict__ workspace, int qo_heads, int splits) {
  const int qh = blockIdx.x, b = blockIdx.y, lane = threadIdx.x;
  const float* lse = workspace + static_cast<int64_t>(gridDim.y) * splits * qo_heads * V3_HEAD_DIM;
  course::softmax_state<V3_PER_LANE> st;
  st.init();
  for (int s = 0; s < splits; ++s) {
    const int64_t i0 = (static_cast<int64_t>(b) * splits + s) * qo_heads + qh;
    float os[V3_PER_LANE];
#pragma unroll
    for (int i = 0; i < V3_PER_LANE; ++i) os[i] = workspace[i0 * V3_HEAD_DIM + lane * V3_PER_LANE + i];
    st.merge_lse(os, lse[i0]);
  }
#pragma unroll
  for (int i = 0; i < V3_PER_LANE; ++i)
    o[(static_cast<int64_t>(b) * qo_heads + qh) * V3_HEAD_DIM + lane * V3_PER_LANE + i] =
        course::from_float<__nv_bfloat16>(st.o[i]);
}

}  // namespace

// Contiguous K, V [batch, len, kv_heads, 128], bf16; workspace: batch * splits * qo_heads * 129 floats, at most
// max(batch, 32) * qo_heads * 129 (batch * splits <= 32 whenever splits > 1).
COURSE_EXPORT cudaError_t decode_v3_split_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                const __nv_bfloat16* v, float* workspace, int64_t batch, int64_t len, int64_t qo_heads,
                                                int64_t kv_heads, float sm_scale, cudaStream_t stream) {
  if (batch < 1 || len < 1 || kv_heads < 1 || qo_heads % kv_heads != 0) return cudaErrorInvalidValue;
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  int64_t splits = course::ceil_div<int64_t>(2 * sms, batch * qo_heads);
  splits = splits < 1 ? 1 : (splits > 32 / batch ? (32 / batch > 1 ? 32 / batch : 1) : splits);
  const dim3 grid(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch), static_cast<unsigned>(splits));
  decode_split_kernel<<<grid, V3_WARPS * 32, 0, stream>>>(o, q, k, v, workspace, static_cast<int>(len),
                                                       static_cast<int>(qo_heads), static_cast<int>(kv_heads),
                                                       sm_scale * course::LOG2E);
  merge_states_kernel<<<dim3(grid.x, grid.y), 32, 0, stream>>>(o, workspace, static_cast<int>(qo_heads),
                                                               static_cast<int>(splits));
  return cudaGetLastError();
}
