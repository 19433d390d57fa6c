// CORRECT the learner's own cp.async / commit_group / wait_group / ldmatrix PTX as plain __device__ functions at file scope (no course/async.cuh), the kernel's arguments in a struct passed by value, the pipeline as a __device__ function template instead of a generic lambda, a per-device static flag for cudaFuncSetAttribute with fprintf(stderr) when it fails
// Day 10, gemm: C = A B^T. 128 x 256 block tiles of 8 warps (64 x 64 each), a 3-stage cp.async ring
// of 64-wide K tiles, XOR-swizzled rows, double-buffered fragments, grouped raster, C staged through
// shared memory for 16-byte stores. Plain loads fill the ring where cp.async cannot (K % 8 != 0 or
// misaligned a / b).
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "course/mma.cuh"

// ---- my PTX --------------------------------------------------------------------------------------

__device__ uint32_t smem_ptr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared, L2 only; src-size 0 (pred false) writes zeros and reads nothing
__device__ void cp_async_cg16(uint32_t dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(pred ? 16 : 0));
}

__device__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;\n" ::); }

// the ring is 3 deep: "the next tile has landed" is "at most 1 group of mine still in flight"
__device__ void cp_async_wait_all_but_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
__device__ void cp_async_wait_everything() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// ---- tiling ----------------------------------------------------------------------------------------

namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, GROUP_M = 8;
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
constexpr int MT = WM / 16, NT = WN / 8;
constexpr int CH = BK / 8, KSTEPS = BK / 16;
constexpr int A_CHUNKS = BM * CH, STAGE_CHUNKS = (BM + BN) * CH;
constexpr int A_LOADS = BM * CH / THREADS, B_LOADS = BN * CH / THREADS;
constexpr int ROW_STEP = THREADS / CH;
constexpr int C_PITCH = BN + 8;
constexpr int PIPE_BYTES = STAGES * STAGE_CHUNKS * 16, C_BYTES = BM * C_PITCH * 2;
constexpr int SMEM = PIPE_BYTES > C_BYTES ? PIPE_BYTES : C_BYTES;
static_assert(STAGES == 3, "cp_async_wait_all_but_one assumes STAGES - 2 == 1");
static_assert(KSTEPS % 2 == 0, "fragments alternate between two register buffers");

template <typename T>
struct GemmParams {
  T* c;
  const T* a;
  const T* b;
  int64_t m, n, k;
  bool aligned;  // a, b 16-byte aligned and k % 8 == 0: cp.async
  bool vec_c;    // c 16-byte aligned and n % 8 == 0: 16-byte stores of C
};

__device__ __forceinline__ int slot(int row, int chunk) { return row * CH + (chunk ^ (row & 7)); }

template <typename T>
__device__ __forceinline__ uint4 load_chunk_sync(const T* __restrict__ src, bool row_ok, int64_t col, int64_t k) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (!row_ok) return v;
  T e[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) e[j] = col + j < k ? src[j] : course::from_float<T>(0.0f);
  v = make_uint4(course::bits16(e[0]) | course::bits16(e[1]) << 16, course::bits16(e[2]) | course::bits16(e[3]) << 16,
                 course::bits16(e[4]) | course::bits16(e[5]) << 16, course::bits16(e[6]) | course::bits16(e[7]) << 16);
  return v;
}

template <typename T>
struct TileLoader {
  uint4* smem;
  uint32_t a_dst, b_dst;
  const T* a_src;
  const T* b_src;
  int64_t a_rows, b_rows;
  int64_t row_step, k;
  int ch, r0, tiles;

  __device__ __forceinline__ TileLoader(uint4* smem_, const GemmParams<T>& p, int64_t m0, int64_t n0, int tiles_)
      : smem(smem_), k(p.k), tiles(tiles_) {
    ch = threadIdx.x % CH;
    r0 = threadIdx.x / CH;
    a_dst = smem_ptr(smem) + slot(r0, ch) * 16;
    b_dst = a_dst + A_CHUNKS * 16;
    a_src = p.a + (m0 + r0) * p.k + ch * 8;
    b_src = p.b + (n0 + r0) * p.k + ch * 8;
    a_rows = p.m - m0 - r0;
    b_rows = p.n - n0 - r0;
    row_step = ROW_STEP * p.k;
  }

  template <bool ALIGNED>
  __device__ __forceinline__ void issue(int t) const {
    const uint32_t stage = (t % STAGES) * STAGE_CHUNKS * 16;
    const bool live = t < tiles;
    const int64_t k0 = static_cast<int64_t>(live ? t : 0) * BK;
    const bool col_ok = live && k0 + ch * 8 < k;
    if constexpr (ALIGNED) {
#pragma unroll
      for (int i = 0; i < A_LOADS; ++i)
        cp_async_cg16(a_dst + stage + i * ROW_STEP * CH * 16, a_src + i * row_step + k0, col_ok && i * ROW_STEP < a_rows);
#pragma unroll
      for (int i = 0; i < B_LOADS; ++i)
        cp_async_cg16(b_dst + stage + i * ROW_STEP * CH * 16, b_src + i * row_step + k0, col_ok && i * ROW_STEP < b_rows);
    } else {
      if (!live) return;
      uint4* sa = smem + (t % STAGES) * STAGE_CHUNKS;
      uint4* sb = sa + A_CHUNKS;
      for (int i = 0; i < A_LOADS; ++i)
        sa[slot(r0 + i * ROW_STEP, ch)] =
            load_chunk_sync(a_src + i * row_step + k0, i * ROW_STEP < a_rows, k0 + ch * 8, k);
      for (int i = 0; i < B_LOADS; ++i)
        sb[slot(r0 + i * ROW_STEP, ch)] =
            load_chunk_sync(b_src + i * row_step + k0, i * ROW_STEP < b_rows, k0 + ch * 8, k);
    }
  }
};

struct FragmentLoader {
  uint32_t a_frag[KSTEPS], b_frag[KSTEPS];

  __device__ __forceinline__ FragmentLoader(uint32_t smem0, int wm, int wn, int lane) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      a_frag[ks] = smem0 + slot(wm + lane % 16, 2 * ks + lane / 16) * 16;
      b_frag[ks] = smem0 + (A_CHUNKS + slot(wn + lane % 8 + lane / 16 * 8, 2 * ks + lane / 8 % 2)) * 16;
    }
  }

  __device__ __forceinline__ void load(uint32_t (&af)[MT][4], uint32_t (&bf)[NT / 2][4], int t, int ks) const {
    const uint32_t stage = (t % STAGES) * STAGE_CHUNKS * 16;
#pragma unroll
    for (int i = 0; i < MT; ++i) ldsm4(af[i], a_frag[ks] + stage + i * 16 * CH * 16);
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) ldsm4(bf[j], b_frag[ks] + stage + j * 16 * CH * 16);
  }
};

template <typename T>
__device__ __forceinline__ void mma_step(float (&acc)[MT][NT][4], const uint32_t (&af)[MT][4],
                                         const uint32_t (&bf)[NT / 2][4]) {
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint32_t bt[2] = {bf[j / 2][j % 2 * 2], bf[j / 2][j % 2 * 2 + 1]};
      course::mma_m16n8k16<T>(acc[i][j], af[i], bt);
    }
  }
}

// The main loop: a 3-deep ring of K tiles, one barrier per tile, fragments of the next k step loaded
// before this one's mma.
template <typename T, bool ALIGNED>
__device__ __forceinline__ void mainloop(const TileLoader<T>& tile, const FragmentLoader& frags,
                                         float (&acc)[MT][NT][4], int tiles) {
  uint32_t af[2][MT][4], bf[2][NT / 2][4];
#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    tile.template issue<ALIGNED>(t);
    cp_async_commit_group();
  }
  cp_async_wait_all_but_one();
  __syncthreads();
  frags.load(af[0], bf[0], 0, 0);

  for (int t = 0; t < tiles; ++t) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      if (ks == KSTEPS - 1) {
        cp_async_wait_all_but_one();  // tile t + 1 has landed (mine) ...
        __syncthreads();              // ... everyone's, and nobody reads tile t - 1's stage any more
        frags.load(af[0], bf[0], t + 1, 0);
      } else {
        frags.load(af[(ks + 1) % 2], bf[(ks + 1) % 2], t, ks + 1);
      }
      if (ks == 0) {
        tile.template issue<ALIGNED>(t + STAGES - 1);
        cp_async_commit_group();
      }
      mma_step<T>(acc, af[ks % 2], bf[ks % 2]);
    }
  }
}

template <typename T>
__device__ __forceinline__ void store_c_tile(const GemmParams<T>& p, const T* cs, int64_t m0, int64_t n0) {
  for (int v = threadIdx.x; v < BM * BN / 8; v += THREADS) {
    const int row = v / (BN / 8), col = v % (BN / 8) * 8;
    const int64_t gr = m0 + row, gc = n0 + col;
    if (gr >= p.m || gc >= p.n) continue;
    const uint4 val = *reinterpret_cast<const uint4*>(&cs[row * C_PITCH + col]);
    T* dst = p.c + gr * p.n + gc;
    if (p.vec_c && gc + 8 <= p.n) {
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(val.x), "r"(val.y), "r"(val.z),
                   "r"(val.w)
                   : "memory");
    } else {
      const uint32_t w[4] = {val.x, val.y, val.z, val.w};
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (gc + e < p.n) reinterpret_cast<uint16_t*>(dst)[e] = static_cast<uint16_t>(w[e / 2] >> (16 * (e % 2)));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1) gemm_pipelined(const GemmParams<T> p) {
  extern __shared__ __align__(128) uint4 smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;
  const int tiles = static_cast<int>((p.k + BK - 1) / BK);

  // grouped raster: GROUP_M block rows at a time, walked down each block column
  const int blocks_m = static_cast<int>((p.m + BM - 1) / BM);
  const int blocks_n = static_cast<int>((p.n + BN - 1) / BN);
  const int bid = static_cast<int>(blockIdx.x);
  const int group = bid / (GROUP_M * blocks_n);
  const int first_row = group * GROUP_M;
  const int height = min(GROUP_M, blocks_m - first_row);
  const int pos = bid - group * GROUP_M * blocks_n;
  const int64_t m0 = static_cast<int64_t>(first_row + pos % height) * BM;
  const int64_t n0 = static_cast<int64_t>(pos / height) * BN;

  const TileLoader<T> tile(smem, p, m0, n0, tiles);
  const FragmentLoader frags(smem_ptr(smem), wm, wn, lane);
  float acc[MT][NT][4] = {};
  if (p.aligned)
    mainloop<T, true>(tile, frags, acc, tiles);
  else
    mainloop<T, false>(tile, frags, acc, tiles);
  cp_async_wait_everything();
  __syncthreads();  // the ring becomes the C tile

  T* cs = reinterpret_cast<T*>(smem);
  const int qr = lane / 4, qc = lane % 4;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      uint32_t* top = reinterpret_cast<uint32_t*>(&cs[(wm + 16 * i + qr) * C_PITCH + wn + 8 * j + 2 * qc]);
      uint32_t* bottom = reinterpret_cast<uint32_t*>(&cs[(wm + 16 * i + qr + 8) * C_PITCH + wn + 8 * j + 2 * qc]);
      *top = course::pack2<T>(acc[i][j][0], acc[i][j][1]);
      *bottom = course::pack2<T>(acc[i][j][2], acc[i][j][3]);
    }
  __syncthreads();
  store_c_tile(p, cs, m0, n0);
}

template <typename T>
cudaError_t gemm_launch(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  const int64_t blocks = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
  if (blocks > INT32_MAX || (k + BK - 1) / BK > INT32_MAX) return cudaErrorInvalidValue;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  static bool smem_raised[64] = {};  // per device
  if (dev < 0 || dev >= 64 || !smem_raised[dev]) {
    err = cudaFuncSetAttribute(gemm_pipelined<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    if (err != cudaSuccess) {
      fprintf(stderr, "gemm: cannot raise the shared memory limit to %d bytes: %s\n", SMEM, cudaGetErrorString(err));
      return err;
    }
    if (dev >= 0 && dev < 64) smem_raised[dev] = true;
  }
  GemmParams<T> p;
  p.c = c;
  p.a = a;
  p.b = b;
  p.m = m;
  p.n = n;
  p.k = k;
  p.aligned = k % 8 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  p.vec_c = n % 8 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
  gemm_pipelined<T><<<static_cast<unsigned>(blocks), THREADS, SMEM, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n, int64_t k,
                                    cudaStream_t stream) {
  return gemm_launch(c, a, b, m, n, k, stream);
}

COURSE_EXPORT cudaError_t gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m,
                                    int64_t n, int64_t k, cudaStream_t stream) {
  return gemm_launch(c, a, b, m, n, k, stream);
}
