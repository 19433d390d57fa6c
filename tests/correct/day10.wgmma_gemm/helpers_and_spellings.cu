// CORRECT the descriptor in a plain __device__ function outside the anonymous namespace, entry points spelled half*,
// `half const*`, nv_bfloat16*: Day 10's reference wgmma GEMM otherwise.
// Day 10 exercise (Hopper, sm_90a): C = A B^T on the tensor cores' own path, wgmma fed by TMA.
//
//   a [M, K], b [N, K], c [M, N]   fp16 or bf16, row-major; fp32 accumulation rounded once at the store
//   any M, N; K a multiple of 8 and a, b 16-byte aligned (a tensor map's rows are 16-byte aligned)
//
// The design is the notebook's v8 (kernels/day10/gemm_v5..v8): a block of three warpgroups per SM,
// persistent over C's 128 x 256 tiles in grouped order. Warpgroup 0 is the producer: one thread fills
// a ring of STAGES shared-memory stages (A's 128 x 64 tile and B's 256 x 64, 48 KB) with TMA copies,
// announced on the stage's `full` mbarrier. Warpgroups 1 and 2 are the consumers, 64 rows of the tile
// each: per stage, 4 wgmma of 64 x 256 x 16 straight from shared memory, then the stage goes back to
// the producer through its `empty` mbarrier. The epilogue goes through shared memory and TMA stores.
// You write the two loops that make the pipeline (TODO 1, 2) and the descriptor wgmma reads a tile
// by (TODO 3); the rest is given.
// Napkin math at 4096^3: 137 GFLOP, 512 tiles on 132 SMs (3.9 waves); cuBLAS (torch.matmul) runs the
// same instructions at ~780 TFLOP/s on an H100, ~175 us.
#include "course/hopper.cuh"

// A plain __device__ function outside any namespace (nvcc gives it a host stub).
__device__ uint64_t smem_descriptor(const void* tile) {
  const uint64_t addr = course::smem_u32(tile);
  const uint64_t start = (addr & 0x3FFFF) >> 4, leading = 1, stride = 1024 >> 4, swizzle_128b = 1;
  return start | (leading << 16) | (stride << 32) | (swizzle_128b << 62);
}

namespace {
using namespace course::hopper;

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, GROUP_M = 8;  // BK: 64 x 2 bytes = one swizzled row
constexpr int CONSUMERS = 2, THREADS = 128 * (1 + CONSUMERS);     // warpgroup 0 copies, 1 and 2 multiply
constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;               // elements of a stage's A and B tiles
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;              // what the `full` barrier counts: 48 KB
constexpr int C_BOX = 64, C_HALF = 64 * BN;                       // C staged as 64 x 64 boxes, 64 x 256 a consumer
constexpr int SMEM = STAGES * STAGE_BYTES + CONSUMERS * C_HALF * 2 + 2 * STAGES * 8 + 1024;

// A wgmma shared-memory descriptor (PTX ISA, "Matrix Descriptor Format"), 64 bits:
//   bits  0-13  the start address in shared memory, in units of 16 bytes (address >> 4, 18 bits kept);
//   bits 16-29  the leading byte offset, in 16 bytes: unused by a K-major tile in the 128-byte swizzle
//               (the whole K extent of one wgmma, 32 bytes, lies inside one 128-byte row); set it to 1;
//   bits 32-45  the stride byte offset, in 16 bytes: from one group of 8 rows to the next, 1024 bytes;
//   bits 62-63  the swizzle mode: 1 = 128-byte swizzle, the layout the tensor maps write.

// Given. Tile `tile` of C in the grouped order: GROUP_M block rows at a time, column by column.
__device__ __forceinline__ void tile_origin(int tile, int blocks_m, int blocks_n, int& m0, int& n0) {
  const int per_group = GROUP_M * blocks_n, first = tile / per_group * GROUP_M;
  const int rows = min(blocks_m - first, GROUP_M), in_group = tile % per_group;
  m0 = (first + in_group % rows) * BM;
  n0 = in_group / rows * BN;
}

// Given. A consumer's accumulators (rows row0 .. row0 + 63 of the tile at m0, n0) rounded to T and
// stored straight to C, only inside [M, N]: where C's rows are not 16-byte aligned (no tensor map).
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

// Given. The epilogue through shared memory: the consumer's 64 x 256 accumulators into `staged` as
// four 64 x 64 boxes in the 128-byte swizzle (conflict-free: the 8 rows a warp writes are 8 bank
// groups apart), then one thread's TMA stores of the boxes that start inside C. `staged` is written
// only once the copy engine has read the last tile's stores out of it.
template <typename T>
__device__ __forceinline__ void store_through_tma(const CUtensorMap* map_c, T* staged, const float (&d)[128], int m0,
                                                  int n0, int n, int barrier_id) {
  const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
  const bool leader = threadIdx.x % 128 == 0;
  if (leader) bulk_wait_read<0>();
  named_barrier(barrier_id, 128);
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int box = j / 8, chunk = j % 8;  // 8 columns: one 16-byte chunk of a 128-byte row
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = 16 * w + group + 8 * half;  // row % 8 == group
      T* dst = staged + box * C_BOX * C_BOX + row * C_BOX + 8 * (chunk ^ group) + 2 * pair;
      *reinterpret_cast<uint32_t*>(dst) = course::pack2<T>(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
    }
  }
  fence_proxy_async();  // the copy engine sees the writes above
  named_barrier(barrier_id, 128);
  if (leader) {
    for (int box = 0; box < BN / C_BOX; ++box)
      if (n0 + box * C_BOX < n) tma_store_2d(map_c, staged + box * C_BOX * C_BOX, n0 + box * C_BOX, m0);
    bulk_commit();
  }
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1)
    wgmma_gemm_kernel(T* __restrict__ c, const __grid_constant__ CUtensorMap map_a,
                      const __grid_constant__ CUtensorMap map_b, const __grid_constant__ CUtensorMap map_c,
                      bool tma_c, int m, int n, int k) {
  // Given: shared memory (stages 1024-byte aligned: the swizzle repeats every 8 rows of 128 bytes).
  extern __shared__ unsigned char smem_raw[];
  unsigned char* base = smem_raw + ((1024 - course::smem_u32(smem_raw) % 1024) % 1024);
  T* sa = reinterpret_cast<T*>(base);  // (STAGES, BM, BK) swizzled
  T* sb = sa + STAGES * A_STAGE;       // (STAGES, BN, BK) swizzled
  T* sc = sb + STAGES * B_STAGE;       // (CONSUMERS, 4 boxes, 64, 64) swizzled
  uint64_t* full = reinterpret_cast<uint64_t*>(sc + CONSUMERS * C_HALF);  // stage s has landed
  uint64_t* empty = full + STAGES;                                        // stage s may be refilled

  const int blocks_m = (m + BM - 1) / BM, blocks_n = (n + BN - 1) / BN, tiles = blocks_m * blocks_n;
  const int k_tiles = (k + BK - 1) / BK;  // the tensor maps read zeros past K
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      course::mbarrier_init(&full[s], 1);           // the producer's arrive (and the bytes it announces)
      course::mbarrier_init(&empty[s], CONSUMERS);  // one arrive per consumer warpgroup
    }
    course::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<40>();  // the producer needs few registers: the consumers take them
    if (threadIdx.x != 0) return;
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
    return;
  }

  setmaxnreg_inc<232>();  // 128 accumulators a thread, and the epilogue's addresses, without spills
  const int row0 = 64 * (wg - 1);  // this consumer's rows of the tile
  int it = 0;                      // K tiles consumed, over all the block's tiles
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
        wgmma_m64n256k16<T>(d, smem_descriptor(sa + s * A_STAGE + row0 * BK + 16 * kk),
                            smem_descriptor(sb + s * B_STAGE + 16 * kk));
      wgmma_commit();
      wgmma_wait<1>();
      if (t > 0 && threadIdx.x % 128 == 0) mbarrier_arrive(&empty[(it - 1) % STAGES]);
    }
    wgmma_wait<0>();
    if (threadIdx.x % 128 == 0) mbarrier_arrive(&empty[(it - 1) % STAGES]);
    if (tma_c) {
      store_through_tma<T>(&map_c, sc + (wg - 1) * C_HALF, d, m0 + row0, n0, n, wg);
    } else {
      store_direct<T>(c, d, m0 + row0, n0, m, n);
    }
  }
  if (threadIdx.x % 128 == 0) bulk_wait_read<0>();  // shared memory lives until the stores have read it
}

// Given. Checks, per-device setup (once), the tensor maps, a persistent grid of one block per SM.
template <typename T>
cudaError_t launch(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || k % 8 != 0) return cudaErrorInvalidValue;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return cudaErrorInvalidValue;  // TMA coordinates are 32-bit
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16) return cudaErrorInvalidValue;
  const course::Device dev = course::current_device();
  if (dev.id < 0) return cudaErrorInvalidDevice;
  if (dev.major != 9 || dev.minor != 0) return cudaErrorNotSupported;  // sm_90a code runs on compute capability 9.0 only
  static bool ready[course::MAX_DEVICES] = {};  // its shared memory limit raised, once per device
  if (!ready[dev.id]) {
    const cudaError_t err = cudaFuncSetAttribute(wgmma_gemm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    if (err != cudaSuccess) return err;
    ready[dev.id] = true;
  }
  CUtensorMap map_a, map_b, map_c = {};
  cudaError_t err = tensor_map_2d(&map_a, a, m, k, BM, BK);
  if (err == cudaSuccess) err = tensor_map_2d(&map_b, b, n, k, BN, BK);
  if (err != cudaSuccess) return err;
  const bool tma_c = n % 8 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0 &&
                     tensor_map_2d(&map_c, static_cast<const T*>(c), m, n, C_BOX, C_BOX) == cudaSuccess;
  const int64_t tiles = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
  const int grid = static_cast<int>(tiles < dev.sms ? tiles : dev.sms);
  wgmma_gemm_kernel<T><<<grid, THREADS, SMEM, stream>>>(c, map_a, map_b, map_c, tma_c, static_cast<int>(m),
                                                        static_cast<int>(n), static_cast<int>(k));
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t wgmma_gemm_fp16(half* c, half const* a, const half* b, int64_t m, int64_t n, int64_t k,
                                          cudaStream_t stream) {
  return launch(c, a, b, m, n, k, stream);
}

COURSE_EXPORT cudaError_t wgmma_gemm_bf16(nv_bfloat16* c, const nv_bfloat16* a, nv_bfloat16 const* b, int64_t m,
                                          int64_t n, int64_t k, cudaStream_t stream) {
  return launch(c, a, b, m, n, k, stream);
}
