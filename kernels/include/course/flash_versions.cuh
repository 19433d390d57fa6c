// What Day 12's prefill-attention versions (kernels/day12/flash_v*.cu) share, so that each file holds
// only what it adds: the fixed problem, the two shared-memory layouts (plain rows, XOR-swizzled rows),
// the copies of a tile into shared memory (plain 16-byte loads, or cp.async), one warp's step over a
// K/V tile on the tensor cores (S = Q K^T, online softmax, O += P V) and its final store, and the
// v1/v2 kernel, which loads each tile and then computes on it (no pipeline). v1 runs it with plain
// rows, v2 with swizzled ones; v3 (its own file) adds the cp.async ring. Not used by the exercise,
// whose kernel also handles tails, fp16, head_dim 64, bottom-right causal masks and the lse.
//
//   q [batch, seq, qo_heads, 128], k, v [batch, seq, kv_heads, 128], o like q; bf16, contiguous;
//   seq a multiple of 128; query head qh reads KV head qh / (qo_heads / kv_heads); causal or not.
#pragma once

#include "course/async.cuh"
#include "course/math.cuh"
#include "course/mma.cuh"

namespace flash_versions {

using T = __nv_bfloat16;
constexpr int HEAD_DIM = 128;
constexpr int WARPS = 8, THREADS = 32 * WARPS;
constexpr int BLOCK_Q = 16 * WARPS;  // 128 query rows per block, 16 per warp
constexpr int BLOCK_KV = 64;         // keys per K/V tile
constexpr int CHUNKS = HEAD_DIM / 8; // 16-byte chunks per row
constexpr int TILE = BLOCK_KV * HEAD_DIM;

// Where element (row, col) of a staged [rows][HEAD_DIM] tile lives (col a multiple of 8). Plain: rows
// of 256 bytes, so the 8 rows one ldmatrix reads at a column all fall into the same 4 banks (8 passes).
// Swizzled: chunk c of row r at chunk c ^ (r % 8), 8 different bank groups (1 pass; Day 9, FlashInfer's
// permuted_smem.cuh).
struct Plain {
  __device__ __forceinline__ static int at(int row, int col) { return row * HEAD_DIM + col; }
};
struct Swizzled {
  __device__ __forceinline__ static int at(int row, int col) { return row * HEAD_DIM + (((col / 8) ^ (row % 8)) * 8); }
};

// ROWS rows of one head (`src`: its first row; rows `stride` elements apart) into `dst`, 16 bytes per
// thread and step. sync: through registers, the thread waits for each load before its store.
template <typename Layout, int ROWS>
__device__ __forceinline__ void stage_sync(T* dst, const T* src, int64_t stride) {
#pragma unroll
  for (int n = 0; n < ROWS * CHUNKS / THREADS; ++n) {
    const int i = threadIdx.x + n * THREADS, r = i / CHUNKS, c = i % CHUNKS * 8;
    *reinterpret_cast<uint4*>(dst + Layout::at(r, c)) = *reinterpret_cast<const uint4*>(src + r * stride + c);
  }
}
// async: cp.async (LDGSTS), .cg (L2 only: other blocks, not this SM, read these rows again). Visible
// after the thread's wait on its group and a barrier.
template <typename Layout, int ROWS>
__device__ __forceinline__ void stage_async(T* dst, const T* src, int64_t stride) {
#pragma unroll
  for (int n = 0; n < ROWS * CHUNKS / THREADS; ++n) {
    const int i = threadIdx.x + n * THREADS, r = i / CHUNKS, c = i % CHUNKS * 8;
    course::cp_async<16, course::CacheHint::cg>(dst + Layout::at(r, c), src + r * stride + c);
  }
}

// The keys a block of query rows q0 .. q0 + 127 visits: all, or (causal) up to its last row.
__device__ __forceinline__ int kv_tiles(int q0, int seq, bool causal) {
  return (causal ? q0 + BLOCK_Q : seq) / BLOCK_KV;
}

// One warp's 16 query rows: Q fragments in registers for the whole kernel, O in fp32 accumulators,
// the online-softmax state per row (m in base 2, d = this lane's share of the row sum).
// Lane l holds rows l / 4 and l / 4 + 8 (course/mma.cuh's C layout).
struct WarpRows {
  uint32_t qf[HEAD_DIM / 16][4];
  float o[HEAD_DIM / 8][4];
  float m[2], d[2];

  // Q fragments from the staged Q tile (this warp's rows 16 w .. 16 w + 15), O and state empty.
  template <typename Layout>
  __device__ __forceinline__ void init(const T* q_s) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
      course::ldmatrix_x4(qf[kk], q_s + Layout::at(16 * warp + lane % 16, kk * 16 + (lane / 16) * 8));
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    m[0] = m[1] = -INFINITY;
    d[0] = d[1] = 0.0f;
  }

  // One K/V tile (keys k0 .. k0 + 63, staged at ks and vs): S = Q K^T, scaled to base 2, masked
  // (causal: key > row is -inf), the online-softmax update, then O += P V.
  template <typename Layout>
  __device__ __forceinline__ void attend(const T* ks, const T* vs, int k0, int q0, bool causal, float scale_log2) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float s[BLOCK_KV / 8][4] = {};  // s[j][e]: row lane / 4 + 8 (e / 2), key k0 + 8 j + 2 (lane % 4) + e % 2
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
#pragma unroll
      for (int jp = 0; jp < BLOCK_KV / 16; ++jp) {
        uint32_t b[4];  // K is [key][dim]: the mma's "col" operand, ldmatrix without .trans
        course::ldmatrix_x4(b, ks + Layout::at(16 * jp + lane % 8 + (lane / 16) * 8, kk * 16 + (lane / 8 % 2) * 8));
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        course::mma_m16n8k16<T>(s[2 * jp], qf[kk], b0);
        course::mma_m16n8k16<T>(s[2 * jp + 1], qf[kk], b1);
      }
    const int row = q0 + 16 * warp + lane / 4, key = k0 + 2 * (lane % 4);
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < BLOCK_KV / 8; ++j)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[j][e] = causal && key + 8 * j + e % 2 > row + 8 * r ? -INFINITY : s[j][e] * scale_log2;
          mx = fmaxf(mx, s[j][e]);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // a row's 64 keys are spread over a quad
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      rescale[r] = m_new == -INFINITY ? 1.0f : course::ptx_exp2(m[r] - m_new);
      const float shift = m_new == -INFINITY ? 0.0f : m_new;  // nothing seen yet: no -inf - -inf
      m[r] = m_new;
      d[r] *= rescale[r];
#pragma unroll
      for (int j = 0; j < BLOCK_KV / 8; ++j)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[j][e] = course::ptx_exp2(s[j][e] - shift);
          d[r] += s[j][e];
        }
    }
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= rescale[e / 2];
    // O += P V: P's C fragments are the next mma's A fragments; V is [key][dim] = [k][n]: .trans.
#pragma unroll
    for (int kk = 0; kk < BLOCK_KV / 16; ++kk) {
      const uint32_t pa[4] = {course::pack2<T>(s[2 * kk][0], s[2 * kk][1]), course::pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              course::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              course::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nd = 0; nd < HEAD_DIM / 16; ++nd) {
        uint32_t b[4];
        course::ldmatrix_x4_trans(b, vs + Layout::at(16 * kk + lane % 16, nd * 16 + (lane / 16) * 8));
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        course::mma_m16n8k16<T>(o[2 * nd], pa, b0);
        course::mma_m16n8k16<T>(o[2 * nd + 1], pa, b1);
      }
    }
  }

  // o = O / d for the warp's 16 rows (`rows`: the warp's first row of o; rows `stride` apart), straight
  // from the registers: each lane stores 4 bytes (two neighbouring dims) per row and n tile.
  __device__ __forceinline__ void store(T* rows, int64_t stride) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      d[r] += __shfl_xor_sync(0xffffffffu, d[r], 1);
      d[r] += __shfl_xor_sync(0xffffffffu, d[r], 2);
      const float inv = 1.0f / d[r];
      T* out = rows + (lane / 4 + 8 * r) * stride + 2 * (lane % 4);
#pragma unroll
      for (int n = 0; n < HEAD_DIM / 8; ++n)
        *reinterpret_cast<uint32_t*>(out + 8 * n) = course::pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
  }
};

// The block's rows: (query head, request, query tile) from blockIdx; the pointers to its first rows.
struct BlockRows {
  int q0;
  const T *q, *k, *v;
  T* o;
  int64_t q_stride, kv_stride;  // elements from one token to the next

  __device__ __forceinline__ BlockRows(T* o_, const T* q_, const T* k_, const T* v_, int seq, int group) {
    const int qh = blockIdx.x, b = blockIdx.y, qo_heads = gridDim.x;
    q0 = blockIdx.z * BLOCK_Q;
    q_stride = static_cast<int64_t>(qo_heads) * HEAD_DIM;
    kv_stride = static_cast<int64_t>(qo_heads / group) * HEAD_DIM;
    q = q_ + (static_cast<int64_t>(b) * seq + q0) * q_stride + qh * HEAD_DIM;
    o = o_ + (static_cast<int64_t>(b) * seq + q0) * q_stride + qh * HEAD_DIM;
    k = k_ + static_cast<int64_t>(b) * seq * kv_stride + (qh / group) * HEAD_DIM;
    v = v_ + static_cast<int64_t>(b) * seq * kv_stride + (qh / group) * HEAD_DIM;
  }
};

// v1 and v2: load a tile, barrier, compute on it, barrier. While the copies are in flight the tensor
// cores have nothing to do, and while they work no copy is in flight.
template <typename Layout>
__global__ void __launch_bounds__(THREADS, 1)
    flash_sync_kernel(T* o, const T* q, const T* k, const T* v, int seq, int group, bool causal, float scale_log2) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);  // (BLOCK_Q, HEAD_DIM)
  T* k_s = q_s + BLOCK_Q * HEAD_DIM;        // (BLOCK_KV, HEAD_DIM)
  T* v_s = k_s + TILE;                      // (BLOCK_KV, HEAD_DIM)
  const BlockRows at(o, q, k, v, seq, group);
  const int warp = threadIdx.x / 32;
  stage_sync<Layout, BLOCK_Q>(q_s, at.q, at.q_stride);
  __syncthreads();
  WarpRows w;
  w.init<Layout>(q_s);
  const int tiles = kv_tiles(at.q0, seq, causal);
  for (int t = 0; t < tiles; ++t) {
    const int64_t k0 = static_cast<int64_t>(t) * BLOCK_KV;
    stage_sync<Layout, BLOCK_KV>(k_s, at.k + k0 * at.kv_stride, at.kv_stride);
    stage_sync<Layout, BLOCK_KV>(v_s, at.v + k0 * at.kv_stride, at.kv_stride);
    __syncthreads();  // the tile is in shared memory
    w.attend<Layout>(k_s, v_s, t * BLOCK_KV, at.q0, causal, scale_log2);
    __syncthreads();  // every warp is done with it before the next tile overwrites it
  }
  w.store(at.o + static_cast<int64_t>(16 * warp) * at.q_stride, at.q_stride);
}

// The versions' fast path only: what the exercise must also handle is refused here.
inline bool shape_ok(const void* o, const void* q, const void* k, const void* v, int64_t batch, int64_t seq,
                     int64_t qo_heads, int64_t kv_heads) {
  const bool aligned = (reinterpret_cast<uintptr_t>(o) | reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                        reinterpret_cast<uintptr_t>(v)) % 16 == 0;
  return aligned && batch >= 1 && batch <= 65535 && seq >= BLOCK_Q && seq % BLOCK_Q == 0 && seq <= (1 << 24) &&
         kv_heads >= 1 && qo_heads % kv_heads == 0 && qo_heads <= 65535;
}

// Launch one of the versions' kernels: grid (query head, request, query tile), SMEM bytes of dynamic
// shared memory (above 48 KB, so the limit is raised first).
template <typename Kernel>
cudaError_t launch(Kernel kernel, int smem, T* o, const T* q, const T* k, const T* v, int64_t batch, int64_t seq,
                   int64_t qo_heads, int64_t kv_heads, bool causal, float sm_scale, cudaStream_t stream) {
  if (!shape_ok(o, q, k, v, batch, seq, qo_heads, kv_heads) || !(sm_scale > 0.0f)) return cudaErrorInvalidValue;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch), static_cast<unsigned>(seq / BLOCK_Q));
  kernel<<<grid, THREADS, smem, stream>>>(o, q, k, v, static_cast<int>(seq), static_cast<int>(qo_heads / kv_heads),
                                          causal, sm_scale * course::LOG2E);
  return cudaGetLastError();
}

}  // namespace flash_versions
