// Your exercise: fill in the TODOs (about 53 lines). Generated from solutions/day07/skinny_gemm.cu by `grader release` (stub-hash 922538a40129).
// Day 7 exercise: skinny GEMM, the decode-shaped matrix product, through a cp.async pipeline
// (model: FlashInfer include/flashinfer/cp_async.cuh and permuted_smem.cuh; the split of the work
// is "stream-K", Osama et al., PPoPP 2023, as CUTLASS implements it).
//
//   x       [M, K]   fp16 or bf16, M = 1..16 tokens (decode: one token per sequence)
//   weight  [N, K]   a linear layer's weight, row-major as PyTorch stores it
//   y       [M, N]   y[m, n] = sum_k x[m, k] * weight[n, k]   (y = x @ weight.T)
//
// Arithmetic in fp32, one rounding when y is stored. With M <= 16 every weight element is used
// M times at most: the kernel is memory-bound on the weight. Napkin math for bf16, N x K =
// 4096 x 14336: the weight is 2 B * 58.7 M = 117 MB, x and y < 1 MB; at an H200's ~4.2 TB/s that is
// ~28 us (~40 us at an H100's ~3 TB/s).
// The 2 M N K flops are no problem for the tensor cores (course::mma_m16n8k16), but would be for
// fp32 FMAs: at M = 16 they would need ~90% of the SMs' FMA peak to keep up with the memory.
// All that matters is to keep every SM streaming, from the first microsecond to the last.
//
// Design (stream-K). The work is RT x KT items: item (rt, kt) is row tile rt of the weight
// (ROWS = 32 rows) times its k tile kt (K_TILE = 256 columns), with the same columns of x.
// The items are numbered row tile by row tile, k fastest. The grid is one wave of resident
// blocks (two per SM), and block b takes the contiguous run of items [b total / G, (b + 1) total / G):
// every block gets the same work, within one item, whatever N and K. (Whole row tiles per block
// cannot: 4096 x 14336 has 128 row tiles for 264 resident blocks, 14336 x 4096 has 448.)
// A block streams its run through one ring of STAGES = 4 shared-memory buffers filled by
// cp.async, STAGES - 1 items always on their way from DRAM while its 8 warps multiply the one
// that arrived: 2 groups of 16 rows x 4 k parts of 64 columns. The ring runs on from one row tile
// into the next without draining. A segment, the part of a run in one row tile, ends with the
// k parts' sums meeting in shared memory; then
//   - a row tile that one block did entirely is rounded and stored (no atomics);
//   - otherwise the block adds its fp32 sums into the row tile's slot of a workspace in global
//     memory (red.global.add.f32) and its number of k tiles to the slot's arrival counter; the
//     block whose count completes KT reads the slot, rounds and stores y, and zeroes the slot and
//     the counter: the workspace is all zeros again for the next call.
// The workspace is a static __device__ array, because a submission may not allocate memory. Two
// calls running at the same time on different streams would share it and mix their sums; the
// course does nothing about that: the decode calls of one model run one after another, on one
// stream. Tokens are padded to the mma's 8 columns (M <= 8) or 16 (M = 9..16): MTOK.
//
// Target (grader/exercises/day07.py): >= 0.75x streaming read of as many bytes (the read ceiling) (GB/s).
#include "course/async.cuh"
#include "course/mma.cuh"
#include "course/vec.cuh"

namespace {

constexpr int CHUNK = 8;          // elements per 16-byte copy
constexpr int MAX_M = 16;         // tokens
constexpr int MAX_ROWS = 32;      // rows of a row tile
constexpr int MAX_GRID = 1024;    // blocks of a grid (an H200 holds 264 of this kernel at once)

// The workspace: per slot, the fp32 sums [MAX_M][MAX_ROWS] of one row tile that more than one
// block works on, and its arrival counter (k tiles added so far). The slot of such a row tile is
// the block whose run holds its first item; a run holds the first item of at most one row tile
// that it does not finish (its last), so no two row tiles of a call share a slot.
// 2 MiB + 4 KiB; zero when the module is loaded, and again after every call.
__device__ float g_partials[MAX_GRID * MAX_M * MAX_ROWS];
__device__ int g_arrived[MAX_GRID];

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

// *counter += v at GPU scope, returning the old value, with release and acquire semantics
// (atom.acq_rel.gpu): what this thread's block did before (ordered by a barrier) is visible to
// whoever reads the new count, and what those who counted before did is visible to this thread.
__device__ __forceinline__ int atomic_add_acq_rel(int* counter, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(counter), "r"(v) : "memory");
  return old;
}

// Given. The end of a segment: this block has multiplied k tiles kt0 .. kt1 of row tile rt, and
// the block's warps hold their k parts' sums in acc (zeroed here for the next segment). Lane
// (g, t) holds rows g and g + 8, tokens 2t and 2t + 1 (+8 h). total: the items of the call.
template <typename T, int ROW_GROUPS, int MTOK, int KSPLIT>
__device__ void finish_segment(T* __restrict__ y, float* red, float (&acc)[MTOK / 8][4], int rg, int kh, int64_t M,
                               int64_t N, int KT, int64_t total, int rt, int kt0, int kt1) {
  constexpr int ROWS = 16 * ROW_GROUPS, THREADS = 32 * ROW_GROUPS * KSPLIT;
  static_assert(ROWS <= MAX_ROWS && MTOK <= MAX_M, "the workspace's slots are MAX_M x MAX_ROWS");
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // 1. The k parts' sums meet in shared memory; the warps of k part 0 add them up.
  constexpr int SLOT = ROW_GROUPS * 32 * (MTOK / 2);  // red: (KSPLIT - 1, ROW_GROUPS, 32 lanes, MTOK / 2)
  float* mine = red + (kh > 0 ? kh - 1 : 0) * SLOT + (rg * 32 + lane) * (MTOK / 2);
  if (kh > 0) {
#pragma unroll
    for (int h = 0; h < MTOK / 8; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) mine[h * 4 + i] = acc[h][i];
  }
  __syncthreads();
  // 2. A whole row tile is stored; a part of one is added into its workspace slot.
  const bool whole = kt0 == 0 && kt1 == KT - 1;
  const int64_t n0 = static_cast<int64_t>(rt) * ROWS;
  const int64_t first = static_cast<int64_t>(rt) * KT;  // the row tile's first item
  const int slot = static_cast<int>(((first + 1) * gridDim.x - 1) / total);  // the block whose run holds it
  float* part = g_partials + static_cast<int64_t>(slot) * (MAX_M * MAX_ROWS);  // [m][row], rows ROWS apart
  if (kh == 0) {
#pragma unroll
    for (int h = 0; h < MTOK / 8; ++h) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float sum = acc[h][i];
#pragma unroll
        for (int p = 0; p < KSPLIT - 1; ++p) sum += mine[p * SLOT + h * 4 + i];
        const int r = rg * 16 + g + (i / 2) * 8, m = h * 8 + 2 * t + i % 2;
        const int64_t n = n0 + r;
        if (n < N && m < M) {
          if (whole) y[m * N + n] = course::from_float<T>(sum);
          else atomicAdd(part + m * ROWS + r, sum);  // result unused: one REDG.E.ADD.F32, done in L2
        }
      }
    }
  }
#pragma unroll
  for (int h = 0; h < MTOK / 8; ++h)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[h][i] = 0.0f;
  if (whole) return;  // (the same for the whole block)
  // 3. Count this segment's k tiles. The barrier orders every thread's additions before thread
  // 0's count, whose release makes them visible with it; its acquire makes the additions of the
  // blocks that counted before visible to this block (through the barrier after it).
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int add = kt1 - kt0 + 1;
    last = atomic_add_acq_rel(&g_arrived[slot], add) + add == KT;
  }
  __syncthreads();
  if (!last) return;
  // 4. The last block of the row tile: every k tile has been added. Read the sums from L2 (.cg:
  // not through this SM's L1), round and store them, and leave zeros for the next call.
  for (int q = threadIdx.x; q < M * ROWS; q += THREADS) {
    const int m = q / ROWS, r = q % ROWS;
    const int64_t n = n0 + r;
    if (n < N) {
      float* p = part + m * ROWS + r;
      y[m * N + n] = course::from_float<T>(__ldcg(p));
      __stcg(p, 0.0f);
    }
  }
  if (threadIdx.x == 0) g_arrived[slot] = 0;
}

// Items of ROWS x K_TILE weight (16 ROW_GROUPS rows) and MTOK x K_TILE x, through a ring of
// STAGES buffers. Warps: ROW_GROUPS x KSPLIT k parts. Two blocks per SM: shared memory holds two
// (85 or 104 KB each), so the registers must too (at most 128 per thread).
template <typename T, int ROW_GROUPS, int KSPLIT, int K_TILE, int MTOK, int STAGES>
__global__ void __launch_bounds__(32 * ROW_GROUPS * KSPLIT, 2)
    skinny_gemm_kernel(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ weight, int64_t M,
                       int64_t N, int64_t K, bool aligned) {
  constexpr int ROWS = 16 * ROW_GROUPS, THREADS = 32 * ROW_GROUPS * KSPLIT;
  constexpr int STAGE_ELEMS = (ROWS + MTOK) * K_TILE;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);                          // (STAGES, ROWS + MTOK, K_TILE)
  float* red = reinterpret_cast<float*>(stages + STAGES * STAGE_ELEMS);  // (KSPLIT - 1, ROW_GROUPS, 32, MTOK / 2)

  const int warp = threadIdx.x / 32, rg = warp % ROW_GROUPS, kh = warp / ROW_GROUPS;
  const int KT = K > 0 ? static_cast<int>(course::ceil_div<int64_t>(K, K_TILE)) : 1;  // K = 0: y = 0
  const int64_t total = course::ceil_div<int64_t>(N, ROWS) * KT;  // items (row tile, k tile), k fastest
  const int64_t begin = blockIdx.x * total / gridDim.x;           // this block's run: begin .. end - 1
  const int64_t end = (blockIdx.x + 1) * total / gridDim.x;
  const int tiles = static_cast<int>(end - begin);
  float acc[MTOK / 8][4] = {};

  // TODO: stream this block's run of `tiles` items, begin .. end - 1, through the STAGES
  // buffers with cp.async. Item i is k tile kt = i % KT of row tile rt = i / KT: weight rows
  // n0 = rt * ROWS .. n0 + ROWS - 1 and columns k0 = kt * K_TILE .. k0 + K_TILE - 1, and the
  // same columns of x. The f-th item of the run goes to buffer stages + (f % STAGES) * STAGE_ELEMS:
  // weight rows first, then the rows of x, chunk c of row r at swizzled<K_TILE>(r, c). Chunks
  // past row N or column K must hold zeros (x's rows past M need not be written: they only
  // reach the sums of tokens that are never stored).
  // 1. A loader: with `aligned`, one course::cp_async_zfill<16, course::CacheHint::cg> per 16-byte
  //    chunk (both streams are read once per block: L2 only); otherwise load_tile_sync(...).
  // 2. Prologue: items 0 .. STAGES - 2 of the run, one commit group each (commit even when empty).
  // 3. For each f: course::cp_async_wait<STAGES - 2>(), then __syncthreads(); load item
  //    f + STAGES - 1 into the buffer item f - 1 used; commit; warp_tile_mma on item f. A segment
  //    (the run's part of one row tile) ends at the row tile's last k tile or at the run's last
  //    item: then finish_segment(..., rt, kt0, kt1) with its row tile and first and last k tiles.
  (void)rg; (void)kh; (void)begin; (void)tiles; (void)total; (void)red; (void)stages; (void)acc;
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
  // One wave: every resident block (264 on an H200), unless there are fewer items than that
  // (then one item each), and no more than the workspace has slots.
  const int KT = K > 0 ? static_cast<int>(course::ceil_div<int64_t>(K, K_TILE)) : 1;
  const int64_t total = course::ceil_div<int64_t>(N, ROWS) * KT;
  int64_t grid = resident < total ? resident : total;
  grid = grid < MAX_GRID ? grid : MAX_GRID;
  kernel<<<static_cast<unsigned>(grid), THREADS, SMEM, stream>>>(y, x, weight, M, N, K, aligned);
  return cudaGetLastError();
}

template <typename T>
cudaError_t skinny_gemm(T* y, const T* x, const T* weight, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M < 0 || M > MAX_M || N < 0 || K < 0 || N > INT32_MAX || K > INT32_MAX) return cudaErrorInvalidValue;
  if (M == 0 || N == 0) return cudaSuccess;
  // 16-byte copies need every row of x and weight to start on 16 bytes: K a multiple of 8 and
  // aligned base pointers (a tensor slice can start anywhere). y is written element by element.
  const bool aligned = K % CHUNK == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(weight) % 16 == 0;
  // The best of a sweep, or within 1% of it, at every shape (reports/day07-skinny-sweep.json): 32-row
  // tiles, k tiles of 256 shared by 4 k parts, 4 stages; tokens padded to 8 up to 8 tokens, to 16 above.
  if (M <= 8) {
    return launch_skinny<T, 2, 4, 256, 8, 4>(y, x, weight, M, N, K, aligned, stream);
  }
  return launch_skinny<T, 2, 4, 256, 16, 4>(y, x, weight, M, N, K, aligned, stream);
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
