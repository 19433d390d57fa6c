// v4, N stages: adds a ring of STAGES buffers (2 to 8). STAGES - 1 tiles are in flight while the
// warps multiply the one that landed, and one barrier per tile is enough: after it, no warp
// still reads the buffer the next copy refills. Napkin math: to stream ~3.8 TB/s over 128 blocks
// (N = 4096) with ~1 us of DRAM latency under load, each block needs ~30 KB in flight: 2 stages
// of 16 KB of weight each, with room to spare at 4. Expect v3 at 2 stages, rising to the copy's
// bandwidth by 3-4 stages (the notebook measures it).
//
//   x [M, K], weight [N, K], y [M, N] bf16/fp16; M <= 16, N % 32 == 0, K % 256 == 0, aligned
#include "course/async.cuh"
#include "course/mma.cuh"

// Its own namespace: build_day compiles the day's files as one translation unit.
namespace skinny_v4 {

// The problem, fixed for the versions: units of 32 weight rows (one block each), k tiles of 256,
// up to 16 tokens; 4 warps = 2 row groups of 16 x 2 k halves. Aligned pointers, N % 32 == 0,
// K % 256 == 0 (the exercise handles every shape).
constexpr int ROWS = 32, K_TILE = 256, MTOK = 16, THREADS = 128, CHUNK = 8;
constexpr int CHUNKS_PER_ROW = K_TILE / CHUNK;
constexpr int STAGE_ELEMS = (ROWS + MTOK) * K_TILE;  // 24 KB per stage in bf16

// Chunk c of row r of a tile; odd rows swap their 64-byte halves (no bank conflicts, see the notebook).
__device__ __forceinline__ int swizzled(int row, int chunk) { return row * K_TILE + ((chunk ^ ((row & 1) << 2)) * CHUNK); }

// One warp's share of a tile in shared memory: rows 16 rg.., k half kh, tokens 0-7 (and 8-15).
template <typename T>
__device__ __forceinline__ void warp_tile_mma(const T* sw, const T* sx, int rg, int kh, bool two, float (&acc)[2][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int s = 0; s < K_TILE / 64; ++s) {
    const int c = (kh * (K_TILE / 64) + s) * 4 + t;
    const uint4 w0 = *reinterpret_cast<const uint4*>(sw + swizzled(rg * 16 + g, c));
    const uint4 w1 = *reinterpret_cast<const uint4*>(sw + swizzled(rg * 16 + g + 8, c));
    const uint32_t a_lo[4] = {w0.x, w1.x, w0.y, w1.y}, a_hi[4] = {w0.z, w1.z, w0.w, w1.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !two) break;  // (a uniform branch: the whole warp skips tokens 8-15)
      const uint4 xv = *reinterpret_cast<const uint4*>(sx + swizzled(h * 8 + g, c));
      const uint32_t b_lo[2] = {xv.x, xv.y}, b_hi[2] = {xv.z, xv.w};
      course::mma_m16n8k16<T>(acc[h], a_lo, b_lo);
      course::mma_m16n8k16<T>(acc[h], a_hi, b_hi);
    }
  }
}

// The two k halves meet in shared memory; k half 0 rounds once and stores y[m, n].
template <typename T>
__device__ void store_block(T* y, float (&acc)[2][4], int rg, int kh, int64_t M, int64_t N, int64_t n0) {
  __shared__ float red[2][32][8];
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if (kh == 1)
#pragma unroll
    for (int i = 0; i < 8; ++i) red[rg][lane][i] = acc[i / 4][i % 4];
  __syncthreads();
  if (kh == 0)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t n = n0 + rg * 16 + g + (i % 4 / 2) * 8, m = (i / 4) * 8 + 2 * t + i % 2;
      if (m < M) y[m * N + n] = course::from_float<T>(acc[i / 4][i % 4] + red[rg][lane][i]);
    }
}

// Copy tile kt of this block's rows (and of x) into `stage` with 16-byte cp.async; x rows past M are zeros.
template <typename T>
__device__ __forceinline__ void load_tile_async(T* stage, const T* x, const T* w, int64_t M, int64_t K, int64_t n0,
                                                int kt) {
  const int64_t k0 = static_cast<int64_t>(kt) * K_TILE;
#pragma unroll
  for (int q = threadIdx.x; q < ROWS * CHUNKS_PER_ROW; q += THREADS) {  // weight: streamed, L2 only
    const int r = q / CHUNKS_PER_ROW, c = q % CHUNKS_PER_ROW;
    course::cp_async<16, course::CacheHint::cg>(stage + swizzled(r, c), w + (n0 + r) * K + k0 + c * CHUNK);
  }
#pragma unroll
  for (int q = threadIdx.x; q < MTOK * CHUNKS_PER_ROW; q += THREADS) {  // x: read by every block, L1 too
    const int m = q / CHUNKS_PER_ROW, c = q % CHUNKS_PER_ROW;
    course::cp_async_zfill<16, course::CacheHint::ca>(stage + swizzled(ROWS + m, c), m < M ? x + m * K + k0 + c * CHUNK : x,
                                                      m < M);
  }
}

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
    warp_tile_mma(stage, stage + ROWS * K_TILE, rg, kh, M > 8, acc);
  }
  store_block(y, acc, rg, kh, M, N, n0);
}

bool shape_ok(const void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K) {
  return M >= 1 && M <= 16 && N > 0 && N % ROWS == 0 && K > 0 && K % K_TILE == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 && y != nullptr;
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
