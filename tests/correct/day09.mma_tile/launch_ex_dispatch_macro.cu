// CORRECT one void* launcher with an enum class dtype tag and a learner-written AT_DISPATCH-style macro (a lambda per type), the kernel launched with cudaLaunchKernelEx and a cudaLaunchConfig_t, static_asserts on the slice and pitches
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
#include "course/mma.cuh"

// The learner's own dtype dispatch: one launcher takes a Dtype tag and void pointers, and a macro
// opens a scope in which `scalar_t` is the element type (as PyTorch's AT_DISPATCH does).
enum class Dtype { kF16, kBF16 };

#define DISPATCH_HALF_TYPES(DTYPE, ...)                    \
  [&]() -> cudaError_t {                                   \
    switch (DTYPE) {                                       \
      case Dtype::kF16: {                                  \
        using scalar_t = __half;                           \
        return __VA_ARGS__();                              \
      }                                                    \
      case Dtype::kBF16: {                                 \
        using scalar_t = __nv_bfloat16;                    \
        return __VA_ARGS__();                              \
      }                                                    \
    }                                                      \
    return cudaErrorInvalidValue;                          \
  }()

namespace {

constexpr int WARPS = 4;   // tiles per block, one per warp
constexpr int KC = 64;     // the slice of k staged per step
constexpr int A_PITCH = KC + 8;  // (halves) row pitch of a staged A tile: 144 bytes, see below
constexpr int B_PITCH = 16 + 8;  // (halves) row pitch of a staged B tile: 48 bytes
// Why the pads: ldmatrix reads 8 rows of 16 bytes at once. Rows 128 bytes apart (an unpadded A
// slice) would all start in the same 4 banks: an 8-way conflict. At a pitch of 144 bytes the 8
// rows start 9 x 16 bytes apart, in 8 different groups of 4 banks; at 48 bytes, 3 x 16 apart:
// conflict-free too. Both pitches stay multiples of 16 bytes, which ldmatrix needs.
static_assert(KC % 16 == 0 && KC % 8 == 0, "a slice is whole mma k steps of whole 16-byte chunks");
static_assert((A_PITCH * 2) % 16 == 0 && (B_PITCH * 2) % 16 == 0, "ldmatrix rows start on 16 bytes");
static_assert((A_PITCH / 8) % 2 == 1 && (B_PITCH / 8) % 2 == 1, "an odd number of 16-byte chunks per row");

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
}

cudaError_t launch_mma_tile(Dtype dtype, float* c, const void* a, const void* b, int64_t tiles, int64_t k,
                            cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(c) % 16 == 0;
  if (tiles < 0 || k < 16 || k % 16 != 0 || k > INT32_MAX || !aligned) return cudaErrorInvalidValue;
  if (tiles == 0) return cudaSuccess;
  const int64_t blocks = course::ceil_div<int64_t>(tiles, WARPS);
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  // cudaLaunchKernelEx with a launch configuration instead of <<<...>>>.
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(WARPS * 32);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = nullptr;
  cfg.numAttrs = 0;
  const int kk = static_cast<int>(k);
  return DISPATCH_HALF_TYPES(dtype, [&] {
    return cudaLaunchKernelEx(&cfg, mma_tile_kernel<scalar_t>, c, static_cast<const scalar_t*>(a),
                              static_cast<const scalar_t*>(b), tiles, kk);
  });
}

}  // namespace

COURSE_EXPORT cudaError_t mma_tile_fp16(float* c, const __half* a, const __half* b, int64_t tiles, int64_t k,
                                        cudaStream_t stream) {
  return launch_mma_tile(Dtype::kF16, c, a, b, tiles, k, stream);
}

COURSE_EXPORT cudaError_t mma_tile_bf16(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t tiles,
                                        int64_t k, cudaStream_t stream) {
  return launch_mma_tile(Dtype::kBF16, c, a, b, tiles, k, stream);
}
