// v8, v6 with its epilogue through shared memory and a TMA store (sm_90a only, not graded).
// In v6 the two consumer warpgroups finish a tile together and then store it straight from their
// registers, 4 bytes a lane over 8 rows per instruction, while the tensor cores wait. What changes:
//  * each consumer warpgroup writes its 64 x 256 accumulators, rounded, into its own 32 KB of shared
//    memory, as four 64 x 64 boxes in the 128-byte swizzle (the same chunk permutation the loads
//    use: the 8 rows a warp writes land in 8 different bank groups), then fences them for the copy
//    engine, syncs its 128 threads (a named barrier) and one thread issues four TMA stores;
//  * the stores run while the warpgroup starts the next tile's wgmmas; before it writes that shared
//    memory again it waits until the copy engine has read it (cp.async.bulk.wait_group.read);
//  * the ring has 3 stages (144 KB) to leave room for the two C buffers (64 KB);
//  * the TMA store writes only what lies inside C; where C's rows are not 16-byte aligned (N not a
//    multiple of 8, or c not 16-byte aligned) no tensor map can describe it and v6's direct stores
//    are used.
//
//   a [M, K], b [N, K], c [M, N]   bf16; K a multiple of 8 (16-byte rows for the tensor map); a, b
//   16-byte aligned
#include "course/hopper.cuh"

namespace {
namespace v8 {
using namespace course::hopper;

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, GROUP_M = 8;
constexpr int CONSUMERS = 2, THREADS = 128 * (1 + CONSUMERS);
constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;
constexpr int C_BOX = 64, C_HALF = 64 * BN;  // C staged as 64 x 64 boxes; a consumer's 64 x 256 elements
constexpr int SMEM = STAGES * STAGE_BYTES + CONSUMERS * C_HALF * 2 + 2 * STAGES * 8 + 1024;

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
                           const __grid_constant__ CUtensorMap map_b, const __grid_constant__ CUtensorMap map_c,
                           bool tma_c, int m, int n, int k) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* base = smem_raw + ((1024 - course::smem_u32(smem_raw) % 1024) % 1024);
  __nv_bfloat16* sa = reinterpret_cast<__nv_bfloat16*>(base);
  __nv_bfloat16* sb = sa + STAGES * A_STAGE;
  __nv_bfloat16* sc = sb + STAGES * B_STAGE;  // (CONSUMERS, 4 boxes, 64, 64) swizzled
  uint64_t* full = reinterpret_cast<uint64_t*>(sc + CONSUMERS * C_HALF);
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

    if (tma_c) {
      __nv_bfloat16* mine = sc + (wg - 1) * C_HALF;
      if (threadIdx.x % 128 == 0) bulk_wait_read<0>();  // the last tile's stores have read `mine`
      named_barrier(wg, 128);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int box = j / 8, chunk = j % 8;  // 8 columns = one 16-byte chunk of a 128-byte row
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = 16 * w + group + 8 * half;  // row % 8 == group
          __nv_bfloat16* dst = mine + box * C_BOX * C_BOX + row * C_BOX + 8 * (chunk ^ group) + 2 * pair;
          *reinterpret_cast<uint32_t*>(dst) = course::pack2<__nv_bfloat16>(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
        }
      }
      fence_proxy_async();  // the writes above are seen by the copy engine
      named_barrier(wg, 128);
      if (threadIdx.x % 128 == 0) {
        for (int box = 0; box < BN / C_BOX; ++box)
          if (n0 + box * C_BOX < n) tma_store_2d(&map_c, mine + box * C_BOX * C_BOX, n0 + box * C_BOX, m0 + row0);
        bulk_commit();
      }
      continue;
    }
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
  if (threadIdx.x % 128 == 0) bulk_wait_read<0>();  // shared memory stays until the stores have read it
}

}  // namespace v8
}  // namespace

COURSE_EXPORT cudaError_t gemm_v8_tma_store_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
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
        cudaFuncSetAttribute(v8::gemm_persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v8::SMEM);
    if (err != cudaSuccess) return err;
    ready[dev.id] = true;
  }
  CUtensorMap map_a, map_b;
  cudaError_t err = course::hopper::tensor_map_2d(&map_a, a, m, k, v8::BM, v8::BK);
  if (err == cudaSuccess) err = course::hopper::tensor_map_2d(&map_b, b, n, k, v8::BN, v8::BK);
  if (err != cudaSuccess) return err;
  CUtensorMap map_c = {};
  const bool tma_c = n % 8 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0 &&
                     course::hopper::tensor_map_2d(&map_c, c, m, n, v8::C_BOX, v8::C_BOX) == cudaSuccess;
  const int64_t tiles = ((m + v8::BM - 1) / v8::BM) * ((n + v8::BN - 1) / v8::BN);
  const int grid = static_cast<int>(tiles < dev.sms ? tiles : dev.sms);
  v8::gemm_persistent_kernel<<<grid, v8::THREADS, v8::SMEM, stream>>>(c, map_a, map_b, map_c, tma_c, static_cast<int>(m),
                                                                      static_cast<int>(n), static_cast<int>(k));
  return cudaGetLastError();
}
