// course/rope.cuh: the angles of rotary position embedding (RoPE), Llama's form.
//
// RoPE rotates each pair of a query or key head by an angle that grows with the token's
// position: pair i of a head of head_dim d turns by  pos * theta^(-2i/d)  radians, so that a
// dot product q_m . k_n depends only on m - n. Llama (and HF Transformers' `rotate_half`) pairs
// element i with element i + d/2 ("non-interleaved"); GPT-J and some others pair 2i with 2i+1
// ("interleaved"): the same math on another layout, and a wrong answer if mixed up. theta is
// `rope_theta`: 10000 in Llama 2, 500000 in Llama 3.
//
// FlashInfer's include/flashinfer/pos_enc.cuh computes the same angles inside its kernels
// (`freq = rope_rcp_scale * __powf(rope_theta, -2i/d)`, then `__sincosf(pos * freq)`), with
// Llama 3.1's frequency scaling on top. The difference here is accuracy at long contexts, where
// angles reach 131072 radians (Llama 3.1): the angle is reduced to a fraction of a turn exactly
// before sin and cos are taken (below). That costs ~20 instructions per pair; a kernel computes
// the angles of a token once and reuses them for every head, so the cost disappears behind the
// memory traffic.
#pragma once

#include "course/common.cuh"

namespace course {

// theta^(-2i/d) / (2 pi): the turns pair i makes per position, for a head of `head_dim` elements;
// log2_theta = log2(rope_theta), computed once on the host (the launcher) in double precision.
// Folding 1 / (2 pi) into the exponent costs nothing and lets rope_cos_sin reduce exactly.
__device__ __forceinline__ float rope_turns(int i, int head_dim, float log2_theta) {
  constexpr float LOG2_TWO_PI = 2.6514961294723187f;
  return exp2f(-static_cast<float>(2 * i) / static_cast<float>(head_dim) * log2_theta - LOG2_TWO_PI);
}

// cos and sin of pair i's angle at position `pos` (|pos| < 2^24), from its turns per position.
// The angle in turns is pos x turns: its integer part is dropped exactly (hi - rint(hi)) and the
// product's own rounding error is added back (an FMA gives it exactly), so what is left is the
// fraction of a turn to within ~1 fp32 ulp of the angle, whatever the position; sincospif then
// needs no argument reduction of its own. (sincosf of a large fp32 angle would fall back to a
// Payne-Hanek reduction above 105615 rad, through a local-memory table; __sincosf is fast but
// loses accuracy as the angle grows.)
__device__ __forceinline__ void rope_cos_sin(int32_t pos, float turns, float* cos_out, float* sin_out) {
  const float p = static_cast<float>(pos);   // exact: positions are below 2^24
  const float hi = p * turns;
  const float lo = fmaf(p, turns, -hi);      // hi + lo = pos x turns exactly
  const float frac = (hi - rintf(hi)) + lo;  // in [-0.5, 0.5]: the angle modulo one turn
  sincospif(2.0f * frac, sin_out, cos_out);
}

// One pair rotated: (x, y) = (x cos - y sin, y cos + x sin), with x in the first half of the
// head and y its partner d/2 elements later (rotate_half: [x1, x2] -> [-x2, x1]).
__device__ __forceinline__ void rope_rotate(float& x, float& y, float c, float s) {
  const float rx = x * c - y * s;
  const float ry = y * c + x * s;
  x = rx;
  y = ry;
}

}  // namespace course
