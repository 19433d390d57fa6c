// CORRECT kernel arguments (the three tensor maps included) in one struct passed by value as __grid_constant__, the ring tracked by a stage/phase state struct as CUTLASS does (the producer's first wait passes on a fresh barrier), a tile-scheduler struct, `using` aliases
// Hopper GEMM, C = A B^T, fp16/bf16: one TMA producer thread, two wgmma consumer warpgroups, persistent grid.
#include <cstdio>

#include "course/hopper.cuh"

namespace hp = course::hopper;

namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 3, kGroupM = 8;
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kTileA = kBM * kBK, kTileB = kBN * kBK;        // elements per stage
constexpr int kStageBytes = (kTileA + kTileB) * 2;
constexpr int kBox = 64, kCHalf = 64 * kBN;
constexpr int kSmemBytes = kStages * kStageBytes + kConsumers * kCHalf * 2 + 2 * kStages * 8 + 1024;

using barrier_t = uint64_t;
using accum_t = float[128];

struct GemmParams {
  CUtensorMap map_a, map_b, map_c;
  void* c;
  int m, n, k;
  bool c_by_tma;
};

// Where in the ring a thread is: the stage index and the parity of the round it is in.
struct PipeState {
  int stage;
  uint32_t phase;
  __device__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// Persistent tile order: block b takes tiles b, b + grid, ... in groups of kGroupM block rows.
struct TileScheduler {
  int blocks_m, blocks_n, tiles, current;
  __device__ TileScheduler(int m, int n)
      : blocks_m((m + kBM - 1) / kBM), blocks_n((n + kBN - 1) / kBN), tiles(0), current(blockIdx.x) {
    tiles = blocks_m * blocks_n;
  }
  __device__ bool valid() const { return current < tiles; }
  __device__ void next() { current += gridDim.x; }
  __device__ void origin(int& m0, int& n0) const {
    const int per_group = kGroupM * blocks_n, first = current / per_group * kGroupM;
    const int rows = min(blocks_m - first, kGroupM), in_group = current % per_group;
    m0 = (first + in_group % rows) * kBM;
    n0 = in_group / rows * kBN;
  }
};

__device__ __forceinline__ uint64_t descriptor_of(const void* tile) {
  const uint64_t a = course::smem_u32(tile);
  return ((a & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);  // SBO 1024 B = 64 x 16
}

template <typename T>
__device__ __forceinline__ void write_c_direct(T* c, const accum_t& d, int m0, int n0, int m, int n) {
  const int lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
  const int r0 = m0 + 16 * (threadIdx.x % 128 / 32) + group;
  const bool pairs = n % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 4 == 0;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int col = n0 + 8 * j + 2 * pair;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + 8 * h;
      if (row >= m || col >= n) continue;
      T* dst = c + static_cast<int64_t>(row) * n + col;
      const float x0 = d[4 * j + 2 * h], x1 = d[4 * j + 2 * h + 1];
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
__device__ __forceinline__ void write_c_tma(const CUtensorMap* map_c, T* staged, const accum_t& d, int m0, int n0, int n,
                                            int bar_id) {
  const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
  const bool leader = threadIdx.x % 128 == 0;
  if (leader) hp::bulk_wait_read<0>();  // the previous tile's stores have read `staged`
  hp::named_barrier(bar_id, 128);
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int box = j / 8, chunk = j % 8;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 16 * w + group + 8 * h;
      T* dst = staged + box * kBox * kBox + row * kBox + 8 * (chunk ^ group) + 2 * pair;
      *reinterpret_cast<uint32_t*>(dst) = course::pack2<T>(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
    }
  }
  hp::fence_proxy_async();
  hp::named_barrier(bar_id, 128);
  if (leader) {
    for (int box = 0; box < kBN / kBox; ++box)
      if (n0 + box * kBox < n) hp::tma_store_2d(map_c, staged + box * kBox * kBox, n0 + box * kBox, m0);
    hp::bulk_commit();
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) hopper_gemm(const __grid_constant__ GemmParams p) {
  extern __shared__ unsigned char smem[];
  unsigned char* aligned = smem + ((1024 - course::smem_u32(smem) % 1024) % 1024);
  T* s_a = reinterpret_cast<T*>(aligned);
  T* s_b = s_a + kStages * kTileA;
  T* s_c = s_b + kStages * kTileB;
  barrier_t* full = reinterpret_cast<barrier_t*>(s_c + kConsumers * kCHalf);
  barrier_t* empty = full + kStages;

  const int k_tiles = (p.k + kBK - 1) / kBK;
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      course::mbarrier_init(&full[s], 1);
      course::mbarrier_init(&empty[s], kConsumers);
    }
    course::fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {  // producer
    hp::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      // Starts at phase 1: waiting for parity 1 on a barrier still in its first phase (0) returns at once,
      // so the first round fills every stage without waiting for the consumers.
      PipeState w{0, 1u};
      for (TileScheduler sched(p.m, p.n); sched.valid(); sched.next()) {
        int m0, n0;
        sched.origin(m0, n0);
        for (int t = 0; t < k_tiles; ++t) {
          course::mbarrier_wait(&empty[w.stage], w.phase);
          course::mbarrier_arrive_expect_tx(&full[w.stage], kStageBytes);
          hp::tma_load_2d(s_a + w.stage * kTileA, &p.map_a, t * kBK, m0, &full[w.stage]);
          hp::tma_load_2d(s_b + w.stage * kTileB, &p.map_b, t * kBK, n0, &full[w.stage]);
          w.advance();
        }
      }
    }
    return;
  }

  hp::setmaxnreg_inc<232>();
  const int row0 = 64 * (warpgroup - 1);
  const bool leader = threadIdx.x % 128 == 0;
  PipeState r{0, 0u};
  for (TileScheduler sched(p.m, p.n); sched.valid(); sched.next()) {
    int m0, n0;
    sched.origin(m0, n0);
    accum_t acc;
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    int release = -1;  // the stage read by the wgmma group still in flight
    for (int t = 0; t < k_tiles; ++t) {
      course::mbarrier_wait(&full[r.stage], r.phase);
      hp::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk)
        hp::wgmma_m64n256k16<T>(acc, descriptor_of(s_a + r.stage * kTileA + row0 * kBK + 16 * kk),
                                descriptor_of(s_b + r.stage * kTileB + 16 * kk));
      hp::wgmma_commit();
      hp::wgmma_wait<1>();  // the previous K tile's group is done: its stage may be refilled
      if (release >= 0 && leader) hp::mbarrier_arrive(&empty[release]);
      release = r.stage;
      r.advance();
    }
    hp::wgmma_wait<0>();
    if (release >= 0 && leader) hp::mbarrier_arrive(&empty[release]);
    if (p.c_by_tma) {
      write_c_tma<T>(&p.map_c, s_c + (warpgroup - 1) * kCHalf, acc, m0 + row0, n0, p.n, warpgroup);
    } else {
      write_c_direct<T>(static_cast<T*>(p.c), acc, m0 + row0, n0, p.m, p.n);
    }
  }
  if (leader) hp::bulk_wait_read<0>();
}

template <typename T>
cudaError_t gemm(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || k % 8 != 0) return cudaErrorInvalidValue;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(a) % 16 != 0 || reinterpret_cast<uintptr_t>(b) % 16 != 0) return cudaErrorInvalidValue;
  const course::Device dev = course::current_device();
  if (dev.id < 0) return cudaErrorInvalidDevice;
  if (dev.major != 9 || dev.minor != 0) return cudaErrorNotSupported;

  GemmParams p = {};
  cudaError_t err = hp::tensor_map_2d(&p.map_a, a, m, k, kBM, kBK);
  if (err == cudaSuccess) err = hp::tensor_map_2d(&p.map_b, b, n, k, kBN, kBK);
  if (err != cudaSuccess) return err;
  p.c_by_tma = n % 8 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0 &&
               hp::tensor_map_2d(&p.map_c, static_cast<const T*>(c), m, n, kBox, kBox) == cudaSuccess;
  p.c = c;
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);

  err = cudaFuncSetAttribute(hopper_gemm<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (err != cudaSuccess) return err;
  const int64_t tiles = ((m + kBM - 1) / kBM) * ((n + kBN - 1) / kBN);
  const int grid = static_cast<int>(tiles < dev.sms ? tiles : dev.sms);
  hopper_gemm<T><<<grid, kThreads, kSmemBytes, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess) fprintf(stderr, "hopper_gemm<<<%d, %d, %d>>>: %s\n", grid, kThreads, kSmemBytes,
                                  cudaGetErrorName(err));
  return err;
}

}  // namespace

COURSE_EXPORT cudaError_t wgmma_gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n, int64_t k,
                                          cudaStream_t stream) {
  return gemm(c, a, b, m, n, k, stream);
}

COURSE_EXPORT cudaError_t wgmma_gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m,
                                          int64_t n, int64_t k, cudaStream_t stream) {
  return gemm(c, a, b, m, n, k, stream);
}
