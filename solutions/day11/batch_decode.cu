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
// group. Tiles of 64 tokens (16 per warp) come from the pages with cp.async, 2 stages; each warp keeps
// its own online-softmax state for its 16 rows and the 4 states merge through shared memory at the
// end. When batch * kv_heads blocks cannot fill the GPU, each request is split into `splits` token
// ranges; each split writes its state (o, lse) to the workspace and a second launch of the kernel
// (phase 1) merges them (course/attention.cuh). On sm_90 that launch is a programmatic dependent
// launch: its blocks are resident before phase 0 ends and wait for it in griddepcontrol.wait, so
// the launch gap between the two is not paid.
//
// Given: attend_tile, one warp's tensor-core math on a tile (S = Q K^T, the online softmax on the mma
// fragments, O += P V: FlashAttention-2's register layout, which Day 12 teaches), stage_q, the merge
// of the 4 warps' states (park_warp_states, block_state), merge_splits' last step (finish_merge) and
// the launcher. Yours (the TODOs): the request's length and the split's token range from the page
// table, the paged cp.async tile loader, the STAGES-deep pipeline around attend_tile, writing the
// state (o and lse, or the split's partial state in the workspace), and merge_splits' weights and
// weighted sums (FlashInfer's MergeStates of the splits).
//
// Napkin math (Llama 3 8B: 32 query heads, 8 KV heads, head_dim 128, bf16): a token's K and V of one
// KV head are 2 x 256 B; batch 64 x 4096 tokens reads 64 x 4096 x 8 x 512 B = 1.07 GB: ~255 us at
// an H200's ~4.2 TB/s (~360 us on an H100). Per byte read, a group of 4 heads does 4 multiply-adds per K element and per V element:
// ~4 flops per byte, far below the tensor cores' ~130 per byte of bandwidth, so memory-bound; the
// tensor cores only save the CUDA cores' issue slots. The kernel reads and writes next to nothing:
// it is timed against the read ceiling of the same bytes.
// Target (grader/exercises/day11.py): @TARGET@.
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

// Given: the Q tile, q_s (16, HEAD_DIM) swizzled: row r < group is qg[r * HEAD_DIM ..] (the group's
// query heads, neighbours in q), rows group .. 15 are zeros (their scores are 0 and never stored).
// Plain stores: a __syncthreads() (the pipeline's first) makes them visible to the other warps.
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void stage_q(T* q_s, const T* qg, int group) {
  constexpr int CHUNKS = HEAD_DIM / 8;  // 16-byte chunks per row
  for (int v = threadIdx.x; v < 16 * CHUNKS; v += THREADS) {
    const int row = v / CHUNKS, col = v % CHUNKS * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row < group) val = *reinterpret_cast<const uint4*>(qg + row * HEAD_DIM + col);
    *reinterpret_cast<uint4*>(q_s + swz<HEAD_DIM>(row, col)) = val;
  }
}

// Given, a black box today (Day 12 opens it): one warp's share of a K/V tile on the tensor cores.
// Warp w adds tokens first + 16 w .. first + 16 w + 15 to its online-softmax state of the 16 rows of
// q_s: S = Q K^T (ldmatrix + mma.sync m16n8k16), scaled by scale_log2 (base 2) and -inf for tokens
// >= t1; m_new = max(m, row max of S); o_acc and d *= 2^(m - m_new); P = 2^(S - m_new); d += P's row
// sums; O += P V, P taken from S's registers and V through ldmatrix.trans.
//   In:  q_s (16, HEAD_DIM), ks and vs (TILE, HEAD_DIM) of one stage, all shared and swizzled with
//        swz, landed and visible to every warp (after the wait and the __syncthreads()). Rows of
//        tokens >= t1 must be finite: zero-filled.
//   The state, per lane (the mma's C layout, course/mma.cuh), rows r0 = lane / 4 and r1 = r0 + 8:
//        o_acc[n][0..1] = O[r0][8 n + 2 (lane % 4) + 0..1], o_acc[n][2..3] the same columns of r1,
//        n = 0 .. HEAD_DIM / 8 - 1, not yet divided by d; m[0], m[1]: the largest base-2 score of rows
//        r0, r1 so far (the same in the 4 lanes of a quad); d[0], d[1]: this lane's part of the rows'
//        sums of 2^(s - m) (the quad's 4 lanes add up to d). Start from o_acc = 0, m = -inf, d = 0.
// Every lane of every warp calls it (mma.sync and shuffles); it only reads shared memory.
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void attend_tile(const T* q_s, const T* ks, const T* vs, int first, int t1, float scale_log2,
                                            float (&o_acc)[HEAD_DIM / 8][4], float (&m)[2], float (&d)[2]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pair = lane % 4;
  // S (16 rows, 16 tokens) as two n tiles of 8 tokens. K is stored [token][dim] = [n][k]: the mma's
  // "col" B operand, ldmatrix without .trans (lane gives token l % 8 + (l / 16) * 8 at dim chunk
  // (l / 8) % 2 of the step: bk[0..1] are tokens 0-7, bk[2..3] tokens 8-15).
  float s[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    uint32_t qa[4], bk[4];
    course::ldmatrix_x4(qa, q_s + swz<HEAD_DIM>(lane % 16, kk * 16 + (lane / 16) * 8));
    course::ldmatrix_x4(bk, ks + swz<HEAD_DIM>(16 * warp + lane % 8 + (lane / 16) * 8, kk * 16 + (lane / 8 % 2) * 8));
    const uint32_t b_lo[2] = {bk[0], bk[1]}, b_hi[2] = {bk[2], bk[3]};
    course::mma_m16n8k16<T>(s[0], qa, b_lo);
    course::mma_m16n8k16<T>(s[1], qa, b_hi);
  }
  // s[j][e]: row lane / 4 + 8 (e / 2), token 16 warp + 8 j + 2 pair + e % 2 of the tile.
  const int tok0 = first + 16 * warp + 2 * pair;
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = tok0 + 8 * j + e % 2 < t1 ? s[j][e] * scale_log2 : -INFINITY;
      row_max[e / 2] = fmaxf(row_max[e / 2], s[j][e]);
    }
  float rescale[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // The 4 lanes of a quad hold one row's 16 tokens.
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
    const float m_new = fmaxf(m[r], row_max[r]);
    // Nothing seen yet (m_new = -inf): keep everything at 0 and avoid -inf - -inf = NaN.
    rescale[r] = m_new == -INFINITY ? 1.0f : course::ptx_exp2(m[r] - m_new);
    m[r] = m_new;
    d[r] *= rescale[r];
  }
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float shift = m[e / 2] == -INFINITY ? 0.0f : m[e / 2];
      s[j][e] = course::ptx_exp2(s[j][e] - shift);  // 2^-inf = 0 for masked tokens
      d[e / 2] += s[j][e];
    }
#pragma unroll
  for (int n = 0; n < HEAD_DIM / 8; ++n) {
    o_acc[n][0] *= rescale[0];
    o_acc[n][1] *= rescale[0];
    o_acc[n][2] *= rescale[1];
    o_acc[n][3] *= rescale[1];
  }
  // P's C layout is the A layout of the next mma (FlashAttention-2's register reuse): tokens 0-7 of
  // the step are s[0], tokens 8-15 are s[1]; rounded to T, as the tensor cores need.
  const uint32_t pa[4] = {course::pack2<T>(s[0][0], s[0][1]), course::pack2<T>(s[0][2], s[0][3]),
                          course::pack2<T>(s[1][0], s[1][1]), course::pack2<T>(s[1][2], s[1][3])};
  // O += P V: V is stored [token][dim] = [k][n], so .trans (lane gives token l % 16 at dim chunk l / 16).
#pragma unroll
  for (int nd = 0; nd < HEAD_DIM / 16; ++nd) {
    uint32_t bv[4];
    course::ldmatrix_x4_trans(bv, vs + swz<HEAD_DIM>(16 * warp + lane % 16, nd * 16 + (lane / 16) * 8));
    const uint32_t b_lo[2] = {bv[0], bv[1]}, b_hi[2] = {bv[2], bv[3]};
    course::mma_m16n8k16<T>(o_acc[2 * nd], pa, b_lo);
    course::mma_m16n8k16<T>(o_acc[2 * nd + 1], pa, b_hi);
  }
}

// Given: the 4 warps' states of the block merged into one per query head. park_warp_states waits for
// every copy still in flight and for every warp (it reuses the K/V stages as o_part), then parks each
// warp's rows < group in shared memory: its o divided by its d, its m and its d (warp, group_row and
// pair: the lane's place in attend_tile's layout). Once per row it turns them into weights, warp w's
// d_w 2^(m_w - m) / sum over the warps (m the largest m_w), in d_part, and the row's lse (base 2) in
// m_part[0]: the merge's exponentials and division once per row, not once per element. Then
// block_state(row, col) is element (row, col) of the group's O as one course::softmax_state<1>:
// o[0] the weighted sum of the warps' o, lse2() the row's lse in base 2.
template <int HEAD_DIM>
__device__ __forceinline__ void park_warp_states(const float (&o_acc)[HEAD_DIM / 8][4], const float (&m)[2],
                                                 const float (&d)[2], float* o_part, float (*m_part)[MAX_GROUP],
                                                 float (*d_part)[MAX_GROUP], int group, int warp, int group_row,
                                                 int pair) {
  course::cp_async_wait<0>();  // (only empty groups can be left; the stages are reused below)
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float dr = d[r];
    dr += __shfl_xor_sync(0xffffffffu, dr, 1);
    dr += __shfl_xor_sync(0xffffffffu, dr, 2);
    const int row = group_row + 8 * r;
    if (row < group) {
      const float inv = dr > 0.0f ? 1.0f / dr : 0.0f;
#pragma unroll
      for (int n = 0; n < HEAD_DIM / 8; ++n) {
        float* dst = o_part + (warp * group + row) * HEAD_DIM + 8 * n + 2 * pair;
        dst[0] = o_acc[n][2 * r] * inv;
        dst[1] = o_acc[n][2 * r + 1] * inv;
      }
      if (pair == 0) {
        m_part[warp][row] = m[r];
        d_part[warp][row] = dr;
      }
    }
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  if (warp == 0 && lane < group) {  // per row, once: warp w's weight d_w 2^(m_w - m) / sum, and the row's lse
    const int row = lane;
    float mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, m_part[w][row]);
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float x = mx == -INFINITY ? 0.0f : d_part[w][row] * course::ptx_exp2(m_part[w][row] - mx);
      d_part[w][row] = x;
      sum += x;
    }
    const float to_one = sum > 0.0f ? 1.0f / sum : 0.0f;  // the weights add up to 1
#pragma unroll
    for (int w = 0; w < WARPS; ++w) d_part[w][row] *= to_one;
    m_part[0][row] = sum > 0.0f ? mx + log2f(sum) : -INFINITY;
  }
  __syncthreads();
}

template <int HEAD_DIM>
__device__ __forceinline__ course::softmax_state<1> block_state(const float* o_part, const float (*m_part)[MAX_GROUP],
                                                                const float (*d_part)[MAX_GROUP], int group, int row,
                                                                int col) {
  course::softmax_state<1> st;
  st.o[0] = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) st.o[0] += d_part[w][row] * o_part[(w * group + row) * HEAD_DIM + col];
  st.m = m_part[0][row];  // the row's lse (base 2): lse2() = m + log2(1)
  st.d = 1.0f;
  return st;
}

// Given: the end of merge_splits. Each thread brings its set's sums over the set's splits (acc: floats
// 4 lane .. 4 lane + 3 of sum_s w_s o_s; sum: sum_s w_s) and m, the largest lse. The sets add up
// through shared memory; then set 0 writes o[out, 4 lane .. 4 lane + 3] = acc / sum (as T) and lane 0
// lse[out] = (m + log2(sum)) ln 2, in natural log (no token at all, sum = 0: o = 0, lse = -inf).
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void finish_merge(T* __restrict__ o, float* __restrict__ lse, int64_t out, float4 acc,
                                             float sum, float m, float4* acc_s, float* sum_s, int lane, int set) {
  constexpr int LANES = HEAD_DIM / 4, SETS = THREADS / LANES;
  acc_s[set * LANES + lane] = acc;
  if (lane == 0) sum_s[set] = sum;
  __syncthreads();
  if (set == 0) {
#pragma unroll
    for (int g = 1; g < SETS; ++g) {
      const float4 x = acc_s[g * LANES + lane];
      acc.x += x.x;
      acc.y += x.y;
      acc.z += x.z;
      acc.w += x.w;
      sum += sum_s[g];
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    T* dst = o + out * HEAD_DIM + 4 * lane;
    dst[0] = course::from_float<T>(acc.x * inv);
    dst[1] = course::from_float<T>(acc.y * inv);
    dst[2] = course::from_float<T>(acc.z * inv);
    dst[3] = course::from_float<T>(acc.w * inv);
    if (lane == 0) lse[out] = sum > 0.0f ? (m + log2f(sum)) * course::LN2 : -INFINITY;
  }
}

// Phase 1, a second launch of the same kernel with one block per (query head, request): merge the
// `splits` partial states in the workspace (FlashInfer cascade.cuh's MergeStates). One kernel with
// two phases rather than two kernels: the grader's SASS check looks for the pipeline in every kernel.
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void merge_splits(T* __restrict__ o, float* __restrict__ lse,
                                             const float* __restrict__ workspace, int qo_heads, int splits) {
  // The block's threads are LANES columns of 4 floats (a row of o) times SETS sets of splits: set g
  // takes splits g, g + SETS, ... and the sets add up through shared memory (finish_merge). First every
  // split's weight 2^(lse - max) goes to shared memory (one load per thread and split, all at once);
  // then the o rows, 8 loads in flight per thread. A merge that carries one state from split to split
  // (softmax_state::merge_lse) waits a full L2 round trip per split (with 32 splits that took 24 us
  // on the H200, a third of the call).
  constexpr int LANES = HEAD_DIM / 4, SETS = THREADS / LANES;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float4* acc_s = reinterpret_cast<float4*>(smem_raw);            // (SETS, LANES)
  float* sum_s = reinterpret_cast<float*>(acc_s + SETS * LANES);  // (SETS)
  float* w_s = sum_s + SETS;                                      // (splits) weights
  const int qh = blockIdx.x, b = blockIdx.y, lane = threadIdx.x % LANES, set = threadIdx.x / LANES;
  // BEGIN SOLUTION
  // STUB: // TODO: MergeStates of the partial states of splits s = 0 .. splits - 1 of (b, qh). State i =
  // STUB: // (b * splits + s) * qo_heads + qh: its o at workspace[i * HEAD_DIM ..], its lse (base 2, -inf for
  // STUB: // an empty split) at workspace[MAX_SPLITS * qo_heads * HEAD_DIM + i].
  // STUB: //  1. The weights: thread threadIdx.x takes splits s = threadIdx.x, + THREADS, ...: w_s[s] = lse_s;
  // STUB: //     m = the largest lse of all (course::block_reduce_max, whose barriers make w_s visible); then
  // STUB: //     w_s[s] = 2^(lse_s - m) (course::ptx_exp2; 0 when m is -inf), and a __syncthreads().
  // STUB: //  2. The weighted sums: set `set` takes splits set, set + SETS, ...: float sum += w_s[s], float4
  // STUB: //     acc += w_s[s] * float4 number `lane` of state s's o. Keep those loads independent of each
  // STUB: //     other (#pragma unroll 8): the merge waits on memory, not on arithmetic.
  // STUB: //  3. finish_merge<T, HEAD_DIM>(o, lse, b * qo_heads + qh, acc, sum, m, acc_s, sum_s, lane, set): it
  // STUB: //     adds up the sets and writes o[b, qh, :] = acc / sum and lse[b, qh] = (m + log2(sum)) ln 2.
  // STUB: (void)acc_s; (void)sum_s; (void)w_s; (void)lane; (void)set; (void)o; (void)lse; (void)workspace; (void)qh; (void)b;
  const float* ws_lse = workspace + static_cast<int64_t>(MAX_SPLITS) * qo_heads * HEAD_DIM;
  const int64_t first = static_cast<int64_t>(b) * splits * qo_heads + qh;  // state i = first + s * qo_heads
  float m = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += THREADS) {
    w_s[s] = ws_lse[first + static_cast<int64_t>(s) * qo_heads];
    m = fmaxf(m, w_s[s]);
  }
  m = course::block_reduce_max(m);  // (its barriers also make every w_s entry visible)
  for (int s = threadIdx.x; s < splits; s += THREADS)
    w_s[s] = m == -INFINITY ? 0.0f : course::ptx_exp2(w_s[s] - m);  // an empty split: 2^-inf = 0
  __syncthreads();
  float sum = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
  for (int s = set; s < splits; s += SETS) {
    const float w = w_s[s];
    const float4 x = reinterpret_cast<const float4*>(workspace + (first + static_cast<int64_t>(s) * qo_heads) * HEAD_DIM)[lane];
    sum += w;
    acc.x += w * x.x;
    acc.y += w * x.y;
    acc.z += w * x.z;
    acc.w += w * x.w;
  }
  finish_merge<T, HEAD_DIM>(o, lse, static_cast<int64_t>(b) * qo_heads + qh, acc, sum, m, acc_s, sum_s, lane, set);
  // END SOLUTION
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
  const int group_row = lane / 4, pair = lane % 4;  // the lane's place in the mma tiles (attend_tile's layout)
  const int qo_heads = kv_heads * group;
  const int64_t row_stride = static_cast<int64_t>(kv_heads) * HEAD_DIM;  // one token slot of all KV heads
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Programmatic dependent launch: phase 1's blocks may start before phase 0 ends; they wait here
  // for phase 0 to finish and its writes to be visible. Phase 0 lets them launch at once.
  if (phase == 1) asm volatile("griddepcontrol.wait;" ::: "memory");
  else asm volatile("griddepcontrol.launch_dependents;");
#endif
  if (phase == 1) {
    merge_splits<T, HEAD_DIM>(o, lse, workspace, qo_heads, splits);
    return;
  }

  // BEGIN SOLUTION
  // STUB: // TODO: this block's share of attention for query heads kv_head * group .. + group - 1 of request
  // STUB: // b over its tokens [t0, t1), and the block's state written out. Given above: stage_q, attend_tile
  // STUB: // (its comment gives the state's layout), park_warp_states and block_state.
  // STUB: //  1. The page table: pages = kv_indptr[b + 1] - kv_indptr[b], len = (pages - 1) * page_size +
  // STUB: //     kv_last_page_len[b] (0 without pages). The split's range, whole tiles: tiles = ceil(len / TILE),
  // STUB: //     per_split = max(MIN_SPLIT_TILES, ceil(tiles / splits)) * TILE, t0 = min(len, split * per_split),
  // STUB: //     t1 = min(len, t0 + per_split): the last splits of a short request are empty (no tile; m = -inf).
  // STUB: //  2. stage_q(q_s, q + (b * qo_heads + kv_head * group) * HEAD_DIM, group): GQA, one Q tile per group.
  // STUB: //  3. A loader of tile i into stage s: every (row, 16-byte chunk at col) of the TILE x HEAD_DIM tile,
  // STUB: //     consecutive threads along a row. Token t = t0 + i * TILE + row is in page p =
  // STUB: //     kv_indices[kv_indptr[b] + t / page_size]; its K row starts at kv_cache + (p * 2 * page_size +
  // STUB: //     t % page_size) * row_stride + kv_head * HEAD_DIM, its V row page_size * row_stride further.
  // STUB: //     Copy both with course::cp_async_zfill<16, course::CacheHint::cg>(dst, src, t < t1) to k_s and
  // STUB: //     v_s + s * TILE * HEAD_DIM + swz<HEAD_DIM>(row, col): past t1 it writes zeros and reads nothing
  // STUB: //     (pass kv_cache as src there: no page lookup for a token the request does not have).
  // STUB: //  4. The state: float o_acc[HEAD_DIM / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, d[2] = {}.
  // STUB: //     The pipeline, STAGES deep: load tiles 0 .. STAGES - 2, each followed by course::cp_async_commit()
  // STUB: //     (commit even when there is no such tile). Per tile: load tile + STAGES - 1 (if any) into stage
  // STUB: //     (tile + STAGES - 1) % STAGES, commit, course::cp_async_wait<STAGES - 1>(), __syncthreads(),
  // STUB: //     attend_tile<T, HEAD_DIM>(q_s, k_s and v_s of stage tile % STAGES, t0 + tile * TILE, t1,
  // STUB: //     scale_log2, o_acc, m, d), then __syncthreads() before that stage is refilled.
  // STUB: //  5. park_warp_states<HEAD_DIM>(o_acc, m, d, o_part, m_part, d_part, group, warp, group_row, pair).
  // STUB: //     Then for every (row < group, col < HEAD_DIM), spread over the block's threads: st =
  // STUB: //     block_state<HEAD_DIM>(o_part, m_part, d_part, group, row, col), query head qh = kv_head * group
  // STUB: //     + row. splits == 1: o[b, qh, col] = st.o[0] (as T) and lse[b, qh] = st.lse2() * course::LN2
  // STUB: //     (natural log). Else the split's partial state i = (b * splits + split) * qo_heads + qh, for
  // STUB: //     merge_splits: workspace[i * HEAD_DIM + col] = st.o[0] and, base 2,
  // STUB: //     workspace[MAX_SPLITS * qo_heads * HEAD_DIM + i] = st.lse2().
  const int page0 = kv_indptr[b], pages = kv_indptr[b + 1] - page0;  // the request's pages in kv_indices
  const int len = pages > 0 ? (pages - 1) * page_size + kv_last_page_len[b] : 0;
  const int tiles = (len + TILE - 1) / TILE;  // whole tiles per split: a short request's last splits are empty
  const int per_split = max(MIN_SPLIT_TILES, (tiles + splits - 1) / splits) * TILE;
  const int t0 = min(len, split * per_split), t1 = min(len, t0 + per_split);
  const int num_tiles = (t1 - t0 + TILE - 1) / TILE;

  const T* qg = q + (static_cast<int64_t>(b) * qo_heads + static_cast<int64_t>(kv_head) * group) * HEAD_DIM;
  stage_q<T, HEAD_DIM>(q_s, qg, group);  // GQA: the group's query heads are the rows of one Q tile

  auto load_tile = [&](int tile, int stage) {  // threads along a token's row (contiguous in its page)
    for (int v = threadIdx.x; v < TILE * CHUNKS; v += THREADS) {
      const int row = v / CHUNKS, col = v % CHUNKS * 8;
      const int t = t0 + tile * TILE + row;
      const bool valid = t < t1;
      const T* k_src = kv_cache;
      if (valid) {
        const int64_t page = kv_indices[page0 + t / page_size];
        k_src = kv_cache + (page * 2 * page_size + t % page_size) * row_stride + kv_head * HEAD_DIM + col;
      }
      const T* v_src = valid ? k_src + page_size * row_stride : kv_cache;
      const int at = stage * TILE * HEAD_DIM + swz<HEAD_DIM>(row, col);
      course::cp_async_zfill<16, course::CacheHint::cg>(k_s + at, k_src, valid);
      course::cp_async_zfill<16, course::CacheHint::cg>(v_s + at, v_src, valid);
    }
  };

  float o_acc[HEAD_DIM / 8][4] = {};  // this warp's O and softmax state, in attend_tile's layout
  float m[2] = {-INFINITY, -INFINITY}, d[2] = {0.0f, 0.0f};
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < num_tiles) load_tile(st, st);
    course::cp_async_commit();
  }
  for (int tile = 0; tile < num_tiles; ++tile) {  // refill the stage freed at the last barrier, STAGES - 1 ahead
    if (tile + STAGES - 1 < num_tiles) load_tile(tile + STAGES - 1, (tile + STAGES - 1) % STAGES);
    course::cp_async_commit();
    course::cp_async_wait<STAGES - 1>();  // this tile's copies landed: all but the newest STAGES - 1 groups
    __syncthreads();  // every thread's copies (and, the first time, q_s) are visible to all warps
    const T* ks = k_s + (tile % STAGES) * TILE * HEAD_DIM;
    const T* vs = v_s + (tile % STAGES) * TILE * HEAD_DIM;
    // S (16 rows, 16 tokens) = Q K^T, the online softmax and O += P V on this warp's 16 tokens.
    attend_tile<T, HEAD_DIM>(q_s, ks, vs, t0 + tile * TILE, t1, scale_log2, o_acc, m, d);
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }

  park_warp_states<HEAD_DIM>(o_acc, m, d, o_part, m_part, d_part, group, warp, group_row, pair);
  for (int v = threadIdx.x; v < group * HEAD_DIM; v += THREADS) {  // one state per query head, written out
    const int row = v / HEAD_DIM, col = v % HEAD_DIM;
    const course::softmax_state<1> st = block_state<HEAD_DIM>(o_part, m_part, d_part, group, row, col);
    const int64_t qh = static_cast<int64_t>(kv_head) * group + row;
    if (splits == 1) {
      o[(b * static_cast<int64_t>(qo_heads) + qh) * HEAD_DIM + col] = course::from_float<T>(st.o[0]);
      if (col == 0) lse[b * static_cast<int64_t>(qo_heads) + qh] = st.lse2() * course::LN2;
    } else {
      const int64_t i = (static_cast<int64_t>(b) * splits + split) * qo_heads + qh;  // partial state i
      workspace[i * HEAD_DIM + col] = st.o[0];
      if (col == 0) workspace[static_cast<int64_t>(MAX_SPLITS) * qo_heads * HEAD_DIM + i] = st.lse2();
    }
  }
  // END SOLUTION
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
  const int sms = course::current_device().sms;
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
  const course::Device dev = course::current_device();
  if (dev.id < 0) return cudaErrorInvalidDevice;
  // Once per device (and instantiation), for the same reason: the kernel's shared memory limit raised
  // and its blocks per SM asked.
  static int blocks_per_sm[course::MAX_DEVICES] = {};  // 0: not yet
  if (blocks_per_sm[dev.id] == 0) {
    cudaError_t err = cudaFuncSetAttribute(batch_decode_kernel<T, HEAD_DIM>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    if (err != cudaSuccess) return err;
    int blocks = 1;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, batch_decode_kernel<T, HEAD_DIM>, THREADS, SMEM);
    if (err != cudaSuccess) return err;
    blocks_per_sm[dev.id] = blocks > 0 ? blocks : 1;
  }
  const int per_sm = blocks_per_sm[dev.id];
  const int splits = choose_splits(batch, kv_heads, per_sm);
  const dim3 grid(static_cast<unsigned>(kv_heads), static_cast<unsigned>(batch), static_cast<unsigned>(splits));
  const int group = static_cast<int>(qo_heads / kv_heads);
  batch_decode_kernel<T, HEAD_DIM><<<grid, THREADS, SMEM, stream>>>(
      o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace, static_cast<int>(kv_heads), group,
      static_cast<int>(page_size), sm_scale * course::LOG2E, splits, 0);
  if (splits > 1) {  // phase 1: merge the splits' states, after phase 0 on the same stream
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch));
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = merge_smem_bytes();
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &capturing);
    cfg.attrs = attr;
    // sm_90 and later: launched while phase 0 runs. Not while a CUDA graph is being captured: a
    // graph launches its kernels back to back anyway, and the plain launch is the proven path there.
    cfg.numAttrs = dev.major >= 9 && capturing == cudaStreamCaptureStatusNone ? 1 : 0;
    const cudaError_t err =
        cudaLaunchKernelEx(&cfg, batch_decode_kernel<T, HEAD_DIM>, o, lse, q, kv_cache, kv_indptr, kv_indices,
                           kv_last_page_len, workspace, static_cast<int>(kv_heads), group,
                           static_cast<int>(page_size), sm_scale * course::LOG2E, splits, 1);
    if (err != cudaSuccess) return err;
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
