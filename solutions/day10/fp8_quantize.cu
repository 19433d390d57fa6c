// Day 10 exercise 2: dynamic per-token FP8 quantization, the step before an FP8 GEMM.
//
//   x       [M, K]  fp16 or bf16, row-major: one token's activations per row
//   q       [M, K]  fp8 e4m3 as bytes (torch.float8_e4m3fn viewed as uint8)
//   scales  [M]     fp32, so that x[m, k] ~ q[m, k] * scales[m]
//
//   scales[m] = max(max_k |x[m, k]| / 448, 1 / (448 * 512))     448: e4m3's largest finite value
//   q[m, k]   = e4m3(x[m, k] / scales[m]), rounded to nearest even, saturating to +-448
//
// e4m3 (1 sign bit, 4 exponent bits, 3 mantissa bits, no infinities) spans +-448 with 3 bits of
// mantissa: scaling each row so that its largest value lands on 448 uses the whole range. The
// lower bound on the scale holds for every row (vLLM's choice): it keeps an all-zero row finite and
// a row of values below 1/512 short of 448. The quotient is IEEE
// fp32's x / s (not x * (1 / s)), so every byte matches torch's float8_e4m3fn conversion of the
// same quotient; div_by_scale below gets it in 3 instructions. The conversion is one PTX
// instruction for two values:
//   cvt.rn.satfinite.e4m3x2.f32 d, hi, lo;   (SASS F2FP.SATFINITE.E4M3.F32.PACK_AB...)
//
// Design: one block per row. A row is read once with 16-byte loads into registers, its |max|
// reduced in the block, and converted and stored from the registers (8 bytes per thread and
// chunk). Rows of up to 4096 elements take blocks of 64 threads (8 chunks each, at least 8 blocks
// per SM: 64 registers a thread, many rows' loads in flight at once); rows up to 256 x 8 x 8 =
// 16384 take 256 threads. Longer rows, K not a multiple of 8 or misaligned pointers take a
// two-pass path with element loads (the second pass reads from L2).
// Why 64 threads and div_by_scale: at K = 4096 they reach 0.99x the copy on an H100, where 256
// threads a row and IEEE `/` reached 0.88x.
// Napkin math, M = 32768 tokens of K = 4096 bf16: 256 MB read, 128 MB written, 128 KB of scales;
// at an H200's ~4.2 TB/s of copy bandwidth that is ~92 us (~130 us at an H100's ~3 TB/s).
// Target (grader/exercises/day10.py): @TARGET@.
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
  // BEGIN SOLUTION
  // STUB: // TODO: one cvt.rn.satfinite.e4m3x2.f32 (PTX): the first source goes to the upper byte.
  // STUB: (void)lo; (void)hi;
  // STUB: return 0;
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
  // END SOLUTION
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
  // BEGIN SOLUTION
  // STUB: // TODO: scales[row] and q[row, :] (see the top of the file).
  // STUB: // 1. With `vec`: this thread's chunks c = threadIdx.x + i * BLOCK (i < ROW_CHUNKS, c * 8 < k)
  // STUB: //    as course::vec_t<T, 8> loads, kept in registers; the largest |x| of them.
  // STUB: //    Otherwise: the largest |x| over elements threadIdx.x, + BLOCK, ... of the row.
  // STUB: // 2. course::block_reduce_max; scale = max(amax / E4M3_MAX, MIN_SCALE) (thread 0 stores it).
  // STUB: // 3. q = e4m3x2(x / scale, ...) for neighbouring pairs: 8 bytes per chunk with `vec`, else one
  // STUB: //    byte per element (the low byte of e4m3x2(v, 0.0f)). Divide: x * (1 / scale) is not the same;
  // STUB: //    div_by_scale(x, scale, __frcp_rn(scale)) (above) is, in 3 instructions where `/` takes ~10.
  // STUB: (void)xr; (void)qr; (void)vec; (void)scales; (void)k;
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
  // END SOLUTION
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

COURSE_EXPORT cudaError_t fp8_quantize_fp16(uint8_t* q, float* scales, const __half* x, int64_t m, int64_t k,
                                            cudaStream_t stream) {
  return launch_fp8_quantize(q, scales, x, m, k, stream);
}

COURSE_EXPORT cudaError_t fp8_quantize_bf16(uint8_t* q, float* scales, const __nv_bfloat16* x, int64_t m, int64_t k,
                                            cudaStream_t stream) {
  return launch_fp8_quantize(q, scales, x, m, k, stream);
}
