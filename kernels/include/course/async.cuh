// course/async.cuh: copies from global to shared memory that do not wait (Day 7).
// Adds cp.async (sm_80+, SASS LDGSTS): a thread asks for 4, 8 or 16 bytes to be copied straight
// from global into shared memory, without passing through its registers, and goes on. Copies are
// collected in *groups* (commit_group, SASS LDGDEPBAR) and waited for by group (wait_group<N>,
// SASS DEPBAR: "until at most N of my groups are still in flight"). A predicated form copies
// fewer source bytes and fills the rest with zeros (src-size 0: all zeros, nothing read), which
// is how a tile past the end of a row is padded. Days 10-12 build their pipelines on these.
// Also the Hopper bulk copy (sm_90, cp.async.bulk + mbarrier): one thread moves a whole
// contiguous block, and the barrier counts the bytes that arrived.
// Model: FlashInfer include/flashinfer/cp_async.cuh (the same PTX; here one function per idea).
#pragma once

#include "course/common.cuh"

namespace course {

// A shared-memory address as the PTX instructions want it: 32 bits in the shared window.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Where the copied line may be cached on the way: .ca keeps it in L1 too (data other warps of
// the SM will read again, e.g. activations), .cg only in L2 (data streamed once, e.g. weights).
// The hardware allows .cg for 16-byte copies only.
enum class CacheHint { ca, cg };

// cp.async of BYTES (4, 8 or 16) from `gmem` to `smem`, both aligned to BYTES. Returns at once;
// the data is there only after the group it belongs to has been waited for.
template <int BYTES, CacheHint HINT = CacheHint::ca>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  static_assert(HINT == CacheHint::ca || BYTES == 16, "cp.async.cg copies 16 bytes only");
  if constexpr (HINT == CacheHint::cg) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "n"(BYTES));
  }
}

// The predicated copy: with `pred` it copies BYTES; without, it reads nothing and writes BYTES
// zeros (src-size 0). `gmem` must still be a valid-looking address: pass the tensor's base.
template <int BYTES, CacheHint HINT = CacheHint::ca>
__device__ __forceinline__ void cp_async_zfill(void* smem, const void* gmem, bool pred) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  static_assert(HINT == CacheHint::ca || BYTES == 16, "cp.async.cg copies 16 bytes only");
  const int src_bytes = pred ? BYTES : 0;
  if constexpr (HINT == CacheHint::cg) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "n"(BYTES), "r"(src_bytes));
  }
}

// Close the current group: every cp.async this thread issued since the last commit.
// An empty group is fine (and keeps the counting in a pipeline loop uniform).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most N of this thread's committed groups are still in flight. Only this
// thread's copies: a __syncthreads() afterwards makes every thread's copies visible to all.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------- Hopper bulk copy (sm_90)
// One thread copies `bytes` (a multiple of 16; both addresses 16-byte aligned) with one
// instruction; completion is counted in bytes on an mbarrier, a 64-bit object in shared memory.
// The barrier's phase flips once `expected` threads have arrived and all announced bytes landed.
// sm_90 and later only: compiled for an older GPU, these trap.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define COURSE_SM90_ONLY(...) __trap()
#else
#define COURSE_SM90_ONLY(...) __VA_ARGS__
#endif
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t expected) {
  COURSE_SM90_ONLY(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(expected)));
}

// Make the initialized barrier visible to the copy engine (the "async proxy") before first use.
__device__ __forceinline__ void fence_barrier_init() {
  COURSE_SM90_ONLY(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));
}

// Arrive on the barrier and announce `bytes` more to come from bulk copies in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  COURSE_SM90_ONLY(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory"));
}

// Wait until the phase with parity `phase` (0, 1, 0, ...) has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t phase) {
  COURSE_SM90_ONLY(asm volatile(
      "{\n"
      " .reg .pred done;\n"
      "WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(phase)
      : "memory"));
}

// One bulk copy global -> shared, its bytes counted on `bar` (SASS UBLKCP).
__device__ __forceinline__ void cp_async_bulk(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
  COURSE_SM90_ONLY(asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
      : "memory"));
}
#undef COURSE_SM90_ONLY

}  // namespace course
