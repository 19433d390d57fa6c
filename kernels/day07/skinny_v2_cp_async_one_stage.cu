// v2, cp.async, one stage: adds the asynchronous copy. Each tile of the weight (32 rows x 256)
// and of x goes global -> shared with 16-byte cp.async (SASS LDGSTS; .cg for the weight, which is
// read once, .ca for x), one commit group per tile, wait_group 0, a barrier, the math. Nothing
// overlaps yet: each block has one 16 KB tile of weight in flight, then none while it computes.
// Napkin math: 128 blocks x 16 KB per ~1.5 us round trip = ~1.4 TB/s, about a third of the copy.
// The copy itself, skinny::load_tile_async, is in course/skinny_versions.cuh: v3 and v4 reuse it.
//
//   x [M, K], weight [N, K], y [M, N] bf16/fp16; M <= 16, N % 32 == 0, K % 256 == 0, aligned
#include "course/skinny_versions.cuh"

// Its own namespace: build_day compiles the day's files as one translation unit.
namespace skinny_v2 {

using namespace skinny;  // the shared problem and helpers: course/skinny_versions.cuh

constexpr int STAGE_ELEMS = (ROWS + MTOK) * Swizzled::STRIDE;  // 24 KB per stage in bf16

template <typename T>
__global__ void __launch_bounds__(THREADS) skinny_one_stage_kernel(T* y, const T* x, const T* w, int64_t M, int64_t N, int64_t K) {
  __shared__ __align__(128) T stage[STAGE_ELEMS];  // (ROWS + MTOK, K_TILE): 24 KB
  const int warp = threadIdx.x / 32, rg = warp % 2, kh = warp / 2;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * ROWS;
  float acc[2][4] = {};
  for (int kt = 0; kt < K / K_TILE; ++kt) {
    load_tile_async(stage, x, w, M, K, n0, kt);
    course::cp_async_commit();
    course::cp_async_wait<0>();  // my copies have landed ...
    __syncthreads();             // ... and everyone's
    warp_tile_mma<Swizzled>(stage, stage + ROWS * K_TILE, rg, kh, M > 8, acc);
    __syncthreads();             // nobody reads the tile any more: the next copy may overwrite it
  }
  store_block(y, acc, rg, kh, M, N, n0);
}

}  // namespace skinny_v2

COURSE_EXPORT cudaError_t skinny_v2_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                         int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  using namespace skinny_v2;
  if (!shape_ok(y, x, weight, M, N, K)) return cudaErrorInvalidValue;
  skinny_one_stage_kernel<<<static_cast<unsigned>(N / ROWS), THREADS, 0, stream>>>(y, x, weight, M, N, K);
  return cudaGetLastError();
}
