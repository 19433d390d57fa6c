// v4, the last steps of a fast mma.sync GEMM: adds to v3
//  * double-buffered fragments: while the tensor cores run k step s, the warp's ldmatrix for step
//    s + 1 (or step 0 of the next K tile) are already issued into a second set of registers, so
//    no mma waits on a shared-memory load (64 registers more: 2 x (16 A + 16 B) per lane);
//  * block rasterization: a 1-D grid walked in groups of GROUP_M = 8 block rows, column by column,
//    so the blocks running at once (132 of them, one per SM) share fewer panels of A and B in L2
//    (at 8192^3 a wave in row-major order touches 5 row panels of A and all 32 column panels of B,
//    138 MB; grouped, 8 and 17 of them, 84 MB; at 4096^3 both orders touch ~40 MB);
//  * a staged epilogue: the accumulators go through shared memory (rows padded by 16 bytes: no
//    bank conflicts), so that C is written in coalesced 16-byte stores of whole rows instead of
//    4-byte stores scattered over 8 rows per instruction.
// Napkin math at 4096^3: 137 GFLOP; what is left is mma.sync's own ceiling (~636 TFLOP/s on an
// H200) against cuBLAS's wgmma (~780): expect 0.6-0.75x torch.matmul.
//
// The tile shape, the copy of a K tile into a stage (issue_tile) and a k step's fragments and mma
// are course/gemm_versions.cuh's (shared with v1-v3).
#include "course/gemm_versions.cuh"

namespace {
namespace v4 {  // the versions of a day build into one extension: names apart
using namespace course::gemm_versions;

constexpr int STAGES = 4;                                // ring depth
constexpr int C_PITCH = BN + 8;                          // staged C rows: 528 bytes, 4 banks apart
constexpr int PIPE_BYTES = STAGES * STAGE_CHUNKS * 16, C_BYTES = BM * C_PITCH * 2;
constexpr int SMEM = PIPE_BYTES > C_BYTES ? PIPE_BYTES : C_BYTES;  // the C tile reuses the ring
constexpr int GROUP_M = 8;

__global__ void __launch_bounds__(THREADS, 1)
    gemm_raster_epilogue_kernel(__nv_bfloat16* __restrict__ c, const __nv_bfloat16* __restrict__ a,
                                const __nv_bfloat16* __restrict__ b, int64_t m, int64_t n, int64_t k) {
  extern __shared__ __align__(128) uint4 smem[];  // (STAGES, BM + BN, BK), later (BM, C_PITCH) of C
  // Block order: GROUP_M block rows walked down one block column, then the next column.
  const int blocks_m = static_cast<int>(m / BM), blocks_n = static_cast<int>(n / BN);
  const int per_group = GROUP_M * blocks_n, group_first = static_cast<int>(blockIdx.x) / per_group * GROUP_M;
  const int group_rows = min(blocks_m - group_first, GROUP_M);  // the last group may be shorter
  const int in_group = static_cast<int>(blockIdx.x) % per_group;
  const int64_t m0 = static_cast<int64_t>(group_first + in_group % group_rows) * BM;
  const int64_t n0 = static_cast<int64_t>(in_group / group_rows) * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / WARPS_N * WM, wn = warp % WARPS_N * WN;
  const int tiles = static_cast<int>(k / BK);

  auto issue_tile = [&](int t) {
    course::gemm_versions::issue_tile(smem + (t % STAGES) * STAGE_CHUNKS, a, b, m0, n0, k, t);
  };

  float acc[MT][NT][4] = {};
  uint32_t af[2][MT][4], bf[2][NT / 2][4];  // fragments of k step s in buffer s % 2
  auto load_fragments = [&](int buf, int t, int ks) {
    const uint4* sa = smem + (t % STAGES) * STAGE_CHUNKS;
    course::gemm_versions::load_fragments<Swizzled>(af[buf], bf[buf], sa, sa + A_CHUNKS, wm, wn, lane, ks);
  };

#pragma unroll
  for (int t = 0; t < STAGES - 1; ++t) {
    if (t < tiles) issue_tile(t);
    course::cp_async_commit();
  }
  course::cp_async_wait<STAGES - 2>();
  __syncthreads();
  load_fragments(0, 0, 0);
  for (int t = 0; t < tiles; ++t) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      if (ks == KSTEPS - 1) {  // before reading tile t + 1: it has landed, and tile t - 1 is free
        course::cp_async_wait<STAGES - 2>();
        __syncthreads();
      }
      if (ks < KSTEPS - 1) {
        load_fragments((ks + 1) % 2, t, ks + 1);
      } else if (t + 1 < tiles) {
        load_fragments(0, t + 1, 0);
      }
      if (ks == 0) {  // every warp passed the last barrier, so tile t - 1's stage is free
        if (t + STAGES - 1 < tiles) issue_tile(t + STAGES - 1);
        course::cp_async_commit();
      }
      mma_step(acc, af[ks % 2], bf[ks % 2]);
    }
  }
  course::cp_async_wait<0>();
  __syncthreads();  // the ring becomes the C tile

  // Epilogue: lane (group, pair) writes 2 neighbours of rows group and group + 8 of each mma tile;
  // rows are 528 bytes apart, so the 8 rows of one store instruction hit 8 different bank groups.
  __nv_bfloat16* cs = reinterpret_cast<__nv_bfloat16*>(smem);
  const int group = lane / 4, pair = lane % 4;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(&cs[(wm + 16 * i + group + 8 * h) * C_PITCH + wn + 8 * j + 2 * pair]) =
            course::pack2<__nv_bfloat16>(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
  __syncthreads();
  // A warp writes one 512-byte row of C per instruction, 16 bytes per lane.
#pragma unroll 4
  for (int v = threadIdx.x; v < BM * BN / 8; v += THREADS) {
    const int row = v / (BN / 8), col = v % (BN / 8) * 8;
    *reinterpret_cast<uint4*>(c + (m0 + row) * n + n0 + col) = *reinterpret_cast<const uint4*>(&cs[row * C_PITCH + col]);
  }
}

}  // namespace v4
}  // namespace

COURSE_EXPORT cudaError_t gemm_v4_raster_epilogue_bf16(__nv_bfloat16* c, const __nv_bfloat16* a,
                                                       const __nv_bfloat16* b, int64_t m, int64_t n, int64_t k,
                                                       cudaStream_t stream) {
  if (course::gemm_versions::bad_args(m, n, k, a, b, c, 16)) return cudaErrorInvalidValue;
  static bool attr_set = false;  // more than 48 KB of dynamic shared memory is asked for once
  if (!attr_set) {
    const cudaError_t err = cudaFuncSetAttribute(v4::gemm_raster_epilogue_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, v4::SMEM);
    if (err != cudaSuccess) return err;
    attr_set = true;
  }
  const int64_t blocks = (m / v4::BM) * (n / v4::BN);
  v4::gemm_raster_epilogue_kernel<<<static_cast<unsigned>(blocks), v4::THREADS, v4::SMEM, stream>>>(c, a, b, m, n, k);
  return cudaGetLastError();
}
