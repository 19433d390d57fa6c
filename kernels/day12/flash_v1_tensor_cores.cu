// Day 12, v1: FlashAttention-2's structure on the tensor cores, nothing else. A block of 8 warps takes
// 128 query rows of one (request, query head); warp w keeps the Q fragments of its 16 rows in registers
// for the whole kernel. For each tile of 64 keys the block copies K and V into shared memory (16-byte
// loads through registers), waits at a barrier, and each warp computes S = Q K^T (ldmatrix + mma
// m16n8k16), its online softmax (m, d per row, base 2) and O += P V (P straight from S's registers, V
// with ldmatrix.trans), then waits again before the next tile overwrites the buffers. Causal: tiles
// past the block's last row are never visited; inside the others, key > row is masked.
// Napkin math (batch 8 x 2048, 32 heads, head_dim 128, non-causal: 4 x 8 x 32 x 2048^2 x 128 = 550
// GFLOP): rows of 256 bytes put the 8 rows of every ldmatrix into the same 4 banks, 8 passes instead
// of 1: shared memory then serves ~16 B/clk/SM of fragments, which at 16 flops per byte is ~70 TFLOP/s
// at most; and the copies never overlap the math. Expect ~50-70 TFLOP/s, a fraction of SDPA's ~350.
//
//   q [batch, seq, qo_heads, 128], k, v [batch, seq, kv_heads, 128], o like q; bf16; seq % 128 == 0
#include "course/flash_versions.cuh"

COURSE_EXPORT cudaError_t flash_v1_tensor_cores_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                     const __nv_bfloat16* v, int64_t batch, int64_t seq,
                                                     int64_t qo_heads, int64_t kv_heads, bool causal, float sm_scale,
                                                     cudaStream_t stream) {
  using namespace flash_versions;  // the shared problem, kernel and launcher: course/flash_versions.cuh
  constexpr int SMEM = (BLOCK_Q + 2 * BLOCK_KV) * HEAD_DIM * 2;  // Q, one K tile, one V tile: 64 KB
  return launch(flash_sync_kernel<Plain>, SMEM, o, q, k, v, batch, seq, qo_heads, kv_heads, causal, sm_scale, stream);
}
