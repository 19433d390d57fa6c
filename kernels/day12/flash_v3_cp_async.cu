// Day 12, v3: + a cp.async pipeline. K and V tiles go straight from global to (swizzled) shared memory
// with 16-byte cp.async (LDGSTS) through a ring of STAGES = 3 buffers of one K and one V tile each
// (Day 7, Day 10): while the warps work on tile t, tiles t + 1 and t + 2 are in flight. Every
// iteration commits exactly one group (empty ones too), so wait_group<STAGES - 2> always means "tile t
// has landed"; one barrier per tile then does two jobs: everyone's copies of tile t are visible, and
// every warp is done with tile t - 1, whose buffer the next copy overwrites. Q comes the same way, in
// a group of its own, ahead of the first tiles. 32 KB of Q and 3 x 32 KB of K/V: 128 KB of dynamic
// shared memory, one block per SM (the registers allow no more anyway: ~220 per lane x 256 threads).
// Napkin math (batch 8 x 2048, 32 heads, head_dim 128): the copies are off the critical path; what is
// left is the warps' own instruction stream (address arithmetic, masks tested on every tile, the
// softmax's scale and max in separate instructions, 4-byte stores of o), which v4 (the exercise) trims.
// Expect ~0.8x SDPA's FLASH backend (v4 closes the rest).
//
//   q [batch, seq, qo_heads, 128], k, v [batch, seq, kv_heads, 128], o like q; bf16; seq % 128 == 0
#include "course/flash_versions.cuh"

namespace flash_v3 {  // the versions of a day build into one extension: names apart

using namespace flash_versions;  // the shared problem and pieces: course/flash_versions.cuh

constexpr int STAGES = 3;
constexpr int SMEM = (BLOCK_Q + 2 * STAGES * BLOCK_KV) * HEAD_DIM * 2;  // 128 KB

__global__ void __launch_bounds__(THREADS, 1)
    flash_cp_async_kernel(T* o, const T* q, const T* k, const T* v, int seq, int group, bool causal, float scale_log2) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);  // (BLOCK_Q, HEAD_DIM)
  T* ring = q_s + BLOCK_Q * HEAD_DIM;       // (STAGES, 2, BLOCK_KV, HEAD_DIM): K, then V, per stage
  const BlockRows at(o, q, k, v, seq, group);
  const int warp = threadIdx.x / 32;
  const int tiles = kv_tiles(at.q0, seq, causal);
  auto issue = [&](int t) {  // tile t into its stage, t % STAGES
    const int64_t k0 = static_cast<int64_t>(t) * BLOCK_KV;
    T* ks = ring + (t % STAGES) * 2 * TILE;
    stage_async<Swizzled, BLOCK_KV>(ks, at.k + k0 * at.kv_stride, at.kv_stride);
    stage_async<Swizzled, BLOCK_KV>(ks + TILE, at.v + k0 * at.kv_stride, at.kv_stride);
  };
  // Prologue: Q in one group, tiles 0 .. STAGES - 2 in one group each (a block has >= 2 tiles).
  stage_async<Swizzled, BLOCK_Q>(q_s, at.q, at.q_stride);
  course::cp_async_commit();
  for (int t = 0; t < STAGES - 1; ++t) {
    issue(t);
    course::cp_async_commit();
  }
  course::cp_async_wait<STAGES - 1>();  // Q's group, the oldest, has landed
  __syncthreads();
  WarpRows w;
  w.init<Swizzled>(q_s);
  for (int t = 0; t < tiles; ++t) {
    course::cp_async_wait<STAGES - 2>();  // tile t has landed (this thread's copies)...
    __syncthreads();                      // ...everyone's; and tile t - 1 is free
    if (t + STAGES - 1 < tiles) issue(t + STAGES - 1);
    course::cp_async_commit();
    const T* ks = ring + (t % STAGES) * 2 * TILE;
    w.attend<Swizzled>(ks, ks + TILE, t * BLOCK_KV, at.q0, causal, scale_log2);
  }
  course::cp_async_wait<0>();
  w.store(at.o + static_cast<int64_t>(16 * warp) * at.q_stride, at.q_stride);
}

}  // namespace flash_v3

COURSE_EXPORT cudaError_t flash_v3_cp_async_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                 const __nv_bfloat16* v, int64_t batch, int64_t seq, int64_t qo_heads,
                                                 int64_t kv_heads, bool causal, float sm_scale, cudaStream_t stream) {
  using namespace flash_v3;
  return launch(flash_cp_async_kernel, SMEM, o, q, k, v, batch, seq, qo_heads, kv_heads, causal, sm_scale, stream);
}
