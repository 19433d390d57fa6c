// v6, v5 made persistent (sm_90a only, not graded): one block per SM walks C's tiles.
// What changes against v5:
//  * a persistent grid: as many blocks as SMs, each taking tiles blockIdx.x, + gridDim.x, ... in the
//    grouped order. The ring of stages runs on across tiles: while the consumers store tile i's
//    accumulators, the producer is already filling the ring with tile i + 1's first K tiles, so no
//    block starts cold (v5 pays the ring's fill and the epilogue once per tile, unhidden);
//  * the stage and its mbarrier phase follow one counter that runs over all the block's K tiles,
//    not only the current tile's: stage = it % STAGES, phase = (it / STAGES) & 1;
//  * the consumers release a tile's last stage after their final wait, or the producer would wait
//    for it forever on the next tile;
//  * setmaxnreg: the producer warpgroup gives registers back (40 a thread), the two consumer
//    warpgroups take them (232): the 128 accumulators and the epilogue's addresses never spill;
//  * M and N need not be multiples of the tile: the tensor maps read zeros past the edges and the
//    epilogue stores only what lies inside C.
// Napkin math at 4096^3: 512 tiles of 128 x 256 on 132 SMs, 3.9 waves; each tile is 64 K tiles of
// 48 KB (4.2 MFLOP each).
//
//   a [M, K], b [N, K], c [M, N]   bf16; K a multiple of 8 (16-byte rows for the tensor map); a, b
//   16-byte aligned
#include "course/hopper.cuh"

namespace {
namespace v6 {
using namespace course::hopper;

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, GROUP_M = 8;
constexpr int CONSUMERS = 2, THREADS = 128 * (1 + CONSUMERS);
constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;
constexpr int SMEM = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;

// As v5: a K-major tile in the 128-byte swizzle, 1024 bytes from one group of 8 rows to the next.
__device__ __forceinline__ uint64_t smem_descriptor(const void* p) {
  const uint64_t addr = course::smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// Tile `tile` of C in the grouped order: GROUP_M block rows at a time, column by column.
__device__ __forceinline__ void tile_origin(int tile, int blocks_m, int blocks_n, int& m0, int& n0) {
  const int per_group = GROUP_M * blocks_n, first = tile / per_group * GROUP_M;
  const int rows = min(blocks_m - first, GROUP_M), in_group = tile % per_group;
  m0 = (first + in_group % rows) * BM;
  n0 = in_group / rows * BN;
}

__global__ void __launch_bounds__(THREADS, 1)
    gemm_persistent_kernel(__nv_bfloat16* __restrict__ c, const __grid_constant__ CUtensorMap map_a,
                           const __grid_constant__ CUtensorMap map_b, int m, int n, int k) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* base = smem_raw + ((1024 - course::smem_u32(smem_raw) % 1024) % 1024);
  __nv_bfloat16* sa = reinterpret_cast<__nv_bfloat16*>(base);
  __nv_bfloat16* sb = sa + STAGES * A_STAGE;
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + STAGES * B_STAGE);
  uint64_t* empty = full + STAGES;

  const int blocks_m = (m + BM - 1) / BM, blocks_n = (n + BN - 1) / BN, tiles = blocks_m * blocks_n;
  const int k_tiles = (k + BK - 1) / BK;  // the tensor map reads zeros past K
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      course::mbarrier_init(&full[s], 1);
      course::mbarrier_init(&empty[s], CONSUMERS);
    }
    course::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int it = 0;  // K tiles issued by this block, over all its tiles
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int m0, n0;
        tile_origin(tile, blocks_m, blocks_n, m0, n0);
        for (int t = 0; t < k_tiles; ++t, ++it) {
          const int s = it % STAGES;
          if (it >= STAGES) course::mbarrier_wait(&empty[s], (it / STAGES - 1) & 1);
          course::mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);
          tma_load_2d(sa + s * A_STAGE, &map_a, t * BK, m0, &full[s]);
          tma_load_2d(sb + s * B_STAGE, &map_b, t * BK, n0, &full[s]);
        }
      }
    }
    return;
  }

  setmaxnreg_inc<232>();
  const int row0 = 64 * (wg - 1);
  const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
  const bool pairs = n % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 4 == 0;  // 4-byte stores line up
  int it = 0;  // K tiles consumed, over all the block's tiles
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int m0, n0;
    tile_origin(tile, blocks_m, blocks_n, m0, n0);
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    for (int t = 0; t < k_tiles; ++t, ++it) {
      const int s = it % STAGES;
      course::mbarrier_wait(&full[s], (it / STAGES) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)
        wgmma_m64n256k16<__nv_bfloat16>(d, smem_descriptor(sa + s * A_STAGE + row0 * BK + 16 * kk),
                         smem_descriptor(sb + s * B_STAGE + 16 * kk));
      wgmma_commit();
      wgmma_wait<1>();
      if (t > 0 && threadIdx.x % 128 == 0) mbarrier_arrive(&empty[(it - 1) % STAGES]);
    }
    wgmma_wait<0>();
    if (threadIdx.x % 128 == 0) mbarrier_arrive(&empty[(it - 1) % STAGES]);  // the tile's last stage

    const int r = m0 + row0 + 16 * w + group;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = n0 + 8 * j + 2 * pair;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = r + 8 * half;
        if (row >= m || col >= n) continue;
        __nv_bfloat16* dst = c + static_cast<int64_t>(row) * n + col;
        const float x0 = d[4 * j + 2 * half], x1 = d[4 * j + 2 * half + 1];
        if (pairs && col + 1 < n) {
          *reinterpret_cast<uint32_t*>(dst) = course::pack2<__nv_bfloat16>(x0, x1);
        } else {
          dst[0] = __float2bfloat16_rn(x0);
          if (col + 1 < n) dst[1] = __float2bfloat16_rn(x1);
        }
      }
    }
  }
}

}  // namespace v6
}  // namespace

COURSE_EXPORT cudaError_t gemm_v6_persistent_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                  int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || k % 8) return cudaErrorInvalidValue;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16) return cudaErrorInvalidValue;
  const course::Device dev = course::current_device();
  if (dev.id < 0) return cudaErrorInvalidDevice;
  if (dev.major != 9 || dev.minor != 0) return cudaErrorNotSupported;  // sm_90a code runs on compute capability 9.0 only
  static bool ready[course::MAX_DEVICES] = {};  // its shared memory limit raised, once per device
  if (!ready[dev.id]) {
    const cudaError_t err =
        cudaFuncSetAttribute(v6::gemm_persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v6::SMEM);
    if (err != cudaSuccess) return err;
    ready[dev.id] = true;
  }
  CUtensorMap map_a, map_b;
  cudaError_t err = course::hopper::tensor_map_2d(&map_a, a, m, k, v6::BM, v6::BK);
  if (err == cudaSuccess) err = course::hopper::tensor_map_2d(&map_b, b, n, k, v6::BN, v6::BK);
  if (err != cudaSuccess) return err;
  const int64_t tiles = ((m + v6::BM - 1) / v6::BM) * ((n + v6::BN - 1) / v6::BN);
  const int grid = static_cast<int>(tiles < dev.sms ? tiles : dev.sms);
  v6::gemm_persistent_kernel<<<grid, v6::THREADS, v6::SMEM, stream>>>(c, map_a, map_b, static_cast<int>(m),
                                                                      static_cast<int>(n), static_cast<int>(k));
  return cudaGetLastError();
}
