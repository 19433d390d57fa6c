// Day 11, v4: + a paged KV cache. v3's K and V were one contiguous tensor per request; here they
// come from FlashInfer's page table: cache [num_pages, 2, page_size, kv_heads, 128], request b owns
// pages kv_indices[kv_indptr[b] .. kv_indptr[b + 1]), its length is (pages - 1) * page_size +
// kv_last_page_len[b], token t is in page kv_indices[kv_indptr[b] + t / page_size], slot
// t % page_size. Each token's 256 bytes of one KV head are still contiguous, so a warp's loads stay
// coalesced; the page lookup is one extra (cached) load per token. Lengths may now differ per request.
// Napkin math: as v3; the page indirection costs a dependent load per token, hidden by 4 warps.
#include "course/attention.cuh"
#include "course/vec.cuh"
#include "course/math.cuh"
#include "course/warp.cuh"

namespace {

constexpr int V4_WARPS = 4;
constexpr int V4_HEAD_DIM = 128;
constexpr int V4_PER_LANE = V4_HEAD_DIM / 32;  // 4 bf16 = 8 bytes per lane per row

__global__ void __launch_bounds__(V4_WARPS * 32)
    decode_paged_kernel(__nv_bfloat16* __restrict__ o, const __nv_bfloat16* __restrict__ q,
                         const __nv_bfloat16* __restrict__ cache, const int32_t* __restrict__ kv_indptr,
                         const int32_t* __restrict__ kv_indices, const int32_t* __restrict__ kv_last_page_len,
                         float* __restrict__ workspace, int page_size, int qo_heads, int kv_heads, float scale_log2) {
  const int qh = blockIdx.x, b = blockIdx.y, h = qh / (qo_heads / kv_heads);
  const int page0 = kv_indptr[b], pages = kv_indptr[b + 1] - page0;
  const int len = pages > 0 ? (pages - 1) * page_size + kv_last_page_len[b] : 0;
  const int splits = gridDim.z, per_split = (len + splits - 1) / splits;
  const int t0 = min(len, static_cast<int>(blockIdx.z) * per_split), t1 = min(len, t0 + per_split);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  course::vec_t<__nv_bfloat16, V4_PER_LANE> qv;
  qv.load(q + (static_cast<int64_t>(b) * qo_heads + qh) * V4_HEAD_DIM + lane * V4_PER_LANE);
  course::softmax_state<V4_PER_LANE> st;
  st.init();
  for (int t = t0 + warp; t < t1; t += V4_WARPS) {
    const int64_t page = kv_indices[page0 + t / page_size];
    const int64_t row = ((page * 2 * page_size + t % page_size) * kv_heads + h) * V4_HEAD_DIM + lane * V4_PER_LANE;
    course::vec_t<__nv_bfloat16, V4_PER_LANE> kv, vv;
    kv.load(cache + row);
    vv.load(cache + row + static_cast<int64_t>(page_size) * kv_heads * V4_HEAD_DIM);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < V4_PER_LANE; ++i) s += course::to_float(qv[i]) * course::to_float(kv[i]);
    s = course::warp_reduce_sum(s) * scale_log2;
    float vf[V4_PER_LANE];
#pragma unroll
    for (int i = 0; i < V4_PER_LANE; ++i) vf[i] = course::to_float(vv[i]);
    st.merge(vf, s, 1.0f);  // a state of one token: o = v, m = s, d = 1
  }
  // The 4 warps' states, merged by warp 0.
  __shared__ float o_s[V4_WARPS][V4_HEAD_DIM], m_s[V4_WARPS], d_s[V4_WARPS];
#pragma unroll
  for (int i = 0; i < V4_PER_LANE; ++i) o_s[warp][lane * V4_PER_LANE + i] = st.o[i];
  if (lane == 0) {
    m_s[warp] = st.m;
    d_s[warp] = st.d;
  }
  __syncthreads();
  if (warp == 0) {
    for (int w = 1; w < V4_WARPS; ++w) {
      float ow[V4_PER_LANE];
#pragma unroll
      for (int i = 0; i < V4_PER_LANE; ++i) ow[i] = o_s[w][lane * V4_PER_LANE + i];
      st.merge(ow, m_s[w], d_s[w]);
    }
    // This split's state: o (normalised) and lse in base 2, at partial (b, split, qh).
    const int64_t i0 = (static_cast<int64_t>(b) * splits + blockIdx.z) * qo_heads + qh;
#pragma unroll
    for (int i = 0; i < V4_PER_LANE; ++i) workspace[i0 * V4_HEAD_DIM + lane * V4_PER_LANE + i] = st.o[i];
    if (lane == 0) workspace[static_cast<int64_t>(gridDim.y) * splits * qo_heads * V4_HEAD_DIM + i0] = st.lse2();
  }
}

// One warp per (query head, request): merge the splits' states in order.
__global__ void __launch_bounds__(32)
    merge_paged_states_kernel(__nv_bfloat16* __restrict__ o, const float* __restrict__ workspace, int qo_heads, int splits) {
  const int qh = blockIdx.x, b = blockIdx.y, lane = threadIdx.x;
  const float* lse = workspace + static_cast<int64_t>(gridDim.y) * splits * qo_heads * V4_HEAD_DIM;
  course::softmax_state<V4_PER_LANE> st;
  st.init();
  for (int s = 0; s < splits; ++s) {
    const int64_t i0 = (static_cast<int64_t>(b) * splits + s) * qo_heads + qh;
    float os[V4_PER_LANE];
#pragma unroll
    for (int i = 0; i < V4_PER_LANE; ++i) os[i] = workspace[i0 * V4_HEAD_DIM + lane * V4_PER_LANE + i];
    st.merge_lse(os, lse[i0]);
  }
#pragma unroll
  for (int i = 0; i < V4_PER_LANE; ++i)
    o[(static_cast<int64_t>(b) * qo_heads + qh) * V4_HEAD_DIM + lane * V4_PER_LANE + i] =
        course::from_float<__nv_bfloat16>(st.o[i]);
}

}  // namespace

// The paged cache as in the exercise (head_dim 128, bf16); workspace: at most max(batch, 32) * qo_heads *
// 129 floats (batch * splits <= 32 whenever splits > 1).
COURSE_EXPORT cudaError_t decode_v4_paged_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* cache,
                                               const int32_t* kv_indptr, const int32_t* kv_indices,
                                               const int32_t* kv_last_page_len, float* workspace, int64_t batch,
                                               int64_t page_size, int64_t qo_heads, int64_t kv_heads, float sm_scale,
                                               cudaStream_t stream) {
  if (batch < 1 || page_size < 1 || kv_heads < 1 || qo_heads % kv_heads != 0) return cudaErrorInvalidValue;
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  int64_t splits = course::ceil_div<int64_t>(2 * sms, batch * qo_heads);
  splits = splits < 1 ? 1 : (splits > 32 / batch ? (32 / batch > 1 ? 32 / batch : 1) : splits);
  const dim3 grid(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch), static_cast<unsigned>(splits));
  decode_paged_kernel<<<grid, V4_WARPS * 32, 0, stream>>>(o, q, cache, kv_indptr, kv_indices, kv_last_page_len, workspace,
                                                       static_cast<int>(page_size),
                                                       static_cast<int>(qo_heads), static_cast<int>(kv_heads),
                                                       sm_scale * course::LOG2E);
  merge_paged_states_kernel<<<dim3(grid.x, grid.y), 32, 0, stream>>>(o, workspace, static_cast<int>(qo_heads),
                                                               static_cast<int>(splits));
  return cudaGetLastError();
}
