// v5, Hopper's own path (sm_90a only, not graded): wgmma + TMA, what cuBLAS runs for torch.matmul.
// Three things change at once against v4, all of them Hopper-only:
//  * TMA (the tensor memory accelerator): one thread describes a whole tile (a 2-D box of a tensor
//    map, cuTensorMapEncodeTiled on the host) and the copy engine writes it to shared memory,
//    already in the 128-byte XOR swizzle (chunk c of row r at c ^ (r % 8), FlashInfer's
//    permuted_smem layout); completion is counted in bytes on an mbarrier (SASS UTMALDG, SYNCS);
//  * wgmma: a warpgroup (4 warps, 128 threads) multiplies a 64 x 256 x 16 step in one instruction,
//    reading A and B straight from shared memory through 64-bit descriptors: no ldmatrix, no
//    fragment registers, and each instruction does 32x the work of one mma.sync (SASS HGMMA);
//    it runs asynchronously: issued, committed as a group, waited for later;
//  * warp specialization: warpgroup 0 only issues copies (one thread), warpgroups 1 and 2 only
//    multiply, each 64 rows of the 128 x 256 tile; full / empty mbarriers per stage hand the four
//    stages of the ring back and forth, with no __syncthreads in the loop.
// Napkin math at 4096^3: 137 GFLOP; the dense bf16 peak is ~989 TFLOP/s, cuBLAS reaches ~780.
// Built only for sm_90a (the file name says so: grader.build compiles *_sm90a.cu files, and the
// extension that holds them, with -gencode=arch=compute_90a,code=sm_90a on a compute capability
// 9.0 GPU and in compile-only mode); elsewhere the kernel traps and the launcher refuses.
//
//   a [M, K], b [N, K], c [M, N]   bf16; M a multiple of 128, N of 256, K of 64; 16-byte aligned
#include <cuda.h>  // CUtensorMap (the driver's function itself is fetched at run time)
#include <cudaTypedefs.h>

#include "course/async.cuh"
#include "course/mma.cuh"

namespace {
namespace v5 {  // the versions of a day build into one extension: names apart

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4;  // BK: 64 bf16 = one 128-byte swizzled row
constexpr int CONSUMERS = 2, THREADS = 128 * (1 + CONSUMERS);  // warpgroup 0 copies, 1-2 multiply
constexpr int A_STAGE = BM * BK, B_STAGE = BN * BK;            // elements: 16 KB and 32 KB
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;
constexpr int SMEM = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;  // + barriers + room to align

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // sm_90a: the arch-specific instructions exist
#define V5_SM90A(...) __VA_ARGS__
#else
#define V5_SM90A(...) __trap()
#endif

// A wgmma shared-memory descriptor for a K-major tile in the 128-byte swizzle: start address
// (bits 0-13, in 16 bytes), leading byte offset (16-29; unused by this layout: 1), stride byte
// offset (32-45: 1024 bytes from one group of 8 rows to the next), swizzle mode (62-63: 1 = 128 B).
__device__ __forceinline__ uint64_t smem_descriptor(const void* p) {
  const uint64_t addr = course::smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// d[64 x 256] += A[64 x 16] B[16 x 256]^T for the warpgroup, A and B K-major in shared memory.
// Lane layout of d (per warp w of the group, per n8 column tile j): the mma.sync C fragment,
// d[4 j + 0..1] = row 16 w + group, columns 8 j + 2 pair + 0..1; d[4 j + 2..3] = row + 8.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  V5_SM90A(
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
               "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
               "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
               "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
               "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
               "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
               "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
               "}, %128, %129, 1, 1, 1, 0, 0;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                 "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                 "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                 "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                 "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                 "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                 "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                 "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                 "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "l"(desc_a), "l"(desc_b));
  );
}
__device__ __forceinline__ void wgmma_fence() { V5_SM90A(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory")); }
__device__ __forceinline__ void wgmma_commit() {
  V5_SM90A(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"));
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  V5_SM90A(asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"));
}

// TMA: the box of the tensor map at (k0, row0) into shared memory, its bytes counted on `bar`.
__device__ __forceinline__ void tma_load_2d(void* smem, const CUtensorMap* map, int k0, int row0, uint64_t* bar) {
  V5_SM90A(asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(course::smem_u32(smem)), "l"(map), "r"(k0), "r"(row0), "r"(course::smem_u32(bar)) : "memory"));
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  V5_SM90A(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(course::smem_u32(bar)) : "memory"));
}

__global__ void __launch_bounds__(THREADS, 1)
    gemm_wgmma_tma_kernel(__nv_bfloat16* __restrict__ c, const __grid_constant__ CUtensorMap map_a,
                          const __grid_constant__ CUtensorMap map_b, int64_t m, int64_t n, int64_t k) {
  extern __shared__ unsigned char smem_raw[];
  // The 128-byte swizzle repeats every 8 rows (1024 bytes): stages start on 1024-byte boundaries.
  unsigned char* base = smem_raw + ((1024 - course::smem_u32(smem_raw) % 1024) % 1024);
  __nv_bfloat16* sa = reinterpret_cast<__nv_bfloat16*>(base);  // (STAGES, BM, BK) swizzled
  __nv_bfloat16* sb = sa + STAGES * A_STAGE;                    // (STAGES, BN, BK) swizzled
  uint64_t* full = reinterpret_cast<uint64_t*>(sb + STAGES * B_STAGE);  // stage s has landed
  uint64_t* empty = full + STAGES;                                      // stage s may be refilled

  // Grouped block order, as v4.
  constexpr int GROUP_M = 8;
  const int blocks_m = static_cast<int>(m / BM), blocks_n = static_cast<int>(n / BN);
  const int per_group = GROUP_M * blocks_n, group_first = static_cast<int>(blockIdx.x) / per_group * GROUP_M;
  const int group_rows = min(blocks_m - group_first, GROUP_M);
  const int in_group = static_cast<int>(blockIdx.x) % per_group;
  const int m0 = (group_first + in_group % group_rows) * BM, n0 = in_group / group_rows * BN;
  const int tiles = static_cast<int>(k / BK);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      course::mbarrier_init(&full[s], 1);           // the producer's arrive (+ the TMA bytes)
      course::mbarrier_init(&empty[s], CONSUMERS);  // one arrive per consumer warpgroup
    }
    course::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // producer: one thread keeps the ring full
    if (threadIdx.x == 0) {
      for (int t = 0; t < tiles; ++t) {
        const int s = t % STAGES;
        if (t >= STAGES) course::mbarrier_wait(&empty[s], (t / STAGES - 1) & 1);  // both consumers done with it
        course::mbarrier_arrive_expect_tx(&full[s], STAGE_BYTES);
        tma_load_2d(sa + s * A_STAGE, &map_a, t * BK, m0, &full[s]);
        tma_load_2d(sb + s * B_STAGE, &map_b, t * BK, n0, &full[s]);
      }
    }
    return;
  }

  // Consumers: warpgroup wg multiplies rows 64 (wg - 1) .. + 63 of the tile by all 256 columns.
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  const int row0 = 64 * (wg - 1);
  for (int t = 0; t < tiles; ++t) {
    const int s = t % STAGES;
    course::mbarrier_wait(&full[s], (t / STAGES) & 1);
    wgmma_fence();  // the accumulators are ready for the tensor cores
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)  // 16 k = 32 bytes further along each swizzled row
      wgmma_m64n256k16(d, smem_descriptor(sa + s * A_STAGE + row0 * BK + 16 * kk),
                       smem_descriptor(sb + s * B_STAGE + 16 * kk));
    wgmma_commit();
    wgmma_wait<1>();  // tile t - 1's wgmmas are done (tile t's may still run)...
    if (t > 0 && threadIdx.x % 128 == 0) mbarrier_arrive(&empty[(t - 1) % STAGES]);  // ...so its stage is free
  }
  wgmma_wait<0>();

  const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, group = lane / 4, pair = lane % 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    __nv_bfloat16* dst = c + static_cast<int64_t>(m0 + row0 + 16 * w + group) * n + n0 + 8 * j + 2 * pair;
    *reinterpret_cast<uint32_t*>(dst) = course::pack2<__nv_bfloat16>(d[4 * j], d[4 * j + 1]);
    *reinterpret_cast<uint32_t*>(dst + 8 * n) = course::pack2<__nv_bfloat16>(d[4 * j + 2], d[4 * j + 3]);
  }
}
#undef V5_SM90A

// A 2-D tensor map over a row-major [rows, k] bf16 matrix, boxes of box_rows x 64, 128-byte swizzle.
// cuTensorMapEncodeTiled is a driver function: fetched through the runtime, nothing to link.
cudaError_t make_tensor_map(CUtensorMap* map, const __nv_bfloat16* ptr, int64_t rows, int64_t k, int box_rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (encode == nullptr) {
    cudaDriverEntryPointQueryResult found;
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode),
                                                             12000, cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || encode == nullptr) return cudaErrorNotSupported;
  }
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};  // innermost first
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};                         // bytes, of dim 1
  const cuuint32_t box[2] = {BK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t steps[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(ptr), dims, strides,
                            box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace v5
}  // namespace

COURSE_EXPORT cudaError_t gemm_v5_wgmma_tma_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                 int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0 || m % v5::BM || n % v5::BN || k % v5::BK) return cudaErrorInvalidValue;
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return cudaErrorInvalidValue;  // TMA coordinates are 32-bit
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16 || reinterpret_cast<uintptr_t>(c) % 4)
    return cudaErrorInvalidValue;
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) return cudaErrorNotSupported;  // sm_90a code runs on compute capability 9.0 only
  static bool attr_set = false;
  if (!attr_set) {
    const cudaError_t err = cudaFuncSetAttribute(v5::gemm_wgmma_tma_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, v5::SMEM);
    if (err != cudaSuccess) return err;
    attr_set = true;
  }
  CUtensorMap map_a, map_b;
  cudaError_t err = v5::make_tensor_map(&map_a, a, m, k, v5::BM);
  if (err == cudaSuccess) err = v5::make_tensor_map(&map_b, b, n, k, v5::BN);
  if (err != cudaSuccess) return err;
  const int64_t blocks = (m / v5::BM) * (n / v5::BN);
  v5::gemm_wgmma_tma_kernel<<<static_cast<unsigned>(blocks), v5::THREADS, v5::SMEM, stream>>>(c, map_a, map_b, m, n, k);
  return cudaGetLastError();
}
