// v4, N stages: adds a ring of STAGES buffers (2 to 8). STAGES - 1 tiles are in flight while the
// warps multiply the one that landed, and one barrier per tile is enough: after it, no warp
// still reads the buffer the next copy refills. Napkin math: to stream ~3.8 TB/s over 128 blocks
// (N = 4096) with ~1 us of DRAM latency under load, each block needs ~30 KB in flight: 2 stages
// of 16 KB of weight each, with room to spare at 4. Expect v3 at 2 stages, rising to the copy's
// bandwidth by 3-4 stages (the notebook measures it).
//
//   x [M, K], weight [N, K], y [M, N] bf16/fp16; M <= 16, N % 32 == 0, K % 256 == 0, aligned
#include "course/skinny_versions.cuh"

// Its own namespace: build_day compiles the day's files as one translation unit.
namespace skinny_v4 {

using namespace skinny;  // the shared problem and helpers: course/skinny_versions.cuh

constexpr int STAGE_ELEMS = (ROWS + MTOK) * Swizzled::STRIDE;  // 24 KB per stage in bf16

template <typename T, int STAGES>
__global__ void __launch_bounds__(THREADS) skinny_stages_kernel(T* y, const T* x, const T* w, int64_t M, int64_t N, int64_t K) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);  // (STAGES, ROWS + MTOK, K_TILE)
  const int warp = threadIdx.x / 32, rg = warp % 2, kh = warp / 2;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * ROWS;
  const int tiles = static_cast<int>(K / K_TILE);
  float acc[2][4] = {};

  for (int kt = 0; kt < STAGES - 1; ++kt) {  // prologue: STAGES - 1 groups, empty ones included
    if (kt < tiles) load_tile_async(stages + kt * STAGE_ELEMS, x, w, M, K, n0, kt);
    course::cp_async_commit();
  }
  for (int kt = 0; kt < tiles; ++kt) {
    course::cp_async_wait<STAGES - 2>();  // tile kt is mine; STAGES - 2 newer groups may still fly
    __syncthreads();                      // everyone's copies of tile kt, and tile kt - 1 is done with
    const int next = kt + STAGES - 1;     // goes to the buffer tile kt - 1 used
    if (next < tiles) load_tile_async(stages + (next % STAGES) * STAGE_ELEMS, x, w, M, K, n0, next);
    course::cp_async_commit();
    const T* stage = stages + (kt % STAGES) * STAGE_ELEMS;
    warp_tile_mma<Swizzled>(stage, stage + ROWS * K_TILE, rg, kh, M > 8, acc);
  }
  store_block(y, acc, rg, kh, M, N, n0);
}

template <typename T, int STAGES>
cudaError_t launch_stages(T* y, const T* x, const T* w, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  constexpr int SMEM = STAGES * STAGE_ELEMS * static_cast<int>(sizeof(T));
  auto kernel = skinny_stages_kernel<T, STAGES>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(N / ROWS), THREADS, SMEM, stream>>>(y, x, w, M, N, K);
  return cudaGetLastError();
}

}  // namespace skinny_v4

// stages: 2, 3, 4, 6 or 8 (8 x 24 KB = 192 KB of shared memory: one block per SM).
COURSE_EXPORT cudaError_t skinny_v4_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                         int64_t M, int64_t N, int64_t K, int64_t stages, cudaStream_t stream) {
  using namespace skinny_v4;
  if (!shape_ok(y, x, weight, M, N, K)) return cudaErrorInvalidValue;
  switch (stages) {
    case 2: return launch_stages<__nv_bfloat16, 2>(y, x, weight, M, N, K, stream);
    case 3: return launch_stages<__nv_bfloat16, 3>(y, x, weight, M, N, K, stream);
    case 4: return launch_stages<__nv_bfloat16, 4>(y, x, weight, M, N, K, stream);
    case 6: return launch_stages<__nv_bfloat16, 6>(y, x, weight, M, N, K, stream);
    case 8: return launch_stages<__nv_bfloat16, 8>(y, x, weight, M, N, K, stream);
    default: return cudaErrorInvalidValue;
  }
}
