// Top-p v1: sort, then scan, the way torch does it, but with CUB. Adds: a device-wide CUB
// algorithm (cub::DeviceSegmentedSort: every row a segment, sorted by probability, descending,
// token ids alongside; long segments go through radix-sort passes. Its sibling
// cub::DeviceSegmentedRadixSort does the same, but one of its kernels spills registers on sm_90,
// which this course's build test refuses) and a per-row kernel that scans the sorted row with
// cub::BlockScan twice: once to find where the nucleus ends, once to invert the nucleus's
// running mass at a uniform draw.
//
// Device-wide CUB calls run in two steps: called with a null scratch pointer they only say how
// many bytes of scratch they need; called again with it, they launch their kernels on `stream`.
// This file asks the caller for one workspace (top_p_v1_workspace_bytes) instead of allocating.
//
// Napkin math, 128 x 128256: a radix sort of 16.4 M (key, id) pairs makes 4 passes of 8 bits
// over 8 bytes per pair read and written (~530 MB, ~150 us at 3.5 TB/s, plus the segmented
// sort's overheads), then the scans read the sorted row twice. The sort is the cost: v3 shows
// that no sort is needed.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <curand_kernel.h>

#include "course/common.cuh"

namespace {

constexpr int V1_THREADS = 1024;
constexpr int V1_ITEMS = 4;
constexpr int64_t V1_TILE = V1_THREADS * V1_ITEMS;

__global__ void iota_rows_kernel(int* __restrict__ ids, int* __restrict__ offsets, int64_t rows, int64_t vocab) {
  const int64_t n = rows * vocab;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    ids[i] = static_cast<int>(i % vocab);
    if (i % vocab == 0) offsets[i / vocab] = static_cast<int>(i);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) offsets[rows] = static_cast<int>(n);
}

struct V1Carry {
  float running;
  __device__ float operator()(float tile_total) {
    const float before = running;
    running += tile_total;
    return before;
  }
};

// One block per row of the sorted probabilities (descending) and their token ids.
__global__ void __launch_bounds__(V1_THREADS)
    sorted_top_p_kernel(int64_t* __restrict__ tokens, const float* __restrict__ sorted, const int* __restrict__ ids,
                        const float* __restrict__ top_p, int64_t vocab, uint64_t seed, uint64_t offset) {
  using BlockScan = cub::BlockScan<float, V1_THREADS, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ typename BlockScan::TempStorage scratch;
  __shared__ int hit;        // first position found by this pass (INT32_MAX: none yet)
  __shared__ float hit_mass; // pass 1: the mass before it
  const int64_t row = blockIdx.x;
  const float* s = sorted + row * vocab;  // (vocab,) descending
  const float p_top = top_p[row];

  // Pass 1: the nucleus ends at the first position that starts a new group of equal values and
  // has at least top_p before it; its mass is what lies before that position. With top_p >= 1
  // (or if no position qualifies) it is the whole row.
  int64_t end = vocab;
  V1Carry carry{0.0f};
  for (int64_t base = 0; base < vocab; base += V1_TILE) {
    const int64_t i = base + threadIdx.x * V1_ITEMS;  // my first position: blocked arrangement
    float v[V1_ITEMS], before[V1_ITEMS];
#pragma unroll
    for (int j = 0; j < V1_ITEMS; ++j) v[j] = i + j < vocab ? s[i + j] : 0.0f;
    BlockScan(scratch).ExclusiveSum(v, before, carry);
    if (threadIdx.x == 0) hit = INT32_MAX;
    __syncthreads();
    if (p_top < 1.0f) {
      for (int j = 0; j < V1_ITEMS; ++j) {
        const bool new_group = i + j == 0 || s[i + j] != s[i + j - 1];
        if (i + j < vocab && new_group && before[j] >= p_top) {
          if (atomicMin(&hit, static_cast<int>(i + j)) > i + j) hit_mass = before[j];
          break;
        }
      }
    }
    __syncthreads();
    if (hit != INT32_MAX) break;
  }
  // The smallest position wins the atomicMin; hit_mass may have been written by a larger one
  // first, so read it again from the winner.
  float mass = carry.running;  // the whole row
  if (hit != INT32_MAX) {
    end = hit;
    mass = hit_mass;
  }
  __syncthreads();

  // Pass 2: u in (0, mass]; the first position (of p > 0) whose running mass reaches u.
  float u;
  {
    curandStatePhilox4_32_10_t rng;
    curand_init(seed, row, offset, &rng);  // every thread draws the same u: no broadcast needed
    u = curand_uniform(&rng) * mass;
  }
  if (threadIdx.x == 0) hit = INT32_MAX;
  __syncthreads();
  carry.running = 0.0f;
  for (int64_t base = 0; base < end; base += V1_TILE) {
    const int64_t i = base + threadIdx.x * V1_ITEMS;
    float v[V1_ITEMS], incl[V1_ITEMS];
#pragma unroll
    for (int j = 0; j < V1_ITEMS; ++j) v[j] = i + j < end ? s[i + j] : 0.0f;
    BlockScan(scratch).InclusiveSum(v, incl, carry);
    for (int j = 0; j < V1_ITEMS; ++j) {
      if (i + j < end && v[j] > 0.0f && incl[j] >= u) {  // a float scan is not monotonic: the
        atomicMin(&hit, static_cast<int>(i + j));         // first position that reaches u wins
        break;
      }
    }
    __syncthreads();
    if (hit != INT32_MAX) break;
  }
  // Rounding can leave u unreached: then the last position of the nucleus with p > 0.
  int64_t pos = hit != INT32_MAX ? hit : end - 1;
  while (pos > 0 && s[pos] <= 0.0f) --pos;
  if (threadIdx.x == 0) tokens[row] = ids[row * vocab + pos];
}

}  // namespace

// Bytes of workspace for `batch` rows of `vocab`: sorted keys, ids in and out, row offsets and
// CUB's own scratch (asked for with a null pointer: no work is done).
COURSE_EXPORT int64_t top_p_v1_workspace_bytes(int64_t batch, int64_t vocab) {
  const int64_t n = batch * vocab;
  size_t cub_bytes = 0;
  cub::DeviceSegmentedSort::SortPairsDescending(nullptr, cub_bytes, static_cast<const float*>(nullptr),
                                                     static_cast<float*>(nullptr), static_cast<const int*>(nullptr),
                                                     static_cast<int*>(nullptr), static_cast<int>(n),
                                                     static_cast<int>(batch), static_cast<const int*>(nullptr),
                                                     static_cast<const int*>(nullptr) + 1);
  return 4 * n * 3 + 4 * (batch + 1) + static_cast<int64_t>(cub_bytes) + 4 * 256;  // + room to align
}

COURSE_EXPORT cudaError_t top_p_v1_cub_sort(int64_t* tokens, const float* probs, const float* top_p,
                                            uint8_t* workspace, int64_t workspace_bytes, int64_t batch, int64_t vocab,
                                            int64_t seed, int64_t offset, cudaStream_t stream) {
  if (batch == 0) return cudaSuccess;
  if (batch * vocab > INT32_MAX || workspace_bytes < top_p_v1_workspace_bytes(batch, vocab)) {
    return cudaErrorInvalidValue;
  }
  const int64_t n = batch * vocab;
  // Carve the workspace: (n,) sorted keys, (n,) ids, (n,) sorted ids, (batch + 1,) offsets, CUB's scratch.
  auto align = [](uint8_t* p) { return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 255) & ~uintptr_t(255)); };
  uint8_t* at = align(workspace);
  float* keys_out = reinterpret_cast<float*>(at);
  int* ids_in = reinterpret_cast<int*>(keys_out + n);
  int* ids_out = ids_in + n;
  int* offsets = ids_out + n;
  uint8_t* cub_scratch = reinterpret_cast<uint8_t*>(offsets + batch + 1);
  size_t cub_bytes = static_cast<size_t>(workspace + workspace_bytes - cub_scratch);
  iota_rows_kernel<<<course::grid_stride_blocks(n, 256), 256, 0, stream>>>(ids_in, offsets, batch, vocab);
  cudaError_t err = cub::DeviceSegmentedSort::SortPairsDescending(
      cub_scratch, cub_bytes, probs, keys_out, ids_in, ids_out, static_cast<int>(n), static_cast<int>(batch),
      offsets, offsets + 1, stream);
  if (err != cudaSuccess) return err;
  sorted_top_p_kernel<<<static_cast<unsigned>(batch), V1_THREADS, 0, stream>>>(
      tokens, keys_out, ids_out, top_p, vocab, static_cast<uint64_t>(seed), static_cast<uint64_t>(offset));
  return cudaGetLastError();
}
