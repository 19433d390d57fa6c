// Day 12, v2: + the XOR swizzle. The same kernel as v1 (course/flash_versions.cuh's flash_sync_kernel),
// with chunk c of each staged row r stored at chunk c ^ (r % 8) (`Swizzled` instead of `Plain`): the 8
// rows that one ldmatrix reads at one column now lie in 8 different groups of 4 banks, one pass per
// 8 x 8 tile instead of 8. The copies' 16-byte stores stay conflict-free (a row's chunks are only
// permuted). Napkin math (batch 8 x 2048, 32 heads, head_dim 128): shared memory is no longer the
// limit (~128 B/clk/SM of fragments: ~530 TFLOP/s at 16 flops per byte); what remains is the wait for
// every tile's copies with the tensor cores idle: a load from L2 takes ~1 us, the tile's math ~1.5-3 us.
// Expect several times v1, still well short of SDPA.
//
//   q [batch, seq, qo_heads, 128], k, v [batch, seq, kv_heads, 128], o like q; bf16; seq % 128 == 0
#include "course/flash_versions.cuh"

COURSE_EXPORT cudaError_t flash_v2_swizzled_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                 const __nv_bfloat16* v, int64_t batch, int64_t seq, int64_t qo_heads,
                                                 int64_t kv_heads, bool causal, float sm_scale, cudaStream_t stream) {
  using namespace flash_versions;  // the shared problem, kernel and launcher: course/flash_versions.cuh
  constexpr int SMEM = (BLOCK_Q + 2 * BLOCK_KV) * HEAD_DIM * 2;  // 64 KB, as v1
  return launch(flash_sync_kernel<Swizzled>, SMEM, o, q, k, v, batch, seq, qo_heads, kv_heads, causal, sm_scale,
                stream);
}
