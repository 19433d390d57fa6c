// CORRECT the kernels' arguments in a struct passed by value, a separate element kernel for unaligned or long rows with a grid-stride loop over rows sized from a static per-device SM-count cache (cudaGetDevice + cudaDeviceGetAttribute), a never-taken debug printf in it, `using` aliases, fprintf(stderr) on bad arguments
// Day 10, fp8_quantize. Rows that can be read 16 bytes at a time go to a block-per-row kernel that
// keeps the row in registers (64 threads for rows up to 4096, 256 up to 16384); the rest to a simple
// two-pass kernel whose blocks walk the rows.
#include <cstdio>

#include "course/block.cuh"
#include "course/vec.cuh"

namespace {

using f32 = float;
using byte_t = uint8_t;

constexpr f32 FP8_MAX = 448.0f;
constexpr f32 SCALE_FLOOR = 1.0f / (448.0f * 512.0f);
constexpr int VEC = 8;  // elements per 16-byte load

template <typename T>
struct QuantArgs {
  byte_t* q;
  f32* scales;
  const T* x;
  int64_t m, k;
  int verbose;  // 1: print what each block does (debugging; the entry points pass 0)
};

__device__ __forceinline__ uint16_t to_e4m3x2(f32 lo, f32 hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// IEEE x / s from r = rn(1 / s): q0 = x r, then one FMA residual correction (bit-exact for these inputs)
__device__ __forceinline__ f32 quotient(f32 x, f32 s, f32 r) {
  const f32 q0 = x * r;
  return copysignf(fmaf(fmaf(-q0, s, x), r, q0), x);
}

// 16-byte loads: x 16-byte aligned, q 8-byte aligned, k % 8 == 0, k <= THREADS * VEC * CHUNKS
template <typename T, int THREADS, int CHUNKS>
__global__ void __launch_bounds__(THREADS, THREADS == 64 ? 8 : 2) quantize_vec(const QuantArgs<T> args) {
  using chunk_t = course::vec_t<T, VEC>;
  const int64_t row = blockIdx.x;
  const T* xr = args.x + row * args.k;
  byte_t* qr = args.q + row * args.k;
  chunk_t v[CHUNKS];
  f32 amax = 0.0f;
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * THREADS;
    if (c * VEC < args.k) {
      v[i].load(xr + c * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) amax = fmaxf(amax, fabsf(course::to_float(v[i][j])));
    }
  }
  const f32 scale = fmaxf(course::block_reduce_max(amax) / FP8_MAX, SCALE_FLOOR);
  if (threadIdx.x == 0) args.scales[row] = scale;
  const f32 r = __frcp_rn(scale);
#pragma unroll
  for (int i = 0; i < CHUNKS; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * THREADS;
    if (c * VEC < args.k) {
      uint32_t w[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint16_t lo = to_e4m3x2(quotient(course::to_float(v[i][4 * h]), scale, r),
                                      quotient(course::to_float(v[i][4 * h + 1]), scale, r));
        const uint16_t hi = to_e4m3x2(quotient(course::to_float(v[i][4 * h + 2]), scale, r),
                                      quotient(course::to_float(v[i][4 * h + 3]), scale, r));
        w[h] = lo | (uint32_t{hi} << 16);
      }
      *reinterpret_cast<uint2*>(qr + c * VEC) = make_uint2(w[0], w[1]);
    }
  }
}

// any alignment, any k: blocks of 256 walk the rows; two passes per row
template <typename T>
__global__ void __launch_bounds__(256) quantize_any(const QuantArgs<T> args) {
  for (int64_t row = blockIdx.x; row < args.m; row += gridDim.x) {
    const T* xr = args.x + row * args.k;
    byte_t* qr = args.q + row * args.k;
    f32 amax = 0.0f;
    for (int64_t i = threadIdx.x; i < args.k; i += blockDim.x) amax = fmaxf(amax, fabsf(course::to_float(xr[i])));
    amax = course::block_reduce_max(amax);  // every thread of the block, every row: uniform trip count
    const f32 scale = fmaxf(amax / FP8_MAX, SCALE_FLOOR);
    if (args.verbose && threadIdx.x == 0) printf("row %lld: amax %g scale %g\n", static_cast<long long>(row), amax, scale);
    if (threadIdx.x == 0) args.scales[row] = scale;
    for (int64_t i = threadIdx.x; i < args.k; i += blockDim.x)
      qr[i] = static_cast<byte_t>(to_e4m3x2(course::to_float(xr[i]) / scale, 0.0f));
  }
}

int multiprocessors() {
  static int known[128] = {};
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev < 0 || dev >= 128) return 132;
  if (known[dev] == 0) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
    known[dev] = n;
  }
  return known[dev];
}

template <typename T>
cudaError_t quantize(byte_t* q, f32* scales, const T* x, int64_t m, int64_t k, cudaStream_t stream) {
  if (m < 0 || k < 1 || m > INT32_MAX) {
    fprintf(stderr, "fp8_quantize: invalid shape m=%lld k=%lld\n", static_cast<long long>(m),
            static_cast<long long>(k));
    return cudaErrorInvalidValue;
  }
  if (m == 0) return cudaSuccess;
  const QuantArgs<T> args{q, scales, x, m, k, 0};
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 8 == 0;
  const unsigned rows = static_cast<unsigned>(m);
  if (aligned && k % VEC == 0 && k <= 64 * VEC * 8) {
    quantize_vec<T, 64, 8><<<rows, 64, 0, stream>>>(args);
  } else if (aligned && k % VEC == 0 && k <= 256 * VEC * 8) {
    quantize_vec<T, 256, 8><<<rows, 256, 0, stream>>>(args);
  } else {
    const int64_t cap = static_cast<int64_t>(multiprocessors()) * 8;
    quantize_any<T><<<static_cast<unsigned>(m < cap ? m : cap), 256, 0, stream>>>(args);
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
