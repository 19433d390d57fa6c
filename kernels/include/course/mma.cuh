// course/mma.cuh: one tensor-core instruction, mma.sync.m16n8k16 with fp32 accumulators.
// Adds the smallest piece of Day 9 that Day 7's skinny GEMM needs: D[16 x 8] += A[16 x 16] B[16 x 8]
// for one warp, A and B in fp16 or bf16 (SASS HMMA.16816.F32 / .F32.BF16), C and D in fp32.
// Day 9 explains the fragment layouts and ldmatrix; here only what a warp holds:
// lane = 4 g + t (g = lane / 4 in 0..7, t = lane % 4); each uint32_t holds two 16-bit values.
//   a[0]: A[g][2t, 2t+1]   a[1]: A[g+8][2t, 2t+1]   a[2]: A[g][2t+8, 2t+9]   a[3]: A[g+8][2t+8, 2t+9]
//   b[0]: B[2t, 2t+1][g]   b[1]: B[2t+8, 2t+9][g]
//   c[0], c[1]: D[g][2t, 2t+1]                      c[2], c[3]: D[g+8][2t, 2t+1]
// For a dot product the k order is free: any k may sit in any k slot, as long as A and B agree.
#pragma once

#include <type_traits>

#include "course/common.cuh"

namespace course {

template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  static_assert(std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value,
                "mma_16x8x16: fp16 or bf16 inputs");
  if constexpr (std::is_same<T, __half>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

}  // namespace course
