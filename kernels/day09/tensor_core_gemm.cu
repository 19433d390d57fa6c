// Your exercise: fill in the TODOs (about 60 lines). Generated from solutions/day09/tensor_core_gemm.cu by `grader release` (stub-hash dd60050c2432).
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
// Target (grader/exercises/day09.py): >= 0.30x torch.matmul (cuBLAS) (TFLOP/s).
#include "course/mma.cuh"

namespace {

constexpr int BM = 128, BN = 128, BK = 32;  // block tile of C, and the K step
constexpr int WARPS_M = 2, WARPS_N = 4;     // 8 warps
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // 64 x 32 of C per warp
constexpr int MT = WM / 16, NT = WN / 8;    // 4 x 4 mma tiles (16 x 8) per warp
constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int CHUNKS = BK / 8;              // 16-byte chunks per staged row (4: 64-byte rows)
constexpr int LOADS = BM * CHUNKS / THREADS;  // chunks of A (and of B) per thread per K tile: 2
constexpr int GROUP_M = 8;                  // block rows walked together (L2 reuse, see below)

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
  // Grouped order: consecutive blocks walk GROUP_M block rows down one block column before
  // moving right, so the blocks running at once share A and B panels in L2.
  const int blocks_m = static_cast<int>(course::ceil_div<int64_t>(m, BM));
  const int blocks_n = static_cast<int>(course::ceil_div<int64_t>(n, BN));
  const int per_group = GROUP_M * blocks_n, group_first = static_cast<int>(blockIdx.x) / per_group * GROUP_M;
  const int group_rows = min(blocks_m - group_first, GROUP_M);
  const int in_group = static_cast<int>(blockIdx.x) % per_group;  // (column, row) within the group
  const int64_t m0 = static_cast<int64_t>(group_first + in_group % group_rows) * BM;
  const int64_t n0 = static_cast<int64_t>(in_group / group_rows) * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;  // this warp's 64 x 32 within the tile

  // TODO: C[m0:m0+128, n0:n0+128] = A B^T for this block, fp32 accumulation, rounded once.
  // 1. For each K tile k0 = 0, 32, ... (the last one may run past k: load_chunk8 gives zeros),
  //    the block's 256 threads copy A rows m0..m0+127 and B rows n0..n0+127, columns
  //    k0..k0+31, into a_s / b_s: LOADS chunks each (load_row, load_chunk), at slot(row, chunk).
  //    Load them into registers one tile ahead (uint4 a_next[LOADS], b_next[LOADS]: tile 0 before
  //    the loop, tile t + 1 right after tile t's stores and barrier, in flight during the math).
  //    __syncthreads() before any ldmatrix, and again before the next tile overwrites them.
  // 2. Per 16-wide step: course::ldmatrix_x4 of this warp's 4 A tiles (rows wm + 16 i + lane % 16,
  //    chunk 2 step + lane / 16) and 2 x4 loads of B covering 32 n (which lanes give which rows
  //    and chunks? see course/mma.cuh); 16 course::mma_m16n8k16<T> into float acc[MT][NT][4].
  // 3. Store acc rounded to T, only inside [m, n] (course/mma.cuh: which lane holds which element;
  //    course::pack2 writes two neighbours at once when pair_stores allows).
}

template <typename T>
cudaError_t launch_gemm(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  const int64_t blocks = course::ceil_div<int64_t>(m, BM) * course::ceil_div<int64_t>(n, BN);
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
