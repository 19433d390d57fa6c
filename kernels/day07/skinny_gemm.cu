// Your exercise: fill in the TODOs. Generated from solutions/day07/skinny_gemm.cu by `grader release` (stub-hash 759c8b996d54).
// Day 7 exercise: skinny GEMM, the decode-shaped matrix product, through a cp.async pipeline
// (model: FlashInfer include/flashinfer/cp_async.cuh and permuted_smem.cuh).
//
//   x       [M, K]   fp16 or bf16, M = 1..16 tokens (decode: one token per sequence)
//   weight  [N, K]   a linear layer's weight, row-major as PyTorch stores it
//   y       [M, N]   y[m, n] = sum_k x[m, k] * weight[n, k]   (y = x @ weight.T)
//
// Arithmetic in fp32, one rounding when y is stored. With M <= 16 every weight element is used
// M times at most: the kernel is memory-bound on the weight. Napkin math for bf16, N x K =
// 4096 x 14336: the weight is 2 B * 58.7 M = 117 MB, x and y < 1 MB; at ~4.2 TB/s that is ~28 us.
// The target is >= 0.90x the bandwidth of a copy of those bytes; on an H200, cuBLAS (torch.matmul)
// measured 0.77-0.86x of that copy at these shapes. The 2 M N K flops are no problem for the tensor cores
// (course::mma_m16n8k16), but would be for fp32 FMAs: at M = 16 they would need ~90% of the SMs'
// FMA peak to keep up with the memory.
//
// Design: the weight is cut into units of ROWS rows; each block walks its units' tiles of
// ROWS x K_TILE (and the matching M x K_TILE of x) through a ring of STAGES shared-memory
// buffers filled by cp.async, so that STAGES - 1 tiles are always on their way from DRAM while
// the warps multiply the one that arrived; KSPLIT warps share each 16-row group's tile, each
// taking a part of its k range. A grid of at most one wave of blocks, each taking every G-th
// unit, keeps all SMs streaming to the end.
#include "course/async.cuh"
#include "course/mma.cuh"
#include "course/vec.cuh"

namespace {

constexpr int CHUNK = 8;          // elements per 16-byte copy

// Shared memory holds a tile's rows of K_TILE elements in 16-byte chunks; in odd rows chunk c
// is stored at c ^ 4. A warp's 16-byte reads (rows g and g + 1 at the same chunk, 8 lanes per
// phase) then fall into the two different halves of the 32 banks: no conflicts, no padding.
template <int K_TILE>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * K_TILE + ((chunk ^ ((row & 1) << 2)) * CHUNK);
}

// Given. The fallback copy for what 16-byte copies cannot do (K not a multiple of 8, or x or
// weight not 16-byte aligned): plain loads, one element at a time, into the same layout,
// zeros past the ends. It waits for its loads, so no tile is in flight while it runs.
template <typename T, int ROWS, int MTOK, int K_TILE, int THREADS>
__device__ void load_tile_sync(T* stage, const T* __restrict__ x, const T* __restrict__ weight, int64_t M,
                               int64_t N, int64_t K, int64_t n0, int64_t k0) {
  constexpr int CHUNKS_PER_ROW = K_TILE / CHUNK;
  const T zero = course::from_float<T>(0.0f);
  for (int q = threadIdx.x; q < (ROWS + MTOK) * CHUNKS_PER_ROW; q += THREADS) {
    const int row = q / CHUNKS_PER_ROW, c = q % CHUNKS_PER_ROW;  // rows ROWS.. are x's tokens
    const bool is_w = row < ROWS;
    const int64_t r = is_w ? n0 + row : row - ROWS;
    const T* src = is_w ? weight + r * K : x + r * K;
    course::vec_t<T, CHUNK> v;
#pragma unroll
    for (int j = 0; j < CHUNK; ++j) {
      const int64_t k = k0 + c * CHUNK + j;
      v[j] = (r < (is_w ? N : M) && k < K) ? src[k] : zero;
    }
    v.store(stage + swizzled<K_TILE>(row, c));
  }
}

// Given. One warp's share of one stage: rows 16 rg .. 16 rg + 15 of the tile times all MTOK
// tokens, over one KSPLIT-th of K_TILE (k part kh). Lane (g, t) reads 16 bytes (8 k values) of weight rows
// g and g + 8 and of token rows g (and g + 8), and hands them to the tensor cores in the k slots
// of its own fragment: k order does not matter in a dot product, as long as A and B agree.
template <typename T, int ROWS, int MTOK, int K_TILE, int KSPLIT>
__device__ __forceinline__ void warp_tile_mma(const T* stage, int rg, int kh, float (&acc)[MTOK / 8][4]) {
  constexpr int STEPS = K_TILE / KSPLIT / 32;  // 32 k values (two mma k16 steps) per step
  static_assert(STEPS >= 1, "K_TILE must hold 32 k values per k part");
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T* sw = stage;                  // (ROWS, K_TILE) weight tile
  const T* sx = stage + ROWS * K_TILE;  // (MTOK, K_TILE) x tile
#pragma unroll
  for (int s = 0; s < STEPS; ++s) {
    const int c = (kh * STEPS + s) * 4 + t;  // this lane's chunk of the rows
    const uint4 w0 = *reinterpret_cast<const uint4*>(sw + swizzled<K_TILE>(rg * 16 + g, c));
    const uint4 w1 = *reinterpret_cast<const uint4*>(sw + swizzled<K_TILE>(rg * 16 + g + 8, c));
    const uint32_t a_lo[4] = {w0.x, w1.x, w0.y, w1.y}, a_hi[4] = {w0.z, w1.z, w0.w, w1.w};
#pragma unroll
    for (int h = 0; h < MTOK / 8; ++h) {  // tokens 0-7, then 8-15
      const uint4 xv = *reinterpret_cast<const uint4*>(sx + swizzled<K_TILE>(h * 8 + g, c));
      const uint32_t b_lo[2] = {xv.x, xv.y}, b_hi[2] = {xv.z, xv.w};
      course::mma_m16n8k16<T>(acc[h], a_lo, b_lo);
      course::mma_m16n8k16<T>(acc[h], a_hi, b_hi);
    }
  }
}

// Given. The end of a unit: the k parts' sums meet in shared memory, and the warps of k part 0
// add them, round once and store. Lane (g, t) holds rows g and g + 8, tokens 2t and 2t + 1 (+8 h).
template <typename T, int ROW_GROUPS, int MTOK, int KSPLIT>
__device__ void store_unit(T* __restrict__ y, float* red, float (&acc)[MTOK / 8][4], int rg, int kh, int64_t M,
                           int64_t N, int64_t n0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  constexpr int SLOT = ROW_GROUPS * 32 * (MTOK / 2);  // red: (KSPLIT - 1, ROW_GROUPS, 32 lanes, MTOK / 2)
  float* mine = red + (kh > 0 ? kh - 1 : 0) * SLOT + (rg * 32 + lane) * (MTOK / 2);
  if (kh > 0) {
#pragma unroll
    for (int h = 0; h < MTOK / 8; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) mine[h * 4 + i] = acc[h][i];
  }
  __syncthreads();
  if (kh == 0) {
#pragma unroll
    for (int h = 0; h < MTOK / 8; ++h) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float sum = acc[h][i];
#pragma unroll
        for (int part = 0; part < KSPLIT - 1; ++part) sum += mine[part * SLOT + h * 4 + i];
        const int64_t n = n0 + rg * 16 + g + (i / 2) * 8, m = h * 8 + 2 * t + i % 2;
        if (n < N && m < M) y[m * N + n] = course::from_float<T>(sum);
      }
    }
  }
#pragma unroll
  for (int h = 0; h < MTOK / 8; ++h)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[h][i] = 0.0f;
}

// Tiles of ROWS x K_TILE weight (16 ROW_GROUPS rows) and MTOK x K_TILE x, through a ring of
// STAGES buffers. Warps: ROW_GROUPS x KSPLIT k parts. The block takes units blockIdx.x, + gridDim.x,
// ...; its tiles are numbered f = 0, 1, ... across its units (unit f / KT, k tile f % KT), so the
// pipeline runs on from one unit into the next without draining.
template <typename T, int ROW_GROUPS, int KSPLIT, int K_TILE, int MTOK, int STAGES>
__global__ void __launch_bounds__(32 * ROW_GROUPS * KSPLIT)
    skinny_gemm_kernel(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ weight, int64_t M,
                       int64_t N, int64_t K, bool aligned) {
  constexpr int ROWS = 16 * ROW_GROUPS, THREADS = 32 * ROW_GROUPS * KSPLIT;
  constexpr int STAGE_ELEMS = (ROWS + MTOK) * K_TILE;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);                          // (STAGES, ROWS + MTOK, K_TILE)
  float* red = reinterpret_cast<float*>(stages + STAGES * STAGE_ELEMS);  // (KSPLIT - 1, ROW_GROUPS, 32, MTOK / 2)

  const int warp = threadIdx.x / 32, rg = warp % ROW_GROUPS, kh = warp / ROW_GROUPS;
  const int KT = K > 0 ? static_cast<int>(course::ceil_div<int64_t>(K, K_TILE)) : 1;  // K = 0: y = 0
  const int64_t units = course::ceil_div<int64_t>(N, ROWS);
  const int tiles = static_cast<int>(course::ceil_div<int64_t>(units - blockIdx.x, gridDim.x)) * KT;
  float acc[MTOK / 8][4] = {};

  // TODO: stream this block's `tiles` tiles through the STAGES buffers with cp.async.
  // Tile f belongs to unit u = blockIdx.x + (f / KT) * gridDim.x: weight rows n0 = u * ROWS
  // .. n0 + ROWS - 1, and k0 = (f % KT) * K_TILE; it goes to buffer stages + (f % STAGES) *
  // STAGE_ELEMS, weight rows first, then MTOK rows of x, chunk c of row r at
  // swizzled<K_TILE>(r, c). Chunks past N, M or K must hold zeros.
  // 1. A loader: with `aligned`, one course::cp_async_zfill<16, ...> per 16-byte chunk
  //    (CacheHint::cg for the weight, streamed once; CacheHint::ca for x, read by every block);
  //    otherwise load_tile_sync(...).
  // 2. Prologue: tiles 0 .. STAGES - 2, one commit group each (commit even when empty).
  // 3. For each f: wait until tile f has landed (course::cp_async_wait<STAGES - 2>), then
  //    __syncthreads(); load tile f + STAGES - 1 into the buffer tile f - 1 used; commit;
  //    warp_tile_mma on tile f; after a unit's last k tile, store_unit(...).
  (void)rg; (void)kh; (void)tiles; (void)red; (void)stages; (void)acc;
}

template <typename T, int ROW_GROUPS, int KSPLIT, int K_TILE, int MTOK, int STAGES>
cudaError_t launch_skinny(T* y, const T* x, const T* weight, int64_t M, int64_t N, int64_t K, bool aligned,
                          cudaStream_t stream) {
  constexpr int ROWS = 16 * ROW_GROUPS, THREADS = 32 * ROW_GROUPS * KSPLIT;
  constexpr int SMEM = STAGES * (ROWS + MTOK) * K_TILE * static_cast<int>(sizeof(T)) +
                       (KSPLIT > 1 ? KSPLIT - 1 : 1) * ROW_GROUPS * 32 * (MTOK / 2) * static_cast<int>(sizeof(float));
  auto kernel = skinny_gemm_kernel<T, ROW_GROUPS, KSPLIT, K_TILE, MTOK, STAGES>;
  // Asked once per process (per instantiation): the launch itself must stay cheap.
  static int resident = 0;
  if (resident == 0) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    if (err != cudaSuccess) return err;
    int device = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, SMEM);
    if (err != cudaSuccess) return err;
    resident = sms * (per_sm > 0 ? per_sm : 1);
  }
  // One wave at most: units split as evenly as whole units allow (e.g. 448 units of 32 rows
  // on 264 resident blocks: 2 waves' worth, so 224 blocks of exactly 2 units each).
  const int64_t units = course::ceil_div<int64_t>(N, ROWS);
  const int64_t waves = course::ceil_div<int64_t>(units, resident);
  const int64_t grid = course::ceil_div<int64_t>(units, waves);
  kernel<<<static_cast<unsigned>(grid), THREADS, SMEM, stream>>>(y, x, weight, M, N, K, aligned);
  return cudaGetLastError();
}

template <typename T>
cudaError_t skinny_gemm(T* y, const T* x, const T* weight, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M < 0 || M > 16 || N < 0 || K < 0 || N > INT32_MAX) return cudaErrorInvalidValue;
  if (M == 0 || N == 0) return cudaSuccess;
  // 16-byte copies need every row of x and weight to start on 16 bytes: K a multiple of 8 and
  // aligned base pointers (a tensor slice can start anywhere). y is written element by element.
  const bool aligned = K % CHUNK == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(weight) % 16 == 0;
  // The shapes, measured on an H200 (a sweep of row groups, k parts, tiles and stages; see the
  // notebook): with few rows (N = 4096: 256 units of 16 rows for 132 SMs) small units of 16 rows,
  // their k tiles shared by 4 (up to 8 tokens) or 8 warps, keep every SM streaming; with many
  // rows, units of 32 (64 for 9-16 tokens) rows read x from L2 less often per weight byte.
  static int sms = 0;
  if (sms == 0) {
    int device = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  const bool few_rows = course::ceil_div<int64_t>(N, 32) < 2 * static_cast<int64_t>(sms);
  if (M <= 8) {
    if (few_rows) return launch_skinny<T, 1, 4, 512, 8, 4>(y, x, weight, M, N, K, aligned, stream);
    return launch_skinny<T, 2, 2, 256, 8, 4>(y, x, weight, M, N, K, aligned, stream);
  }
  if (few_rows) return launch_skinny<T, 1, 8, 512, 16, 3>(y, x, weight, M, N, K, aligned, stream);
  return launch_skinny<T, 4, 2, 256, 16, 4>(y, x, weight, M, N, K, aligned, stream);
}

}  // namespace

COURSE_EXPORT cudaError_t skinny_gemm_fp16(__half* y, const __half* x, const __half* weight, int64_t M, int64_t N,
                                           int64_t K, cudaStream_t stream) {
  return skinny_gemm(y, x, weight, M, N, K, stream);
}

COURSE_EXPORT cudaError_t skinny_gemm_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                           int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  return skinny_gemm(y, x, weight, M, N, K, stream);
}
