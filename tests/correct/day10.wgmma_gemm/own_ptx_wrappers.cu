// CORRECT the learner's own inline-PTX wrappers for mbarriers (a C++ try_wait loop), TMA loads and stores, and the descriptor as plain __device__ functions; SM count cached in a static local; cudaFuncSetAttribute on every call with fprintf on failure
// Hopper GEMM, C = A B^T: producer warpgroup with TMA, two consumer warpgroups with wgmma, persistent grid.
// The wgmma family (mma, fence, commit, wait), setmaxnreg and the tensor-map encoding come from the course header.
#include <cstdio>

#include "course/hopper.cuh"

// ----------------------------------------------------------------- my PTX wrappers
__device__ uint32_t shared_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ void bar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_addr(bar)), "r"(count) : "memory");
}

__device__ void bar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_addr(bar)) : "memory");
}

__device__ void bar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_addr(bar)), "r"(bytes)
               : "memory");
}

// one try of the parity wait: 1 once the phase with that parity has completed
__device__ uint32_t bar_try(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n"
      " .reg .pred p;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(ok)
      : "r"(shared_addr(bar)), "r"(parity)
      : "memory");
  return ok;
}

__device__ void bar_wait(uint64_t* bar, uint32_t parity) {
  while (!bar_try(bar, parity)) {
  }
}

__device__ void tma_load(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(shared_addr(dst)), "l"(map), "r"(col), "r"(row), "r"(shared_addr(bar))
      : "memory");
}

__device__ void tma_store(const CUtensorMap* map, const void* src, int col, int row) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(map), "r"(col),
               "r"(row), "r"(shared_addr(src))
               : "memory");
}

// K-major tile, 128-byte swizzle: address/16 in bits 0-13, LBO 1 (unused), SBO 1024 B / 16, swizzle mode 1 at bit 62
__device__ uint64_t make_desc(const void* tile) {
  uint64_t desc = (shared_addr(tile) & 0x3FFFFu) >> 4;
  desc |= uint64_t(1) << 16;
  desc |= uint64_t(1024 / 16) << 32;
  desc |= uint64_t(1) << 62;
  return desc;
}

namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, GROUP_M = 8;
constexpr int CONSUMERS = 2, THREADS = 128 * (1 + CONSUMERS);
constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;
constexpr int C_BOX = 64, C_HALF = 64 * BN;
constexpr int SMEM = STAGES * STAGE_BYTES + CONSUMERS * C_HALF * 2 + 2 * STAGES * 8 + 1024;

// grouped tile order: GROUP_M block rows at a time, column by column
__device__ void tile_coords(int tile, int blocks_m, int blocks_n, int& m0, int& n0) {
  const int per_group = GROUP_M * blocks_n;
  const int first = tile / per_group * GROUP_M;
  const int rows = min(blocks_m - first, GROUP_M);
  const int in_group = tile % per_group;
  m0 = (first + in_group % rows) * BM;
  n0 = in_group / rows * BN;
}

template <typename T>
__device__ __forceinline__ void store_direct(T* c, const float (&d)[128], int m0, int n0, int m, int n) {
  const int lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
  const int r0 = m0 + 16 * (threadIdx.x % 128 / 32) + group;
  const bool pairs = n % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 4 == 0;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = n0 + 8 * j + 2 * pair;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = r0 + 8 * half;
      if (row >= m || col >= n) continue;
      T* dst = c + static_cast<int64_t>(row) * n + col;
      const float x0 = d[4 * j + 2 * half], x1 = d[4 * j + 2 * half + 1];
      if (pairs && col + 1 < n) {
        *reinterpret_cast<uint32_t*>(dst) = course::pack2<T>(x0, x1);
      } else {
        dst[0] = course::from_float<T>(x0);
        if (col + 1 < n) dst[1] = course::from_float<T>(x1);
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void store_staged(const CUtensorMap* map_c, T* staged, const float (&d)[128], int m0, int n0,
                                             int n, int barrier_id) {
  const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
  const bool leader = threadIdx.x % 128 == 0;
  if (leader) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  asm volatile("bar.sync %0, 128;" ::"r"(barrier_id) : "memory");
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int box = j / 8, chunk = j % 8;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = 16 * w + group + 8 * half;
      T* dst = staged + box * C_BOX * C_BOX + row * C_BOX + 8 * (chunk ^ group) + 2 * pair;
      *reinterpret_cast<uint32_t*>(dst) = course::pack2<T>(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("bar.sync %0, 128;" ::"r"(barrier_id) : "memory");
  if (leader) {
    for (int box = 0; box < BN / C_BOX; ++box)
      if (n0 + box * C_BOX < n) tma_store(map_c, staged + box * C_BOX * C_BOX, n0 + box * C_BOX, m0);
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_tma_wgmma(T* __restrict__ c, const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, bool tma_c, int m, int n, int k) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* base = smem_raw + ((1024 - shared_addr(smem_raw) % 1024) % 1024);
  T* sa = reinterpret_cast<T*>(base);
  T* sb = sa + STAGES * A_STAGE;
  T* sc = sb + STAGES * B_STAGE;
  uint64_t* full = reinterpret_cast<uint64_t*>(sc + CONSUMERS * C_HALF);
  uint64_t* empty = full + STAGES;

  const int blocks_m = (m + BM - 1) / BM, blocks_n = (n + BN - 1) / BN, tiles = blocks_m * blocks_n;
  const int k_tiles = (k + BK - 1) / BK;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      bar_init(&full[s], 1);
      bar_init(&empty[s], CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    course::hopper::setmaxnreg_dec<40>();
    if (threadIdx.x != 0) return;
    int it = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      int m0, n0;
      tile_coords(tile, blocks_m, blocks_n, m0, n0);
      for (int t = 0; t < k_tiles; ++t, ++it) {
        const int s = it % STAGES;
        if (it >= STAGES) bar_wait(&empty[s], (it / STAGES - 1) & 1);
        bar_expect_bytes(&full[s], STAGE_BYTES);
        tma_load(sa + s * A_STAGE, &map_a, t * BK, m0, &full[s]);
        tma_load(sb + s * B_STAGE, &map_b, t * BK, n0, &full[s]);
      }
    }
    return;
  }

  course::hopper::setmaxnreg_inc<232>();
  const int row0 = 64 * (wg - 1);
  int it = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int m0, n0;
    tile_coords(tile, blocks_m, blocks_n, m0, n0);
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    for (int t = 0; t < k_tiles; ++t, ++it) {
      const int s = it % STAGES;
      bar_wait(&full[s], (it / STAGES) & 1);
      course::hopper::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)
        course::hopper::wgmma_m64n256k16<T>(d, make_desc(sa + s * A_STAGE + row0 * BK + 16 * kk),
                                            make_desc(sb + s * B_STAGE + 16 * kk));
      course::hopper::wgmma_commit();
      course::hopper::wgmma_wait<1>();
      if (t > 0 && threadIdx.x % 128 == 0) bar_arrive(&empty[(it - 1) % STAGES]);
    }
    course::hopper::wgmma_wait<0>();
    if (threadIdx.x % 128 == 0) bar_arrive(&empty[(it - 1) % STAGES]);
    if (tma_c) {
      store_staged<T>(&map_c, sc + (wg - 1) * C_HALF, d, m0 + row0, n0, n, wg);
    } else {
      store_direct<T>(c, d, m0 + row0, n0, m, n);
    }
  }
  if (threadIdx.x % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

struct DeviceInfo {
  int sms;
  bool hopper;
};

DeviceInfo device_info() {
  static int cached_dev = -1;
  static DeviceInfo cached = {0, false};
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev != cached_dev) {
    int sms = 0, major = 0, minor = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cached = {sms > 0 ? sms : 1, major == 9 && minor == 0};
    cached_dev = dev;
  }
  return cached;
}

template <typename T>
cudaError_t run_gemm(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || k % 8 != 0) return cudaErrorInvalidValue;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16) return cudaErrorInvalidValue;
  const DeviceInfo info = device_info();
  if (!info.hopper) return cudaErrorNotSupported;
  cudaError_t err = cudaFuncSetAttribute(gemm_tma_wgmma<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  if (err != cudaSuccess) {
    fprintf(stderr, "wgmma gemm: cannot get %d bytes of shared memory: %s\n", SMEM, cudaGetErrorString(err));
    return err;
  }
  CUtensorMap map_a, map_b, map_c = {};
  err = course::hopper::tensor_map_2d(&map_a, a, m, k, BM, BK);
  if (err == cudaSuccess) err = course::hopper::tensor_map_2d(&map_b, b, n, k, BN, BK);
  if (err != cudaSuccess) return err;
  const bool tma_c = n % 8 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0 &&
                     course::hopper::tensor_map_2d(&map_c, static_cast<const T*>(c), m, n, C_BOX, C_BOX) == cudaSuccess;
  const int64_t tiles = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
  const int grid = static_cast<int>(tiles < info.sms ? tiles : info.sms);
  gemm_tma_wgmma<T><<<grid, THREADS, SMEM, stream>>>(c, map_a, map_b, map_c, tma_c, static_cast<int>(m),
                                                     static_cast<int>(n), static_cast<int>(k));
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t wgmma_gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n, int64_t k,
                                          cudaStream_t stream) {
  return run_gemm(c, a, b, m, n, k, stream);
}

COURSE_EXPORT cudaError_t wgmma_gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m,
                                          int64_t n, int64_t k, cudaStream_t stream) {
  return run_gemm(c, a, b, m, n, k, stream);
}
