// CORRECT kernel arguments in a struct passed by value, dynamic shared memory raised with cudaFuncSetAttribute, one void* launcher with a runtime dtype switch, a grid-stride loop over groups of tiles sized from a static SM-count cache, fprintf(stderr) on bad arguments, float2 updates of c
// Day 9, mma_tile, as I structured it: the block's 4 warps stage the slices of 4 tiles together
// (16-byte loads), each warp then runs ldmatrix + mma.sync on its own tile. Blocks loop over
// groups of 4 tiles so that the grid stays a few waves large.
#include <cstdio>

#include "course/mma.cuh"

namespace {

enum class DType { f16, bf16 };

constexpr int WARPS = 4;
constexpr int KC = 64;
constexpr int A_LD = KC + 8;  // padded row pitches (elements)
constexpr int B_LD = 16 + 8;
using u32 = uint32_t;

template <typename T>
struct TileArgs {
  float* c;       // [tiles, 16, 16]
  const T* a;     // [tiles, 16, k]
  const T* b;     // [tiles, k, 16]
  int64_t tiles;
  int k;
};

template <typename T>
constexpr int smem_bytes() {
  return WARPS * (16 * A_LD + KC * B_LD) * static_cast<int>(sizeof(T));
}

template <typename T>
__global__ void __launch_bounds__(WARPS * 32) tile_mma_kernel(const TileArgs<T> args) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* a_s = reinterpret_cast<T*>(smem);   // [WARPS][16][A_LD]
  T* b_s = a_s + WARPS * 16 * A_LD;      // [WARPS][KC][B_LD]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t groups = (args.tiles + WARPS - 1) / WARPS;

  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {  // same trip count for the whole block
    const int64_t first = g * WARPS, tile = first + warp;
    float acc[2][4] = {};
    for (int k0 = 0; k0 < args.k; k0 += KC) {
      const int kc = min(KC, args.k - k0);
      for (int v = threadIdx.x; v < WARPS * 16 * (KC / 8); v += WARPS * 32) {
        const int w = v / (16 * (KC / 8)), row = (v / (KC / 8)) % 16, col = (v % (KC / 8)) * 8;
        if (first + w < args.tiles && col < kc) {
          const T* src = args.a + ((first + w) * 16 + row) * static_cast<int64_t>(args.k) + k0 + col;
          *reinterpret_cast<uint4*>(a_s + (w * 16 + row) * A_LD + col) = *reinterpret_cast<const uint4*>(src);
        }
      }
      for (int v = threadIdx.x; v < WARPS * KC * 2; v += WARPS * 32) {
        const int w = v / (KC * 2), row = (v / 2) % KC, col = (v % 2) * 8;
        if (first + w < args.tiles && row < kc) {
          const T* src = args.b + ((first + w) * static_cast<int64_t>(args.k) + k0 + row) * 16 + col;
          *reinterpret_cast<uint4*>(b_s + (w * KC + row) * B_LD + col) = *reinterpret_cast<const uint4*>(src);
        }
      }
      __syncthreads();
      if (tile < args.tiles) {
        const T* my_a = a_s + warp * 16 * A_LD;
        const T* my_b = b_s + warp * KC * B_LD;
#pragma unroll 2
        for (int ks = 0; ks < kc; ks += 16) {
          u32 af[4], bf[4];
          course::ldmatrix_x4(af, my_a + (lane % 16) * A_LD + ks + (lane / 16) * 8);
          course::ldmatrix_x4_trans(bf, my_b + (ks + lane % 16) * B_LD + (lane / 16) * 8);
          const u32 n_lo[2] = {bf[0], bf[1]};
          const u32 n_hi[2] = {bf[2], bf[3]};
          course::mma_m16n8k16<T>(acc[0], af, n_lo);
          course::mma_m16n8k16<T>(acc[1], af, n_hi);
        }
      }
      __syncthreads();
    }
    if (tile < args.tiles) {  // lane holds rows lane/4 and lane/4 + 8, columns 2 (lane%4) + {0, 1}
      float* ct = args.c + tile * 256;
      const int row = lane / 4;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = 8 * j + 2 * (lane % 4);
        float2* top = reinterpret_cast<float2*>(ct + row * 16 + col);
        float2* bottom = reinterpret_cast<float2*>(ct + (row + 8) * 16 + col);
        float2 t = *top, u = *bottom;
        t.x += acc[j][0];
        t.y += acc[j][1];
        u.x += acc[j][2];
        u.y += acc[j][3];
        *top = t;
        *bottom = u;
      }
    }
  }
}

int sm_count() {
  static int cached[64] = {};  // per device id
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  if (cached[dev] == 0) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cached[dev] = sms > 0 ? sms : 132;
  }
  return cached[dev];
}

template <typename T>
cudaError_t launch_typed(float* c, const void* a, const void* b, int64_t tiles, int k, cudaStream_t stream) {
  constexpr int SMEM = smem_bytes<T>();
  cudaError_t err = cudaFuncSetAttribute(tile_mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  if (err != cudaSuccess) {
    fprintf(stderr, "mma_tile: cudaFuncSetAttribute failed: %s\n", cudaGetErrorString(err));
    return err;
  }
  const TileArgs<T> args{c, static_cast<const T*>(a), static_cast<const T*>(b), tiles, k};
  const int64_t groups = (tiles + WARPS - 1) / WARPS;
  const int64_t cap = static_cast<int64_t>(sm_count()) * 16;
  const unsigned grid = static_cast<unsigned>(groups < cap ? groups : cap);
  tile_mma_kernel<T><<<grid, WARPS * 32, SMEM, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t launch(DType dt, float* c, const void* a, const void* b, int64_t tiles, int64_t k, cudaStream_t stream) {
  const bool aligned = (reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                        reinterpret_cast<uintptr_t>(c)) % 16 == 0;
  if (tiles < 0 || k < 16 || k % 16 != 0 || k > INT32_MAX || !aligned) {
    fprintf(stderr, "mma_tile: bad arguments (tiles %lld, k %lld, 16-byte aligned %d)\n",
            static_cast<long long>(tiles), static_cast<long long>(k), aligned ? 1 : 0);
    return cudaErrorInvalidValue;
  }
  if (tiles == 0) return cudaSuccess;
  switch (dt) {
    case DType::f16: return launch_typed<__half>(c, a, b, tiles, static_cast<int>(k), stream);
    case DType::bf16: return launch_typed<__nv_bfloat16>(c, a, b, tiles, static_cast<int>(k), stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

COURSE_EXPORT cudaError_t mma_tile_fp16(float* c, const __half* a, const __half* b, int64_t tiles, int64_t k,
                                        cudaStream_t stream) {
  return launch(DType::f16, c, a, b, tiles, k, stream);
}

COURSE_EXPORT cudaError_t mma_tile_bf16(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t tiles,
                                        int64_t k, cudaStream_t stream) {
  return launch(DType::bf16, c, a, b, tiles, k, stream);
}
