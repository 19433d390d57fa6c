// Your exercise: fill in the TODOs. Generated from solutions/day12/flash_attention.cu by `grader release` (stub-hash fdc474f61857).
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
// Design (kernels/day12 v1-v3 build up its parts with 8 warps of 16 rows): a block of 4 warps takes
// 128 query rows of one (request, query head); warp w owns rows 32 w .. 32 w + 31 as 2 m tiles of 16
// (FlashAttention-2's split), so each K and V fragment it loads with ldmatrix feeds two mma. Q stays
// in shared memory: a warp reads its Q fragments with ldmatrix again for every tile (the registers
// hold the second m tile's O instead). K and V come in tiles of 32 keys through a 2-stage cp.async
// ring in XOR-swizzled shared memory (one barrier per tile). Per tile each warp computes S = Q K^T
// (2 x 16 x 32, mma m16n8k16 with ldmatrix for K), masks it where the tile needs a mask, updates its
// online softmax (m, d per row, in registers; base 2), rescales O and adds P V (P straight from S's
// registers, V with ldmatrix.trans). Tiles past the causal diagonal are never loaded; a warp skips a
// loaded tile that lies wholly past its own rows. Finally o = O / d goes out through shared memory in
// 16-byte rows, lse = (m + log2 d) ln 2. Two blocks per SM (__launch_bounds__(128, 2)): 255 registers
// per lane, no spills.
// Addresses are the other half of the speed: every ldmatrix and cp.async takes a 32-bit shared address
// computed once, outside the loops. The swizzled chunk of k step kk is (2 kk + c) ^ (row % 8) =
// (2 kk) ^ (c ^ row % 8), so a lane's address at step kk is its step-0 address XOR 32 kk bytes (one
// LOP3; FlashInfer's permuted_smem.cuh advances its offsets the same way), and a thread's copies are
// one base plus constants. Per tile of 32 keys a warp then issues ~630 instructions for its 128 mma
// instead of ~810 with the swizzle and the 64-bit copy addresses recomputed per use (counted in the
// SASS): with 2 warps per scheduler, the issue slots were what the mma waited for.
//
// Napkin math (batch 1 x 16384, 32 heads, head_dim 128, non-causal): 4 x 32 x 16384^2 x 128 = 4.4
// TFLOP. mma.sync on the H100 and H200 (132 SMs) tops out near 636 TFLOP/s and SDPA's FLASH backend
// (FlashAttention-2) reached ~350 (340-360 non-causal on the H100); the design aims at ~315 TFLOP/s,
// ~14 ms here.
// Target (grader/exercises/day12.py): >= 0.90x scaled_dot_product_attention (FLASH backend) (TFLOP/s).
// Per tile of 32 keys a block runs 4 warps x 128 mma = 2.1 MFLOP on 16 KB of K and V:
// 128 flops per byte brought in from L2 (the 128 rows share every byte), ~2.5 TB/s of L2 traffic at
// 315 TFLOP/s; with 64-row blocks it would be twice that, near what the L2 can deliver. Shared memory:
// per tile a warp reads the 16 KB of K and V and its own 8 KB of Q with ldmatrix for its 32 rows: 21
// flops per byte (16 with 16 rows a warp, even with Q in registers), so ~128 B/clk/SM caps the mma
// near 710 TFLOP/s, past mma.sync's own ceiling (530 with 16 rows a warp); a bank conflict still costs
// at once: the swizzle is not optional. Registers per lane (head_dim 128): O 128 (2 m tiles x 64),
// S/P 32, Q 8 per k step (Q for the whole kernel would add 64: it stays in shared memory). 64 KB of
// shared memory and 128 threads a block: 2 blocks per SM, 2 warps per scheduler, one block's copies
// and barrier overlapping the other's mma.
// Measured on an H100 in the same run (reports/variant-sweep-day12-addressing.json), TFLOP/s as a
// fraction of SDPA's FLASH backend at bf16 8 x 2048 causal, fp16 8 x 2048 full, bf16 1 x 16384 full,
// fp16 1 x 16384 causal: these addresses 1.013 0.961 0.971 1.029; the same kernel with addresses from
// swz() at every use 0.914 0.856 0.856 0.916. With 64-key tiles (FA_BLOCK_KV 64) it reached 1.021
// 0.992 1.006 1.066 but spilled 236 bytes a lane, which the grader does not accept. Earlier
// (reports/variant-sweep-day10-day12.json): FA_STAGES 3 was slower, and so was the previous design,
// 8 warps x 16 rows with Q in registers and 64-key tiles.
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
// benchmarks/variant_sweep tries (the defaults measured best on the H100, see above).
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

// One warp's share of a tile for its MT m tiles of 16 rows (rows q_w + 16 mt .. + 15 of q_s): S = Q K^T
// over the tile's BLOCK_KV keys, the online-softmax update of (m, d) per row and O += P V. Each K and V
// fragment loaded from shared memory feeds MT mma; the Q fragments are read from q_s per k step. MASK:
// the tile holds keys some row may not see: row group_row + 8 r of m tile mt may not see keys from
// seq_kv on, nor (causal) from lim0 + 16 mt + 8 r on.
template <bool MASK, typename T, int HEAD_DIM>
__device__ __forceinline__ void attend_tile(const T* __restrict__ ks, const T* __restrict__ vs,
                                            const T* __restrict__ q_s, int q_w, float (&o_acc)[MT][HEAD_DIM / 8][4],
                                            float (&m)[MT][2], float (&d)[MT][2], int k0, int lim0, int seq_kv,
                                            bool causal, float scale_log2) {
  const int lane = threadIdx.x % 32, pair = lane % 4;
  // TODO: this warp's step over one tile (K at ks, V at vs, both [BLOCK_KV][HEAD_DIM] swizzled) for
  // its MT = 2 m tiles of 16 rows:
  //  1. S (MT x 16 x BLOCK_KV) = Q K^T. Per k step kk of 16: the A fragments of both m tiles with
  //     course::ldmatrix_x4 from q_s (rows q_w + 16 mt + lane % 16, columns 16 kk + (lane / 16) 8);
  //     then per pair of key n-tiles one course::ldmatrix_x4 of K (stored [key][dim]: the mma's "col"
  //     B operand, no .trans) feeding course::mma_m16n8k16<T> for both m tiles (4 mma).
  //     s[mt][j][e] is row group_row + 8 (e / 2) of m tile mt, key k0 + 8 j + 2 pair + e % 2.
  //  2. MASK: -inf for keys >= seq_kv and, when causal, keys >= lim0 + 16 mt + 8 (e / 2).
  //  3. Per row: the tile's max (the 4 lanes of a quad share a row: __shfl_xor_sync 1, 2), m_new in
  //     base 2 (scores x scale_log2), O and d rescaled by 2^(m_old - m_new), p = 2^(s scale_log2 -
  //     m_new) (no NaN while a row has seen only -inf), d += p.
  //  4. O += P V: P's C fragments are the A fragments of the next mma (course::pack2<T>); V is
  //     stored [key][dim] = [k][n]: course::ldmatrix_x4_trans, each V fragment for both m tiles.
  //  Speed (the target needs it): compute each lane's Q, K and V addresses once, before the
  //  loops, as 32-bit shared addresses (course::smem_u32) for ldsm_x4 / ldsm_x4_trans above; the
  //  address at k step kk is the step-0 address XOR 32 kk bytes (the swizzle only permutes chunks
  //  within a row), and 16 rows further on is + 16 rows of bytes. With swz() and a pointer at every
  //  ldmatrix the warp issues ~30% more instructions and reaches ~0.86x.
  (void)ks; (void)vs; (void)q_s; (void)q_w; (void)o_acc; (void)m; (void)d; (void)k0; (void)lim0; (void)seq_kv;
  (void)causal; (void)scale_log2; (void)pair;
}

template <typename T, int HEAD_DIM>
__global__ void __launch_bounds__(THREADS, FA_MIN_BLOCKS)
    flash_attention_kernel(T* __restrict__ o, float* __restrict__ lse, const T* __restrict__ q,
                           const T* __restrict__ k, const T* __restrict__ v, int seq_q, int seq_kv, int group,
                           int64_t q_stride, int64_t kv_stride, bool causal, float scale_log2) {
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

  // TODO: the block's 128 query rows q0 .. q0 + 127 of head qh (see the notebook's exercise cell);
  // warp w owns rows q_w .. q_w + 31 (q_w = WARP_ROWS w) as MT = 2 m tiles of 16:
  //  1. key_range(): how many tiles of BLOCK_KV keys to visit (none past kv_end) and from which
  //     tile on a mask is needed (full_end); lim0 = q0 + q_w + group_row + seq_kv - seq_q + 1, the
  //     first key this lane's row of m tile 0 may not see under the causal mask.
  //  2. Q into q_s with 16-byte cp.async (course::cp_async_zfill: zeros past seq_q), its own commit
  //     group; the first STAGES - 1 K/V tiles into the ring, one group each (empty ones too).
  //  3. Wait for Q and __syncthreads: attend_tile reads each warp's Q fragments from q_s per tile.
  //  4. Per tile t: cp_async_wait<STAGES - 2>, __syncthreads, issue tile t + STAGES - 1 into the
  //     stage tile t - 1 used (cp_async16 above from a shared address and source pointers computed
  //     once: a thread's rows r0 + i ROW_STEP share a swizzle), commit, then attend_tile on stage
  //     t % STAGES: MASK false below full_end's tile, true from there on; a masked tile wholly past
  //     the warp's last row is skipped.
  //  5. Per m tile: o = O / d (0 where d = 0) rounded to T, into the warp's own rows of q_s
  //     (swizzled; __syncwarp first: Q is read there until the last tile), then 16-byte stores of
  //     whole rows; lse = (m + log2 d) ln 2, -inf for a row without keys; nothing past seq_q.
  (void)o; (void)lse; (void)q_rows; (void)k_rows; (void)v_rows; (void)q_stride; (void)kv_stride; (void)causal;
  (void)scale_log2; (void)q_s; (void)ring; (void)qo_heads; (void)warp; (void)group_row; (void)pair; (void)q0;
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
  const dim3 grid(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch), static_cast<unsigned>(q_tiles));
  kernel<<<grid, THREADS, SMEM, stream>>>(o, lse, q, k, v, static_cast<int>(seq_q), static_cast<int>(seq_kv),
                                          static_cast<int>(qo_heads / kv_heads), q_stride, kv_stride, causal,
                                          sm_scale * course::LOG2E);
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
