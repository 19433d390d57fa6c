// CORRECT one warp per row (4 rows per block, shuffles only, no shared memory or block barrier) for rows of up to 2048, a block per row with a hand-written shared-memory reduction up to 16384 (64 threads up to 4096, 256 beyond), a separate two-pass element kernel for the rest; the e4m3 convert, warp max and division as plain __device__ functions at file scope
// Day 10, fp8_quantize: scales[m] = max(max|x[m, :]| / 448, 1 / (448 * 512)), q[m, k] = e4m3(x[m, k] / scales[m]).
// Short rows (up to 2048: 32 registers of data per lane; twice that costs occupancy, and the block
// kernel takes over) fit in the registers of one warp, so a warp reads its row once with 16-byte loads,
// reduces |max| with shuffles and converts from registers.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "course/common.cuh"

// ---- helpers ---------------------------------------------------------------------------------------

// two floats to two e4m3 bytes (round to nearest even, saturating); `lo` ends up in the low byte
__device__ uint16_t cvt_e4m3x2(float lo, float hi) {
  uint16_t out;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(out) : "f"(hi), "f"(lo));
  return out;
}

__device__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// x / s rounded exactly like IEEE division, given r = 1/s rounded (__frcp_rn): one Newton correction
// of the residual (the notebook's trick: q0 = x r, e = x - q0 s exactly, q0 + e r rounds to x / s)
__device__ float divide_by_scale(float x, float s, float r) {
  const float q0 = x * r;
  const float e = fmaf(-q0, s, x);
  return copysignf(fmaf(e, r, q0), x);
}

__device__ float as_float(__half v) { return __half2float(v); }
__device__ float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// ---- kernels ---------------------------------------------------------------------------------------

namespace {

constexpr float kE4m3Max = 448.0f;
constexpr float kMinScale = 1.0f / (448.0f * 512.0f);
constexpr int kRowsPerBlock = 4;               // warps per block in the warp-per-row kernel
constexpr int kWarpChunks = 8;                 // 8 chunks of 8 per lane: rows up to 32 * 64 = 2048
constexpr int kWarpMaxK = 32 * 8 * kWarpChunks;
constexpr int kBlockThreads = 256, kBlockChunks = 8;  // rows up to 256 * 64 = 16384
constexpr int kBlockMaxK = kBlockThreads * 8 * kBlockChunks;

template <typename T>
union Chunk {  // 8 values, one 16-byte load
  uint4 raw;
  T v[8];
};

template <typename T>
__device__ __forceinline__ uint2 convert_chunk(const Chunk<T>& ch, float scale, float r) {
  uint16_t b[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    b[j] = cvt_e4m3x2(divide_by_scale(as_float(ch.v[2 * j]), scale, r),
                      divide_by_scale(as_float(ch.v[2 * j + 1]), scale, r));
  return make_uint2(b[0] | (uint32_t{b[1]} << 16), b[2] | (uint32_t{b[3]} << 16));
}

// k % 8 == 0, k <= 2048, x 16-byte aligned, q 8-byte aligned
template <typename T>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    quantize_rows_warp(uint8_t* __restrict__ q, float* __restrict__ scales, const T* __restrict__ x, int64_t m,
                       int64_t k) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= m) return;  // no block-level barrier in this kernel
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * k);
  uint2* qr = reinterpret_cast<uint2*>(q + row * k);
  const int chunks = static_cast<int>(k / 8);

  Chunk<T> data[kWarpChunks];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kWarpChunks; ++i) {
    const int c = lane + 32 * i;
    if (c < chunks) {
      data[i].raw = xr[c];
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(as_float(data[i].v[j])));
    }
  }
  const float scale = fmaxf(warp_max(amax) / kE4m3Max, kMinScale);
  if (lane == 0) scales[row] = scale;
  const float r = __frcp_rn(scale);
#pragma unroll
  for (int i = 0; i < kWarpChunks; ++i) {
    const int c = lane + 32 * i;
    if (c < chunks) qr[c] = convert_chunk(data[i], scale, r);
  }
}

// k % 8 == 0, k <= 8 * kBlockChunks * BLOCK, same alignment: one block of BLOCK threads per row (64 threads
// for rows up to 4096: small blocks, many of them per SM, many rows' loads in flight)
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK, BLOCK <= 64 ? 8 : 2)
    quantize_rows_block(uint8_t* __restrict__ q, float* __restrict__ scales, const T* __restrict__ x, int64_t k) {
  __shared__ float warp_amax[BLOCK / 32];
  const int64_t row = blockIdx.x;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * k);
  uint2* qr = reinterpret_cast<uint2*>(q + row * k);
  const int chunks = static_cast<int>(k / 8);

  Chunk<T> data[kBlockChunks];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kBlockChunks; ++i) {
    const int c = threadIdx.x + BLOCK * i;
    if (c < chunks) {
      data[i].raw = xr[c];
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(as_float(data[i].v[j])));
    }
  }
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0) warp_amax[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = 0.0f;
#pragma unroll
  for (int w = 0; w < BLOCK / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  const float scale = fmaxf(amax / kE4m3Max, kMinScale);
  if (threadIdx.x == 0) scales[row] = scale;
  const float r = __frcp_rn(scale);
#pragma unroll
  for (int i = 0; i < kBlockChunks; ++i) {
    const int c = threadIdx.x + BLOCK * i;
    if (c < chunks) qr[c] = convert_chunk(data[i], scale, r);
  }
}

// anything else (k % 8 != 0, misaligned x or q, rows past 16384): two passes, element by element
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    quantize_rows_scalar(uint8_t* __restrict__ q, float* __restrict__ scales, const T* __restrict__ x, int64_t k) {
  __shared__ float warp_amax[kBlockThreads / 32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * k;
  uint8_t* qr = q + row * k;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += kBlockThreads) amax = fmaxf(amax, fabsf(as_float(xr[i])));
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0) warp_amax[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = 0.0f;
  for (int w = 0; w < kBlockThreads / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  const float scale = fmaxf(amax / kE4m3Max, kMinScale);
  if (threadIdx.x == 0) scales[row] = scale;
  for (int64_t i = threadIdx.x; i < k; i += kBlockThreads)
    qr[i] = static_cast<uint8_t>(cvt_e4m3x2(as_float(xr[i]) / scale, 0.0f) & 0xff);
}

template <typename T>
cudaError_t quantize(uint8_t* q, float* scales, const T* x, int64_t m, int64_t k, cudaStream_t stream) {
  if (m < 0 || k < 1 || m > INT32_MAX) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  const bool vec_ok = k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 8 == 0;
  if (vec_ok && k <= kWarpMaxK) {
    const int64_t blocks = (m + kRowsPerBlock - 1) / kRowsPerBlock;
    quantize_rows_warp<T><<<static_cast<unsigned>(blocks), kRowsPerBlock * 32, 0, stream>>>(q, scales, x, m, k);
  } else if (vec_ok && k <= 8 * kBlockChunks * 64) {
    quantize_rows_block<T, 64><<<static_cast<unsigned>(m), 64, 0, stream>>>(q, scales, x, k);
  } else if (vec_ok && k <= kBlockMaxK) {
    quantize_rows_block<T, kBlockThreads><<<static_cast<unsigned>(m), kBlockThreads, 0, stream>>>(q, scales, x, k);
  } else {
    quantize_rows_scalar<T><<<static_cast<unsigned>(m), kBlockThreads, 0, stream>>>(q, scales, x, k);
  }
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t fp8_quantize_fp16(uint8_t* q, float* scales, const __half* x, int64_t m, int64_t k,
                                            cudaStream_t stream) {
  return quantize(q, scales, x, m, k, stream);
}

COURSE_EXPORT cudaError_t fp8_quantize_bf16(uint8_t* q, float* scales, const __nv_bfloat16* x, int64_t m, int64_t k,
                                            cudaStream_t stream) {
  return quantize(q, scales, x, m, k, stream);
}
