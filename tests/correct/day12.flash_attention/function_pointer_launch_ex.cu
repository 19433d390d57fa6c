// CORRECT the kernel taken through a function pointer and launched through cudaLaunchKernelEx with a cudaLaunchConfig_t (its shared-memory limit raised on every launch), static_asserts on the tile shape and head_dim
// Day 12 exercise: FlashAttention-2 forward (prefill attention) on the tensor cores, with causal
// masking, GQA and the log-sum-exp (models: FlashInfer include/flashinfer/attention/prefill.cuh,
// mma.cuh, permuted_smem.cuh, cp_async.cuh; the FlashAttention-2 paper, Algorithm 1).
//
//   q    [batch, seq_q, qo_heads, head_dim]    fp16 / bf16; token t of request b at q + (b seq_q + t) q_stride
//   k, v [batch, seq_kv, kv_heads, head_dim]   fp16 / bf16; token t at k + (b seq_kv + t) kv_stride (v alike)
//   o    [batch, seq_q, qo_heads, head_dim]    fp16 / bf16 out, contiguous
//   lse  [batch, seq_q, qo_heads]              fp32 out: ln sum_j exp(sm_scale q_i . k_j), NATURAL log
//
// q_stride and kv_stride (elements from one token to the next) let q, k and v be slices of one fused
// qkv projection, as a model produces them; they must be multiples of 8 and the pointers 16-byte
// aligned. Query head qh reads KV head qh / group (group = qo_heads / kv_heads: neighbours share).
// Causal masks are aligned bottom-right, as FlashInfer's: query i attends key j iff
// j <= i + seq_kv - seq_q (the last query sees every key; with seq_q = seq_kv the usual triangle).
// A query that may attend no key at all (i + seq_kv - seq_q < 0, or seq_kv = 0) gets o = 0 and
// lse = -inf, as FlashInfer returns them. sm_scale must be > 0.
//
// The exercise: the body of attend_tile (one warp's S = Q K^T, online softmax and O += P V on the mma
// fragments of one K/V tile) and the tile loop of flash_attention_kernel (the cp.async ring's waits,
// barriers and refills around attend_tile). The rest of this file is given: the copies (load_q,
// KvTileLoader), the lanes' ldmatrix addresses (FragAddrs), the mask (mask_scores), the limits of the
// loop, the epilogue and the launcher.
//
// Design (kernels/day12 v1-v3 build up its parts): a block of 4 warps takes 128 query rows of one
// (request, query head); warp w owns rows 32 w .. 32 w + 31 as 2 m tiles of 16, so each K and V
// fragment it loads with ldmatrix feeds two mma. Q stays in shared memory (a warp reads its fragments
// again per tile); K and V come in tiles of 32 keys through a 2-stage cp.async ring in XOR-swizzled
// shared memory, one barrier per tile; tiles past the causal diagonal are never loaded. Every shared
// address is computed once outside the loops (a k step is an XOR of 32 kk bytes, as FlashInfer's
// permuted_smem.cuh advances): with 2 warps per scheduler, issue slots are what the mma wait for.
//
// Napkin math (batch 1 x 16384, 32 heads, head_dim 128, non-causal): 4 x 32 x 16384^2 x 128 = 4.4
// TFLOP. mma.sync on the H100 and H200 tops out near 636 TFLOP/s and SDPA's FLASH backend reaches
// ~350; per tile a block brings 16 KB of K and V from L2 for 2.1 MFLOP (128 flops per byte), and a
// warp reads 21 flops per byte from shared memory. 255 registers per lane, no spills, two blocks per
// SM. Target (grader/exercises/day12.py): see the spec.
#include "course/async.cuh"
#include "course/attention.cuh"
#include "course/math.cuh"
#include "course/mma.cuh"

namespace {

// Given. ldmatrix.x4 (.trans) and a 16-byte cp.async (.cg, zero-filled unless `pred`) on 32-bit
// shared-memory addresses, as course::ldmatrix_x4 and course::cp_async_zfill do on pointers: an address
// computed once plus a constant or an XOR is one instruction, where a pointer is converted at every use.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* gmem, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

constexpr int WARPS = 4;
constexpr int MT = 2;                       // m tiles of 16 query rows per warp
constexpr int THREADS = WARPS * 32;
constexpr int WARP_ROWS = 16 * MT;          // query rows per warp: 32
constexpr int BLOCK_Q = WARP_ROWS * WARPS;  // query rows per block: 128
// Keys per tile, the depth of the cp.async ring and __launch_bounds__' blocks per SM: knobs that
// benchmarks/variant_sweep tries (the defaults measured best on the H100: reports/variant-sweep-day10-day12.json).
#ifndef FA_BLOCK_KV
#define FA_BLOCK_KV 32
#endif
#ifndef FA_STAGES
#define FA_STAGES 2
#endif
#ifndef FA_MIN_BLOCKS
#define FA_MIN_BLOCKS 2
#endif
constexpr int BLOCK_KV = FA_BLOCK_KV;  // keys per tile
constexpr int STAGES = FA_STAGES;      // K/V tiles in the cp.async ring
static_assert(BLOCK_KV % 16 == 0, "a K/V tile is whole mma k steps (P V) and n pairs (Q K^T)");
static_assert(STAGES >= 2, "the ring refills the stage freed at the last barrier");
static_assert(BLOCK_Q % 16 == 0 && THREADS % 32 == 0, "whole m tiles, whole warps");

// Shared tiles are [rows][HEAD_DIM] with the 16-byte chunk c of row r stored at chunk c ^ (r % 8):
// the 8 rows one ldmatrix reads at the same column land in 8 different bank groups (Day 9's swizzle
// for rows of 128 and 256 bytes). Returns the element offset of (row, col), col a multiple of 8.
template <int HEAD_DIM>
__device__ __forceinline__ int swz(int row, int col) {
  return row * HEAD_DIM + (((col / 8) ^ (row % 8)) * 8);
}

// The dynamic shared memory of one block: Q (BLOCK_Q rows, later O), then STAGES x (K tile, V tile).
template <typename T, int HEAD_DIM>
constexpr int smem_bytes() {
  return (BLOCK_Q + 2 * STAGES * BLOCK_KV) * HEAD_DIM * static_cast<int>(sizeof(T));  // 64 KB at 128
}

// The keys the block's rows may see: [0, kv_end) over all its rows, and [0, full_end) for every one
// of them (tiles below full_end need no mask). off = seq_kv - seq_q aligns the causal mask bottom-right.
struct KeyRange {
  int kv_end, full_end;
};
__device__ __forceinline__ KeyRange key_range(int q0, int seq_q, int seq_kv, bool causal) {
  if (!causal) return {seq_kv, seq_kv};
  const int off = seq_kv - seq_q, last_row = min(q0 + BLOCK_Q, seq_q) - 1;
  return {max(0, min(seq_kv, last_row + off + 1)), max(0, min(seq_kv, q0 + off + 1))};
}

// Given. Q's BLOCK_Q rows from q0 on into q_s (swizzled), as 16-byte cp.async; rows past seq_q are
// zero-filled (their scores are computed, never stored). Thread i moves chunk i % CHUNKS of rows
// i / CHUNKS, + ROW_STEP, ... Commits nothing: the caller closes the group.
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void load_q(T* q_s, const T* q_rows, const T* q, int q0, int seq_q, int64_t q_stride) {
  constexpr int CHUNKS = HEAD_DIM / 8, ROW_STEP = THREADS / CHUNKS;
  const int ch = threadIdx.x % CHUNKS, r0 = threadIdx.x / CHUNKS;
#pragma unroll
  for (int i = 0; i < BLOCK_Q / ROW_STEP; ++i) {
    const int r = r0 + i * ROW_STEP;
    const bool valid = q0 + r < seq_q;
    const T* src = valid ? q_rows + static_cast<int64_t>(q0 + r) * q_stride + ch * 8 : q;
    course::cp_async_zfill<16, course::CacheHint::cg>(q_s + swz<HEAD_DIM>(r, ch * 8), src, valid);
  }
}

// Given. The copies of the cp.async ring: load(tile) issues the BLOCK_KV rows of K and of V from key
// tile * BLOCK_KV on into stage tile % STAGES of the ring (K at ring + stage 2 TILE, V at + TILE, both
// swizzled), zero-filling rows past seq_kv (masked: never counted). It commits nothing: the caller
// commits one group per tile. Thread i moves chunk i % CHUNKS of rows r0 = i / CHUNKS, + ROW_STEP, ...;
// .cg (L2 only): other blocks, not this SM, read the same K and V again. The thread's rows share one
// swizzle (ROW_STEP is a multiple of 8), so its shared address and its two source pointers are
// computed once, here; per tile only the tile's offset is added.
template <typename T, int HEAD_DIM>
struct KvTileLoader {
  static constexpr int CHUNKS = HEAD_DIM / 8;  // 16-byte chunks per row
  uint32_t dst;       // the thread's first chunk in stage 0's K tile (32-bit shared address)
  const T* k_thr;     // its first chunk of key r0 of the head in k (v_thr: in v)
  const T* v_thr;
  const T* k_any;     // a valid address, the source of a zero-filled copy (v_any: for V)
  const T* v_any;
  int64_t kv_stride;  // elements from one key to the next
  int r0, seq_kv;

  __device__ __forceinline__ KvTileLoader(T* ring, const T* k_rows, const T* v_rows, const T* k, const T* v,
                                          int64_t kv_stride, int seq_kv)
      : k_any(k), v_any(v), kv_stride(kv_stride), r0(threadIdx.x / CHUNKS), seq_kv(seq_kv) {
    const int ch = threadIdx.x % CHUNKS;
    dst = course::smem_u32(ring + swz<HEAD_DIM>(r0, ch * 8));
    const int64_t thr_off = static_cast<int64_t>(r0) * kv_stride + ch * 8;
    k_thr = k_rows + thr_off;
    v_thr = v_rows + thr_off;
  }

  __device__ __forceinline__ void load(int tile) const {
    constexpr int ROW_STEP = THREADS / CHUNKS, TILE = BLOCK_KV * HEAD_DIM;
    const uint32_t stage = dst + (tile % STAGES) * 2 * TILE * static_cast<int>(sizeof(T));
    const int k0 = tile * BLOCK_KV;
    const int64_t tile_off = static_cast<int64_t>(k0) * kv_stride;
    const int64_t row_step = static_cast<int64_t>(ROW_STEP) * kv_stride;
#pragma unroll
    for (int i = 0; i < BLOCK_KV / ROW_STEP; ++i) {
      const bool valid = k0 + r0 + i * ROW_STEP < seq_kv;  // zeros past seq_kv (masked: never counted)
      const T* ksrc = valid ? k_thr + tile_off + i * row_step : k_any;
      const T* vsrc = valid ? v_thr + tile_off + i * row_step : v_any;
      cp_async16(stage + i * ROW_STEP * HEAD_DIM * static_cast<int>(sizeof(T)), ksrc, valid);
      cp_async16(stage + (TILE + i * ROW_STEP * HEAD_DIM) * static_cast<int>(sizeof(T)), vsrc, valid);
    }
  }
};

// Given. A lane's ldmatrix addresses in q_s and in one K/V tile (Day 9's lane mapping on the swizzled
// layout), as 32-bit shared addresses computed once per tile. Rows are 2 HEAD_DIM bytes (a multiple of
// 128) and the swizzle only permutes a row's 16-byte chunks: the chunk (2 kk + c) ^ (row % 8) of k step
// kk is (2 kk) ^ (c ^ row % 8), so the address of step kk is the step-0 address XOR 32 kk bytes, and 16
// rows on is + 16 rows of bytes: one LOP3 or IADD per ldmatrix, no register per k step.
template <typename T, int HEAD_DIM>
struct FragAddrs {
  static constexpr int ROWS16 = 16 * HEAD_DIM * static_cast<int>(sizeof(T));  // bytes of 16 rows
  uint32_t q_addr, k_addr, v_addr;  // k step 0, m tile 0, key 0

  __device__ __forceinline__ FragAddrs(const T* q_s, int q_w, const T* ks, const T* vs) {
    const int lane = threadIdx.x % 32;
    q_addr = course::smem_u32(q_s + swz<HEAD_DIM>(q_w + lane % 16, (lane / 16) * 8));
    k_addr = course::smem_u32(ks + swz<HEAD_DIM>(lane % 8 + (lane / 16) * 8, (lane / 8 % 2) * 8));
    v_addr = course::smem_u32(vs + swz<HEAD_DIM>(lane % 16, (lane / 16) * 8));
  }
  // For ldsm_x4: the A fragment of m tile mt (rows q_w + 16 mt .. + 15) at k step kk (dims 16 kk .. + 15).
  __device__ __forceinline__ uint32_t q(int mt, int kk) const { return (q_addr + mt * ROWS16) ^ (kk * 32); }
  // For ldsm_x4: at k step kk, r[0..1] the B fragment of keys 16 jp .. + 7 (K is [key][dim]: the mma's
  // "col" operand, no .trans), r[2..3] of keys 16 jp + 8 .. + 15.
  __device__ __forceinline__ uint32_t k(int kk, int jp) const { return (k_addr ^ (kk * 32)) + jp * ROWS16; }
  // For ldsm_x4_trans: keys 16 kk .. + 15 (V is [key][dim] = [k][n]), r[0..1] the B fragment of dims
  // 16 nd .. + 7, r[2..3] of dims 16 nd + 8 .. + 15.
  __device__ __forceinline__ uint32_t v(int kk, int nd) const { return (v_addr ^ (nd * 32)) + kk * ROWS16; }
};

// Given. The mask of one m tile's scores (C layout: s[j][e] is row group_row + 8 (e / 2) of the m tile,
// key k0 + 8 j + 2 pair + e % 2): -inf for keys from seq_kv on and, when causal, from lim on for row
// group_row (lim + 8 for row group_row + 8), lim clamped to [0, seq_kv].
__device__ __forceinline__ void mask_scores(float (&s)[BLOCK_KV / 8][4], int k0, int lim, int seq_kv, bool causal) {
  const int pair = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < BLOCK_KV / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (k0 + 8 * j + 2 * pair + e % 2 >= (causal ? min(seq_kv, max(0, lim + 8 * (e / 2))) : seq_kv))
        s[j][e] = -INFINITY;
}

// One warp's share of a tile for its MT m tiles of 16 rows (rows q_w + 16 mt .. + 15 of q_s): S = Q K^T
// over the tile's BLOCK_KV keys (from key k0 on), the online-softmax update of (m, d) per row and O += P V
// (P straight from S's registers: FlashAttention-2's register reuse; V's fragments by ldmatrix.trans).
// Each K and V fragment loaded from shared memory feeds MT mma; the Q fragments are read from q_s per
// k step. MASK: the tile holds keys some row may not see: row group_row + 8 r of m tile mt may not see
// keys from seq_kv on, nor (causal) from lim0 + 16 mt + 8 r on. A row that has seen only masked keys
// keeps m = -inf: it is shifted by 0, not by m, so that no -inf - -inf (NaN) appears; its p are
// 2^-inf = 0 and its O and d stay 0.
template <bool MASK, typename T, int HEAD_DIM>
__device__ __forceinline__ void attend_tile(const T* __restrict__ ks, const T* __restrict__ vs,
                                            const T* __restrict__ q_s, int q_w, float (&o_acc)[MT][HEAD_DIM / 8][4],
                                            float (&m)[MT][2], float (&d)[MT][2], int k0, int lim0, int seq_kv,
                                            bool causal, float scale_log2) {
  const FragAddrs<T, HEAD_DIM> addr(q_s, q_w, ks, vs);
  float s[MT][BLOCK_KV / 8][4] = {};
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    uint32_t qa[MT][4];  // the A fragments of the warp's MT m tiles for this k step, straight from q_s
    for (int mt = 0; mt < MT; ++mt) ldsm_x4(qa[mt], addr.q(mt, kk));
    for (int jp = 0; jp < BLOCK_KV / 16; ++jp) {
      uint32_t bk[4];  // keys 16 jp .. + 7 and + 8 .. + 15: each half feeds MT mma
      ldsm_x4(bk, addr.k(kk, jp));
      const uint32_t b_lo[2] = {bk[0], bk[1]}, b_hi[2] = {bk[2], bk[3]};
      for (int mt = 0; mt < MT; ++mt) {
        course::mma_m16n8k16<T>(s[mt][2 * jp], qa[mt], b_lo);
        course::mma_m16n8k16<T>(s[mt][2 * jp + 1], qa[mt], b_hi);
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    if constexpr (MASK) mask_scores(s[mt], k0, lim0 + 16 * mt, seq_kv, causal);
    float neg_m[2];
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;  // the tile's row max of the raw scores (sm_scale > 0: max(s) x scale)
      for (int j = 0; j < BLOCK_KV / 8; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * r], s[mt][j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the quad's 4 lanes hold the row's keys
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[mt][r], mx * scale_log2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;     // no key yet: shift by 0, not -inf
      const float rescale = course::ptx_exp2(m[mt][r] - m_use);  // 0 while m_old = -inf
      m[mt][r] = m_new;
      d[mt][r] *= rescale;
      neg_m[r] = -m_use;
      for (int n = 0; n < HEAD_DIM / 8; ++n) {
        o_acc[mt][n][2 * r] *= rescale;
        o_acc[mt][n][2 * r + 1] *= rescale;
      }
    }
    for (int j = 0; j < BLOCK_KV / 8; ++j)
      for (int e = 0; e < 4; ++e) {  // p = 2^(s scale_log2 - m): one FFMA and one MUFU.EX2 per score
        s[mt][j][e] = course::ptx_exp2(fmaf(s[mt][j][e], scale_log2, neg_m[e / 2]));
        d[mt][e / 2] += s[mt][j][e];
      }
  }
#pragma unroll
  for (int kk = 0; kk < BLOCK_KV / 16; ++kk) {  // O += P V, 16 keys per k step
    uint32_t pa[MT][4];  // P's C fragments are the next mma's A fragments, rounded to T
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = course::pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      pa[mt][1] = course::pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      pa[mt][2] = course::pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      pa[mt][3] = course::pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int nd = 0; nd < HEAD_DIM / 16; ++nd) {
      uint32_t bv[4];  // dims 16 nd .. + 7 and + 8 .. + 15: each half feeds MT mma
      ldsm_x4_trans(bv, addr.v(kk, nd));
      const uint32_t b_lo[2] = {bv[0], bv[1]}, b_hi[2] = {bv[2], bv[3]};
      for (int mt = 0; mt < MT; ++mt) {
        course::mma_m16n8k16<T>(o_acc[mt][2 * nd], pa[mt], b_lo);
        course::mma_m16n8k16<T>(o_acc[mt][2 * nd + 1], pa[mt], b_hi);
      }
    }
  }
}

template <typename T, int HEAD_DIM>
__global__ void __launch_bounds__(THREADS, FA_MIN_BLOCKS)
    flash_attention_kernel(T* __restrict__ o, float* __restrict__ lse, const T* __restrict__ q,
                           const T* __restrict__ k, const T* __restrict__ v, int seq_q, int seq_kv, int group,
                           int64_t q_stride, int64_t kv_stride, bool causal, float scale_log2) {
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "rows of 128 or 256 bytes: the swizzle's assumption");
  constexpr int CHUNKS = HEAD_DIM / 8;           // 16-byte chunks per row
  constexpr int TILE = BLOCK_KV * HEAD_DIM;      // elements of one K (or V) tile
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);       // (BLOCK_Q, HEAD_DIM) swizzled; O on the way out
  T* ring = q_s + BLOCK_Q * HEAD_DIM;            // (STAGES, 2, BLOCK_KV, HEAD_DIM): K then V, swizzled

  // Heaviest query tiles first: under a causal mask the last tiles see the most keys, and starting
  // them first keeps the GPU's last wave short.
  const int qh = blockIdx.x, b = blockIdx.y, q0 = (gridDim.z - 1 - blockIdx.z) * BLOCK_Q;
  const int qo_heads = gridDim.x, kv_head = qh / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group_row = lane / 4, pair = lane % 4;
  const T* q_rows = q + static_cast<int64_t>(b) * seq_q * q_stride + static_cast<int64_t>(qh) * HEAD_DIM;
  const T* k_rows = k + static_cast<int64_t>(b) * seq_kv * kv_stride + static_cast<int64_t>(kv_head) * HEAD_DIM;
  const T* v_rows = v + static_cast<int64_t>(b) * seq_kv * kv_stride + static_cast<int64_t>(kv_head) * HEAD_DIM;

  // Given: the limits. The tiles to visit: none past the last key any of the block's rows may see
  // (kv_end); from full_tiles on a tile needs the mask. This lane's rows are q0 + q_w + 16 mt +
  // group_row + 8 r; lim0: the first key row group_row of m tile 0 may not see (causal);
  // warp_last_key: the last key any row of the warp may see (a tile starting past it is skipped by the
  // warp).
  const KeyRange keys = key_range(q0, seq_q, seq_kv, causal);
  const int n_tiles = (keys.kv_end + BLOCK_KV - 1) / BLOCK_KV;
  const int full_tiles = keys.full_end / BLOCK_KV;  // tiles 0 .. full_tiles - 1 need no mask
  const int q_w = WARP_ROWS * warp, off = seq_kv - seq_q;  // the warp's first row in the block
  const int lim0 = q0 + q_w + group_row + off + 1;
  const int warp_last_key = causal ? q0 + q_w + WARP_ROWS - 1 + off : seq_kv - 1;

  // Given: Q's copies, committed as the first (oldest) group of copies; the K/V tile copier.
  load_q<T, HEAD_DIM>(q_s, q_rows, q, q0, seq_q, q_stride);
  course::cp_async_commit();
  const KvTileLoader<T, HEAD_DIM> kv(ring, k_rows, v_rows, k, v, kv_stride, seq_kv);

  // Given: the online-softmax state of the lane's 4 rows (2 per m tile), empty.
  float o_acc[MT][HEAD_DIM / 8][4];  // O (16 MT, HEAD_DIM) in C layout: n tiles of 8 dims per m tile
  float m[MT][2], d[MT][2];          // per row; d is this lane's share
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) o_acc[mt][n][0] = o_acc[mt][n][1] = o_acc[mt][n][2] = o_acc[mt][n][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    d[mt][0] = d[mt][1] = 0.0f;
  }

  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < n_tiles) kv.load(t);
    course::cp_async_commit();  // one group per tile, empty or not: the waits count groups
  }
  course::cp_async_wait<STAGES - 1>();  // Q's group (the oldest) has landed
  __syncthreads();                      // everyone's Q: attend_tile reads it from q_s on every tile

  for (int t = 0; t < n_tiles; ++t) {
    course::cp_async_wait<STAGES - 2>();  // all but the newest STAGES - 2 groups: tile t (this thread's copies)
    __syncthreads();  // everyone's copies of tile t; and every warp is done with tile t - 1: refill its stage
    if (t + STAGES - 1 < n_tiles) kv.load(t + STAGES - 1);
    course::cp_async_commit();
    const T* ks = ring + (t % STAGES) * 2 * TILE;
    const int k0 = t * BLOCK_KV;
    if (t < full_tiles)
      attend_tile<false, T, HEAD_DIM>(ks, ks + TILE, q_s, q_w, o_acc, m, d, k0, lim0, seq_kv, causal, scale_log2);
    else if (k0 <= warp_last_key)  // a tile wholly past the warp's rows adds nothing: skip it
      attend_tile<true, T, HEAD_DIM>(ks, ks + TILE, q_s, q_w, o_acc, m, d, k0, lim0, seq_kv, causal, scale_log2);
  }
  course::cp_async_wait<0>();  // (only empty groups can be left)

  // Given: the epilogue, per m tile. o = O / d rounded to T and lse = (m + log2 d) ln 2 (natural log)
  // for the warp's rows, none past seq_q; a row that saw no key (d = 0, m = -inf) gets o = 0 and
  // lse = -inf. d so far is this lane's share of its rows' sums: add the quad's 4 shares first. o goes
  // into the warp's own rows of q_s (no other warp reads them: no block barrier), then whole rows out
  // with 16-byte stores: 256 contiguous bytes per row instead of 4-byte pieces.
  T* o_s = q_s + q_w * HEAD_DIM;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      d[mt][r] += __shfl_xor_sync(0xffffffffu, d[mt][r], 1);
      d[mt][r] += __shfl_xor_sync(0xffffffffu, d[mt][r], 2);
      inv[r] = d[mt][r] > 0.0f ? 1.0f / d[mt][r] : 0.0f;  // a row without keys: o = 0
      const int row = q0 + q_w + 16 * mt + group_row + 8 * r;
      if (pair == 0 && row < seq_q)
        lse[(static_cast<int64_t>(b) * seq_q + row) * qo_heads + qh] =
            m[mt][r] == -INFINITY ? -INFINITY : (m[mt][r] + course::ptx_log2(d[mt][r])) * course::LN2;
    }
    __syncwarp();  // every lane has read its last Q fragments of these rows
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t packed = course::pack2<T>(o_acc[mt][n][2 * r] * inv[r], o_acc[mt][n][2 * r + 1] * inv[r]);
        *reinterpret_cast<uint32_t*>(o_s + swz<HEAD_DIM>(16 * mt + group_row + 8 * r, n * 8) + 2 * pair) = packed;
      }
  }
  __syncwarp();
#pragma unroll
  for (int i = lane; i < WARP_ROWS * CHUNKS; i += 32) {
    const int r = i / CHUNKS, c = i % CHUNKS, row = q0 + q_w + r;
    if (row < seq_q)
      *reinterpret_cast<uint4*>(o + ((static_cast<int64_t>(b) * seq_q + row) * qo_heads + qh) * HEAD_DIM + c * 8) =
          *reinterpret_cast<const uint4*>(o_s + swz<HEAD_DIM>(r, c * 8));
  }
}

template <typename T, int HEAD_DIM>
cudaError_t launch_attention(T* o, float* lse, const T* q, const T* k, const T* v, int64_t batch, int64_t seq_q,
                             int64_t seq_kv, int64_t qo_heads, int64_t kv_heads, int64_t q_stride, int64_t kv_stride,
                             bool causal, float sm_scale, cudaStream_t stream) {
  constexpr int SMEM = smem_bytes<T, HEAD_DIM>();
  auto kernel = flash_attention_kernel<T, HEAD_DIM>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  if (err != cudaSuccess) return err;
  const int64_t q_tiles = course::ceil_div<int64_t>(seq_q, BLOCK_Q);
  // cudaLaunchKernelEx with a launch configuration instead of <<<...>>>.
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch), static_cast<unsigned>(q_tiles));
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = SMEM;
  cfg.stream = stream;
  cfg.numAttrs = 0;
  err = cudaLaunchKernelEx(&cfg, kernel, o, lse, q, k, v, static_cast<int>(seq_q), static_cast<int>(seq_kv),
                           static_cast<int>(qo_heads / kv_heads), q_stride, kv_stride, causal,
                           sm_scale * course::LOG2E);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch(T* o, float* lse, const T* q, const T* k, const T* v, int64_t batch, int64_t seq_q,
                     int64_t seq_kv, int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t q_stride,
                     int64_t kv_stride, bool causal, float sm_scale, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(k) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(v) % 16 == 0 && reinterpret_cast<uintptr_t>(o) % 16 == 0 &&
                       q_stride % 8 == 0 && kv_stride % 8 == 0;
  if (batch < 0 || batch > 65535 || seq_q < 0 || seq_kv < 0 || seq_q > (1 << 29) || seq_kv > (1 << 29) ||
      kv_heads < 1 || qo_heads < kv_heads || qo_heads % kv_heads != 0 || qo_heads > 65535 || !(sm_scale > 0.0f) ||
      q_stride < qo_heads * head_dim || kv_stride < kv_heads * head_dim || !aligned ||
      course::ceil_div<int64_t>(seq_q, BLOCK_Q) > 65535)
    return cudaErrorInvalidValue;
  if (batch == 0 || seq_q == 0) return cudaSuccess;
  switch (head_dim) {
    case 64: return launch_attention<T, 64>(o, lse, q, k, v, batch, seq_q, seq_kv, qo_heads, kv_heads, q_stride,
                                            kv_stride, causal, sm_scale, stream);
    case 128: return launch_attention<T, 128>(o, lse, q, k, v, batch, seq_q, seq_kv, qo_heads, kv_heads, q_stride,
                                              kv_stride, causal, sm_scale, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

COURSE_EXPORT cudaError_t flash_attention_fp16(__half* o, float* lse, const __half* q, const __half* k, const __half* v,
                                               int64_t batch, int64_t seq_q, int64_t seq_kv, int64_t qo_heads,
                                               int64_t kv_heads, int64_t head_dim, int64_t q_stride, int64_t kv_stride,
                                               bool causal, float sm_scale, cudaStream_t stream) {
  return dispatch(o, lse, q, k, v, batch, seq_q, seq_kv, qo_heads, kv_heads, head_dim, q_stride, kv_stride, causal,
                  sm_scale, stream);
}

COURSE_EXPORT cudaError_t flash_attention_bf16(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q,
                                               const __nv_bfloat16* k, const __nv_bfloat16* v, int64_t batch,
                                               int64_t seq_q, int64_t seq_kv, int64_t qo_heads, int64_t kv_heads,
                                               int64_t head_dim, int64_t q_stride, int64_t kv_stride, bool causal,
                                               float sm_scale, cudaStream_t stream) {
  return dispatch(o, lse, q, k, v, batch, seq_q, seq_kv, qo_heads, kv_heads, head_dim, q_stride, kv_stride, causal,
                  sm_scale, stream);
}
