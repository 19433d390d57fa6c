// v5, Hopper's own path (sm_90a only, not graded): wgmma + TMA, what cuBLAS runs for torch.matmul.
// Three things change at once against v4, all of them Hopper-only:
//  * TMA (the tensor memory accelerator): one thread describes a whole tile (a 2-D box of a tensor
//    map, cuTensorMapEncodeTiled on the host) and the copy engine writes it to shared memory,
//    already in the 128-byte XOR swizzle (chunk c of row r at c ^ (r % 8), FlashInfer's
//    permuted_smem layout); completion is counted in bytes on an mbarrier (SASS UTMALDG, SYNCS);
//  * wgmma: a warpgroup (4 warps, 128 threads) multiplies a 64 x 256 x 16 step in one instruction,
//    reading A and B straight from shared memory through 64-bit descriptors: no ldmatrix, no
//    fragment registers, and each instruction does 32x the work of one mma.sync (SASS HGMMA);
//    it runs asynchronously: issued, committed as a group, waited for later;
//  * warp specialization: warpgroup 0 only issues copies (one thread), warpgroups 1 and 2 only
//    multiply, each 64 rows of the 128 x 256 tile; full / empty mbarriers per stage hand the four
//    stages of the ring back and forth, with no __syncthreads in the loop.
// Napkin math at 4096^3: 137 GFLOP; the dense bf16 peak is ~989 TFLOP/s, cuBLAS reaches ~780.
// Built only for sm_90a (the file name says so: grader.jit compiles *_sm90a.cu files, and the
// extension that holds them, with -gencode=arch=compute_90a,code=sm_90a on a compute capability
// 9.0 GPU and in compile-only mode); elsewhere the kernel traps and the launcher refuses.
//
//   a [M, K], b [N, K], c [M, N]   bf16; M a multiple of 128, N of 256, K of 64; 16-byte aligned
#include "course/hopper.cuh"  // the wgmma, TMA and mbarrier wrappers

namespace {
namespace v5 {  // the versions of a day build into one extension: names apart
using namespace course::hopper;

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;  // BK: 64 bf16 = one 128-byte swizzled row
constexpr int CONSUMERS = 2, THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies, 1-2 multiply
constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;            // elements: 16 KB and 32 KB
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;
constexpr int SMEM = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;  // + barriers + room to align

// A wgmma shared-memory descriptor for a K-major tile in the 128-byte swizzle: start address
// (bits 0-13, in 16 bytes), leading byte offset (16-29; unused by this layout: 1), stride byte
// offset (32-45: 1024 bytes from one group of 8 rows to the next), swizzle mode (62-63: 1 = 128 B).
__device__ __forceinline__ uint64_t smem_descriptor(const void* p) {
  const uint64_t addr = course::smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

__global__ void __launch_bounds__(THREADS, 1)
    gemm_wgmma_tma_kernel(__nv_bfloat16* __restrict__ c, const __grid_constant__ CUtensorMap map_a,
                          const __grid_constant__ CUtensorMap map_b, int64_t m, int64_t n, int64_t k) {
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 8 rows (1024 bytes): stages start on 1024-byte boundaries.
  unsigned char* base = smem_raw + ((1024 - course::smem_u32(smem_raw) % 1024) % 1024);
  __nv_bfloat16* sa = reinterpret_cast<__nv_bfloat16*>(base);  // (STAGES, BM, BK) swizzled
  __nv_bfloat16* sb = sa + STAGES * A_STAGE;                    // (STAGES, BN, BK) swizzled
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + STAGES * B_STAGE);  // stage s has landed
  uint64_t* empty = full + STAGES;                                      // stage s may be refilled

  // Grouped block order, as v4.
  constexpr int GROUP_M = 8;
  const int blocks_m = static_cast<int>(m / BM), blocks_n = static_cast<int>(n / BN);
  const int per_group = GROUP_M * blocks_n, group_first = static_cast<int>(blockIdx.x) / per_group * GROUP_M;
  const int group_rows = min(blocks_m - group_first, GROUP_M);
  const int in_group = static_cast<int>(blockIdx.x) % per_group;
  const int m0 = (group_first + in_group % group_rows) * BM, n0 = in_group / group_rows * BN;
  const int tiles = static_cast<int>(k / BK);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      course::mbarrier_init(&full[s], 1);           // the producer's arrive (+ the TMA bytes)
      course::mbarrier_init(&empty[s], CONSUMERS);  // one arrive per consumer warpgroup
    }
    course::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // producer: one thread keeps the ring full
    if (threadIdx.x == 0) {
      for (int t = 0; t < tiles; ++t) {
        const int s = t % STAGES;
        if (t >= STAGES) course::mbarrier_wait(&empty[s], (t / STAGES - 1) & 1);  // both consumers done with it
        course::mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);
        tma_load_2d(sa + s * A_STAGE, &map_a, t * BK, m0, &full[s]);
        tma_load_2d(sb + s * B_STAGE, &map_b, t * BK, n0, &full[s]);
      }
    }
    return;
  }

  // Consumers: warpgroup wg multiplies rows 64 (wg - 1) .. + 63 of the tile by all 256 columns.
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  const int row0 = 64 * (wg - 1);
  for (int t = 0; t < tiles; ++t) {
    const int s = t % STAGES;
    course::mbarrier_wait(&full[s], (t / STAGES) & 1);
    wgmma_fence();  // the accumulators are ready for the tensor cores
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)  // 16 k = 32 bytes further along each swizzled row
      wgmma_m64n256k16<__nv_bfloat16>(d, smem_descriptor(sa + s * A_STAGE + row0 * BK + 16 * kk),
                       smem_descriptor(sb + s * B_STAGE + 16 * kk));
    wgmma_commit();
    wgmma_wait<1>();  // tile t - 1's wgmmas are done (tile t's may still run)...
    if (t > 0 && threadIdx.x % 128 == 0) mbarrier_arrive(&empty[(t - 1) % STAGES]);  // ...so its stage is free
  }
  wgmma_wait<0>();

  const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    __nv_bfloat16* dst = c + static_cast<int64_t>(m0 + row0 + 16 * w + group) * n + n0 + 8 * j + 2 * pair;
    *reinterpret_cast<uint32_t*>(dst) = course::pack2<__nv_bfloat16>(d[4 * j], d[4 * j + 1]);
    *reinterpret_cast<uint32_t*>(dst + 8 * n) = course::pack2<__nv_bfloat16>(d[4 * j + 2], d[4 * j + 3]);
  }
}

}  // namespace v5
}  // namespace

COURSE_EXPORT cudaError_t gemm_v5_wgmma_tma_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                 int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || m % v5::BM || n % v5::BN || k % v5::BK) return cudaErrorInvalidValue;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return cudaErrorInvalidValue;  // TMA coordinates are 32-bit
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16 || reinterpret_cast<uintptr_t>(c) % 4)
    return cudaErrorInvalidValue;
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) return cudaErrorNotSupported;  // sm_90a code runs on compute capability 9.0 only
  static bool attr_set = false;
  if (!attr_set) {
    const cudaError_t err = cudaFuncSetAttribute(v5::gemm_wgmma_tma_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, v5::SMEM);
    if (err != cudaSuccess) return err;
    attr_set = true;
  }
  CUtensorMap map_a, map_b;
  cudaError_t err = course::hopper::tensor_map_2d(&map_a, a, m, k, v5::BM, v5::BK);
  if (err == cudaSuccess) err = course::hopper::tensor_map_2d(&map_b, b, n, k, v5::BN, v5::BK);
  if (err != cudaSuccess) return err;
  const int64_t blocks = (m / v5::BM) * (n / v5::BN);
  v5::gemm_wgmma_tma_kernel<<<static_cast<unsigned>(blocks), v5::THREADS, v5::SMEM, stream>>>(c, map_a, map_b, m, n, k);
  return cudaGetLastError();
}
