// What Day 11's CUDA-core decode versions (kernels/day11/decode_v2..v4) share, so that each file
// holds only what it adds: the fixed problem (bf16, head_dim 128, blocks of 4 warps, one query head
// per block), v2's step of one token into a warp's online-softmax state, the merge of the block's 4
// warp states, and v3's split-KV pieces (the split count, a split's state in the workspace, the
// kernel that merges the splits). Not used by the exercise, which has its own tensor-core design.
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

// v3: a split's finished state into the workspace, at partial (b, split, qh): o (normalised), then,
// after all batch * splits * qo_heads rows of o, lse in base 2. Warp 0 calls it; grid (qh, b, split).
__device__ __forceinline__ void store_split(const State& st, float* __restrict__ workspace, int qo_heads) {
  const int qh = blockIdx.x, b = blockIdx.y, splits = gridDim.z, lane = threadIdx.x % 32;
  const int64_t i0 = (static_cast<int64_t>(b) * splits + blockIdx.z) * qo_heads + qh;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) workspace[i0 * HEAD_DIM + lane * PER_LANE + i] = st.o[i];
  if (lane == 0) workspace[static_cast<int64_t>(gridDim.y) * splits * qo_heads * HEAD_DIM + i0] = st.lse2();
}

// v3: one warp per (query head, request): merge the splits' states in order (FlashInfer cascade.cuh's
// MergeStates) and store o. A template: compiled only where a version launches it.
template <typename T>
__global__ void __launch_bounds__(32)
    merge_states_kernel(T* __restrict__ o, const float* __restrict__ workspace, int qo_heads, int splits) {
  const int qh = blockIdx.x, b = blockIdx.y, lane = threadIdx.x;
  const float* lse = workspace + static_cast<int64_t>(gridDim.y) * splits * qo_heads * HEAD_DIM;
  State st;
  st.init();
  for (int s = 0; s < splits; ++s) {
    const int64_t i0 = (static_cast<int64_t>(b) * splits + s) * qo_heads + qh;
    float os[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) os[i] = workspace[i0 * HEAD_DIM + lane * PER_LANE + i];
    st.merge_lse(os, lse[i0]);
  }
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i)
    o[(static_cast<int64_t>(b) * qo_heads + qh) * HEAD_DIM + lane * PER_LANE + i] =
        course::from_float<T>(st.o[i]);
}

// v3: how many splits per request: enough blocks for two per SM, ceil(2 SMs / (batch * qo_heads)),
// with batch * splits <= 32 (the workspace's bound: max(batch, 32) * qo_heads * 129 floats).
inline int64_t split_count(int64_t batch, int64_t qo_heads) {
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t splits = course::ceil_div<int64_t>(2 * sms, batch * qo_heads);
  const int64_t most = 32 / batch > 1 ? 32 / batch : 1;
  return splits < 1 ? 1 : (splits > most ? most : splits);
}

}  // namespace decode_versions
