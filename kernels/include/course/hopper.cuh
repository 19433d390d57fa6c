// course/hopper.cuh: Hopper's own instructions for Day 10's wgmma GEMMs (sm_90a: compiled for
// another target, each traps). One wrapper per instruction; the pipeline that uses them is in the
// kernel files.
//   wgmma      (SASS HGMMA)     a warpgroup (4 warps, 128 threads) multiplies A[64 x 16] by
//                               B[16 x 256] from shared memory into 128 fp32 registers a thread;
//                               issued, committed as a group and waited for later (asynchronous).
//   TMA        (SASS UTMALDG)   one thread copies a 2-D box of a tensor map into shared memory;
//                               completion is counted in bytes on an mbarrier. `.multicast::cluster`
//                               writes the same box into several blocks of a cluster at once.
//   setmaxnreg                  a warpgroup gives registers back or takes them.
//   clusters                    blocks that run at once on neighbouring SMs and can reach each
//                               other's shared memory (mapa) and barriers.
// Model: the PTX ISA's "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" and "Tensor Copy"
// chapters; FlashInfer include/flashinfer/attention/hopper/ and CUTLASS's cute/arch/ wrap the same.
//
// The accumulator layout of m64n256 (per warp w = 0..3 of the warpgroup, lane = group * 4 + pair):
// d[4 j + 0..1] = D[16 w + group][8 j + 2 pair + 0..1], d[4 j + 2..3] = D[16 w + group + 8][same],
// for j = 0..31: mma.sync's C fragment, once per 8 columns.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums

#include <type_traits>

#include "course/async.cuh"
#include "course/mma.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // sm_90a: the arch-specific instructions exist
#define COURSE_SM90A(...) __VA_ARGS__
#else
#define COURSE_SM90A(...) __trap()
#endif

// Defined by the course's binding (grader/jit/exports.py): cuTensorMapEncodeTiled's arguments.
extern "C" int course_encode_tensor_map_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base,
                                              const cuuint64_t* dims, const cuuint64_t* strides,
                                              const cuuint32_t* box, const cuuint32_t* steps,
                                              CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                              CUtensorMapL2promotion promotion, CUtensorMapFloatOOBfill fill);

namespace course {
namespace hopper {

template <typename T>
struct wgmma_type;  // T as a tensor map names it
template <>
struct wgmma_type<__nv_bfloat16> {
  static constexpr CUtensorMapDataType map = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
};
template <>
struct wgmma_type<__half> {
  static constexpr CUtensorMapDataType map = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
};

#define COURSE_WGMMA_D128 \
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
      "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
      "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
      "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
      "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
      "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
      "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
      "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// d[64 x 256] += A[64 x 16] B[256 x 16]^T for the warpgroup, both K-major in shared memory, each
// given by a descriptor (the kernel builds them: the descriptor's swizzle must be the one the
// tensor map wrote).
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    COURSE_SM90A(asm volatile(
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, 1, 1, 1, 0, 0;\n"
      : COURSE_WGMMA_D128 : "l"(desc_a), "l"(desc_b)));
  } else {
    COURSE_SM90A(asm volatile(
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, 1, 1, 1, 0, 0;\n"
      : COURSE_WGMMA_D128 : "l"(desc_a), "l"(desc_b)));
  }
}
#undef COURSE_WGMMA_D128

// Before the first wgmma that reads accumulators written by other instructions (zeroing them).
__device__ __forceinline__ void wgmma_fence() { COURSE_SM90A(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory")); }
// Close the group of wgmmas issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
  COURSE_SM90A(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"));
}
// Wait until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  COURSE_SM90A(asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"));
}

// A warpgroup's registers per thread: give back (dec) or take (inc), a multiple of 8 in 24..256.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  COURSE_SM90A(asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS)));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  COURSE_SM90A(asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS)));
}

// TMA: the box of the tensor map whose corner is (column x, row y) into shared memory at `smem`,
// its bytes counted on `bar` (both in this block).
__device__ __forceinline__ void tma_load_2d(void* smem, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  COURSE_SM90A(asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(smem_u32(smem)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar)) : "memory"));
}
// The same box into the same shared-memory offset of every block of the cluster in `blocks` (a bit
// per block rank), each counting the bytes on its own barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem, const CUtensorMap* map, int x, int y, uint64_t* bar,
                                                      uint16_t blocks) {
  COURSE_SM90A(asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n"
      ::"r"(smem_u32(smem)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar)), "h"(blocks) : "memory"));
}

// TMA store: shared memory at `smem` (the layout the tensor map's box and swizzle describe) to the box
// whose corner is (column x, row y); the parts of the box past the matrix's edges are not written.
// Asynchronous: commit it (bulk_commit) and, before writing that shared memory again, wait until it
// has been read (bulk_wait_read). Writes made to it by threads must be fenced for the copy engine
// (fence_proxy_async) and the threads synchronized before one of them issues the store.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem, int x, int y) {
  COURSE_SM90A(asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                            ::"l"(map), "r"(x), "r"(y), "r"(smem_u32(smem)) : "memory"));
}
__device__ __forceinline__ void bulk_commit() { COURSE_SM90A(asm volatile("cp.async.bulk.commit_group;\n" ::: "memory")); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  COURSE_SM90A(asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"));
}
__device__ __forceinline__ void fence_proxy_async() {
  COURSE_SM90A(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"));
}
// A barrier for `threads` threads (a multiple of 32) under id `id` (1..15: 0 is __syncthreads's).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrive on a barrier of this block.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  COURSE_SM90A(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory"));
}
// Arrive on the barrier at `bar`'s offset in block `rank` of the cluster (this one included).
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t rank) {
  COURSE_SM90A(asm volatile(
      "{\n"
      " .reg .b32 remote;\n"
      " mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(smem_u32(bar)), "r"(rank) : "memory"));
}

// This block's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r = 0;
  COURSE_SM90A(asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r)));
  return r;
}
// Every thread of every block of the cluster gets here before any goes on (barrier inits become
// visible to the other blocks; no block leaves while another may still write to it).
__device__ __forceinline__ void cluster_sync() {
  COURSE_SM90A(asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" :::
                            "memory"));
}

// A tensor map over a row-major [rows, cols] matrix of T (cols contiguous, 16-byte rows), read in
// boxes of box_rows x box_cols in the 128-byte swizzle (box_cols * sizeof(T) <= 128). Reads past the
// matrix's edges give zeros; a box always counts its full size in bytes. The driver encodes it
// (cuTensorMapEncodeTiled), reached through course_encode_tensor_map_tiled, which the course's
// binding defines: a launcher reaches no other driver function.
template <typename T>
cudaError_t tensor_map_2d(CUtensorMap* map, const T* ptr, int64_t rows, int64_t cols, int box_rows, int box_cols) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};  // innermost first
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(T)};                 // bytes, of dim 1
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t steps[2] = {1, 1};
  const int r = course_encode_tensor_map_tiled(map, wgmma_type<T>::map, 2, const_cast<T*>(ptr), dims, strides, box, steps,
                                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace hopper
}  // namespace course
