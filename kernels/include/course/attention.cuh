// course/attention.cuh: the online-softmax state of attention and how two states merge (Days 11-12).
// Model: FlashInfer include/flashinfer/attention/state.cuh (state_t) and cascade.cuh (MergeStates).
//
// Attention of one query over n keys is o = sum_t p_t v_t / sum_t p_t with p_t = exp(s_t - m).
// Any subset of the keys summarizes as a *state*: m (the largest score seen), d = sum_t exp(s_t - m)
// and o = the weighted mean of its values, already divided by d. Two states of disjoint key sets
// merge exactly (the "rescale"):
//   m = max(m_a, m_b),  d = d_a 2^(m_a - m) + d_b 2^(m_b - m),
//   o = (o_a d_a 2^(m_a - m) + o_b d_b 2^(m_b - m)) / d
// and lse = m + log2(d) is all a state needs besides o (FlashInfer stores (o, lse) in its split-KV
// workspace). Scores are kept in base 2 (s * sm_scale * log2(e)), so every exponential is one
// MUFU.EX2. An empty state has m = -inf, d = 0: it must merge as a no-op without 2^(-inf - -inf).
#pragma once

#include <cmath>

#include "course/common.cuh"

namespace course {

constexpr float LN2 = 0.69314718055994530942f;  // lse_e = lse_2 * ln(2)

// One query row's state for VEC output dimensions (the dimensions one thread holds).
template <int VEC>
struct softmax_state {
  float o[VEC];  // the weighted mean so far (divided by d)
  float m;       // the largest base-2 score so far; -inf while empty
  float d;       // sum of 2^(s - m) so far

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < VEC; ++i) o[i] = 0.0f;
    m = -INFINITY;
    d = 0.0f;
  }

  // Merge the state of another, disjoint set of keys given as (its o, its m, its d).
  __device__ __forceinline__ void merge(const float (&o_b)[VEC], float m_b, float d_b) {
    const float m_new = fmaxf(m, m_b);
    if (m_new == -INFINITY) return;  // both empty
    const float wa = d * exp2f(m - m_new), wb = d_b * exp2f(m_b - m_new);  // exp2(-inf) = 0
    const float d_new = wa + wb;
#pragma unroll
    for (int i = 0; i < VEC; ++i) o[i] = (o[i] * wa + o_b[i] * wb) / d_new;
    m = m_new;
    d = d_new;
  }

  // The same from (o, lse) as a split-KV workspace stores it: lse = m + log2(d), i.e. m = lse, d = 1.
  __device__ __forceinline__ void merge_lse(const float (&o_b)[VEC], float lse_b) { merge(o_b, lse_b, 1.0f); }

  __device__ __forceinline__ float lse2() const { return m == -INFINITY ? -INFINITY : m + log2f(d); }
};

}  // namespace course
