// CORRECT the grouped raster as a struct with __host__ __device__ members shared by launcher and kernel, static_asserts on the tiling
// Day 9 exercise: a first full tensor-core GEMM, C = A B^T, with ldmatrix and mma.sync.
//
//   a  [M, K]  fp16 or bf16, row-major (a token's activations)
//   b  [N, K]  fp16 or bf16, row-major: a weight as nn.Linear stores it, so C = A B^T = x W^T.
//              Its rows are B^T's columns, k contiguous: exactly the "col" operand of mma.sync,
//              loaded by ldmatrix without .trans.
//   c  [M, N]  the same type, fp32 accumulation rounded once at the store
//
// Any M, N, K >= 1 (zeros fill the tiles past the edges) and any pointers: 16-byte loads when K
// is a multiple of 8 and a, b are 16-byte aligned, element loads otherwise (the same kernel).
// A block computes a 128 x 128 tile of C with 8 warps, each 64 x 32 (4 x 4 mma tiles of 16 x 8);
// K advances 32 at a time through one shared buffer per operand. Shared rows are XOR-swizzled so
// that ldmatrix and the 16-byte stores are free of bank conflicts. No cp.async and no multi-stage
// shared ring (Day 10): the only overlap is that the next K tile's global loads are issued into
// registers before this tile's math, so they are in flight while the tensor cores work.
// Napkin math at 4096^3: 2 x 4096^3 = 137 GFLOP. mma.sync peaks near ~636 TFLOP/s on an H200 and
// cuBLAS (wgmma) near ~780: each 0.1x of torch.matmul is ~78 TFLOP/s, ~1.8 ms at 4096^3.
// Each K tile brings 16 KB into a block for 1 MFLOP: 64 flops per byte of shared-memory fill.
// Target (grader/exercises/day09.py): see the spec.
#include "course/mma.cuh"

namespace {

constexpr int BM = 128, BN = 128, BK = 32;  // block tile of C, and the K step
constexpr int WARPS_M = 2, WARPS_N = 4;     // 8 warps
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // 64 x 32 of C per warp
constexpr int MT = WM / 16, NT = WN / 8;    // 4 x 4 mma tiles (16 x 8) per warp
static_assert(WM % 16 == 0 && WN % 16 == 0, "a warp's tile is whole A x4 and B x4 ldmatrix blocks");
constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int CHUNKS = BK / 8;              // 16-byte chunks per staged row (4: 64-byte rows)
constexpr int LOADS = BM * CHUNKS / THREADS;  // chunks of A (and of B) per thread per K tile: 2
constexpr int GROUP_M = 8;                  // block rows walked together (L2 reuse, see below)
static_assert(BM == BN && BM * CHUNKS % THREADS == 0, "A and B tiles are loaded by the same loop");

// The grid's raster, shared by the launcher (how many blocks) and the kernel (where block b sits):
// consecutive blocks walk GROUP_M block rows down one block column before moving right, so the
// blocks running at once share A and B panels in L2.
struct Raster {
  int blocks_m, blocks_n;
  __host__ __device__ Raster(int64_t m, int64_t n)
      : blocks_m(static_cast<int>((m + BM - 1) / BM)), blocks_n(static_cast<int>((n + BN - 1) / BN)) {}
  __host__ __device__ int64_t blocks() const { return static_cast<int64_t>(blocks_m) * blocks_n; }
  __device__ void origin(int block, int64_t& m0, int64_t& n0) const {
    const int per_group = GROUP_M * blocks_n, group_first = block / per_group * GROUP_M;
    const int group_rows = min(blocks_m - group_first, GROUP_M);
    const int in_group = block % per_group;  // (column, row) within the group
    m0 = static_cast<int64_t>(group_first + in_group % group_rows) * BM;
    n0 = static_cast<int64_t>(in_group / group_rows) * BN;
  }
};

// 16-byte slot of chunk `chunk` of row `row` in a staged [rows][32] tile. Rows are 64 bytes, so
// two rows share one 128-byte line of the 32 banks. ldmatrix reads one chunk of 8 consecutive
// rows: unswizzled, rows 0, 2, 4, 6 would hit the same 4 banks (a 4-way conflict). XOR-ing the
// chunk with (row / 2) % 4 puts the 8 rows in 8 different groups of 4 banks.
__device__ __forceinline__ int slot(int row, int chunk) { return row * CHUNKS + (chunk ^ ((row >> 1) & 3)); }

// Chunk `i` of this thread's share of a K tile: row (of A or B) and 16-byte chunk within BK.
__device__ __forceinline__ int load_row(int i) { return (static_cast<int>(threadIdx.x) + i * THREADS) / CHUNKS; }
__device__ __forceinline__ int load_chunk(int i) { return (static_cast<int>(threadIdx.x) + i * THREADS) % CHUNKS; }

// Eight elements of row `row` (of `rows`) of a row-major [rows, k] matrix from column `col`, as
// 16 bytes; zeros past the matrix. VEC: one 16-byte load (k % 8 == 0, aligned base pointer).
template <typename T, bool VEC>
__device__ __forceinline__ uint4 load_chunk8(const T* __restrict__ m, int64_t row, int64_t rows, int64_t col,
                                             int64_t k) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (row >= rows) return v;
  const T* p = m + row * k + col;
  if constexpr (VEC) {
    if (col < k) v = *reinterpret_cast<const uint4*>(p);
  } else {
    T e[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) e[j] = col + j < k ? p[j] : course::from_float<T>(0.0f);
    v = make_uint4(course::bits16(e[0]) | course::bits16(e[1]) << 16, course::bits16(e[2]) | course::bits16(e[3]) << 16,
                   course::bits16(e[4]) | course::bits16(e[5]) << 16, course::bits16(e[6]) | course::bits16(e[7]) << 16);
  }
  return v;
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(THREADS, 2)
    tensor_core_gemm_kernel(T* __restrict__ c, const T* __restrict__ a, const T* __restrict__ b, int64_t m, int64_t n,
                            int64_t k, bool pair_stores) {
  __shared__ __align__(128) uint4 a_s[BM * CHUNKS];  // (BM, BK) swizzled: 8 KB
  __shared__ __align__(128) uint4 b_s[BN * CHUNKS];  // (BN, BK) swizzled: 8 KB
  int64_t m0, n0;
  Raster(m, n).origin(static_cast<int>(blockIdx.x), m0, n0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;  // this warp's 64 x 32 within the tile

  float acc[MT][NT][4] = {};  // (MT, NT, 4): this warp's 64 x 32 of C in mma C fragments
  uint4 a_next[LOADS], b_next[LOADS];  // the next K tile, on its way from global memory

  auto load_tile = [&](int64_t k0) {
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int64_t col = k0 + load_chunk(i) * 8;
      a_next[i] = load_chunk8<T, VEC>(a, m0 + load_row(i), m, col, k);
      b_next[i] = load_chunk8<T, VEC>(b, n0 + load_row(i), n, col, k);
    }
  };

  load_tile(0);
  for (int64_t k0 = 0; k0 < k; k0 += BK) {
    // 1. The registers loaded during the previous tile's math go to shared memory.
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      a_s[slot(load_row(i), load_chunk(i))] = a_next[i];
      b_s[slot(load_row(i), load_chunk(i))] = b_next[i];
    }
    __syncthreads();  // every chunk stored before any warp's ldmatrix reads it
    if (k0 + BK < k) load_tile(k0 + BK);  // in flight while the tensor cores work below

    // 2. Two 16-wide steps of k: 4 ldmatrix.x4 for A, 2 for B, 16 mma per step.
#pragma unroll
    for (int step = 0; step < BK / 16; ++step) {
      uint32_t af[MT][4], bf[NT / 2][4];
#pragma unroll
      for (int i = 0; i < MT; ++i)  // tiles (rows 0-7 | 8-15) x (k 0-7 | 8-15) = a[0..3]
        course::ldmatrix_x4(af[i], &a_s[slot(wm + 16 * i + lane % 16, 2 * step + lane / 16)]);
#pragma unroll
      for (int j = 0; j < NT / 2; ++j)  // tiles (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
        course::ldmatrix_x4(bf[j], &b_s[slot(wn + 16 * j + lane % 8 + lane / 16 * 8, 2 * step + lane / 8 % 2)]);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const uint32_t bt[2] = {bf[t / 2][t % 2 * 2], bf[t / 2][t % 2 * 2 + 1]};
          course::mma_m16n8k16<T>(acc[i][t], af[i], bt);
        }
      }
    }
    __syncthreads();  // every warp is done reading before the next tile is stored
  }

  // 3. acc[i][t][0..1]: row group, columns 2 pair, 2 pair + 1 of mma tile (i, t); [2..3]: row group + 8.
  const int group = lane / 4, pair = lane % 4;
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int64_t col = n0 + wn + 8 * t + 2 * pair;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = m0 + wm + 16 * i + group + 8 * half;
        if (row >= m) continue;
        const float lo = acc[i][t][2 * half], hi = acc[i][t][2 * half + 1];
        T* dst = c + row * n + col;
        if (pair_stores && col + 1 < n) {  // both in bounds, 4-byte aligned: one 32-bit store
          *reinterpret_cast<uint32_t*>(dst) = course::pack2<T>(lo, hi);
        } else {
          if (col < n) dst[0] = course::from_float<T>(lo);
          if (col + 1 < n) dst[1] = course::from_float<T>(hi);
        }
      }
    }
  }
}

template <typename T>
cudaError_t launch_gemm(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  const int64_t blocks = Raster(m, n).blocks();
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  // 16-byte loads need every row start 16-byte aligned: K a multiple of 8, aligned bases.
  const bool vec = k % 8 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  const bool pair_stores = n % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 4 == 0;
  const unsigned grid = static_cast<unsigned>(blocks);
  if (vec) {
    tensor_core_gemm_kernel<T, true><<<grid, THREADS, 0, stream>>>(c, a, b, m, n, k, pair_stores);
  } else {
    tensor_core_gemm_kernel<T, false><<<grid, THREADS, 0, stream>>>(c, a, b, m, n, k, pair_stores);
  }
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t tensor_core_gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n,
                                                int64_t k, cudaStream_t stream) {
  return launch_gemm(c, a, b, m, n, k, stream);
}

COURSE_EXPORT cudaError_t tensor_core_gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  return launch_gemm(c, a, b, m, n, k, stream);
}
