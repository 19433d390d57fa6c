// v3, double buffer: adds a second buffer. While the warps multiply tile kt in one buffer, the
// copies of tile kt + 1 fly into the other: wait_group 1 waits for the older group only. The
// copy of the next tile is issued before the math of this one, so a block always has one 16 KB
// tile in flight. Napkin math: twice v2's bytes in flight, up to ~2x its bandwidth, still short
// of the copy at 128 blocks (v4 adds more stages).
//
//   x [M, K], weight [N, K], y [M, N] bf16/fp16; M <= 16, N % 32 == 0, K % 256 == 0, aligned
#include "course/skinny_versions.cuh"

// Its own namespace: build_day compiles the day's files as one translation unit.
namespace skinny_v3 {

using namespace skinny;  // the shared problem and helpers: course/skinny_versions.cuh

constexpr int STAGE_ELEMS = (ROWS + MTOK) * Swizzled::STRIDE;  // 24 KB per stage in bf16

template <typename T>
__global__ void __launch_bounds__(THREADS) skinny_double_buffer_kernel(T* y, const T* x, const T* w, int64_t M, int64_t N, int64_t K) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* buffers = reinterpret_cast<T*>(smem_raw);  // (2, ROWS + MTOK, K_TILE): 48 KB
  const int warp = threadIdx.x / 32, rg = warp % 2, kh = warp / 2;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * ROWS;
  const int tiles = static_cast<int>(K / K_TILE);
  float acc[2][4] = {};
  load_tile_async(buffers, x, w, M, K, n0, 0);  // tile 0 into buffer 0
  course::cp_async_commit();
  for (int kt = 0; kt < tiles; ++kt) {
    if (kt + 1 < tiles) load_tile_async(buffers + ((kt + 1) % 2) * STAGE_ELEMS, x, w, M, K, n0, kt + 1);
    course::cp_async_commit();   // (an empty group after the last tile keeps the count uniform)
    course::cp_async_wait<1>();  // all but the newest group: tile kt has landed
    __syncthreads();
    const T* stage = buffers + (kt % 2) * STAGE_ELEMS;
    warp_tile_mma<Swizzled>(stage, stage + ROWS * K_TILE, rg, kh, M > 8, acc);
    __syncthreads();  // tile kt's buffer is free for tile kt + 2
  }
  store_block(y, acc, rg, kh, M, N, n0);
}

}  // namespace skinny_v3

COURSE_EXPORT cudaError_t skinny_v3_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                         int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  using namespace skinny_v3;
  if (!shape_ok(y, x, weight, M, N, K)) return cudaErrorInvalidValue;
  constexpr int SMEM = 2 * STAGE_ELEMS * static_cast<int>(sizeof(__nv_bfloat16));
  auto kernel = skinny_double_buffer_kernel<__nv_bfloat16>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(N / ROWS), THREADS, SMEM, stream>>>(y, x, weight, M, N, K);
  return cudaGetLastError();
}
