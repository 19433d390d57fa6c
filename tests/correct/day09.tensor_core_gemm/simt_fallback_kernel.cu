// CORRECT the tensor-core kernel only for 16-byte-loadable A and B, a separate plain CUDA-core kernel (shared-memory tiles, element loads, no HMMA or LDSM) for K % 8 != 0 or misaligned a / b, a struct of kernel arguments, fprintf(stderr) on a launch error
// Day 9, tensor_core_gemm. The fast path is the ldmatrix + mma.sync kernel from the notebook; inputs it
// cannot load 16 bytes at a time go to a simple tiled kernel on the CUDA cores instead.
#include <cstdio>

#include "course/mma.cuh"

namespace {

constexpr int BM = 128, BN = 128, BK = 32;
constexpr int WARPS_M = 2, WARPS_N = 4;
constexpr int NTHREADS = WARPS_M * WARPS_N * 32;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
constexpr int MT = WM / 16, NT = WN / 8;
constexpr int CPR = BK / 8;                 // 16-byte chunks per row of a staged tile
constexpr int PER_THREAD = BM * CPR / NTHREADS;
constexpr int GROUP_M = 8;

template <typename T>
struct GemmArgs {
  T* c;
  const T* a;
  const T* b;
  int64_t m, n, k;
  bool pair_stores;  // n even and c 4-byte aligned
};

__device__ __forceinline__ int swz(int row, int chunk) { return row * CPR + (chunk ^ ((row >> 1) & 3)); }

// A and B rows 16-byte aligned (k % 8 == 0, aligned bases): every chunk is all in or all out of a row.
template <typename T>
__device__ __forceinline__ uint4 load16(const T* __restrict__ base, int64_t row, int64_t rows, int64_t col, int64_t k) {
  if (row < rows && col < k) return *reinterpret_cast<const uint4*>(base + row * k + col);
  return make_uint4(0u, 0u, 0u, 0u);
}

template <typename T>
__global__ void __launch_bounds__(NTHREADS, 2) gemm_tc(const GemmArgs<T> p) {
  __shared__ __align__(128) uint4 as[BM * CPR];
  __shared__ __align__(128) uint4 bs[BN * CPR];
  const int bm = static_cast<int>((p.m + BM - 1) / BM), bn = static_cast<int>((p.n + BN - 1) / BN);
  const int span = GROUP_M * bn;
  const int g0 = static_cast<int>(blockIdx.x) / span * GROUP_M;
  const int rows_here = min(GROUP_M, bm - g0);
  const int idx = static_cast<int>(blockIdx.x) % span;
  const int64_t m0 = static_cast<int64_t>(g0 + idx % rows_here) * BM;
  const int64_t n0 = static_cast<int64_t>(idx / rows_here) * BN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;

  float acc[MT][NT][4] = {};
  uint4 na[PER_THREAD], nb[PER_THREAD];
  int srow[PER_THREAD], schunk[PER_THREAD];
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    srow[i] = (threadIdx.x + i * NTHREADS) / CPR;
    schunk[i] = (threadIdx.x + i * NTHREADS) % CPR;
    na[i] = load16(p.a, m0 + srow[i], p.m, schunk[i] * 8, p.k);
    nb[i] = load16(p.b, n0 + srow[i], p.n, schunk[i] * 8, p.k);
  }

  for (int64_t k0 = 0; k0 < p.k; k0 += BK) {
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      as[swz(srow[i], schunk[i])] = na[i];
      bs[swz(srow[i], schunk[i])] = nb[i];
    }
    __syncthreads();
    if (k0 + BK < p.k) {  // next step's loads in flight during this step's math
#pragma unroll
      for (int i = 0; i < PER_THREAD; ++i) {
        na[i] = load16(p.a, m0 + srow[i], p.m, k0 + BK + schunk[i] * 8, p.k);
        nb[i] = load16(p.b, n0 + srow[i], p.n, k0 + BK + schunk[i] * 8, p.k);
      }
    }
#pragma unroll
    for (int s = 0; s < BK / 16; ++s) {
      uint32_t fa[MT][4], fb[NT / 2][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) course::ldmatrix_x4(fa[i], &as[swz(wm + 16 * i + (lane & 15), 2 * s + (lane >> 4))]);
#pragma unroll
      for (int j = 0; j < NT / 2; ++j)
        course::ldmatrix_x4(fb[j], &bs[swz(wn + 16 * j + (lane & 7) + (lane >> 4) * 8, 2 * s + ((lane >> 3) & 1))]);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const uint32_t bt[2] = {fb[t >> 1][(t & 1) * 2], fb[t >> 1][(t & 1) * 2 + 1]};
          course::mma_m16n8k16<T>(acc[i][t], fa[i], bt);
        }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = m0 + wm + 16 * i + (lane >> 2) + 8 * h;
        const int64_t col = n0 + wn + 8 * t + 2 * (lane & 3);
        if (row >= p.m) continue;
        T* dst = p.c + row * p.n + col;
        if (p.pair_stores && col + 1 < p.n) {
          *reinterpret_cast<uint32_t*>(dst) = course::pack2<T>(acc[i][t][2 * h], acc[i][t][2 * h + 1]);
        } else {
          if (col < p.n) dst[0] = course::from_float<T>(acc[i][t][2 * h]);
          if (col + 1 < p.n) dst[1] = course::from_float<T>(acc[i][t][2 * h + 1]);
        }
      }
}

// The slow path: 32 x 32 tiles of C, 16 x 16 threads with 2 x 2 outputs each, fp32 in shared memory.
constexpr int ST = 32, SK = 32;

template <typename T>
__global__ void __launch_bounds__(256) gemm_simt(const GemmArgs<T> p) {
  __shared__ float at[ST][SK + 1];  // [m][k]
  __shared__ float bt[ST][SK + 1];  // [n][k]
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * ST, n0 = static_cast<int64_t>(blockIdx.x) * ST;
  float sum[2][2] = {};
  for (int64_t k0 = 0; k0 < p.k; k0 += SK) {
    for (int v = threadIdx.x; v < ST * SK; v += 256) {
      const int r = v / SK, kk = v % SK;
      const int64_t gk = k0 + kk;
      at[r][kk] = (m0 + r < p.m && gk < p.k) ? course::to_float(p.a[(m0 + r) * p.k + gk]) : 0.0f;
      bt[r][kk] = (n0 + r < p.n && gk < p.k) ? course::to_float(p.b[(n0 + r) * p.k + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < SK; ++kk) {
      const float a0 = at[ty][kk], a1 = at[ty + 16][kk];
      const float b0 = bt[tx][kk], b1 = bt[tx + 16][kk];
      sum[0][0] = fmaf(a0, b0, sum[0][0]);
      sum[0][1] = fmaf(a0, b1, sum[0][1]);
      sum[1][0] = fmaf(a1, b0, sum[1][0]);
      sum[1][1] = fmaf(a1, b1, sum[1][1]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
      if (row < p.m && col < p.n) p.c[row * p.n + col] = course::from_float<T>(sum[i][j]);
    }
}

template <typename T>
cudaError_t run_gemm(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  const GemmArgs<T> args{c, a, b, m, n, k, n % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 4 == 0};
  const bool fast = k % 8 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  if (fast) {
    const int64_t blocks = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
    if (blocks > INT32_MAX) return cudaErrorInvalidValue;
    gemm_tc<T><<<static_cast<unsigned>(blocks), NTHREADS, 0, stream>>>(args);
  } else {
    const int64_t gx = (n + ST - 1) / ST, gy = (m + ST - 1) / ST;
    if (gx > INT32_MAX || gy > 65535) return cudaErrorInvalidValue;
    gemm_simt<T><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), 256, 0, stream>>>(args);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fprintf(stderr, "tensor_core_gemm (%s path): launch failed: %s\n", fast ? "tensor-core" : "simt",
            cudaGetErrorString(err));
  return err;
}

}  // namespace

COURSE_EXPORT cudaError_t tensor_core_gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n,
                                                int64_t k, cudaStream_t stream) {
  return run_gemm(c, a, b, m, n, k, stream);
}

COURSE_EXPORT cudaError_t tensor_core_gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  return run_gemm(c, a, b, m, n, k, stream);
}
