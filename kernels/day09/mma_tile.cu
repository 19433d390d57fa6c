// Your exercise: fill in the TODOs (about 41 lines). Generated from solutions/day09/mma_tile.cu by `grader release` (stub-hash 7a4232adb30a).
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
// k = 1024 (553 MB) an H200's copy at ~4.2 TB/s gives ~130 us (~185 us at an H100's ~3 TB/s).
// Target (grader/exercises/day09.py): >= 0.60x device-to-device copy (GB/s).
#include "course/mma.cuh"

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
  __shared__ __align__(16) T a_s[WARPS][16][A_PITCH];  // (tile, m, k) this step's slice of A
  __shared__ __align__(16) T b_s[WARPS][KC][B_PITCH];  // (tile, k, n) this step's slice of B
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * WARPS;  // the block's first tile
  const int64_t tile = first + warp;                                // this warp's tile
  constexpr int VEC = 8;                                            // halves in 16 bytes

  // TODO: this warp's tile: acc = its 16 x 16 tile of c, acc += a b over all of k, store acc.
  // 1. For each slice k0 = 0, KC, 2 KC, ... (the last may be shorter: kc = min(KC, k - k0)),
  //    all 128 threads copy the 4 tiles' slices a[first + w][:, k0:k0 + kc] into a_s[w] and
  //    b[first + w][k0:k0 + kc, :] into b_s[w], 16 bytes (uint4) at a time, skipping tiles
  //    >= tiles. Then __syncthreads(): another warp's threads stored parts of your tile.
  // 2. Per 16-wide step of the slice: course::ldmatrix_x4 for A (lane gives row lane % 16,
  //    column (lane / 16) * 8), course::ldmatrix_x4_trans for B (which rows? see
  //    course/mma.cuh), two course::mma_m16n8k16<T> (n = 0-7 and 8-15) into float acc[2][4].
  // 3. __syncthreads() before the next slice overwrites a_s and b_s.
  // 4. Add acc to c (c[2]/c[3] are 8 rows below c[0]/c[1]; see course/mma.cuh for which lane
  //    holds which element), only for tile < tiles.
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
