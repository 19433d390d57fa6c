// CORRECT the learner's own ldmatrix / mma.sync inline PTX and the swizzle, block origin and chunk loads as plain __device__ functions at file scope (not static, not inline), `using` aliases for the fragments, a __device__ function instead of the lambda for the register prefetch
// Day 9, tensor_core_gemm: C = A B^T on the tensor cores, 128 x 128 block tiles of 8 warps (64 x 32
// each), K steps of 32 staged through XOR-swizzled shared memory, the next K step prefetched into
// registers while the tensor cores work on this one.
#include <cstdint>
#include <type_traits>

#include "course/common.cuh"

namespace cfg {
constexpr int BM = 128, BN = 128, BK = 32;
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = WARPS_M * WARPS_N * 32;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // 64 x 32
constexpr int MT = WM / 16, NT = WN / 8;             // 4 x 4 mma tiles
constexpr int CHUNKS = BK / 8;                       // 16-byte chunks per staged row
constexpr int LOADS = BM * CHUNKS / THREADS;         // 2 chunks of A and of B per thread
constexpr int GROUP = 8;                             // block rows per raster group
}  // namespace cfg

using AFrag = uint32_t[4];
using BFrag = uint32_t[2];
using Acc = float[4];

// ---- helpers (mine) ------------------------------------------------------------------------------

// chunk `chunk` of row `row` of a [rows][BK] tile: 64-byte rows, chunk XOR (row / 2) % 4 so that the 8
// rows of one ldmatrix tile land in 8 different bank groups
__device__ int swizzled(int row, int chunk) { return row * cfg::CHUNKS + (chunk ^ ((row >> 1) & 3)); }

__device__ uint32_t cvta_shared(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ void ldmatrix4(AFrag& r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(cvta_shared(p))
               : "memory");
}

__device__ void mma16816(Acc& d, const AFrag& a, const BFrag& b, __half) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ void mma16816(Acc& d, const AFrag& a, const BFrag& b, __nv_bfloat16) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ uint32_t raw16(__half x) { return __half_as_ushort(x); }
__device__ uint32_t raw16(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
__device__ __half cast_to(float x, __half) { return __float2half_rn(x); }
__device__ __nv_bfloat16 cast_to(float x, __nv_bfloat16) { return __float2bfloat16_rn(x); }

// grouped raster: GROUP block rows walked column by column; the last group may be shorter
__device__ int2 block_origin(int64_t m, int64_t n) {
  const int rows = static_cast<int>((m + cfg::BM - 1) / cfg::BM);
  const int cols = static_cast<int>((n + cfg::BN - 1) / cfg::BN);
  const int id = static_cast<int>(blockIdx.x);
  const int per_group = cfg::GROUP * cols;
  const int first_row = id / per_group * cfg::GROUP;
  const int height = min(rows - first_row, cfg::GROUP);
  const int within = id % per_group;
  return make_int2(first_row + within % height, within / height);  // (block row, block column)
}

// eight elements of row `row` of [rows, k] from column `col` as 16 bytes, zeros past the edges
template <typename T, bool VEC>
__device__ uint4 fetch8(const T* __restrict__ src, int64_t row, int64_t rows, int64_t col, int64_t k) {
  if (row >= rows) return make_uint4(0, 0, 0, 0);
  const T* p = src + row * k + col;
  if constexpr (VEC) {
    return col < k ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = col + 2 * j < k ? raw16(p[2 * j]) : 0u;
      const uint32_t hi = col + 2 * j + 1 < k ? raw16(p[2 * j + 1]) : 0u;
      w[j] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <typename T, bool VEC>
__device__ void prefetch(uint4 (&a_regs)[cfg::LOADS], uint4 (&b_regs)[cfg::LOADS], const T* a, const T* b,
                         int64_t m0, int64_t n0, int64_t m, int64_t n, int64_t k, int64_t k0) {
#pragma unroll
  for (int i = 0; i < cfg::LOADS; ++i) {
    const int v = static_cast<int>(threadIdx.x) + i * cfg::THREADS;
    const int row = v / cfg::CHUNKS, chunk = v % cfg::CHUNKS;
    a_regs[i] = fetch8<T, VEC>(a, m0 + row, m, k0 + chunk * 8, k);
    b_regs[i] = fetch8<T, VEC>(b, n0 + row, n, k0 + chunk * 8, k);
  }
}

// ---- kernel --------------------------------------------------------------------------------------

template <typename T, bool VEC>
__global__ void __launch_bounds__(cfg::THREADS, 2)
    tc_gemm(T* __restrict__ c, const T* __restrict__ a, const T* __restrict__ b, int64_t m, int64_t n, int64_t k,
            bool two_at_once) {
  using namespace cfg;
  __shared__ __align__(128) uint4 sa[BM * CHUNKS];
  __shared__ __align__(128) uint4 sb[BN * CHUNKS];

  const int2 blk = block_origin(m, n);
  const int64_t m0 = static_cast<int64_t>(blk.x) * BM, n0 = static_cast<int64_t>(blk.y) * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;

  Acc acc[MT][NT];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  uint4 ra[LOADS], rb[LOADS];
  prefetch<T, VEC>(ra, rb, a, b, m0, n0, m, n, k, 0);

  for (int64_t k0 = 0; k0 < k; k0 += BK) {
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int v = static_cast<int>(threadIdx.x) + i * THREADS;
      sa[swizzled(v / CHUNKS, v % CHUNKS)] = ra[i];
      sb[swizzled(v / CHUNKS, v % CHUNKS)] = rb[i];
    }
    __syncthreads();
    if (k0 + BK < k) prefetch<T, VEC>(ra, rb, a, b, m0, n0, m, n, k, k0 + BK);

#pragma unroll
    for (int half_k = 0; half_k < 2; ++half_k) {
      AFrag fa[MT];
      AFrag fb[NT / 2];
#pragma unroll
      for (int i = 0; i < MT; ++i) ldmatrix4(fa[i], &sa[swizzled(wm + 16 * i + lane % 16, 2 * half_k + lane / 16)]);
#pragma unroll
      for (int j = 0; j < NT / 2; ++j)
        ldmatrix4(fb[j], &sb[swizzled(wn + 16 * j + lane % 8 + (lane / 16) * 8, 2 * half_k + (lane / 8) % 2)]);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const BFrag bt = {fb[t / 2][(t % 2) * 2], fb[t / 2][(t % 2) * 2 + 1]};
          mma16816(acc[i][t], fa[i], bt, T{});
        }
    }
    __syncthreads();
  }

  const int qrow = lane / 4, qcol = 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int64_t col = n0 + wn + 8 * t + qcol;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + wm + 16 * i + qrow + 8 * h;
        if (row >= m) continue;
        T* out = c + row * n + col;
        const T lo = cast_to(acc[i][t][2 * h], T{}), hi = cast_to(acc[i][t][2 * h + 1], T{});
        if (two_at_once && col + 1 < n) {
          *reinterpret_cast<uint32_t*>(out) = raw16(lo) | (raw16(hi) << 16);
        } else {
          if (col < n) out[0] = lo;
          if (col + 1 < n) out[1] = hi;
        }
      }
    }
}

namespace {

template <typename T>
cudaError_t gemm(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  const int64_t blocks = ((m + cfg::BM - 1) / cfg::BM) * ((n + cfg::BN - 1) / cfg::BN);
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  const bool vec = k % 8 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  const bool pairs = n % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 4 == 0;
  const dim3 grid(static_cast<unsigned>(blocks));
  if (vec)
    tc_gemm<T, true><<<grid, cfg::THREADS, 0, stream>>>(c, a, b, m, n, k, pairs);
  else
    tc_gemm<T, false><<<grid, cfg::THREADS, 0, stream>>>(c, a, b, m, n, k, pairs);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t tensor_core_gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n,
                                                int64_t k, cudaStream_t stream) {
  return gemm(c, a, b, m, n, k, stream);
}

COURSE_EXPORT cudaError_t tensor_core_gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  return gemm(c, a, b, m, n, k, stream);
}
