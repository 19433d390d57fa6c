// Inline PTX demo: one asm statement per operand constraint, a "memory" clobber that changes
// the answer, and what `volatile` does and does not promise. Not a performance kernel: the
// notebook reads its PTX and SASS and runs it once on a few elements.
//
//   constraint_tour_kernel        "l" address, "f" float, "h" 16-bit, "r" 32-bit, "n" immediate
//   exchange_no_clobber_kernel    an asm atomic exchange that writes p[i] without saying so
//   exchange_memory_clobber_kernel the same with the "memory" clobber
//   tanh_twice_volatile_kernel    two identical `asm volatile` tanh: two in PTX, one in SASS
#include "course/math.cuh"

namespace {

// x, y     (n,) fp32     y[i] = 2^x[i]
// xh, th   (n,) fp16     th[i] = tanh(xh[i])
// packed   (n,) uint32   the pair (xh[i], th[i]) in one 32-bit word, xh[i] in the low half
__global__ void constraint_tour_kernel(float* __restrict__ y, __half* __restrict__ th,
                                       uint32_t* __restrict__ packed, const float* __restrict__ x,
                                       const __half* __restrict__ xh, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  // "l": the 64-bit address. A generic pointer to global memory is also its global address,
  // so ld.global may use it directly. "=f": the loaded value lands in an .f32 register.
  float xi;
  asm("ld.global.nc.f32 %0, [%1];" : "=f"(xi) : "l"(x + i));
  // "f" in, "=f" out: what course::ptx_exp2 wraps.
  float yi;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(yi) : "f"(xi));
  y[i] = yi;
  // "h": an fp16 value as its 16 raw bits (__half_as_ushort), in a 16-bit register.
  const uint16_t xbits = __half_as_ushort(xh[i]);
  uint16_t tbits;
  asm("tanh.approx.f16 %0, %1;" : "=h"(tbits) : "h"(xbits));
  th[i] = __ushort_as_half(tbits);
  // "r": two 16-bit values packed into one 32-bit register, the first operand in the low half.
  uint32_t pair;
  asm("mov.b32 %0, {%1, %2};" : "=r"(pair) : "h"(tbits), "h"(xbits));
  // "n": a compile-time constant written into the instruction text. prmt's selector 0x1032
  // picks bytes 2, 3, 0, 1 of the input: the two halves swap places.
  asm("prmt.b32 %0, %1, %1, %2;" : "=r"(pair) : "r"(pair), "n"(0x1032));
  packed[i] = pair;
}

// out (3n,) fp32: for each i, p[i] before the exchange, what the exchange returned, p[i] after.
// The asm below writes p[i], but its operands only say "reads an address, returns `old`":
// the compiler may answer the second read of p[i] with the first one.
__global__ void exchange_no_clobber_kernel(float* out, float* p, float value, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float before = p[i];
  uint32_t old;
  asm("atom.global.exch.b32 %0, [%1], %2;" : "=r"(old) : "l"(p + i), "r"(__float_as_uint(value)));
  const float after = p[i];
  out[3 * i] = before;
  out[3 * i + 1] = __uint_as_float(old);
  out[3 * i + 2] = after;
}

// The same statement with "memory" in its clobber list: values read from memory before it
// are stale after it, so p[i] is loaded again.
__global__ void exchange_memory_clobber_kernel(float* out, float* p, float value, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float before = p[i];
  uint32_t old;
  asm("atom.global.exch.b32 %0, [%1], %2;" : "=r"(old) : "l"(p + i), "r"(__float_as_uint(value)) : "memory");
  const float after = p[i];
  out[3 * i] = before;
  out[3 * i + 1] = __uint_as_float(old);
  out[3 * i + 2] = after;
}

__device__ __forceinline__ float tanh_volatile(float x) {
  float y;
  asm volatile("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// y[i] = 2 tanh(x[i]), computed twice. `volatile` keeps both statements in the PTX the
// compiler writes; ptxas, which turns PTX into SASS, sees a pure instruction twice on the same
// register and keeps one.
__global__ void tanh_twice_volatile_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = tanh_volatile(x[i]) + tanh_volatile(x[i]);
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(course::ceil_div<int64_t>(n, 256)); }

}  // namespace

COURSE_EXPORT cudaError_t constraint_tour(float* y, __half* th, uint32_t* packed, const float* x,
                                          const __half* xh, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constraint_tour_kernel<<<blocks_for(n), 256, 0, stream>>>(y, th, packed, x, xh, n);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t exchange_no_clobber(float* out, float* p, float value, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  exchange_no_clobber_kernel<<<blocks_for(n), 256, 0, stream>>>(out, p, value, n);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t exchange_memory_clobber(float* out, float* p, float value, int64_t n,
                                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  exchange_memory_clobber_kernel<<<blocks_for(n), 256, 0, stream>>>(out, p, value, n);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t tanh_twice_volatile(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  tanh_twice_volatile_kernel<<<blocks_for(n), 256, 0, stream>>>(y, x, n);
  return cudaGetLastError();
}
