// CORRECT each warp stages its own tile's slices and syncs with __syncwarp (no block barrier, idle warps leave early); the learner's own ldmatrix / mma.sync inline-PTX wrappers as plain __device__ functions at file scope
// Day 9, mma_tile: c[t] += a[t] b[t], one warp per 16 x 16 tile, written without the course's mma.cuh
// wrappers. Nothing is shared between the warps of a block, so each warp copies its own A and B
// slices into its own part of shared memory and only waits for its own lanes.
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "course/common.cuh"

// ---- my PTX wrappers ---------------------------------------------------------------------------

__device__ uint32_t to_shared_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i
__device__ void ldsm_x4(uint32_t* r, const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(to_shared_u32(row_addr))
               : "memory");
}

__device__ void ldsm_x4_trans(uint32_t* r, const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(to_shared_u32(row_addr))
               : "memory");
}

// d (16x8 fp32) += a (16x16) * b (16x8)
__device__ void hmma_f16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ void hmma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- the kernel --------------------------------------------------------------------------------

namespace {

constexpr int kWarps = 4;
constexpr int kSlice = 64;             // k per staged slice
constexpr int kApitch = kSlice + 8;    // 144-byte rows: ldmatrix rows in 8 different bank groups
constexpr int kBpitch = 16 + 8;        // 48-byte rows
constexpr int kChunksPerArow = kSlice / 8;

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    mma_tile_warp_kernel(float* __restrict__ c, const T* __restrict__ a, const T* __restrict__ b, int64_t tiles,
                         int k) {
  __shared__ __align__(16) T a_stage[kWarps][16 * kApitch];
  __shared__ __align__(16) T b_stage[kWarps][kSlice * kBpitch];

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (tile >= tiles) return;  // every barrier below is a warp's own: the other warps do not wait for us

  T* as = a_stage[warp];
  T* bs = b_stage[warp];
  const T* at = a + tile * 16 * static_cast<int64_t>(k);  // (16, k)
  const T* bt = b + tile * static_cast<int64_t>(k) * 16;  // (k, 16)

  float acc[2][4];
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;

  for (int k0 = 0; k0 < k; k0 += kSlice) {
    const int kc = min(kSlice, k - k0);  // a multiple of 16
    // A slice: 16 rows x 8 chunks of 16 bytes = 128 chunks, 4 per lane; B slice: kc rows x 2 chunks.
    uint4 av[4], bv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int v = lane + 32 * i;
      const int row = v / kChunksPerArow, col = (v % kChunksPerArow) * 8;
      av[i] = col < kc ? *reinterpret_cast<const uint4*>(at + row * static_cast<int64_t>(k) + k0 + col)
                       : make_uint4(0, 0, 0, 0);
      const int brow = v / 2, bcol = (v % 2) * 8;
      bv[i] = brow < kc ? *reinterpret_cast<const uint4*>(bt + (static_cast<int64_t>(k0) + brow) * 16 + bcol)
                        : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int v = lane + 32 * i;
      *reinterpret_cast<uint4*>(&as[(v / kChunksPerArow) * kApitch + (v % kChunksPerArow) * 8]) = av[i];
      *reinterpret_cast<uint4*>(&bs[(v / 2) * kBpitch + (v % 2) * 8]) = bv[i];
    }
    __syncwarp();

    for (int ks = 0; ks < kc; ks += 16) {
      uint32_t af[4], bf[4];
      ldsm_x4(af, &as[(lane % 16) * kApitch + ks + (lane / 16) * 8]);
      ldsm_x4_trans(bf, &bs[(ks + lane % 16) * kBpitch + (lane / 16) * 8]);
      if constexpr (std::is_same<T, __half>::value) {
        hmma_f16(acc[0], af, bf[0], bf[1]);
        hmma_f16(acc[1], af, bf[2], bf[3]);
      } else {
        hmma_bf16(acc[0], af, bf[0], bf[1]);
        hmma_bf16(acc[1], af, bf[2], bf[3]);
      }
    }
    __syncwarp();  // all lanes are done reading before the next slice overwrites the stage
  }

  const int r = lane / 4, cc = 2 * (lane % 4);
  float* ct = c + tile * 256;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    ct[r * 16 + 8 * j + cc] += acc[j][0];
    ct[r * 16 + 8 * j + cc + 1] += acc[j][1];
    ct[(r + 8) * 16 + 8 * j + cc] += acc[j][2];
    ct[(r + 8) * 16 + 8 * j + cc + 1] += acc[j][3];
  }
}

template <typename T>
cudaError_t run_tiles(float* c, const T* a, const T* b, int64_t tiles, int64_t k, cudaStream_t stream) {
  const uintptr_t any = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                        reinterpret_cast<uintptr_t>(c);
  if (tiles < 0 || k < 16 || k % 16 != 0 || k > INT32_MAX || (any & 15) != 0) return cudaErrorInvalidValue;
  if (tiles == 0) return cudaSuccess;
  const int64_t blocks = (tiles + kWarps - 1) / kWarps;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  mma_tile_warp_kernel<T><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(c, a, b, tiles,
                                                                                    static_cast<int>(k));
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t mma_tile_fp16(float* c, const __half* a, const __half* b, int64_t tiles, int64_t k,
                                        cudaStream_t stream) {
  return run_tiles(c, a, b, tiles, k, stream);
}

COURSE_EXPORT cudaError_t mma_tile_bf16(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t tiles,
                                        int64_t k, cudaStream_t stream) {
  return run_tiles(c, a, b, tiles, k, stream);
}
