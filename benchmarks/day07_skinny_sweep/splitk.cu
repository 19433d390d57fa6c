// Day 7 tuning sweep (temporary): split-K / stream-K skinny GEMM, y[M, N] = x[M, K] @ W[N, K]^T.
//
// Work = RT x KT tiles (RT = ceil(N / ROWS) row tiles, KT = ceil(K / K_TILE) k tiles), numbered
// row-tile-major (k fastest). Block b of a grid of G takes the contiguous tile range
// [b * total / G, (b + 1) * total / G) and streams it through one STAGES-deep ring (cp.async, or
// bulk copies + mbarriers), never draining between row tiles. A "segment" is the part of the
// range inside one row tile; at its end the block's KSPLIT k-part warps meet in shared memory and
//   - if the segment is the whole row tile: round and store y directly (no atomics);
//   - else: red.global.add.f32 its fp32 sums into g_ws[m][n], then add its number of k tiles to
//     the row tile's counter (atom.acq_rel.gpu); the block that completes KT reads g_ws (ld.cg),
//     writes y, and zeroes g_ws and the counter: the workspace cleans itself for the next call.
// Grid (runtime `split`): split >= 1: G = RT * split (classic split-K: each block 1/split of a row
// tile's k range; split = 1: no atomics at all); split = 0: G = resident blocks (stream-K, one
// exactly balanced wave); split = -w: G = w * SMs.
// Fast path only: K % 8 == 0, x and W 16-byte aligned, M <= MTOK, N <= MAX_N (any N % ROWS).
// Not safe for two calls running concurrently on different streams (one shared workspace).
#include "course/async.cuh"
#include "course/mma.cuh"
#include "course/vec.cuh"

namespace splitk {

constexpr int CHUNK = 8;          // 16-bit elements per 16-byte copy
constexpr int MAX_M = 16;
constexpr int MAX_N = 28672;
constexpr int MIN_ROWS = 16;
constexpr int SMEM_PER_SM = 233472;  // sm_90: 228 KB per SM (1 KB of it reserved per block)

__device__ float g_ws[MAX_M * MAX_N];         // fp32 partial sums, [m][n]; zero between calls
__device__ int g_cnt[MAX_N / MIN_ROWS];       // k tiles summed so far, per row tile; zero between calls

template <int RG, int KS, int K_TILE, int MTOK, int STAGES, bool BULK>
struct Cfg {
  static constexpr int ROWS = 16 * RG, THREADS = 32 * RG * KS, CPR = K_TILE / CHUNK;
  static constexpr int STEPS = K_TILE / KS / 32;  // 32 k values (two mma k16) per step
  // Bulk copies write rows as they are: pad each row by 64 bytes (stride = 64 mod 128 bytes), so
  // that rows g and g + 1 read at the same chunk fall in different bank halves. cp.async rows are
  // unpadded and swizzled instead (chunk c of an odd row at c ^ 4).
  static constexpr int ROW_ELEMS = BULK ? K_TILE + 32 : K_TILE;
  static constexpr int STAGE_ELEMS = (ROWS + MTOK) * ROW_ELEMS;
  static constexpr int SLOT = RG * 32 * (MTOK / 2);  // floats of one k part in `red`
  static constexpr int BAR_BYTES = 128;
  static constexpr int SMEM = BAR_BYTES + STAGES * STAGE_ELEMS * 2 + (KS > 1 ? KS - 1 : 0) * SLOT * 4;
  static constexpr int BPS_RAW = SMEM_PER_SM / (SMEM + 1024 + 16);
  static constexpr int BPS = BPS_RAW < 1 ? 1 : (BPS_RAW > 4 ? 4 : BPS_RAW);  // blocks per SM (smem)
  static_assert(STEPS >= 1, "K_TILE must hold 32 k values per k part");
  static_assert(K_TILE % 64 == 0, "K_TILE: whole 8-chunk swizzle groups");
  static_assert(STAGES * 8 <= BAR_BYTES, "barriers");
  static_assert(SMEM <= 232448, "shared memory per block");
  static_assert(MTOK == 8 || MTOK == 16, "tokens padded to 8 or 16");
};

template <int K_TILE, bool BULK>
__device__ __forceinline__ int soff(int row, int chunk) {
  if constexpr (BULK) return row * (K_TILE + 32) + chunk * CHUNK;
  else return row * K_TILE + ((chunk ^ ((row & 1) << 2)) * CHUNK);
}

__device__ __forceinline__ int atomic_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

template <typename T, int RG, int KS, int K_TILE, int MTOK, int STAGES, bool BULK>
__global__ void __launch_bounds__(32 * RG * KS, (Cfg<RG, KS, K_TILE, MTOK, STAGES, BULK>::BPS))
    splitk_kernel(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w, int M, int N, int K,
                  int KT, int64_t total) {
  using C = Cfg<RG, KS, K_TILE, MTOK, STAGES, BULK>;
  constexpr int ROWS = C::ROWS, THREADS = C::THREADS, CPR = C::CPR, STEPS = C::STEPS;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem_raw);
  T* stages = reinterpret_cast<T*>(smem_raw + C::BAR_BYTES);
  float* red = reinterpret_cast<float*>(smem_raw + C::BAR_BYTES + STAGES * C::STAGE_ELEMS * 2);
  __shared__ int s_last;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rg = warp % RG, kh = warp / RG;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * total / gridDim.x;
  const int64_t end = static_cast<int64_t>(blockIdx.x + 1) * total / gridDim.x;
  const int tiles = static_cast<int>(end - begin);
  int l_rt = static_cast<int>(begin / KT), l_kt = static_cast<int>(begin % KT);  // next tile to load
  int c_rt = l_rt, c_kt = l_kt, seg_kt0 = l_kt;  // tile to multiply; first k tile of its segment

  // Tile (rt, kt) into ring buffer s. Rows past N and tokens past M are not loaded (their garbage
  // only reaches outputs that are never stored); k past K is zero in weight and x alike.
  auto load = [&](int s, int rt, int kt) {
    T* st = stages + s * C::STAGE_ELEMS;
    const int n0 = rt * ROWS, k0 = kt * K_TILE;
    if constexpr (!BULK) {
      // THREADS % CPR == 0: a thread copies the same chunk c of rows r0, r0 + RSTEP, ... (RSTEP even,
      // so one swizzle for all of them); a warp reads 512 contiguous bytes (or whole row pieces).
      static_assert(THREADS % CPR == 0 && (THREADS / CPR) % 2 == 0, "copy layout");
      constexpr int RSTEP = THREADS / CPR, ITERS = ROWS / RSTEP;
      const int c = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
      const T* src = w + static_cast<int64_t>(n0 + r0) * K + k0 + c * CHUNK;
      T* dst = st + soff<K_TILE, false>(r0, c);
      if (n0 + ROWS <= N && k0 + K_TILE <= K) {  // all but the edge tiles
#pragma unroll
        for (int i = 0; i < ITERS; ++i)
          course::cp_async<16, course::CacheHint::cg>(dst + i * RSTEP * K_TILE, src + static_cast<int64_t>(i) * RSTEP * K);
      } else {
        const bool kin = k0 + c * CHUNK < K;
#pragma unroll
        for (int i = 0; i < ITERS; ++i)
          if (n0 + r0 + i * RSTEP < N)
            course::cp_async_zfill<16, course::CacheHint::cg>(dst + i * RSTEP * K_TILE,
                                                              kin ? src + static_cast<int64_t>(i) * RSTEP * K : w, kin);
      }
      for (int q = threadIdx.x; q < M * CPR; q += THREADS) {
        const int m = q / CPR, cx = q % CPR, k = k0 + cx * CHUNK;
        course::cp_async_zfill<16, course::CacheHint::cg>(st + soff<K_TILE, false>(ROWS + m, cx),
                                                          k < K ? x + static_cast<int64_t>(m) * K + k : x, k < K);
      }
    } else {
      const int kval = min(K_TILE, K - k0), rows = min(ROWS, N - n0);
      if (kval < K_TILE) {  // last k tile: zeros past K (generic stores; the copies write elsewhere)
        const int c0 = kval / CHUNK;
        for (int q = threadIdx.x; q < (ROWS + MTOK) * (CPR - c0); q += THREADS) {
          const int row = q / (CPR - c0), c = c0 + q % (CPR - c0);
          *reinterpret_cast<uint4*>(st + soff<K_TILE, true>(row, c)) = make_uint4(0, 0, 0, 0);
        }
        // generic writes to bytes that later bulk copies (async proxy) overwrite: order them
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      }
      if (warp == 0) {
        uint64_t* bar = bars + s;
        const uint32_t bytes = static_cast<uint32_t>(kval) * 2;
        if (lane == 0) course::mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>(rows + M) * bytes);
        __syncwarp();
        for (int r = lane; r < rows; r += 32)
          course::cp_async_bulk(st + r * C::ROW_ELEMS, w + static_cast<int64_t>(n0 + r) * K + k0, bytes, bar);
        for (int m = lane; m < M; m += 32)
          course::cp_async_bulk(st + (ROWS + m) * C::ROW_ELEMS, x + static_cast<int64_t>(m) * K + k0, bytes, bar);
      }
    }
  };

  float acc[MTOK / 8][4] = {};
  const bool two = MTOK == 16 && M > 8;  // tokens 8-15 exist (uniform)

  // End of a segment (row tile rt, k tiles kt0..kt1): see the header.
  auto flush = [&](int rt, int kt0, int kt1) {
    const int n0 = rt * ROWS;
    if constexpr (KS > 1) {
      float* mine = red + (kh > 0 ? kh - 1 : 0) * C::SLOT + (rg * 32 + lane) * (MTOK / 2);
      if (kh > 0) {
#pragma unroll
        for (int h = 0; h < MTOK / 8; ++h)
#pragma unroll
          for (int i = 0; i < 4; ++i) mine[h * 4 + i] = acc[h][i];
      }
      __syncthreads();
      if (kh == 0) {
#pragma unroll
        for (int part = 0; part < KS - 1; ++part)
#pragma unroll
          for (int h = 0; h < MTOK / 8; ++h)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[h][i] += mine[part * C::SLOT + h * 4 + i];
      }
    }
    const bool whole = kt0 == 0 && kt1 == KT - 1;
    if (kh == 0) {
#pragma unroll
      for (int h = 0; h < MTOK / 8; ++h)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = n0 + rg * 16 + g + (i / 2) * 8, m = h * 8 + 2 * t + i % 2;
          if (n < N && m < M) {
            if (whole) y[static_cast<int64_t>(m) * N + n] = course::from_float<T>(acc[h][i]);
            else atomicAdd(&g_ws[m * MAX_N + n], acc[h][i]);  // result unused: RED.E.ADD.F32
          }
        }
    }
#pragma unroll
    for (int h = 0; h < MTOK / 8; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[h][i] = 0.0f;
    if (!whole) {
      __syncthreads();  // every red of this block issued (ordered before thread 0's release)
      if (threadIdx.x == 0) {
        const int add = kt1 - kt0 + 1;
        s_last = atomic_add_acq_rel(&g_cnt[rt], add) + add == KT;
      }
      __syncthreads();
      if (s_last) {  // every other segment of this row tile has been added: finish it
        for (int q = threadIdx.x; q < M * ROWS; q += THREADS) {
          const int m = q / ROWS, n = n0 + q % ROWS;
          if (n < N) {
            float* p = &g_ws[m * MAX_N + n];
            y[static_cast<int64_t>(m) * N + n] = course::from_float<T>(__ldcg(p));
            __stcg(p, 0.0f);
          }
        }
        if (threadIdx.x == 0) g_cnt[rt] = 0;
      }
    }
  };

  if constexpr (BULK) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < STAGES; ++s) course::mbarrier_init(bars + s, 1);
      course::fence_barrier_init();
    }
    __syncthreads();
  }
#pragma unroll
  for (int f = 0; f < STAGES - 1; ++f) {
    if (f < tiles) {
      load(f, l_rt, l_kt);
      if (++l_kt == KT) l_kt = 0, ++l_rt;
    }
    if constexpr (!BULK) course::cp_async_commit();
  }
  int s = 0, phase = 0, ls = STAGES - 1;  // buffer of tile f, its use parity, buffer of tile f + STAGES - 1
  for (int f = 0; f < tiles; ++f) {
    if constexpr (BULK) course::mbarrier_wait(bars + s, phase);
    else course::cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile f visible to all; nobody still reads tile f - 1's buffer (= ls)
    if (f + STAGES - 1 < tiles) {
      load(ls, l_rt, l_kt);
      if (++l_kt == KT) l_kt = 0, ++l_rt;
    }
    if constexpr (!BULK) course::cp_async_commit();
    const T* sw = stages + s * C::STAGE_ELEMS;
    const T* sx = sw + ROWS * C::ROW_ELEMS;
#pragma unroll
    for (int st = 0; st < STEPS; ++st) {
      const int c = (kh * STEPS + st) * 4 + t;
      const uint4 w0 = *reinterpret_cast<const uint4*>(sw + soff<K_TILE, BULK>(rg * 16 + g, c));
      const uint4 w1 = *reinterpret_cast<const uint4*>(sw + soff<K_TILE, BULK>(rg * 16 + g + 8, c));
      const uint32_t a_lo[4] = {w0.x, w1.x, w0.y, w1.y}, a_hi[4] = {w0.z, w1.z, w0.w, w1.w};
#pragma unroll
      for (int h = 0; h < MTOK / 8; ++h) {
        if (h == 1 && !two) break;
        const uint4 xv = *reinterpret_cast<const uint4*>(sx + soff<K_TILE, BULK>(h * 8 + g, c));
        const uint32_t b_lo[2] = {xv.x, xv.y}, b_hi[2] = {xv.z, xv.w};
        course::mma_m16n8k16<T>(acc[h], a_lo, b_lo);
        course::mma_m16n8k16<T>(acc[h], a_hi, b_hi);
      }
    }
    if (c_kt == KT - 1 || f == tiles - 1) {
      flush(c_rt, seg_kt0, c_kt);
      seg_kt0 = 0;
    }
    if (++c_kt == KT) c_kt = 0, ++c_rt;
    if (++s == STAGES) s = 0, phase ^= 1;
    if (++ls == STAGES) ls = 0;
  }
  if constexpr (!BULK) course::cp_async_wait<0>();
}

template <typename T, int RG, int KS, int K_TILE, int MTOK, int STAGES, bool BULK>
cudaError_t launch(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split,
                   cudaStream_t stream) {
  using C = Cfg<RG, KS, K_TILE, MTOK, STAGES, BULK>;
  if (M < 1 || M > MTOK || N < 1 || N > MAX_N || K < CHUNK || K % CHUNK != 0 || K > (1 << 30) ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  auto kernel = splitk_kernel<T, RG, KS, K_TILE, MTOK, STAGES, BULK>;
  static int resident = 0, sms = 0;  // asked once per instantiation
  if (resident == 0) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (err != cudaSuccess) return err;
    int device = 0, per_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, C::THREADS, C::SMEM);
    if (err != cudaSuccess) return err;
    resident = sms * (per_sm > 0 ? per_sm : 1);
  }
  const int RT = static_cast<int>((N + C::ROWS - 1) / C::ROWS), KT = static_cast<int>((K + K_TILE - 1) / K_TILE);
  const int64_t total = static_cast<int64_t>(RT) * KT;
  int64_t grid = split >= 1 ? RT * split : split == 0 ? resident : -split * sms;
  grid = grid < 1 ? 1 : (grid > total ? total : grid);
  if (grid > INT32_MAX) return cudaErrorInvalidValue;
  kernel<<<static_cast<unsigned>(grid), C::THREADS, C::SMEM, stream>>>(
      static_cast<T*>(y), static_cast<const T*>(x), static_cast<const T*>(w), static_cast<int>(M),
      static_cast<int>(N), static_cast<int>(K), KT, total);
  return cudaGetLastError();
}

template <int RG, int KS, int K_TILE, int MTOK, int STAGES, bool BULK>
cudaError_t dispatch(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split,
                     bool fp16, cudaStream_t stream) {
  if (fp16) return launch<__half, RG, KS, K_TILE, MTOK, STAGES, BULK>(y, x, w, M, N, K, split, stream);
  return launch<__nv_bfloat16, RG, KS, K_TILE, MTOK, STAGES, BULK>(y, x, w, M, N, K, split, stream);
}

// Resident blocks per SM that shared memory allows (for the report), as the kernel's launch bounds assume.
template <int RG, int KS, int K_TILE, int MTOK, int STAGES, bool BULK>
int64_t info(int64_t what) {
  using C = Cfg<RG, KS, K_TILE, MTOK, STAGES, BULK>;
  return what == 0 ? C::SMEM : what == 1 ? C::BPS : what == 2 ? C::THREADS : C::ROWS;
}

}  // namespace splitk

// Entry points, written out by tmp_d7/gen_splitk.py (the export parser reads literal prototypes):
// sk_rg{RG}_ks{KS}_t{K_TILE}_m{MTOK}_s{STAGES}_{cp|bulk}(y, x, w, M, N, K, split, fp16);
// info_<same>(what): 0 shared bytes, 1 blocks per SM (smem), 2 threads, 3 rows per tile.
// BEGIN EXPORTS
COURSE_EXPORT cudaError_t sk_rg4_ks2_t128_m8_s4_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<4, 2, 128, 8, 4, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg4_ks2_t128_m8_s4_cp(int64_t what) { return splitk::info<4, 2, 128, 8, 4, false>(what); }
COURSE_EXPORT cudaError_t sk_rg4_ks2_t128_m8_s6_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<4, 2, 128, 8, 6, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg4_ks2_t128_m8_s6_cp(int64_t what) { return splitk::info<4, 2, 128, 8, 6, false>(what); }
COURSE_EXPORT cudaError_t sk_rg4_ks2_t256_m8_s4_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<4, 2, 256, 8, 4, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg4_ks2_t256_m8_s4_cp(int64_t what) { return splitk::info<4, 2, 256, 8, 4, false>(what); }
COURSE_EXPORT cudaError_t sk_rg2_ks4_t256_m8_s4_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<2, 4, 256, 8, 4, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg2_ks4_t256_m8_s4_cp(int64_t what) { return splitk::info<2, 4, 256, 8, 4, false>(what); }
COURSE_EXPORT cudaError_t sk_rg2_ks2_t128_m8_s8_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<2, 2, 128, 8, 8, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg2_ks2_t128_m8_s8_cp(int64_t what) { return splitk::info<2, 2, 128, 8, 8, false>(what); }
COURSE_EXPORT cudaError_t sk_rg1_ks4_t512_m8_s4_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<1, 4, 512, 8, 4, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg1_ks4_t512_m8_s4_cp(int64_t what) { return splitk::info<1, 4, 512, 8, 4, false>(what); }
COURSE_EXPORT cudaError_t sk_rg4_ks2_t128_m8_s4_bulk(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<4, 2, 128, 8, 4, true>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg4_ks2_t128_m8_s4_bulk(int64_t what) { return splitk::info<4, 2, 128, 8, 4, true>(what); }
COURSE_EXPORT cudaError_t sk_rg2_ks4_t256_m8_s4_bulk(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<2, 4, 256, 8, 4, true>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg2_ks4_t256_m8_s4_bulk(int64_t what) { return splitk::info<2, 4, 256, 8, 4, true>(what); }
COURSE_EXPORT cudaError_t sk_rg4_ks2_t128_m16_s5_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<4, 2, 128, 16, 5, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg4_ks2_t128_m16_s5_cp(int64_t what) { return splitk::info<4, 2, 128, 16, 5, false>(what); }
COURSE_EXPORT cudaError_t sk_rg4_ks2_t128_m16_s4_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<4, 2, 128, 16, 4, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg4_ks2_t128_m16_s4_cp(int64_t what) { return splitk::info<4, 2, 128, 16, 4, false>(what); }
COURSE_EXPORT cudaError_t sk_rg8_ks1_t64_m16_s6_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<8, 1, 64, 16, 6, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg8_ks1_t64_m16_s6_cp(int64_t what) { return splitk::info<8, 1, 64, 16, 6, false>(what); }
COURSE_EXPORT cudaError_t sk_rg8_ks2_t128_m16_s4_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<8, 2, 128, 16, 4, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg8_ks2_t128_m16_s4_cp(int64_t what) { return splitk::info<8, 2, 128, 16, 4, false>(what); }
COURSE_EXPORT cudaError_t sk_rg2_ks4_t256_m16_s4_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<2, 4, 256, 16, 4, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg2_ks4_t256_m16_s4_cp(int64_t what) { return splitk::info<2, 4, 256, 16, 4, false>(what); }
COURSE_EXPORT cudaError_t sk_rg1_ks8_t512_m16_s3_cp(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<1, 8, 512, 16, 3, false>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg1_ks8_t512_m16_s3_cp(int64_t what) { return splitk::info<1, 8, 512, 16, 3, false>(what); }
COURSE_EXPORT cudaError_t sk_rg4_ks2_t128_m16_s4_bulk(void* y, const void* x, const void* w, int64_t M, int64_t N, int64_t K, int64_t split, bool fp16, cudaStream_t stream) {
  return splitk::dispatch<4, 2, 128, 16, 4, true>(y, x, w, M, N, K, split, fp16, stream);
}
COURSE_EXPORT int64_t info_rg4_ks2_t128_m16_s4_bulk(int64_t what) { return splitk::info<4, 2, 128, 16, 4, true>(what); }
// END EXPORTS
