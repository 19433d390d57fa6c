// Day 10 exercise: a fast tensor-core GEMM, C = A B^T, with everything the day adds to Day 9.
//
//   a  [M, K]  fp16 or bf16, row-major
//   b  [N, K]  fp16 or bf16, row-major (a weight as nn.Linear stores it: the "col" operand of mma)
//   c  [M, N]  the same type, fp32 accumulation rounded once at the store
//
// Any M, N, K >= 1 (K up to 16384 and beyond) and any base pointers. The design (kernels/day10/
// v1-v4 build it up one step at a time):
//  * a block of 8 warps computes a BM x BN = 128 x 256 tile of C, each warp 64 x 64 of it in
//    registers: per k step of 16, 4 ldmatrix.x4 for A and 4 for B feed 32 mma.sync;
//  * K advances BK = 64 at a time through a ring of STAGES = 3 shared-memory stages filled with
//    16-byte cp.async copies (.cg, zero-filled past the edges), so 2 tiles are in flight while the
//    warps multiply one; one __syncthreads per K tile (4 k steps, 128 mma per warp);
//  * shared rows of 128 bytes are XOR-swizzled (chunk c of row r at c ^ (r % 8)): ldmatrix and the
//    copies are free of bank conflicts;
//  * the pipeline is one generic lambda compiled twice, for 16-byte copies and for the fallback: the
//    16-byte loop has no branch in it (past the last tile a copy reads nothing instead of being
//    skipped), so the compiler spreads the copies' address arithmetic between the mma (a branch is
//    a wall it does not schedule across: the notebook's section 7);
//  * fragments are double-buffered: the ldmatrix of the next k step are issued before the mma of
//    this one;
//  * blocks are rasterized in groups of GROUP_M block rows, for L2 reuse of A's and B's panels;
//  * the epilogue stages C through shared memory and writes whole rows with 16-byte stores.
// When 16-byte copies are impossible (K not a multiple of 8, or a or b not 16-byte aligned) the same
// pipeline is filled by plain loads instead (slow but right); C falls back to 2-byte stores where a
// row of it is not 16-byte aligned or runs past N.
// Napkin math at 4096^3: 137 GFLOP. On an H100, mma.sync tops out near 627-650 TFLOP/s and cuBLAS
// (torch.matmul, which uses wgmma) reached ~780: mma.sync's ceiling is ~0.8x torch.matmul, and the
// target (below) asks for most of it. Each K tile brings (128 + 256) x 64 x 2 = 48 KB into a block
// for 2 x 128 x 256 x 64 = 4.2 MFLOP: 85 flops per byte (Day 9's 128 x 128: 64). Three stages are
// 144 KB of the 227 KB a block may have.
// Why BK 64 and 3 stages: the fastest ring of those tried on an H100 (BK 32 with 4 stages 0.02-0.04x
// torch.matmul slower, 2 stages ~0.15x slower); GROUP_M from 4 to 32 all within 0.03x of 8
// (reports/variant-sweep-day10-branch-free.json, reports/variant-sweep-day10-group-m.json).
// Given below: the swizzle, the copy and fragment helpers, one k step's mma, the store of the staged
// C tile and the launcher. Written in gemm_kernel: the block order, the pipeline, the C staging.
// Target (grader/exercises/day10.py): @TARGET@.
#include "course/async.cuh"
#include "course/mma.cuh"

#include <type_traits>

namespace {

// The K step, the ring's depth and the raster group: knobs that benchmarks/variant_sweep tries (BK 64
// halves the barriers per flop of BK 32; 3 stages of 64 or 4 of 32 fit one block per SM).
#ifndef GEMM_BK
#define GEMM_BK 64
#endif
#ifndef GEMM_STAGES
#define GEMM_STAGES 3
#endif
#ifndef GEMM_GROUP_M
#define GEMM_GROUP_M 8
#endif
constexpr int BM = 128, BN = 256, BK = GEMM_BK, STAGES = GEMM_STAGES;  // block tile of C, K step, ring depth
constexpr int WARPS_M = 2, WARPS_N = 4, THREADS = 32 * WARPS_M * WARPS_N;
constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;      // 64 x 64 of C per warp
constexpr int MT = WM / 16, NT = WN / 8;                 // 4 x 8 mma tiles (16 x 8) per warp
constexpr int CH = BK / 8, KSTEPS = BK / 16;             // 16-byte chunks per staged row; k steps per tile
constexpr int A_CHUNKS = BM * CH, STAGE_CHUNKS = (BM + BN) * CH;  // a stage: A's tile, then B's
constexpr int A_LOADS = BM * CH / THREADS, B_LOADS = BN * CH / THREADS;  // chunks per thread: 4, 8
constexpr int ROW_STEP = THREADS / CH;                   // a thread copies rows r0, r0 + 32, ...
constexpr int C_PITCH = BN + 8;                          // staged C rows of 528 bytes: 4 banks apart
constexpr int PIPE_BYTES = STAGES * STAGE_CHUNKS * 16, C_BYTES = BM * C_PITCH * 2;
constexpr int SMEM = PIPE_BYTES > C_BYTES ? PIPE_BYTES : C_BYTES;  // 144 KB; the C tile reuses the ring
constexpr int GROUP_M = GEMM_GROUP_M;                               // block rows walked together (L2 reuse)
static_assert(KSTEPS % 2 == 0, "fragments alternate between two register buffers by k step");

// 16-byte slot of chunk `chunk` of row `row` in a staged [rows][BK] tile: rows of 128 bytes, one per
// 128-byte line of the 32 banks; XOR-ing the chunk with row % 8 puts the 8 rows one ldmatrix tile
// reads into 8 different groups of 4 banks. (Rows of 64 bytes, BK = 32: the chunk XOR (row / 2) % 4.)
__device__ __forceinline__ int slot(int row, int chunk) {
  return row * CH + (chunk ^ (CH == 8 ? row & 7 : (row >> 1) & 3));
}

// Given. ldmatrix.x4 and a 16-byte cp.async (.cg, zero-filled unless `pred`) on 32-bit shared-memory
// addresses, as course::ldmatrix_x4 and course::cp_async_zfill do on pointers: an address computed once
// outside the main loop plus a constant offset is one register add, where a pointer is converted
// (64-bit arithmetic) at every use. With 2 warps per scheduler, that integer work is exposed.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* gmem, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(pred ? 16 : 0));
}

// Given. The fallback copy for what cp.async cannot do: 8 elements of a row from `src` (column
// `col` of k) with plain 2-byte loads, zeros past the row's end or for a row past the matrix.
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

// Given. This thread's share of the copies of one K tile into the ring: chunk `ch` of rows r0,
// r0 + ROW_STEP, ... of A's BM rows and of B's BN rows (A_LOADS + B_LOADS = 4 + 8 chunks of 16
// bytes). Rows ROW_STEP apart have the same swizzle, so one shared address per operand, computed
// here once, serves all of them: in the loop a copy's addresses are this plus constants.
template <typename T>
struct TileLoader {
  uint4* smem;
  uint32_t a_dst, b_dst;           // shared byte addresses of this thread's first chunk of A, of B (stage 0)
  const T* a_src;                  // A[m0 + r0, ch * 8], this thread's first chunk of K tile 0
  const T* b_src;                  // B[n0 + r0, ch * 8]
  int64_t a_rows, b_rows;          // rows of A and B left from r0 on
  int64_t row_step, k;             // ROW_STEP rows of A or B, in elements; the row length
  int ch, r0, tiles;               // this thread's chunk of a row, its first row; K tiles in all

  __device__ __forceinline__ TileLoader(uint4* smem_, const T* a, const T* b, int64_t m, int64_t n, int64_t k_,
                                        int64_t m0, int64_t n0, int tiles_)
      : smem(smem_), k(k_), tiles(tiles_) {
    ch = threadIdx.x % CH;
    r0 = threadIdx.x / CH;
    a_dst = course::smem_u32(smem) + slot(r0, ch) * 16;
    b_dst = a_dst + A_CHUNKS * 16;
    a_src = a + (m0 + r0) * k + ch * 8;
    b_src = b + (n0 + r0) * k + ch * 8;
    a_rows = m - m0 - r0;
    b_rows = n - n0 - r0;
    row_step = ROW_STEP * k;
  }

  // K tile t into stage t % STAGES, zeros past M, N and K; commits nothing. ALIGNED (a, b 16-byte
  // aligned, K % 8 == 0): one 16-byte cp.async per chunk, and no branch at all: t past the last
  // tile copies nothing (src-size 0) from a valid address, so the caller need not test it. Otherwise
  // load_chunk_sync and plain stores, and t past the last tile returns at once.
  template <bool ALIGNED>
  __device__ __forceinline__ void issue(std::integral_constant<bool, ALIGNED>, int t) const {
    const uint32_t stage = (t % STAGES) * STAGE_CHUNKS * 16;
    const bool live = t < tiles;  // past the last tile: a copy of nothing from a valid address
    const int64_t k0 = static_cast<int64_t>(live ? t : 0) * BK;
    const bool col_ok = live && k0 + ch * 8 < k;  // K % 8 == 0 when aligned: a chunk is all in or all out
    if constexpr (ALIGNED) {
#pragma unroll
      for (int i = 0; i < A_LOADS; ++i)  // src-size 0 past the edges: zeros, nothing read
        cp_async16(a_dst + stage + i * ROW_STEP * CH * 16, a_src + i * row_step + k0,
                   col_ok && i * ROW_STEP < a_rows);
#pragma unroll
      for (int i = 0; i < B_LOADS; ++i)
        cp_async16(b_dst + stage + i * ROW_STEP * CH * 16, b_src + i * row_step + k0,
                   col_ok && i * ROW_STEP < b_rows);
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

// Given (Day 9's fragments, on the swizzled rows). One k step of 16 of the staged tile for the warp
// whose 64 x 64 of C starts at (wm, wn): 4 ldmatrix.x4 for A (lanes 0-15 give rows 0-15 of an m16
// tile at k 0-7, lanes 16-31 at k 8-15) and 4 for B (two n8 tiles of [N, K] rows each, k 0-7 | 8-15,
// no .trans). Rows 16 apart share a swizzle too: one address per k step and operand, computed here
// once, plus 1024 bytes per m16 (n16) tile and STAGE_CHUNKS * 16 per stage.
struct FragmentLoader {
  uint32_t a_frag[KSTEPS], b_frag[KSTEPS];  // this lane's row of A's and of B's tile, per k step (stage 0)

  __device__ __forceinline__ FragmentLoader(uint32_t smem0, int wm, int wn, int lane) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      a_frag[ks] = smem0 + slot(wm + lane % 16, 2 * ks + lane / 16) * 16;
      b_frag[ks] = smem0 + (A_CHUNKS + slot(wn + lane % 8 + lane / 16 * 8, 2 * ks + lane / 8 % 2)) * 16;
    }
  }

  // k step ks of K tile t (in stage t % STAGES) into af (A's 4 m16 tiles) and bf (B's 4 pairs of n8).
  __device__ __forceinline__ void load(uint32_t (&af)[MT][4], uint32_t (&bf)[NT / 2][4], int t, int ks) const {
    const uint32_t stage = (t % STAGES) * STAGE_CHUNKS * 16;
#pragma unroll
    for (int i = 0; i < MT; ++i) ldsm_x4(af[i], a_frag[ks] + stage + i * 16 * CH * 16);
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) ldsm_x4(bf[j], b_frag[ks] + stage + j * 16 * CH * 16);
  }
};

// Given (Day 9). One k step: the warp's 4 x 8 mma tiles (16 x 8 each) from the fragments of FragmentLoader::load;
// b fragment j of the mma is half of ldmatrix tile j / 2.
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

// Given. The C tile staged in shared memory (cs: [BM][C_PITCH] of T) to C[m0:m0+BM, n0:n0+BN], only
// inside [M, N]. 32 lanes write one 512-byte row of C per instruction, 16 bytes each (vec_c: c
// 16-byte aligned and N % 8 == 0); at the edge of N, or where rows of C are not 16-byte aligned, one
// element at a time.
template <typename T>
__device__ __forceinline__ void store_c_tile(T* __restrict__ c, const T* cs, int64_t m, int64_t n, int64_t m0,
                                             int64_t n0, bool vec_c) {
  for (int v = threadIdx.x; v < BM * BN / 8; v += THREADS) {
    const int row = v / (BN / 8), col = v % (BN / 8) * 8;
    const int64_t gr = m0 + row, gc = n0 + col;
    if (gr >= m || gc >= n) continue;
    const uint4 val = *reinterpret_cast<const uint4*>(&cs[row * C_PITCH + col]);
    T* dst = c + gr * n + gc;
    if (vec_c && gc + 8 <= n) {  // one 16-byte store (st.global.v4: nvcc splits a plain uint4 store here)
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(val.x), "r"(val.y), "r"(val.z),
                   "r"(val.w)
                   : "memory");
    } else {  // the edge of N, or a row of C that is not 16-byte aligned: one element at a time
      const uint32_t w[4] = {val.x, val.y, val.z, val.w};
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (gc + e < n) reinterpret_cast<uint16_t*>(dst)[e] = static_cast<uint16_t>(w[e / 2] >> (16 * (e % 2)));
    }
  }
}

// aligned: a, b 16-byte aligned and K % 8 == 0 (cp.async); vec_c: c 16-byte aligned and N % 8 == 0.
template <typename T>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_kernel(T* __restrict__ c, const T* __restrict__ a, const T* __restrict__ b, int64_t m, int64_t n, int64_t k,
                bool aligned, bool vec_c) {
  extern __shared__ __align__(128) uint4 smem[];  // (STAGES, BM + BN, BK) as 16-byte chunks; then C
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;  // this warp's 64 x 64 of the tile
  const int tiles = static_cast<int>(course::ceil_div<int64_t>(k, BK));

  // BEGIN SOLUTION
  // STUB: // TODO 1. Block order: int64_t m0, n0, this block's tile C[m0:m0+BM, n0:n0+BN], from blockIdx.x, in
  // STUB: //    groups of GROUP_M block rows walked column by column, so that the blocks running at once share
  // STUB: //    A's and B's panels in L2. With blocks_m = ceil(M / BM), blocks_n = ceil(N / BN)
  // STUB: //    (course::ceil_div; the launcher starts blocks_m * blocks_n blocks): group g = blockIdx.x /
  // STUB: //    (GROUP_M * blocks_n) starts at block row g * GROUP_M and has rows = min(GROUP_M, blocks_m -
  // STUB: //    g * GROUP_M) of them (the last group may be shorter); its i-th block (i = blockIdx.x %
  // STUB: //    (GROUP_M * blocks_n)) is block row g * GROUP_M + i % rows, block column i / rows.
  // STUB: const int64_t m0 = 0, n0 = 0;
  // 1. Grouped block order: consecutive blocks walk GROUP_M block rows down one block column
  // before moving right, so the blocks running at once share A's and B's panels in L2.
  const int blocks_m = static_cast<int>(course::ceil_div<int64_t>(m, BM));
  const int blocks_n = static_cast<int>(course::ceil_div<int64_t>(n, BN));
  const int per_group = GROUP_M * blocks_n, group_first = static_cast<int>(blockIdx.x) / per_group * GROUP_M;
  const int group_rows = min(blocks_m - group_first, GROUP_M);  // the last group may be shorter
  const int in_group = static_cast<int>(blockIdx.x) % per_group;
  const int64_t m0 = static_cast<int64_t>(group_first + in_group % group_rows) * BM;
  const int64_t n0 = static_cast<int64_t>(in_group / group_rows) * BN;
  // END SOLUTION

  const TileLoader<T> tile(smem, a, b, m, n, k, m0, n0, tiles);      // tile.issue(tag, t): K tile t's copies
  const FragmentLoader frags(course::smem_u32(smem), wm, wn, lane);  // frags.load(af, bf, t, ks)
  float acc[MT][NT][4] = {};  // this warp's 64 x 64 of C: mma tile (i, j) (16 x 8) in acc[i][j]

  // BEGIN SOLUTION
  // STUB: // TODO 2. The pipeline, a ring of STAGES = 3 K tiles of BK = 64 (4 k steps of 16). Write it once as a
  // STUB: //    generic lambda `auto pipeline = [&](auto aligned_tag) { ... };` and call it with std::true_type{}
  // STUB: //    if `aligned`, else std::false_type{}: tile.issue(aligned_tag, t) then compiles to branch-free
  // STUB: //    cp.async copies (no `if` around it: a tile past the last copies nothing) or to the plain-load
  // STUB: //    fallback. Inside it, with uint32_t af[2][MT][4], bf[2][NT / 2][4] (k step s in buffer s % 2):
  // STUB: //    a. Prologue: for t = 0 .. STAGES - 2: tile.issue(aligned_tag, t), course::cp_async_commit().
  // STUB: //       Then course::cp_async_wait<STAGES - 2>(), __syncthreads() (tile 0 has landed, everyone's),
  // STUB: //       frags.load(af[0], bf[0], 0, 0).
  // STUB: //    b. For each K tile t < tiles, for each k step ks < KSTEPS (#pragma unroll: ks % 2 must be a
  // STUB: //       constant for af and bf to stay in registers), in this order:
  // STUB: //       - at the last k step (ks == KSTEPS - 1): course::cp_async_wait<STAGES - 2>() and
  // STUB: //         __syncthreads(): tile t + 1 has landed, and every warp has issued its last ldmatrix of
  // STUB: //         tile t (step KSTEPS - 1's fragments came at step KSTEPS - 2), so tile t's stage may be refilled;
  // STUB: //       - the next step's fragments: frags.load(af[(ks + 1) % 2], bf[(ks + 1) % 2], t, ks + 1),
  // STUB: //         or, at the last k step, step 0 of tile t + 1: frags.load(af[0], bf[0], t + 1, 0);
  // STUB: //       - at ks == 0 (after the last barrier, tile t - 1's stage is free): tile.issue(aligned_tag,
  // STUB: //         t + STAGES - 1) and course::cp_async_commit(), also when that tile does not exist (one
  // STUB: //         group per tile keeps wait<STAGES - 2> meaning "the next tile has landed");
  // STUB: //       - mma_step<T>(acc, af[ks % 2], bf[ks % 2]).
  // STUB: // TODO 3. Epilogue: course::cp_async_wait<0>() and __syncthreads() (the ring becomes the C tile), then
  // STUB: //    acc rounded to T into T* cs = reinterpret_cast<T*>(smem) as [BM][C_PITCH]: lane (group = lane / 4,
  // STUB: //    pair = lane % 4) puts course::pack2<T>(acc[i][j][2 h], acc[i][j][2 h + 1]) at row
  // STUB: //    wm + 16 i + group + 8 h, column wn + 8 j + 2 pair (h = 0, 1), then __syncthreads();
  // STUB: //    store_c_tile below writes the staged tile to C.
  // STUB: (void)tile; (void)frags; (void)acc; (void)aligned;
  // 2. The pipeline, written once for both kinds of copy and compiled twice (ALIGNED true and false):
  // the aligned loop has no branch left in it, so the compiler interleaves the copies' address
  // arithmetic with the mma instead of running it between them.
  auto pipeline = [&](auto aligned_tag) {
    uint32_t af[2][MT][4], bf[2][NT / 2][4];  // the fragments of k step s live in buffer s % 2

    // Prologue: tiles 0 .. STAGES - 2 in flight (an empty group where there is no tile).
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
      tile.issue(aligned_tag, t);
      course::cp_async_commit();
    }
    course::cp_async_wait<STAGES - 2>();  // tile 0 has landed (mine) ...
    __syncthreads();                      // ... and everyone's
    frags.load(af[0], bf[0], 0, 0);  // (no tile: a stale stage, never used)

    for (int t = 0; t < tiles; ++t) {
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks) {
        if (ks == KSTEPS - 1) {  // next: step 0 of tile t + 1. Groups committed: STAGES - 1 + t + 1;
          course::cp_async_wait<STAGES - 2>();  // at most STAGES - 2 in flight: tiles 0 .. t + 1 landed
          __syncthreads();  // everyone's copies visible; and every warp has read tile t for good
        }
        if (ks < KSTEPS - 1) {
          frags.load(af[(ks + 1) % 2], bf[(ks + 1) % 2], t, ks + 1);
        } else {  // after the last tile this reads a stale stage, never used
          frags.load(af[0], bf[0], t + 1, 0);
        }
        if (ks == 0) {  // after the last barrier no warp reads tile t - 1 again: refill its stage
          tile.issue(aligned_tag, t + STAGES - 1);  // (past the last tile: nothing)
          course::cp_async_commit();
        }
        mma_step<T>(acc, af[ks % 2], bf[ks % 2]);
      }
    }
  };
  if (aligned)
    pipeline(std::true_type{});
  else
    pipeline(std::false_type{});
  course::cp_async_wait<0>();  // no copy left in flight (the trailing groups are empty)
  __syncthreads();             // every warp is done with the ring: it becomes the C tile

  // 3. Epilogue. acc[i][j][0..1]: row group, columns 2 pair, 2 pair + 1 of mma tile (i, j); [2..3]:
  // row group + 8. Rows 528 bytes apart: the 8 rows one store instruction writes hit 8 bank groups.
  T* cs = reinterpret_cast<T*>(smem);  // (BM, C_PITCH)
  const int group = lane / 4, pair = lane % 4;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(&cs[(wm + 16 * i + group + 8 * h) * C_PITCH + wn + 8 * j + 2 * pair]) =
            course::pack2<T>(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
  __syncthreads();
  // END SOLUTION

  store_c_tile(c, reinterpret_cast<const T*>(smem), m, n, m0, n0, vec_c);
}

template <typename T>
cudaError_t launch_gemm(T* c, const T* a, const T* b, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0 || n == 0) return cudaSuccess;
  const int64_t blocks = course::ceil_div<int64_t>(m, BM) * course::ceil_div<int64_t>(n, BN);
  if (blocks > INT32_MAX || course::ceil_div<int64_t>(k, BK) > INT32_MAX) return cudaErrorInvalidValue;
  // More than 48 KB of dynamic shared memory must be asked for: once per process and type.
  static bool attr_set = false;
  if (!attr_set) {
    const cudaError_t err = cudaFuncSetAttribute(gemm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    if (err != cudaSuccess) return err;
    attr_set = true;
  }
  // 16-byte copies need every row start 16-byte aligned: K a multiple of 8 and aligned bases.
  const bool aligned =
      k % 8 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  const bool vec_c = n % 8 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
  gemm_kernel<T><<<static_cast<unsigned>(blocks), THREADS, SMEM, stream>>>(c, a, b, m, n, k, aligned, vec_c);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n, int64_t k,
                                    cudaStream_t stream) {
  return launch_gemm(c, a, b, m, n, k, stream);
}

COURSE_EXPORT cudaError_t gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m,
                                    int64_t n, int64_t k, cudaStream_t stream) {
  return launch_gemm(c, a, b, m, n, k, stream);
}
