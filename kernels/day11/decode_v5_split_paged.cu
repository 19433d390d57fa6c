// Day 11, v5: + the paged KV cache and split-KV. K and V come through FlashInfer's page table (cache
// [num_pages, 2, page_size, kv_heads, 128]; token t of request b: page kv_indices[kv_indptr[b] + t /
// page_size], slot t % page_size), a page lookup per copied row. When batch * kv_heads blocks leave SM
// slots empty, requests split into token ranges (FlashInfer's plan: one wave of blocks); each split
// writes its (o, lse) to the workspace and a second kernel merges them.
// Napkin math: batch 64 x 4096, 512 blocks in 6 x 132 slots: no split; v4 plus, per copied row, a
// division and a remainder by page_size and a 4-byte load of the page number that the copy's address
// waits on. ~15% more instructions put instruction issue at ~85% of the H100's rate at 3 TB/s (little
// slack left), and each refill of the ring starts a cached round trip late: ~0.9x the read, below v4.
// Batch 1 x 32768: 99 splits of 21 tiles fill the 792 slots in one wave, so every SM reads. The wave's
// ramp (every block fills its ring before its first math) and tail (no block starts where one ends
// early) cost a few us of the ~50 the read takes (134 MB at ~2.7 TB/s), and the merge, a second launch
// over 1.6 MB of split states, a few more: ~0.75-0.8x. The page lookups are not the gap: L1 serves 15
// of a 16-token page's 16 lookups.
#include "course/async.cuh"
#include "course/block.cuh"
#include "course/decode_versions.cuh"

namespace decode_v5 {  // the versions of a day build into one extension: names apart

using namespace decode_versions;  // the shared problem and pieces: course/decode_versions.cuh

constexpr int BDZ = 2, CHUNK = 8, TILE = BDZ * CHUNK, STAGES = 4;  // v4's block and ring
constexpr int THREADS = BDX * GROUP * BDZ, ROWS = THREADS / BDX;
constexpr int MIN_SPLIT_TILES = 16;  // a split of >= 256 tokens: the ring's fill stays a small part of it
constexpr int MAX_STATES = 1024;     // batch * splits: the workspace's states per query head (day11.MAX_SPLITS)
constexpr int MERGE_SETS = 4;        // the merge's block: 32 lanes of 4 floats x 4 sets of splits

__global__ void __launch_bounds__(THREADS)
    decode_split_paged_kernel(__nv_bfloat16* __restrict__ o, float* __restrict__ workspace,
                              const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ cache,
                              const int32_t* __restrict__ kv_indptr, const int32_t* __restrict__ kv_indices,
                              const int32_t* __restrict__ kv_last_page_len, int page_size, int kv_heads,
                              float scale_log2) {
  __shared__ __align__(16) __nv_bfloat16 kv_s[STAGES][2][TILE][HEAD_DIM];  // as v4: 32 KB
  const int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z, qo_heads = kv_heads * GROUP;
  const int64_t row = static_cast<int64_t>(b) * qo_heads + h * GROUP + ty;  // of q and o
  float qf[VEC];
  load_q(qf, q + row * HEAD_DIM + tx * VEC, scale_log2);
  // The request's length from its page table; this split's tokens [t0, t1) are whole tiles, at least
  // MIN_SPLIT_TILES of them, so the last splits of a short request can be empty (m = -inf, weight 0).
  const int page0 = kv_indptr[b], pages = kv_indptr[b + 1] - page0;
  const int len = pages > 0 ? (pages - 1) * page_size + kv_last_page_len[b] : 0;
  const int per_split = max(MIN_SPLIT_TILES, ((len + TILE - 1) / TILE + splits - 1) / splits) * TILE;
  const int t0 = min(len, split * per_split), t1 = min(len, t0 + per_split);
  const int64_t slot = static_cast<int64_t>(kv_heads) * HEAD_DIM;  // one token slot: every KV head's row
  const int64_t v_off = page_size * slot;                          // V's half of a page, after K's

  // As v4, each row's address from the page table: page kv_indices[page0 + t / page_size] (L1 serves
  // the other 15 rows of a 16-token page), slot t % page_size, KV head h, this lane's 16 bytes.
  auto copy_tile = [&](int tile) {
#pragma unroll
    for (int pass = 0; pass < TILE / ROWS; ++pass) {
      const int r = pass * ROWS + ty + GROUP * tz, t = t0 + tile * TILE + r;
      const bool valid = t < t1;
      int64_t at = 0;  // past t1: zeros, nothing read
      if (valid)
        at = (kv_indices[page0 + t / page_size] * 2LL * page_size + t % page_size) * slot + h * HEAD_DIM + tx * VEC;
      course::cp_async_zfill<16, course::CacheHint::cg>(&kv_s[tile % STAGES][0][r][tx * VEC], cache + at, valid);
      course::cp_async_zfill<16, course::CacheHint::cg>(&kv_s[tile % STAGES][1][r][tx * VEC],
                                                        cache + (valid ? at + v_off : 0), valid);
    }
  };

  LaneState st;
  st.init();
  const int tiles = (t1 - t0 + TILE - 1) / TILE;  // 0 for an empty split
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < tiles) copy_tile(s);
    course::cp_async_commit();
  }
  for (int tile = 0; tile < tiles; ++tile) {  // v4's ring, unchanged
    course::cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (tile + STAGES - 1 < tiles) copy_tile(tile + STAGES - 1);
    course::cp_async_commit();
    Lanes kr[CHUNK], vr[CHUNK];
#pragma unroll
    for (int j = 0; j < CHUNK; ++j) {
      kr[j].load(&kv_s[tile % STAGES][0][tz * CHUNK + j][tx * VEC]);
      vr[j].load(&kv_s[tile % STAGES][1][tz * CHUNK + j][tx * VEC]);
    }
    st.add_chunk(qf, kr, vr, t1 - (t0 + tile * TILE + tz * CHUNK));
  }
  course::cp_async_wait<0>();
  merge_token_groups<BDZ>(st);
  if (tz != 0) return;
  if (splits == 1) {  // the whole request: o itself
    st.store(o + row * HEAD_DIM + tx * VEC);
    return;
  }
  // Split state i = (b * splits + split) * qo_heads + head: o / d at i * HEAD_DIM, then, after all
  // batch * splits * qo_heads of those, lse in base 2 at i (-inf for an empty split, whose o is 0).
  const int64_t i = (static_cast<int64_t>(b) * splits + split) * qo_heads + h * GROUP + ty;
  const float inv = st.d > 0.0f ? 1.0f / st.d : 0.0f;
  float4* dst = reinterpret_cast<float4*>(workspace + i * HEAD_DIM + tx * VEC);
  dst[0] = make_float4(st.o[0] * inv, st.o[1] * inv, st.o[2] * inv, st.o[3] * inv);
  dst[1] = make_float4(st.o[4] * inv, st.o[5] * inv, st.o[6] * inv, st.o[7] * inv);
  if (tx == 0) workspace[static_cast<int64_t>(gridDim.y) * splits * qo_heads * HEAD_DIM + i] = st.lse2();
}

// One block per (query head, request): o = sum_s 2^(lse_s - m) o_s / sum_s 2^(lse_s - m), m = max_s lse_s
// (FlashInfer cascade.cuh's MergeStates). Every split's lse is loaded at once, then the o rows with
// 4 sets of splits side by side: a merge carried from split to split waits an L2 round trip per split.
__global__ void __launch_bounds__(32 * MERGE_SETS)
    merge_splits_kernel(__nv_bfloat16* __restrict__ o, const float* __restrict__ workspace, int qo_heads, int splits) {
  static_assert(HEAD_DIM == 4 * 32, "a lane merges 4 dims of o");
  __shared__ float w_s[MAX_STATES];  // every split's weight
  __shared__ float4 acc_s[MERGE_SETS][32];
  __shared__ float sum_s[MERGE_SETS];
  const int qh = blockIdx.x, b = blockIdx.y, lane = threadIdx.x % 32, set = threadIdx.x / 32;
  const int64_t first = static_cast<int64_t>(b) * splits * qo_heads + qh;  // split s: state first + s qo_heads
  const float* lse = workspace + static_cast<int64_t>(gridDim.y) * splits * qo_heads * HEAD_DIM;
  float m = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) {
    w_s[s] = lse[first + static_cast<int64_t>(s) * qo_heads];
    m = fmaxf(m, w_s[s]);
  }
  m = course::block_reduce_max(m);  // (its barriers also make every w_s visible)
  for (int s = threadIdx.x; s < splits; s += blockDim.x)
    w_s[s] = m == -INFINITY ? 0.0f : course::ptx_exp2(w_s[s] - m);  // an empty split: 2^-inf = 0
  __syncthreads();
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float sum = 0.0f;
#pragma unroll 4
  for (int s = set; s < splits; s += MERGE_SETS) {
    const float w = w_s[s];
    const float* row = workspace + (first + static_cast<int64_t>(s) * qo_heads) * HEAD_DIM;  // split s's o
    const float4 x = reinterpret_cast<const float4*>(row)[lane];
    sum += w;
    acc = make_float4(acc.x + w * x.x, acc.y + w * x.y, acc.z + w * x.z, acc.w + w * x.w);
  }
  acc_s[set][lane] = acc;
  if (lane == 0) sum_s[set] = sum;
  __syncthreads();
  if (set != 0) return;
  for (int g = 1; g < MERGE_SETS; ++g) {
    const float4 x = acc_s[g][lane];
    acc = make_float4(acc.x + x.x, acc.y + x.y, acc.z + x.z, acc.w + x.w);
    sum += sum_s[g];
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const uint2 packed = make_uint2(course::bfloat162_as_uint32(__floats2bfloat162_rn(acc.x * inv, acc.y * inv)),
                                  course::bfloat162_as_uint32(__floats2bfloat162_rn(acc.z * inv, acc.w * inv)));
  __stcg(reinterpret_cast<uint2*>(o + (static_cast<int64_t>(b) * qo_heads + qh) * HEAD_DIM + 4 * lane), packed);
}

}  // namespace decode_v5

// The paged cache as in the exercise (head_dim 128, bf16), qo_heads = 4 kv_heads; workspace: at least
// 1024 * qo_heads * 129 floats (day11.workspace_floats), unused when the batch fills the GPU.
COURSE_EXPORT cudaError_t decode_v5_split_paged_bf16(__nv_bfloat16* o, const __nv_bfloat16* q,
                                                     const __nv_bfloat16* cache, const int32_t* kv_indptr,
                                                     const int32_t* kv_indices, const int32_t* kv_last_page_len,
                                                     float* workspace, int64_t batch, int64_t page_size,
                                                     int64_t qo_heads, int64_t kv_heads, float sm_scale,
                                                     cudaStream_t stream) {
  using namespace decode_v5;
  if (batch < 1 || batch > 65535 || page_size < 1 || kv_heads < 1 || qo_heads != GROUP * kv_heads)
    return cudaErrorInvalidValue;
  // One wave: slots = blocks that fit on an SM at once x SMs; as many splits as keep batch * kv_heads *
  // splits within them (1 once the batch fills them), at most MAX_STATES / batch.
  int device = 0, sms = 132, per_sm = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_split_paged_kernel, THREADS, 0);
  if (err != cudaSuccess) return err;
  int64_t splits = static_cast<int64_t>(per_sm) * sms / (batch * kv_heads);
  splits = splits < MAX_STATES / batch ? splits : MAX_STATES / batch;
  splits = splits > 1 ? splits : 1;
  const dim3 grid(static_cast<unsigned>(kv_heads), static_cast<unsigned>(batch), static_cast<unsigned>(splits));
  decode_split_paged_kernel<<<grid, dim3(BDX, GROUP, BDZ), 0, stream>>>(
      o, workspace, q, cache, kv_indptr, kv_indices, kv_last_page_len, static_cast<int>(page_size),
      static_cast<int>(kv_heads), sm_scale * course::LOG2E);
  if (splits > 1)  // after the splits, on the same stream
    merge_splits_kernel<<<dim3(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch)), 32 * MERGE_SETS, 0,
                          stream>>>(o, workspace, static_cast<int>(qo_heads), static_cast<int>(splits));
  return cudaGetLastError();
}
