// Day 11, v4: + a paged KV cache. v3's K and V were one contiguous tensor per request; here they
// come from FlashInfer's page table: cache [num_pages, 2, page_size, kv_heads, 128], request b owns
// pages kv_indices[kv_indptr[b] .. kv_indptr[b + 1]), its length is (pages - 1) * page_size +
// kv_last_page_len[b], token t is in page kv_indices[kv_indptr[b] + t / page_size], slot
// t % page_size. Each token's 256 bytes of one KV head are still contiguous, so a warp's loads stay
// coalesced; the page lookup is one extra (cached) load per token. Lengths may now differ per request.
// Napkin math: as v3; the page indirection costs a dependent load per token, hidden by 4 warps.
#include "course/decode_versions.cuh"

namespace {

using namespace decode_versions;  // the shared problem and pieces: course/decode_versions.cuh

__global__ void __launch_bounds__(WARPS * 32)
    decode_paged_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ cache,
                        const int32_t* __restrict__ kv_indptr, const int32_t* __restrict__ kv_indices,
                        const int32_t* __restrict__ kv_last_page_len, float* __restrict__ workspace, int page_size,
                        int qo_heads, int kv_heads, float scale_log2) {
  const int qh = blockIdx.x, b = blockIdx.y, h = qh / (qo_heads / kv_heads);
  const int page0 = kv_indptr[b], pages = kv_indptr[b + 1] - page0;
  const int len = pages > 0 ? (pages - 1) * page_size + kv_last_page_len[b] : 0;
  const int splits = gridDim.z, per_split = (len + splits - 1) / splits;
  const int t0 = min(len, static_cast<int>(blockIdx.z) * per_split), t1 = min(len, t0 + per_split);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Row qv;
  qv.load(q + (static_cast<int64_t>(b) * qo_heads + qh) * HEAD_DIM + lane * PER_LANE);
  State st;
  st.init();
  for (int t = t0 + warp; t < t1; t += WARPS) {  // token t: slot t % page_size of page t / page_size
    const int64_t page = kv_indices[page0 + t / page_size];
    const int64_t row = ((page * 2 * page_size + t % page_size) * kv_heads + h) * HEAD_DIM + lane * PER_LANE;
    add_token(st, qv, cache + row, cache + row + static_cast<int64_t>(page_size) * kv_heads * HEAD_DIM, scale_log2);
  }
  merge_warps(st);
  if (warp == 0) store_split(st, workspace, qo_heads);
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
  const int64_t splits = split_count(batch, qo_heads);
  const dim3 grid(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch), static_cast<unsigned>(splits));
  decode_paged_kernel<<<grid, WARPS * 32, 0, stream>>>(q, cache, kv_indptr, kv_indices, kv_last_page_len, workspace,
                                                      static_cast<int>(page_size), static_cast<int>(qo_heads),
                                                      static_cast<int>(kv_heads), sm_scale * course::LOG2E);
  merge_states_kernel<__nv_bfloat16><<<dim3(grid.x, grid.y), 32, 0, stream>>>(o, workspace, static_cast<int>(qo_heads),
                                                               static_cast<int>(splits));
  return cudaGetLastError();
}
