// CANDIDATE for solutions/day12/flash_attention.cu, measured by benchmarks/variant_sweep with
// 'day12.flash_attention@benchmarks/day12_flash_sweep/candidate.cu:KNOBS' (benchmarks/README.md).
// It differs from the solution in one thing: a warp owns FA_MT m tiles of 16 query rows (FA2's 32
// rows per warp with FA_MT 2), so every K and V fragment it loads with ldmatrix feeds FA_MT mma
// instead of one: per tile, K and V come out of shared memory once per 16 x FA_MT rows. Q fragments
// stay in registers (FA_Q_REGS 1) or are loaded again from shared memory per tile (0: FA2's choice,
// fewer registers). Not graded, not built by the tests.
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
// Design (kernels/day12 v1-v3 build it up): a block of 8 warps takes 128 query rows of one
// (request, query head); warp w owns rows 16 w .. 16 w + 15 and keeps their Q fragments in registers
// for the whole kernel. K and V come in tiles of 64 keys through a 3-stage cp.async ring in XOR-
// swizzled shared memory (one barrier per tile). Per tile each warp computes S = Q K^T (16 x 64, mma
// m16n8k16 with ldmatrix for K), masks it where the tile needs a mask, updates its online softmax
// (m, d per row, in registers; base 2), rescales O and adds P V (P straight from S's registers, V
// with ldmatrix.trans). Tiles past the causal diagonal are never loaded; a warp skips a loaded tile
// that lies wholly past its own rows. Finally o = O / d goes out through shared memory in 16-byte
// rows, lse = (m + log2 d) ln 2.
//
// Napkin math (batch 1 x 16384, 32 heads, head_dim 128, non-causal): 4 x 32 x 16384^2 x 128 = 4.4
// TFLOP. mma.sync on the H200 tops out near 636 TFLOP/s and SDPA's FLASH backend (FlashAttention-2)
// reached ~350: the 0.90x target is ~315 TFLOP/s, ~14 ms here. Per tile of 64 keys a block runs
// 8 warps x 128 mma = 4.2 MFLOP on 32 KB of K and V: 128 flops per byte brought in from L2 (the 128
// rows share every byte), ~2.5 TB/s of L2 traffic at 315 TFLOP/s; with 64-row blocks it would be
// twice that, near what the L2 can deliver. Shared memory: each warp reads the whole 32 KB tile with
// ldmatrix for its 16 rows (16 flops per byte), so ~128 B/clk/SM caps the mma near 530 TFLOP/s and
// a bank conflict costs at once: the swizzle is not optional. Registers per lane (head_dim 128): Q
// fragments 32, O 64, S/P 32: one block of 8 warps per SM, 2 warps per scheduler.
#include "course/async.cuh"
#include "course/attention.cuh"
#include "course/math.cuh"
#include "course/mma.cuh"

namespace {

#ifndef FA_WARPS
#define FA_WARPS 4
#endif
#ifndef FA_MT  // m tiles of 16 query rows per warp
#define FA_MT 2
#endif
#ifndef FA_Q_REGS  // 1: Q fragments in registers for the whole kernel; 0: from shared memory per tile
#define FA_Q_REGS 0
#endif
#ifndef FA_MIN_BLOCKS  // __launch_bounds__' blocks per SM
#define FA_MIN_BLOCKS 2
#endif
constexpr int WARPS = FA_WARPS;
constexpr int MT = FA_MT;
constexpr int THREADS = WARPS * 32;
constexpr int WARP_ROWS = 16 * MT;          // query rows per warp
constexpr int BLOCK_Q = WARP_ROWS * WARPS;  // query rows per block
// Keys per tile and the depth of the cp.async ring: knobs that benchmarks/variant_sweep tries.
#ifndef FA_BLOCK_KV
#define FA_BLOCK_KV 32
#endif
#ifndef FA_STAGES
#define FA_STAGES 2
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
  return (BLOCK_Q + 2 * STAGES * BLOCK_KV) * HEAD_DIM * static_cast<int>(sizeof(T));  // 128 KB at 128
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

// One warp's share of a tile for its MT m tiles of 16 rows: S = Q K^T over the tile's BLOCK_KV keys,
// the online-softmax update of (m, d) per row and O += P V. Each K and V fragment loaded from shared
// memory feeds MT mma. MASK: the tile holds keys some row may not see; row group_row + 8 r of m tile
// mt may not see keys from min(seq_kv, max(0, lim0 + 16 mt + 8 r)) on (causal), or from seq_kv. qf: the Q fragments (FA_Q_REGS) or unused; q_w: the
// warp's first row of Q in shared memory (row index into q_s).
template <bool MASK, typename T, int HEAD_DIM>
__device__ __forceinline__ void attend_tile(const T* __restrict__ ks, const T* __restrict__ vs,
                                            const T* __restrict__ q_s, int q_w,
                                            const uint32_t (&qf)[FA_Q_REGS ? MT : 1][HEAD_DIM / 16][4],
                                            float (&o_acc)[MT][HEAD_DIM / 8][4], float (&m)[MT][2],
                                            float (&d)[MT][2], int k0, int lim0, int seq_kv, bool causal,
                                            float scale_log2) {
  const int lane = threadIdx.x % 32, pair = lane % 4;
  float s[MT][BLOCK_KV / 8][4] = {};
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    uint32_t qa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (FA_Q_REGS) {
#pragma unroll
        for (int i = 0; i < 4; ++i) qa[mt][i] = qf[FA_Q_REGS ? mt : 0][kk][i];
      } else {
        course::ldmatrix_x4(qa[mt], q_s + swz<HEAD_DIM>(q_w + 16 * mt + lane % 16, kk * 16 + (lane / 16) * 8));
      }
    }
#pragma unroll
    for (int jp = 0; jp < BLOCK_KV / 16; ++jp) {
      uint32_t bk[4];
      course::ldmatrix_x4(bk, ks + swz<HEAD_DIM>(16 * jp + lane % 8 + (lane / 16) * 8, kk * 16 + (lane / 8 % 2) * 8));
      const uint32_t b_lo[2] = {bk[0], bk[1]}, b_hi[2] = {bk[2], bk[3]};
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        course::mma_m16n8k16<T>(s[mt][2 * jp], qa[mt], b_lo);
        course::mma_m16n8k16<T>(s[mt][2 * jp + 1], qa[mt], b_hi);
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    if constexpr (MASK) {
#pragma unroll
      for (int j = 0; j < BLOCK_KV / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (k0 + 8 * j + 2 * pair + e % 2 >= (causal ? min(seq_kv, max(0, lim0 + 16 * mt + 8 * (e / 2))) : seq_kv))
            s[mt][j][e] = -INFINITY;
    }
    float neg_m[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < BLOCK_KV / 8; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * r], s[mt][j][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[mt][r], mx * scale_log2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float rescale = course::ptx_exp2(m[mt][r] - m_use);
      m[mt][r] = m_new;
      d[mt][r] *= rescale;
      neg_m[r] = -m_use;
#pragma unroll
      for (int n = 0; n < HEAD_DIM / 8; ++n) {
        o_acc[mt][n][2 * r] *= rescale;
        o_acc[mt][n][2 * r + 1] *= rescale;
      }
    }
#pragma unroll
    for (int j = 0; j < BLOCK_KV / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[mt][j][e] = course::ptx_exp2(fmaf(s[mt][j][e], scale_log2, neg_m[e / 2]));
        d[mt][e / 2] += s[mt][j][e];
      }
  }
#pragma unroll
  for (int kk = 0; kk < BLOCK_KV / 16; ++kk) {
    uint32_t pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = course::pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      pa[mt][1] = course::pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      pa[mt][2] = course::pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      pa[mt][3] = course::pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int nd = 0; nd < HEAD_DIM / 16; ++nd) {
      uint32_t bv[4];
      course::ldmatrix_x4_trans(bv, vs + swz<HEAD_DIM>(16 * kk + lane % 16, nd * 16 + (lane / 16) * 8));
      const uint32_t b_lo[2] = {bv[0], bv[1]}, b_hi[2] = {bv[2], bv[3]};
#pragma unroll
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

  const KeyRange keys = key_range(q0, seq_q, seq_kv, causal);
  const int n_tiles = (keys.kv_end + BLOCK_KV - 1) / BLOCK_KV;
  const int full_tiles = keys.full_end / BLOCK_KV;  // tiles 0 .. full_tiles - 1 need no mask
  // This lane's rows are q0 + q_w + 16 mt + group_row + 8 r; warp_last_key: the last key any row of
  // the warp may see (a tile starting past it is skipped by the warp).
  const int q_w = WARP_ROWS * warp, off = seq_kv - seq_q;  // the warp's first row in the block
  const int lim0 = q0 + q_w + group_row + off + 1;  // the first key row group_row of m tile 0 may not see
  const int warp_last_key = causal ? q0 + q_w + WARP_ROWS - 1 + off : seq_kv - 1;

  // Copies: thread i moves chunk i % CHUNKS of rows i / CHUNKS, + THREADS / CHUNKS, ...; .cg (L2 only):
  // other blocks, not this SM, read the same K and V again.
  const int ch = threadIdx.x % CHUNKS, r0 = threadIdx.x / CHUNKS;
  constexpr int ROW_STEP = THREADS / CHUNKS;
#pragma unroll
  for (int i = 0; i < BLOCK_Q / ROW_STEP; ++i) {
    const int r = r0 + i * ROW_STEP;
    const bool valid = q0 + r < seq_q;
    const T* src = valid ? q_rows + static_cast<int64_t>(q0 + r) * q_stride + ch * 8 : q;
    course::cp_async_zfill<16, course::CacheHint::cg>(q_s + swz<HEAD_DIM>(r, ch * 8), src, valid);
  }
  course::cp_async_commit();
  auto load_tile = [&](int tile) {
    T* ks = ring + (tile % STAGES) * 2 * TILE;
    const int k0 = tile * BLOCK_KV;
#pragma unroll
    for (int i = 0; i < BLOCK_KV / ROW_STEP; ++i) {
      const int r = r0 + i * ROW_STEP;
      const bool valid = k0 + r < seq_kv;  // zeros past seq_kv (masked: their scores never count)
      const int64_t at = static_cast<int64_t>(k0 + r) * kv_stride + ch * 8;
      course::cp_async_zfill<16, course::CacheHint::cg>(ks + swz<HEAD_DIM>(r, ch * 8), valid ? k_rows + at : k, valid);
      course::cp_async_zfill<16, course::CacheHint::cg>(ks + TILE + swz<HEAD_DIM>(r, ch * 8), valid ? v_rows + at : v,
                                                        valid);
    }
  };
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < n_tiles) load_tile(t);
    course::cp_async_commit();
  }

  course::cp_async_wait<STAGES - 1>();  // Q's group (the oldest) has landed
  __syncthreads();
  uint32_t qf[FA_Q_REGS ? MT : 1][HEAD_DIM / 16][4];  // A fragments of the warp's rows (FA_Q_REGS)
  if constexpr (FA_Q_REGS) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
        course::ldmatrix_x4(qf[FA_Q_REGS ? mt : 0][kk],
                            q_s + swz<HEAD_DIM>(q_w + 16 * mt + lane % 16, kk * 16 + (lane / 16) * 8));
  }

  float o_acc[MT][HEAD_DIM / 8][4];  // O (16 MT, HEAD_DIM) in C layout: n tiles of 8 dims per m tile
  float m[MT][2], d[MT][2];          // per row; d is this lane's share
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) o_acc[mt][n][0] = o_acc[mt][n][1] = o_acc[mt][n][2] = o_acc[mt][n][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    d[mt][0] = d[mt][1] = 0.0f;
  }

  for (int t = 0; t < n_tiles; ++t) {
    // All but the newest STAGES - 2 groups have landed: tile t has (this thread's copies); after the
    // barrier everyone's have, and every warp is done with tile t - 1, whose stage is refilled now.
    course::cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (t + STAGES - 1 < n_tiles) load_tile(t + STAGES - 1);
    course::cp_async_commit();
    const T* ks = ring + (t % STAGES) * 2 * TILE;
    const int k0 = t * BLOCK_KV;
    if (t < full_tiles)
      attend_tile<false, T, HEAD_DIM>(ks, ks + TILE, q_s, q_w, qf, o_acc, m, d, k0, lim0, seq_kv, causal, scale_log2);
    else if (k0 <= warp_last_key)  // a tile wholly past the warp's rows adds nothing: skip it
      attend_tile<true, T, HEAD_DIM>(ks, ks + TILE, q_s, q_w, qf, o_acc, m, d, k0, lim0, seq_kv, causal, scale_log2);
  }
  course::cp_async_wait<0>();  // (only empty groups can be left)

  // The epilogue, per m tile. d so far is this lane's share of its rows' sums: add the quad's 4 shares.
  // Every warp reads Q from shared memory until its last tile (FA_Q_REGS 0): O goes into the warp's
  // own rows of q_s only, which no other warp reads.
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
    __syncwarp();  // (FA_Q_REGS 0) every lane's last Q fragments of these rows are read
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
