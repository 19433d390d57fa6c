// course/mma.cuh: tensor-core fragments for Days 9-12. It adds two PTX instructions and the
// register layouts that connect them:
//   ldmatrix  (SASS LDSM)  a warp loads one, two or four 8 x 8 tiles of 16-bit values from shared
//                          memory straight into the registers an mma expects (.trans: transposed);
//   mma.sync  (SASS HMMA.16816.F32, .BF16 for bf16)  D[16 x 8] = A[16 x 16] B[16 x 8] + C,
//                          fp16 or bf16 inputs, fp32 accumulators, one warp.
// Model: FlashInfer include/flashinfer/mma.cuh (which also wraps stmatrix and fp16 accumulation).
// Framework-free: raw registers and shared-memory pointers, no torch, no CUTLASS.
//
// Who holds what (PTX ISA, "Matrix Fragments for mma.m16n8k16"). In a warp, lane = 0..31,
// group = lane / 4 (0..7) and pair = lane % 4 (0..3). Each 32-bit register holds two 16-bit
// values, the lower address / lower column in its low half.
//
//   A 16 x 16 (row-major, [m][k]), four registers a[0..3]:
//     a[0] = A[group    ][2 pair, 2 pair + 1]      a[2] = A[group    ][2 pair + 8, 2 pair + 9]
//     a[1] = A[group + 8][2 pair, 2 pair + 1]      a[3] = A[group + 8][2 pair + 8, 2 pair + 9]
//   B 16 x 8 ("col": element (k, n) with k running fastest in a register), two registers:
//     b[0] = B[2 pair, 2 pair + 1][group]          b[1] = B[2 pair + 8, 2 pair + 9][group]
//   C, D 16 x 8 fp32, four registers:
//     c[0], c[1] = C[group    ][2 pair, 2 pair + 1]
//     c[2], c[3] = C[group + 8][2 pair, 2 pair + 1]
//
// ldmatrix .x1/.x2/.x4 loads 1/2/4 tiles of 8 x 8 16-bit values. Lanes 8 i .. 8 i + 7 give the
// shared addresses of the 8 rows (16 bytes each, 16-byte aligned) of tile i; the lanes of .x1
// and .x2 beyond tile 0 / 1 give addresses that are ignored but must still be valid. Register
// r[i] receives tile i in the layout above: lane holds row `group`, columns 2 pair, 2 pair + 1.
// With .trans it holds column `group`, rows 2 pair, 2 pair + 1 of the tile as stored instead.
// So, for a row-major tile of A, r[i] of tiles {rows 0-7, k 0-7}, {rows 8-15, k 0-7},
// {rows 0-7, k 8-15}, {rows 8-15, k 8-15} is exactly a[0..3]; for B stored [n][k] (k
// contiguous) the plain form gives b[]; for B stored [k][n] (n contiguous) .trans does.
#pragma once

#include <cstdint>

#include "course/common.cuh"

namespace course {

// A generic pointer into shared memory as the 32-bit shared-window address PTX expects.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ----------------------------------------------------------------------------- ldmatrix
// `row` is this lane's row address (see above). "memory" clobber: the load must not be moved
// above the __syncthreads() that published the tile.
__device__ __forceinline__ void ldmatrix_x1(uint32_t (&r)[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(smem_u32(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t (&r)[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(smem_u32(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(row)) : "memory");
}

// ------------------------------------------------------------------------------ mma.sync
// d += a b for one 16 x 8 x 16 step, fp32 accumulators updated in place. T is __half or
// __nv_bfloat16: the type the 16-bit halves of a[] and b[] hold.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                     const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                            const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The 16 bits of a half or bfloat16 value.
__device__ __forceinline__ uint32_t bits16(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ uint32_t bits16(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }

// Two fp32 values rounded to T and packed into one 32-bit word, `lo` in the low half (the lower
// address once stored): c[0], c[1] (or c[2], c[3]) of one lane, on their way to memory.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return bits16(from_float<T>(lo)) | (bits16(from_float<T>(hi)) << 16);
}

}  // namespace course
