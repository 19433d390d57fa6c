// CORRECT the tile multiplied with nvcuda::wmma (m16n16k16 fragments loaded from the padded shared slices, mma_sync; it compiles to ldmatrix and HMMA.16816.F32), the accumulator stored through a per-warp shared tile and added into c with float4
// Day 9 exercise: one warp computes one 16 x 16 tile of C += A B on the tensor cores, from shared
// memory, with ldmatrix and mma.sync (model: FlashInfer include/flashinfer/mma.cuh).
//
//   a  [tiles, 16, k]   fp16 or bf16, row-major: k contiguous
//   b  [tiles, k, 16]   fp16 or bf16, row-major: n contiguous (so B needs ldmatrix .trans)
//   c  [tiles, 16, 16]  fp32, updated in place: c[t] += a[t] b[t]
//
// k is a multiple of 16 (one mma step) and the pointers are 16-byte aligned. A block of 4 warps
// takes 4 tiles: all 128 threads stage 64-wide slices of k of the 4 tiles in shared memory with
// 16-byte loads, then each warp multiplies its own tile with course/mma.cuh. Products of two
// fp16/bf16 values are exact in fp32; only the accumulation rounds.
// Napkin math: per tile, 2 x 16 x 16 x k flops for 64 k bytes of A and B: 8 flops per byte, far
// below the tensor cores' ~150 flops per byte of bandwidth. Memory-bound: at 8192 tiles x
// k = 1024 (553 MB) a copy's ~4.2 TB/s gives ~130 us.
// Target (grader/exercises/day09.py): see the spec.
#include <mma.h>
#include "course/common.cuh"

namespace {

constexpr int WARPS = 4;   // tiles per block, one per warp
constexpr int KC = 64;     // the slice of k staged per step
constexpr int A_PITCH = KC + 8;  // (halves) row pitch of a staged A tile: 144 bytes, see below
constexpr int B_PITCH = 16 + 8;  // (halves) row pitch of a staged B tile: 48 bytes
// Why the pads: ldmatrix reads 8 rows of 16 bytes at once. Rows 128 bytes apart (an unpadded A
// slice) would all start in the same 4 banks: an 8-way conflict. At a pitch of 144 bytes the 8
// rows start 9 x 16 bytes apart, in 8 different groups of 4 banks; at 48 bytes, 3 x 16 apart:
// conflict-free too. Both pitches stay multiples of 16 bytes, which ldmatrix needs.

template <typename T>
__global__ void __launch_bounds__(WARPS * 32)
    mma_tile_kernel(float* __restrict__ c, const T* __restrict__ a, const T* __restrict__ b, int64_t tiles,
                    int k) {
  // wmma wants 32-byte aligned fragment pointers: every tile and every 16-wide step below starts
  // on a multiple of 32 bytes (2304 and 3072 bytes per tile, 32 bytes per step of A, 768 of B).
  __shared__ __align__(32) T a_s[WARPS][16][A_PITCH];  // (tile, m, k) this step's slice of A
  __shared__ __align__(32) T b_s[WARPS][KC][B_PITCH];  // (tile, k, n) this step's slice of B
  __shared__ __align__(32) float c_s[WARPS][16][16];   // (tile, m, n) the result, on its way to c
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * WARPS;  // the block's first tile
  const int64_t tile = first + warp;                                // this warp's tile
  constexpr int VEC = 8;                                            // halves in 16 bytes

  // acc[j] is the 16 x 8 half n = 8 j .. 8 j + 7 of the tile, in the C layout of course/mma.cuh.
  // nvcuda::wmma: one m16n16k16 step is two mma.sync m16n8k16 (HMMA.16816.F32), and its fragment
  // loads from shared memory compile to ldmatrix (B's row-major layout: ldmatrix .trans).
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;
  nvcuda::wmma::fill_fragment(acc, 0.0f);
  for (int k0 = 0; k0 < k; k0 += KC) {
    const int kc = min(KC, k - k0);  // a multiple of 16
    // 1. Stage: vector v of a tile's A slice is row v / (KC / VEC), column chunk v % (KC / VEC);
    //    consecutive threads take consecutive 16-byte chunks of a row (coalesced). Every warp
    //    stores parts of every tile: the barrier below is what makes a tile whole.
    for (int v = threadIdx.x; v < WARPS * 16 * (KC / VEC); v += WARPS * 32) {
      const int w = v / (16 * (KC / VEC)), row = v / (KC / VEC) % 16, col = v % (KC / VEC) * VEC;
      if (first + w < tiles && col < kc) {
        const T* src = a + ((first + w) * 16 + row) * static_cast<int64_t>(k) + k0 + col;
        *reinterpret_cast<uint4*>(&a_s[w][row][col]) = *reinterpret_cast<const uint4*>(src);
      }
    }
    for (int v = threadIdx.x; v < WARPS * KC * 2; v += WARPS * 32) {  // B rows: 16 halves, 2 chunks
      const int w = v / (KC * 2), row = v / 2 % KC, col = v % 2 * VEC;
      if (first + w < tiles && row < kc) {
        const T* src = b + ((first + w) * static_cast<int64_t>(k) + k0 + row) * 16 + col;
        *reinterpret_cast<uint4*>(&b_s[w][row][col]) = *reinterpret_cast<const uint4*>(src);
      }
    }
    __syncthreads();  // the slices are stored before any warp reads them

    // 2. This warp's tile: one A fragment and two B fragments per 16-wide step of k.
    if (tile < tiles) {
      for (int ks = 0; ks < kc; ks += 16) {
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::row_major> af;
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, T, nvcuda::wmma::row_major> bf;
        nvcuda::wmma::load_matrix_sync(af, &a_s[warp][0][ks], A_PITCH);
        nvcuda::wmma::load_matrix_sync(bf, &b_s[warp][ks][0], B_PITCH);
        nvcuda::wmma::mma_sync(acc, af, bf, acc);
      }
    }
    __syncthreads();  // 3. every warp is done with the slices before the next step overwrites them
  }
  // 4. The accumulator's layout is wmma's business: store it to this warp's own 16 x 16 of shared
  // memory, then each lane adds 8 consecutive floats (two float4, c is 16-byte aligned) into c.
  if (tile < tiles) {
    nvcuda::wmma::store_matrix_sync(&c_s[warp][0][0], acc, 16, nvcuda::wmma::mem_row_major);
    __syncwarp();
    float4* ct = reinterpret_cast<float4*>(c + tile * 256) + lane * 2;
    const float4* cs = reinterpret_cast<const float4*>(&c_s[warp][0][0]) + lane * 2;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float4 v = ct[j];
      const float4 d = cs[j];
      v.x += d.x; v.y += d.y; v.z += d.z; v.w += d.w;
      ct[j] = v;
    }
  }
}

template <typename T>
cudaError_t launch_mma_tile(float* c, const T* a, const T* b, int64_t tiles, int64_t k, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(c) % 16 == 0;
  if (tiles < 0 || k < 16 || k % 16 != 0 || k > INT32_MAX || !aligned) return cudaErrorInvalidValue;
  if (tiles == 0) return cudaSuccess;
  const int64_t blocks = course::ceil_div<int64_t>(tiles, WARPS);
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  mma_tile_kernel<T><<<static_cast<unsigned>(blocks), WARPS * 32, 0, stream>>>(c, a, b, tiles, static_cast<int>(k));
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t mma_tile_fp16(float* c, const __half* a, const __half* b, int64_t tiles, int64_t k,
                                        cudaStream_t stream) {
  return launch_mma_tile(c, a, b, tiles, k, stream);
}

COURSE_EXPORT cudaError_t mma_tile_bf16(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t tiles,
                                        int64_t k, cudaStream_t stream) {
  return launch_mma_tile(c, a, b, tiles, k, stream);
}
