// course/math.cuh: fast hardware math and warp shuffles through inline PTX.
// The teaching-size version of FlashInfer's include/flashinfer/math.cuh: each wrapper is one
// `asm` statement around one PTX instruction, which ptxas turns into one SASS instruction of
// the multi-function unit (MUFU.EX2, MUFU.LG2, MUFU.RSQ, MUFU.TANH) or the shuffle unit
// (SHFL.BFLY). Day 3 measures what they cost and how accurate they are.
//
// Inline PTX:   asm("opcode %0, %1;" : "=f"(out) : "f"(in) : clobbers);
//   %0, %1, ...   the operands in order: outputs first, then inputs
//   constraints   which register class the operand lives in, and so its PTX type:
//                 "h" 16-bit register (.b16/.u16: an fp16 or bf16 value as raw bits)
//                 "r" 32-bit register (.b32/.u32/.s32: an int, or two halves packed as half2)
//                 "l" 64-bit register (.b64/.u64: a pointer, a 64-bit integer)
//                 "f" 32-bit float register (.f32), "d" 64-bit float register (.f64)
//                 "n" a compile-time integer, pasted into the text as an immediate
//   "=" / "+"     the operand is written only / read and written
//   clobbers      "memory": the statement touches memory its operands do not show, so the
//                 compiler must not keep memory values in registers across it
//   volatile      `asm volatile` keeps the statement and its place among other volatile
//                 statements even when its outputs look unused. It binds the compiler front
//                 end (the PTX it writes); ptxas still deletes or merges pure instructions.
//
// The math wrappers are plain `asm`: pure functions of their inputs, which the compiler may
// merge or delete like any arithmetic (FlashInfer marks them volatile, which costs nothing
// where the result is used). The shuffle is `asm volatile`: it exchanges registers between
// lanes, so every lane of the mask has to execute it where it was written.
//
// Accuracy, as documented (PTX ISA "Floating-point instructions"; the Day 3 notebook
// measures them against fp64):
//   ptx_exp2   ex2.approx.ftz.f32    2^x        about 2 ulp; subnormal inputs and results are 0
//   ptx_log2   lg2.approx.ftz.f32    log2(x)    about 2^-22 absolute (so many ulp near x = 1)
//   ptx_rsqrt  rsqrt.approx.ftz.f32  1/sqrt(x)  2^-22.9 relative
//   ptx_tanh   tanh.approx.f32       tanh(x)    2^-11 relative (sm_75+)
//              tanh.approx.f16(x2)   tanh(x)    2^-10.987 absolute, per half
// .ftz ("flush to zero") treats subnormal inputs and outputs as 0; it lets the unit skip the
// scaling a subnormal needs. The CUDA library's exp2f, log2f, tanhf are accurate to 1-2 ulp
// over the whole range and cost more instructions.
#pragma once

#include <cstring>

#include "course/common.cuh"

namespace course {

constexpr float LOG2E = 1.44269504088896340736f;  // log2(e): exp(x) = 2^(x * LOG2E)

// ---------------------------------------------------------------- type punning
// The same 32 bits seen as two halves or as one integer. PTX has no half2 operand class:
// packed halves travel in a "r" (32-bit) register, and shuffles move 32 bits at a time.
// memcpy is the C++ way to reinterpret bits (a reinterpret_cast of the pointer breaks the
// strict-aliasing rule); for 4 bytes in registers it compiles to nothing at all.
__device__ __forceinline__ uint32_t half2_as_uint32(__half2 x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}

__device__ __forceinline__ __half2 uint32_as_half2(uint32_t u) {
  __half2 x;
  memcpy(&x, &u, sizeof(u));
  return x;
}

__device__ __forceinline__ uint32_t bfloat162_as_uint32(__nv_bfloat162 x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}

__device__ __forceinline__ __nv_bfloat162 uint32_as_bfloat162(uint32_t u) {
  __nv_bfloat162 x;
  memcpy(&x, &u, sizeof(u));
  return x;
}

// ------------------------------------------------------------ MUFU instructions
// 2^x in one MUFU.EX2. "=f": the result is written to an .f32 register; "f": x is read from one.
__device__ __forceinline__ float ptx_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// log2(x) in one MUFU.LG2.
__device__ __forceinline__ float ptx_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1 / sqrt(x) in one MUFU.RSQ (RMSNorm's normaliser, Day 6).
__device__ __forceinline__ float ptx_rsqrt(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) in one MUFU.TANH (GELU-tanh's activation). No .ftz form exists for tanh.
__device__ __forceinline__ float ptx_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh of one fp16 value: "h" puts its 16 bits in a 16-bit register.
__device__ __forceinline__ __half ptx_tanh(__half x) {
  uint16_t y;
  asm("tanh.approx.f16 %0, %1;" : "=h"(y) : "h"(__half_as_ushort(x)));
  return __ushort_as_half(y);
}

// tanh of two fp16 values in one instruction: the pair travels as one "r" register.
__device__ __forceinline__ __half2 ptx_tanh(__half2 x) {
  uint32_t y;
  asm("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(half2_as_uint32(x)));
  return uint32_as_half2(y);
}

// ------------------------------------------------------------- warp shuffles
// Butterfly exchange: lane i receives `x` from lane i ^ lane_mask (SHFL.BFLY). The operands
// of shfl.sync.bfly.b32 d, a, b, c, membermask:
//   b = lane_mask ("r": a register, or an immediate once the loop is unrolled),
//   c = 0x1f: the last lane of the segment (31: the whole warp is one segment),
//   membermask = 0xffffffff: every lane takes part and must reach this instruction.
__device__ __forceinline__ uint32_t shfl_xor(uint32_t x, int lane_mask) {
  uint32_t y;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(y) : "r"(x), "r"(lane_mask));
  return y;
}

// The same for a float: the "f" constraint lets PTX name it as .f32 without a conversion
// (a shuffle only moves bits; .b32 accepts any 32-bit register).
__device__ __forceinline__ float shfl_xor(float x, int lane_mask) {
  float y;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(y) : "f"(x), "r"(lane_mask));
  return y;
}

// Two halves in one shuffle: pun the pair to 32 bits, move it, pun it back.
__device__ __forceinline__ __half2 shfl_xor(__half2 x, int lane_mask) {
  return uint32_as_half2(shfl_xor(half2_as_uint32(x), lane_mask));
}

}  // namespace course
