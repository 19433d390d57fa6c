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
// Target (grader/exercises/day09.py): @TARGET@.
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

  // BEGIN SOLUTION
  // STUB: // TODO: this warp's tile: acc = its 16 x 16 tile of c, acc += a b over all of k, store acc.
  // STUB: // 1. For each slice k0 = 0, KC, 2 KC, ... (the last may be shorter: kc = min(KC, k - k0)),
  // STUB: //    all 128 threads copy the 4 tiles' slices a[first + w][:, k0:k0 + kc] into a_s[w] and
  // STUB: //    b[first + w][k0:k0 + kc, :] into b_s[w], 16 bytes (uint4) at a time, skipping tiles
  // STUB: //    >= tiles. Then __syncthreads(): another warp's threads stored parts of your tile.
  // STUB: // 2. Per 16-wide step of the slice: course::ldmatrix_x4 for A (lane gives row lane % 16,
  // STUB: //    column (lane / 16) * 8), course::ldmatrix_x4_trans for B (which rows? see
  // STUB: //    course/mma.cuh), two course::mma_m16n8k16<T> (n = 0-7 and 8-15) into float acc[2][4].
  // STUB: // 3. __syncthreads() before the next slice overwrites a_s and b_s.
  // STUB: // 4. Add acc to c (c[2]/c[3] are 8 rows below c[0]/c[1]; see course/mma.cuh for which lane
  // STUB: //    holds which element), only for tile < tiles.
  // acc[j] is the 16 x 8 half n = 8 j .. 8 j + 7 of the tile, in the C layout of course/mma.cuh.
  float acc[2][4] = {};
  const int group = lane / 4, pair = lane % 4;
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
        uint32_t af[4], bf[4];
        // A: lanes 0-15 give rows 0-15 at column ks, lanes 16-31 rows 0-15 at ks + 8, so that
        // the four 8 x 8 tiles come back as a[0..3] = (rows 0-7 | 8-15) x (k 0-7 | 8-15).
        course::ldmatrix_x4(af, &a_s[warp][lane % 16][ks + (lane / 16) * 8]);
        // B is stored [k][n]: tile i of the x4 is k rows ks + 8 (i % 2) .. + 7 at n columns
        // 8 (i / 2) .. + 7, transposed on the way, so bf = {b[0], b[1]} of n 0-7, then of n 8-15.
        course::ldmatrix_x4_trans(bf, &b_s[warp][ks + (lane % 16)][(lane / 16) * 8]);
        const uint32_t b_lo[2] = {bf[0], bf[1]}, b_hi[2] = {bf[2], bf[3]};
        course::mma_m16n8k16<T>(acc[0], af, b_lo);
        course::mma_m16n8k16<T>(acc[1], af, b_hi);
      }
    }
    __syncthreads();  // 3. every warp is done with the slices before the next step overwrites them
  }
  // 4. acc[j][0..1] is row `group`, columns 8 j + 2 pair (+1); acc[j][2..3] is row group + 8.
  if (tile < tiles) {
    float* ct = c + tile * 256;  // (16, 16)
    for (int j = 0; j < 2; ++j) {
      const int col = 8 * j + 2 * pair;
      ct[group * 16 + col] += acc[j][0];
      ct[group * 16 + col + 1] += acc[j][1];
      ct[(group + 8) * 16 + col] += acc[j][2];
      ct[(group + 8) * 16 + col + 1] += acc[j][3];
    }
  }
  // END SOLUTION
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
