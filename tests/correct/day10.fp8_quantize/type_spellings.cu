// CORRECT unsigned char* for uint8_t*, half* for __half*
// Day 10's reference FP8 quantization with its entry points written with other names of the same types.
#include "course/block.cuh"
#include "course/vec.cuh"

namespace {

constexpr int THREADS = 256, CHUNK = 8;  // 8 elements = one 16-byte load
// Threads per row of up to 4096 elements (each then holds 4096 / 8 / SHORT_THREADS chunks): a knob
// that benchmarks/variant_sweep tries.
#ifndef FP8_SHORT_THREADS
#define FP8_SHORT_THREADS 64
#endif
#ifndef FP8_MIN_BLOCKS  // the short kernel's minimum blocks per SM (__launch_bounds__), 0: from its size
#define FP8_MIN_BLOCKS 8
#endif
#ifndef FP8_DIV  // the quotient x / scale: 0, IEEE division; 1, div_by_scale (the same bytes, 3 instructions)
#define FP8_DIV 1
#endif
constexpr float E4M3_MAX = 448.0f;
constexpr float MIN_SCALE = 1.0f / (448.0f * 512.0f);

// Two fp32 values as two e4m3 bytes, `lo` in the low byte (the lower address once stored):
// round to nearest even, saturate to +-448 (NaN stays NaN).
__device__ __forceinline__ uint16_t e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// x / scale rounded as IEEE division rounds it, in 3 instructions where `/` takes about 10 (a
// reciprocal, refinement, a check and a branch to a slow path): with r = __frcp_rn(scale), once per
// row, q0 = x r is within an ulp of the quotient, the residual x - q0 scale is exact (one FMA), and
// q0 + residual x r rounds to the quotient (Markstein's theorem). The theorem needs the residual not
// to underflow, which fails only for quotients far below e4m3's smallest value (0 in e4m3 either
// way): for every bf16 and every fp16 amax, scale = max(amax / 448, MIN_SCALE) and every x of that
// type with |x| <= amax, the e4m3 byte equals that of x / scale (2.07 billion pairs, emulated in
// tests/test_fp8_division.py). copysignf keeps -0 for x = -0.
__device__ __forceinline__ float div_by_scale(float x, float scale, float r) {
  const float q0 = x * r;
  const float e = fmaf(-q0, scale, x);
  return copysignf(fmaf(e, r, q0), x);
}

// vec: x 16-byte aligned, q 8-byte aligned, K % 8 == 0 and K <= BLOCK * CHUNK * ROW_CHUNKS. A row of
// up to 4096 elements takes FP8_SHORT_THREADS threads (fewer registers: more blocks per SM, more loads in flight).
template <typename T, int ROW_CHUNKS, int BLOCK = THREADS>
__global__ void __launch_bounds__(BLOCK, ROW_CHUNKS * BLOCK <= 1024 ? (FP8_MIN_BLOCKS ? FP8_MIN_BLOCKS : 1024 / BLOCK) : 2)
    fp8_quantize_kernel(uint8_t* __restrict__ q, float* __restrict__ scales, const T* __restrict__ x, int64_t k,
                        bool vec) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * k;
  uint8_t* qr = q + row * k;
  if (vec) {
    course::vec_t<T, CHUNK> v[ROW_CHUNKS];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < ROW_CHUNKS; ++i) {
      const int64_t c = threadIdx.x + i * BLOCK;
      if (c * CHUNK < k) {
        v[i].load(xr + c * CHUNK);  // 16 bytes, kept in registers until the scale is known
#pragma unroll
        for (int j = 0; j < CHUNK; ++j) amax = fmaxf(amax, fabsf(course::to_float(v[i][j])));
      }
    }
    const float scale = fmaxf(course::block_reduce_max(amax) / E4M3_MAX, MIN_SCALE);
    if (threadIdx.x == 0) scales[row] = scale;
    const float r = __frcp_rn(scale);  // 1 / scale, rounded once, for div_by_scale (unused if FP8_DIV is 0)
    (void)r;
#pragma unroll
    for (int i = 0; i < ROW_CHUNKS; ++i) {
      const int64_t c = threadIdx.x + i * BLOCK;
      if (c * CHUNK < k) {
        uint16_t b[CHUNK / 2];
#pragma unroll
        for (int j = 0; j < CHUNK / 2; ++j)
#if FP8_DIV
          b[j] = e4m3x2(div_by_scale(course::to_float(v[i][2 * j]), scale, r),
                        div_by_scale(course::to_float(v[i][2 * j + 1]), scale, r));
#else
          b[j] = e4m3x2(course::to_float(v[i][2 * j]) / scale, course::to_float(v[i][2 * j + 1]) / scale);
#endif
        // 8 bytes per thread: a warp stores 256 contiguous bytes
        *reinterpret_cast<uint2*>(qr + c * CHUNK) =
            make_uint2(b[0] | uint32_t{b[1]} << 16, b[2] | uint32_t{b[3]} << 16);
      }
    }
  } else {  // any K, any alignment: two passes, element by element
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < k; i += BLOCK) amax = fmaxf(amax, fabsf(course::to_float(xr[i])));
    const float scale = fmaxf(course::block_reduce_max(amax) / E4M3_MAX, MIN_SCALE);
    if (threadIdx.x == 0) scales[row] = scale;
    for (int64_t i = threadIdx.x; i < k; i += BLOCK)
      qr[i] = static_cast<uint8_t>(e4m3x2(course::to_float(xr[i]) / scale, 0.0f));
  }
}

template <typename T>
cudaError_t launch_fp8_quantize(uint8_t* q, float* scales, const T* x, int64_t m, int64_t k, cudaStream_t stream) {
  if (m < 0 || k < 1 || m > INT32_MAX) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  constexpr int64_t SHORT = int64_t{THREADS} * CHUNK * 2, LONG = int64_t{THREADS} * CHUNK * 8;  // 4096, 16384
  const bool vec = k % CHUNK == 0 && k <= LONG && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(q) % 8 == 0;
  if (vec && k <= SHORT) {
    constexpr int ST = FP8_SHORT_THREADS;
    fp8_quantize_kernel<T, SHORT / (ST * CHUNK), ST><<<static_cast<unsigned>(m), ST, 0, stream>>>(q, scales, x, k, vec);
  } else {
    fp8_quantize_kernel<T, 8><<<static_cast<unsigned>(m), THREADS, 0, stream>>>(q, scales, x, k, vec);
  }
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t fp8_quantize_fp16(unsigned char* q, float* scales, const half* x, int64_t m, int64_t k,
                                            cudaStream_t stream) {
  return launch_fp8_quantize(q, scales, x, m, k, stream);
}

COURSE_EXPORT cudaError_t fp8_quantize_bf16(unsigned char* q, float* scales, const __nv_bfloat16* x, int64_t m, int64_t k,
                                            cudaStream_t stream) {
  return launch_fp8_quantize(q, scales, x, m, k, stream);
}
