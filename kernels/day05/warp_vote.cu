// Warp votes: every lane contributes one predicate and every lane gets the combined answer,
// in one instruction (VOTE in the SASS): __ballot_sync (a 32-bit mask, bit k = lane k's
// vote), __any_sync, __all_sync; __popc counts the bits of a mask. Two kernels:
//  * warp_vote_summary: for each chunk of 32 elements, the ballot of x > threshold and
//    whether any / all lanes voted yes (the last chunk may be partial);
//  * compact_above: stream compaction, the elements > threshold packed to the front of
//    `out`, with one atomicAdd per warp instead of one per element. A read of n floats plus
//    a write of the survivors: expect close to the coalesced copy of Day 2 for large n.
//
//   x      (n,) fp32
//   votes  (ceil(n / 32), 3) int32   per chunk: [ballot bits, any, all]
//   out    (n,) fp32, count (1,) int32 (zero before the call): out[:count] are the survivors,
//          in order within a warp's 32 elements, in no fixed order across warps
#include "course/warp.cuh"

namespace {

constexpr int VOTE_THREADS = 256;

__global__ void warp_vote_summary_kernel(int32_t* __restrict__ votes, const float* __restrict__ x,
                                         int64_t n, float threshold) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * VOTE_THREADS + threadIdx.x;
  const int lane = threadIdx.x % course::WARP_SIZE;
  // The mask argument names the lanes that take part, and every named lane must reach the
  // call. First vote on who has an element (all 32 lanes still here), then let the others go.
  const unsigned live = __ballot_sync(course::FULL_MASK, i < n);
  if (i >= n) return;
  const bool yes = x[i] > threshold;
  const unsigned ballot = __ballot_sync(live, yes);  // bit k set <=> lane k voted yes
  const int any = __any_sync(live, yes);             // ballot != 0
  const int all = __all_sync(live, yes);             // ballot == live
  if (lane == 0) {  // lane 0 is live whenever any lane is: i grows with the lane
    int32_t* v = votes + (i / course::WARP_SIZE) * 3;  // (3,) this chunk's row
    v[0] = static_cast<int32_t>(ballot);
    v[1] = any;
    v[2] = all;
  }
}

__global__ void compact_above_kernel(float* __restrict__ out, int32_t* __restrict__ count,
                                     const float* __restrict__ x, int64_t n, float threshold) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * VOTE_THREADS + threadIdx.x;
  const int lane = threadIdx.x % course::WARP_SIZE;
  // Lanes past the end vote "no" but stay: the full-mask ballot needs all 32.
  const float v = i < n ? x[i] : 0.0f;
  const bool keep = i < n && v > threshold;
  const unsigned kept = __ballot_sync(course::FULL_MASK, keep);  // the warp's survivors
  // This lane's slot among them: how many lanes below it also keep their element.
  const int rank = __popc(kept & ((1u << lane) - 1u));
  int base = 0;
  // One atomic per warp reserves __popc(kept) consecutive slots for the whole group...
  if (lane == 0 && kept != 0) base = atomicAdd(count, __popc(kept));
  // ...and a shuffle hands the first slot to every lane.
  base = __shfl_sync(course::FULL_MASK, base, 0);
  if (keep) out[base + rank] = v;
}

}  // namespace

COURSE_EXPORT cudaError_t warp_vote_summary(int32_t* votes, const float* x, int64_t n, float threshold,
                                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int64_t blocks = course::ceil_div<int64_t>(n, VOTE_THREADS);
  warp_vote_summary_kernel<<<static_cast<unsigned>(blocks), VOTE_THREADS, 0, stream>>>(
      votes, x, n, threshold);
  return cudaGetLastError();
}

// `count` must hold 0 before the call (torch.zeros(1, dtype=torch.int32)): it is the next
// free slot of `out`, advanced by each warp's atomicAdd. int32 slots: n below 2^31.
COURSE_EXPORT cudaError_t compact_above(float* out, int32_t* count, const float* x, int64_t n, float threshold,
                                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (n >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  const int64_t blocks = course::ceil_div<int64_t>(n, VOTE_THREADS);
  compact_above_kernel<<<static_cast<unsigned>(blocks), VOTE_THREADS, 0, stream>>>(
      out, count, x, n, threshold);
  return cudaGetLastError();
}
