// What Day 11's CUDA-core decode versions (kernels/day11/decode_v*.cu) share, so that each file
// holds only what it adds: the fixed problem (bf16, head_dim 128); for v2 (one warp per token, blocks
// of 4 warps, one query head per block) its step of one token into a warp's online-softmax state and
// the merge of the block's 4 warp states; for FlashInfer's layout (v3_gqa_lanes, v4_cp_async,
// v5_split_paged: a block per KV head, 16 lanes over head_dim, the group's query heads side by side)
// a lane's state, its step over a chunk of tokens and the merge of the block's token groups. Not used
// by the exercise, which has its own tensor-core design.
#pragma once

#include "course/attention.cuh"
#include "course/math.cuh"
#include "course/vec.cuh"
#include "course/warp.cuh"

namespace decode_versions {

constexpr int WARPS = 4;
constexpr int HEAD_DIM = 128;
constexpr int PER_LANE = HEAD_DIM / 32;  // 4 bf16 = 8 bytes per lane per row
using State = course::softmax_state<PER_LANE>;
using Row = course::vec_t<__nv_bfloat16, PER_LANE>;  // a lane's share of one q, k or v row

// v2: one token into this warp's state. s = q . k is a warp reduction (SHFL.BFLY), scaled to base
// 2; the token's own state (o = v, m = s, d = 1) is merged in.
__device__ __forceinline__ void add_token(State& st, const Row& qv, const __nv_bfloat16* k_row,
                                          const __nv_bfloat16* v_row, float scale_log2) {
  Row kv, vv;
  kv.load(k_row);
  vv.load(v_row);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) s += course::to_float(qv[i]) * course::to_float(kv[i]);
  s = course::warp_reduce_sum(s) * scale_log2;
  float vf[PER_LANE];
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) vf[i] = course::to_float(vv[i]);
  st.merge(vf, s, 1.0f);
}

// The block's 4 warp states, merged into warp 0's `st` in shared memory. Every thread of the block
// must call it (it has a barrier); afterwards only warp 0's state is the block's.
__device__ __forceinline__ void merge_warps(State& st) {
  __shared__ float o_s[WARPS][HEAD_DIM], m_s[WARPS], d_s[WARPS];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) o_s[warp][lane * PER_LANE + i] = st.o[i];
  if (lane == 0) {
    m_s[warp] = st.m;
    d_s[warp] = st.d;
  }
  __syncthreads();
  if (warp == 0)
    for (int w = 1; w < WARPS; ++w) {
      float ow[PER_LANE];
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) ow[i] = o_s[w][lane * PER_LANE + i];
      st.merge(ow, m_s[w], d_s[w]);
    }
}

// ---------------------------------------------------------------- FlashInfer's layout (decode.cuh)
// Thread (tx, ty, tz) of a block of (BDX, GROUP, bdz) works for KV head blockIdx.x: lane tx holds
// dims VEC tx .. VEC tx + 7 of a row (one 16-byte load), ty is query head ty of the KV head's group,
// tz one of the block's token-parallel groups. A warp is 16 lanes x 2 query heads of one tz.
constexpr int VEC = 8;               // bf16 per lane: 16 bytes, one LDG.128 / LDS.128 / LDGSTS
constexpr int BDX = HEAD_DIM / VEC;  // 16 lanes over head_dim
constexpr int GROUP = 4;             // bdy: query heads per KV head (Llama 3 8B: 32 / 8)
using Lanes = course::vec_t<__nv_bfloat16, VEC>;  // a lane's 8 elements of one q, k or v row

// A lane's 8 bf16 in fp32, one instruction each: a bf16 is the top half of an fp32, so the element in
// a word's high 16 bits is the word with its low half cleared, the other the word shifted left by 16
// (__bfloat162float compiles to ~1.6 instructions an element in these loops).
__device__ __forceinline__ void unpack(const Lanes& x, float (&f)[VEC]) {
  uint32_t w[VEC / 2];
  memcpy(w, x.data, sizeof(w));
#pragma unroll
  for (int i = 0; i < VEC / 2; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// q's lane share in fp32, times sm_scale * log2(e): every score comes out in base 2, no multiply.
__device__ __forceinline__ void load_q(float (&q)[VEC], const __nv_bfloat16* row, float scale_log2) {
  Lanes qv;
  qv.load(row);
  unpack(qv, q);
#pragma unroll
  for (int i = 0; i < VEC; ++i) q[i] *= scale_log2;
}

// A lane's online-softmax state for its query head (FlashInfer's state_t): o is the weighted SUM of
// values, divided by d only at the end, so a chunk costs one rescale and no division.
struct LaneState {
  float o[VEC], m, d;  // m: largest base-2 score so far (-inf while empty), d = sum 2^(s - m)

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < VEC; ++i) o[i] = 0.0f;
    m = -INFINITY;
    d = 0.0f;
  }

  // N tokens' K and V rows (this lane's share), of which the first `valid` are real (the rest must be
  // finite: zeros). All N scores first (8 FMAs, then 4 SHFL.BFLY over the 16 lanes: every lane ends with
  // the same sum), then ONE rescale of (o, d) for the chunk, then o += p v.
  template <int N>
  __device__ __forceinline__ void add_chunk(const float (&q)[VEC], const Lanes (&k)[N], const Lanes (&v)[N],
                                            int valid) {
    float s[N], m_new = m;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      float kf[VEC], x = 0.0f;
      unpack(k[j], kf);
#pragma unroll
      for (int i = 0; i < VEC; ++i) x += q[i] * kf[i];
#pragma unroll
      for (int lanes = BDX / 2; lanes > 0; lanes /= 2) x += course::shfl_xor(x, lanes);  // within 16 lanes
      s[j] = j < valid ? x : -INFINITY;
      m_new = fmaxf(m_new, s[j]);
    }
    // Nothing seen yet (m_new = -inf): subtract 0 instead, so that every weight is 2^-inf = 0, not NaN.
    const float base = m_new == -INFINITY ? 0.0f : m_new;
    const float rescale = course::ptx_exp2(m - base);  // 0 while empty (o and d are 0 then)
    d *= rescale;
#pragma unroll
    for (int i = 0; i < VEC; ++i) o[i] *= rescale;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float p = course::ptx_exp2(s[j] - base);
      float vf[VEC];
      unpack(v[j], vf);
      d += p;
#pragma unroll
      for (int i = 0; i < VEC; ++i) o[i] += p * vf[i];
    }
    m = m_new;
  }

  // The finished row: o / d as 8 bf16, packed in pairs into one 16-byte store; zeros for an empty state.
  __device__ __forceinline__ void store(__nv_bfloat16* dst) const {
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    uint32_t packed[VEC / 2];
#pragma unroll
    for (int i = 0; i < VEC / 2; ++i)
      packed[i] = course::bfloat162_as_uint32(__floats2bfloat162_rn(o[2 * i] * inv, o[2 * i + 1] * inv));
    // __stcg: one STG.128 for sure (a plain uint4 assignment can compile to 4 STG.E).
    __stcg(reinterpret_cast<uint4*>(dst), make_uint4(packed[0], packed[1], packed[2], packed[3]));
  }
  __device__ __forceinline__ float lse2() const { return d > 0.0f ? m + course::ptx_log2(d) : -INFINITY; }
};

// The BDZ token groups' states of each query head, merged through shared memory into the threads of
// tz = 0 (FlashInfer's sync_state). Every thread of the block must call it (it has a barrier);
// afterwards only the state of the threads with tz = 0 is the block's.
template <int BDZ>
__device__ __forceinline__ void merge_token_groups(LaneState& st) {
  __shared__ __align__(16) float o_s[BDZ][GROUP][HEAD_DIM];
  __shared__ float m_s[BDZ][GROUP], d_s[BDZ][GROUP];
  const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
#pragma unroll
  for (int i = 0; i < VEC; ++i) o_s[tz][ty][tx * VEC + i] = st.o[i];
  if (tx == 0) {
    m_s[tz][ty] = st.m;
    d_s[tz][ty] = st.d;
  }
  __syncthreads();
  if (tz != 0) return;
  float m = -INFINITY;
#pragma unroll
  for (int z = 0; z < BDZ; ++z) m = fmaxf(m, m_s[z][ty]);
  const float base = m == -INFINITY ? 0.0f : m;  // all groups empty: weights 0, not NaN
  st.init();
  st.m = m;
#pragma unroll
  for (int z = 0; z < BDZ; ++z) {
    const float w = course::ptx_exp2(m_s[z][ty] - base);  // an empty group (m = -inf) weighs 0
    st.d += w * d_s[z][ty];
#pragma unroll
    for (int i = 0; i < VEC; ++i) st.o[i] += w * o_s[z][ty][tx * VEC + i];
  }
}

}  // namespace decode_versions
