#include <cstdio>
// A candidate for Day 10's next version, not in the course yet: v6 in clusters of two blocks that share
// B through TMA multicast (each block loads its A and half of B into both blocks' shared memory; a stage
// is refilled once both blocks' consumers released it: `empty` counts 4 arrivals, two of them from the
// other block through mapa). Right on every tail tried, but far slower than v6 on the H100 (run.py prints
// both): the launch's cluster count is the first suspect, so it prints what cudaOccupancyMaxActiveClusters
// says and launches one cluster per two SMs. Built by run.py only.
#include "course/hopper.cuh"

namespace {
namespace cluster {
using namespace course::hopper;

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, GROUP_M = 8, CLUSTER = 2;
constexpr int CONSUMERS = 2, THREADS = 128 * (1 + CONSUMERS);
constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK, B_HALF = B_STAGE / CLUSTER;
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;
constexpr int SMEM = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;

__device__ __forceinline__ uint64_t smem_descriptor(const void* p) {
  const uint64_t addr = course::smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// Pair `pair` of tiles (2 BM x BN) in the grouped order: GROUP_M block rows at a time, column by column.
__device__ __forceinline__ void pair_origin(int pair, int pairs_m, int blocks_n, int& m0, int& n0) {
  constexpr int GROUP = GROUP_M / CLUSTER;
  const int per_group = GROUP * blocks_n, first = pair / per_group * GROUP;
  const int rows = min(pairs_m - first, GROUP), in_group = pair % per_group;
  m0 = (first + in_group % rows) * CLUSTER * BM;
  n0 = in_group / rows * BN;
}

__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
    gemm_cluster_kernel(__nv_bfloat16* __restrict__ c, const __grid_constant__ CUtensorMap map_a,
                        const __grid_constant__ CUtensorMap map_b, int m, int n, int k) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* base = smem_raw + ((1024 - course::smem_u32(smem_raw) % 1024) % 1024);
  __nv_bfloat16* sa = reinterpret_cast<__nv_bfloat16*>(base);
  __nv_bfloat16* sb = sa + STAGES * A_STAGE;
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + STAGES * B_STAGE);
  uint64_t* empty = full + STAGES;

  const int pairs_m = (m + CLUSTER * BM - 1) / (CLUSTER * BM), blocks_n = (n + BN - 1) / BN;
  const int pairs = pairs_m * blocks_n, k_tiles = (k + BK - 1) / BK;
  const int wg = threadIdx.x / 128;
  const uint32_t rank = cluster_rank();
  const int first_pair = static_cast<int>(blockIdx.x) / CLUSTER, pair_step = static_cast<int>(gridDim.x) / CLUSTER;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      course::mbarrier_init(&full[s], 1);
      course::mbarrier_init(&empty[s], CONSUMERS * CLUSTER);
    }
    course::fence_barrier_init();
  }
  cluster_sync();

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int it = 0;
      for (int pair = first_pair; pair < pairs; pair += pair_step) {
        int m0, n0;
        pair_origin(pair, pairs_m, blocks_n, m0, n0);
        for (int t = 0; t < k_tiles; ++t, ++it) {
          const int s = it % STAGES;
          if (it >= STAGES) course::mbarrier_wait(&empty[s], (it / STAGES - 1) & 1);
          course::mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);
          tma_load_2d(sa + s * A_STAGE, &map_a, t * BK, m0 + rank * BM, &full[s]);
          tma_load_2d_multicast(sb + s * B_STAGE + rank * B_HALF, &map_b, t * BK, n0 + rank * (BN / CLUSTER),
                                &full[s], (1u << CLUSTER) - 1);
        }
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int row0 = 64 * (wg - 1);
    const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, group = lane / 4, pair_lane = lane % 4;
    const bool pairs_ok = n % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 4 == 0;
    const bool leader = threadIdx.x % 128 == 0;
    int it = 0;
    for (int pair = first_pair; pair < pairs; pair += pair_step) {
      int m0, n0;
      pair_origin(pair, pairs_m, blocks_n, m0, n0);
      m0 += rank * BM;
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
        if (t > 0 && leader)
          for (uint32_t r = 0; r < CLUSTER; ++r) mbarrier_arrive_cluster(&empty[(it - 1) % STAGES], r);
      }
      wgmma_wait<0>();
      if (leader)
        for (uint32_t r = 0; r < CLUSTER; ++r) mbarrier_arrive_cluster(&empty[(it - 1) % STAGES], r);

      const int r0 = m0 + row0 + 16 * w + group;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int col = n0 + 8 * j + 2 * pair_lane;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = r0 + 8 * half;
          if (row >= m || col >= n) continue;
          __nv_bfloat16* dst = c + static_cast<int64_t>(row) * n + col;
          const float x0 = d[4 * j + 2 * half], x1 = d[4 * j + 2 * half + 1];
          if (pairs_ok && col + 1 < n) {
            *reinterpret_cast<uint32_t*>(dst) = course::pack2<__nv_bfloat16>(x0, x1);
          } else {
            dst[0] = __float2bfloat16_rn(x0);
            if (col + 1 < n) dst[1] = __float2bfloat16_rn(x1);
          }
        }
      }
    }
  }
  cluster_sync();  // no block leaves while the other may still arrive on its barriers
}

}  // namespace cluster
}  // namespace

COURSE_EXPORT cudaError_t gemm_cluster_multicast_bf16(__nv_bfloat16* c, const __nv_bfloat16* a,
                                                         const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k,
                                                         cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || k % 8) return cudaErrorInvalidValue;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16) return cudaErrorInvalidValue;
  static int clusters[course::MAX_DEVICES] = {};  // per device: how many clusters of two fit at once
  const course::Device dev = course::current_device();
  if (dev.id < 0) return cudaErrorInvalidDevice;
  if (dev.major != 9 || dev.minor != 0) return cudaErrorNotSupported;
  if (clusters[dev.id] == 0) {
    cudaError_t err =
        cudaFuncSetAttribute(cluster::gemm_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, cluster::SMEM);
    if (err != cudaSuccess) return err;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(2 * cluster::CLUSTER * 132);
    config.blockDim = dim3(cluster::THREADS);
    config.dynamicSmemBytes = cluster::SMEM;
    int fit = 0;
    err = cudaOccupancyMaxActiveClusters(&fit, cluster::gemm_cluster_kernel, &config);
    if (err != cudaSuccess) return err;
    if (fit <= 0) return cudaErrorNotSupported;
    printf("cluster candidate: cudaOccupancyMaxActiveClusters says %d clusters of 2 fit; launching %d\n", fit, dev.sms / 2);
    fflush(stdout);
    clusters[dev.id] = dev.sms / 2;
  }
  CUtensorMap map_a, map_b;
  cudaError_t err = course::hopper::tensor_map_2d(&map_a, a, m, k, cluster::BM, cluster::BK);
  if (err == cudaSuccess) err = course::hopper::tensor_map_2d(&map_b, b, n, k, cluster::BN / cluster::CLUSTER, cluster::BK);
  if (err != cudaSuccess) return err;
  const int64_t pairs = ((m + 2 * cluster::BM - 1) / (2 * cluster::BM)) * ((n + cluster::BN - 1) / cluster::BN);
  const int grid = cluster::CLUSTER * static_cast<int>(pairs < clusters[dev.id] ? pairs : clusters[dev.id]);
  cluster::gemm_cluster_kernel<<<grid, cluster::THREADS, cluster::SMEM, stream>>>(c, map_a, map_b, static_cast<int>(m),
                                                                   static_cast<int>(n), static_cast<int>(k));
  return cudaGetLastError();
}
