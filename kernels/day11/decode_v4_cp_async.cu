// Day 11, v4: + K/V tiles through shared memory with a cp.async ring (Day 7). The block copies each
// tile of 16 tokens (8 KB of K and V) once (LDGSTS) and all 4 query heads read it there (v3: both warps
// of a token group load the same rows, the second from L1/L2); the copies hold no registers (64 a
// thread, v3: 96), and STAGES - 1 = 3 tiles stay in flight while the lanes compute.
// Napkin math (batch 64 x 4096): ~4 blocks per SM (512 blocks; 6 fit, by 37 KB of shared memory each)
// x 24 KB in flight = ~95 KB per SM, ~5x the ~18 KB Little's law asks (3 TB/s / 132 SMs x ~0.8 us),
// and in flight during the math too (in v3 a thread's loads and math take turns). Instruction issue is
// the next limit: ~57 instructions per token and thread (v3's less its address arithmetic), ~0.22 warp
// instructions per byte, ~70% of the H100's issue rate at 3 TB/s, which leaves slack: expect ~0.95-1.0x
// the read. Batch 1 x 32768: 8 blocks, one per SM: 24 KB in flight per ~0.8 us round trip, and ~0.26 us
// of math per 8 KB tile: ~30 GB/s a block, ~0.25 TB/s at most: ~0.06-0.09x.
#include "course/async.cuh"
#include "course/decode_versions.cuh"

namespace decode_v4 {  // the versions of a day build into one extension: names apart

using namespace decode_versions;  // the shared problem and pieces: course/decode_versions.cuh

constexpr int BDZ = 2;                      // token groups, as v3
constexpr int CHUNK = 8;                    // tokens a group scores per tile, then one rescale
constexpr int THREADS = BDX * GROUP * BDZ;  // 128
constexpr int TILE = BDZ * CHUNK;           // tokens per stage
constexpr int STAGES = 4;                   // the ring: tile t in use, t + 1 .. t + 3 in flight
constexpr int ROWS = THREADS / BDX;         // rows the block copies per pass: one per (ty, tz)

__global__ void __launch_bounds__(THREADS)
    decode_cp_async_kernel(__nv_bfloat16* __restrict__ o, const __nv_bfloat16* __restrict__ q,
                           const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v, int len,
                           int kv_heads, float scale_log2) {
  __shared__ __align__(16) __nv_bfloat16 kv_s[STAGES][2][TILE][HEAD_DIM];  // (stage, K / V, token, dim): 32 KB
  const int h = blockIdx.x, b = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const int64_t qh = static_cast<int64_t>(b) * kv_heads * GROUP + h * GROUP + ty;
  float qf[VEC];
  load_q(qf, q + qh * HEAD_DIM + tx * VEC, scale_log2);
  const int64_t stride = static_cast<int64_t>(kv_heads) * HEAD_DIM;
  const int64_t first = (static_cast<int64_t>(b) * len * kv_heads + h) * HEAD_DIM + tx * VEC;

  // Tile `tile` into its stage: thread (tx, ty, tz) copies chunk tx of rows ty + 4 tz and + 8, so 16
  // consecutive threads fill one 256-byte row. Past the end: zeros (src-size 0), nothing read.
  auto copy_tile = [&](int tile) {
#pragma unroll
    for (int pass = 0; pass < TILE / ROWS; ++pass) {
      const int r = pass * ROWS + ty + GROUP * tz, t = tile * TILE + r;
      const bool valid = t < len;
      const int64_t at = valid ? first + t * stride : 0;
      course::cp_async_zfill<16, course::CacheHint::cg>(&kv_s[tile % STAGES][0][r][tx * VEC], k + at, valid);
      course::cp_async_zfill<16, course::CacheHint::cg>(&kv_s[tile % STAGES][1][r][tx * VEC], v + at, valid);
    }
  };

  LaneState st;
  st.init();
  const int tiles = (len + TILE - 1) / TILE;
  for (int s = 0; s < STAGES - 1; ++s) {  // prologue: tiles 0 .. STAGES - 2, one group each
    if (s < tiles) copy_tile(s);
    course::cp_async_commit();
  }
  for (int tile = 0; tile < tiles; ++tile) {
    course::cp_async_wait<STAGES - 2>();  // this thread's copies of `tile` have landed...
    __syncthreads();                      // ...everyone's; and every warp is done with tile - 1's stage
    if (tile + STAGES - 1 < tiles) copy_tile(tile + STAGES - 1);  // into tile - 1's stage
    course::cp_async_commit();  // one group per iteration, empty or not: wait<STAGES - 2> keeps its meaning
    Lanes kr[CHUNK], vr[CHUNK];  // group tz's rows, every query head reading the same bytes (broadcast)
#pragma unroll
    for (int j = 0; j < CHUNK; ++j) {
      kr[j].load(&kv_s[tile % STAGES][0][tz * CHUNK + j][tx * VEC]);
      vr[j].load(&kv_s[tile % STAGES][1][tz * CHUNK + j][tx * VEC]);
    }
    st.add_chunk(qf, kr, vr, len - (tile * TILE + tz * CHUNK));  // zero rows past the end weigh 0
  }
  course::cp_async_wait<0>();  // only empty groups can be left
  merge_token_groups<BDZ>(st);
  if (tz == 0) st.store(o + qh * HEAD_DIM + tx * VEC);
}

}  // namespace decode_v4

// Contiguous K, V [batch, len, kv_heads, 128], bf16; qo_heads = 4 kv_heads.
COURSE_EXPORT cudaError_t decode_v4_cp_async_bf16(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                  const __nv_bfloat16* v, int64_t batch, int64_t len,
                                                  int64_t qo_heads, int64_t kv_heads, float sm_scale,
                                                  cudaStream_t stream) {
  using namespace decode_v4;
  if (batch < 1 || batch > 65535 || len < 1 || kv_heads < 1 || qo_heads != GROUP * kv_heads)
    return cudaErrorInvalidValue;
  decode_cp_async_kernel<<<dim3(static_cast<unsigned>(kv_heads), static_cast<unsigned>(batch)),
                           dim3(BDX, GROUP, BDZ), 0, stream>>>(o, q, k, v, static_cast<int>(len),
                                                               static_cast<int>(kv_heads), sm_scale * course::LOG2E);
  return cudaGetLastError();
}
