// __restrict__ demo: the same 4-elements-per-thread copy twice, once with plain pointers and
// once with `const float* __restrict__` / `float* __restrict__`. With the promise that the
// arrays do not overlap, the compiler may (1) use the read-only path, LDG.E.CONSTANT, and
// (2) hoist all four loads above the stores: 4 loads in flight per thread instead of 1.
// Bandwidth on the H100 of reports/gpu-notebooks.json: 1.00x of the copy with the promise, 0.87x without it.
//
//   inp, out  (n,) fp32, n a multiple of DEMO_THREADS * DEMO_ITEMS = 1024 (no bounds checks
//             to clutter the SASS)
//   block b, thread t copies elements b * 1024 + k * DEMO_THREADS + t, k < DEMO_ITEMS
#include "course/common.cuh"

namespace {

constexpr int DEMO_THREADS = 256;
constexpr int DEMO_ITEMS = 4;  // elements per thread, DEMO_THREADS apart so each access stays coalesced

__global__ void copy4_may_alias_kernel(float* out, const float* inp) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * DEMO_THREADS * DEMO_ITEMS + threadIdx.x;
#pragma unroll
  for (int k = 0; k < DEMO_ITEMS; ++k) {
    const int64_t i = base + k * DEMO_THREADS;
    // out may overlap inp: this store might change what the next load reads, so the next
    // load has to wait until the store is issued.
    out[i] = inp[i];
  }
}

__global__ void copy4_restrict_kernel(float* __restrict__ out, const float* __restrict__ inp) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * DEMO_THREADS * DEMO_ITEMS + threadIdx.x;
#pragma unroll
  for (int k = 0; k < DEMO_ITEMS; ++k) {
    const int64_t i = base + k * DEMO_THREADS;
    // No overlap promised: inp is read-only for the whole kernel, loads can move freely.
    out[i] = inp[i];
  }
}

// Both launchers refuse sizes that would need a bounds check (the demo is about the SASS).
bool demo_size_ok(int64_t n) { return n > 0 && n % (DEMO_THREADS * DEMO_ITEMS) == 0; }

}  // namespace

COURSE_EXPORT cudaError_t copy4_may_alias(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  if (!demo_size_ok(n)) return cudaErrorInvalidValue;
  const int64_t blocks = n / (DEMO_THREADS * DEMO_ITEMS);  // one tile of 1024 floats per block
  copy4_may_alias_kernel<<<static_cast<unsigned>(blocks), DEMO_THREADS, 0, stream>>>(out, inp);
  return cudaGetLastError();
}

COURSE_EXPORT cudaError_t copy4_restrict(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  if (!demo_size_ok(n)) return cudaErrorInvalidValue;
  const int64_t blocks = n / (DEMO_THREADS * DEMO_ITEMS);
  copy4_restrict_kernel<<<static_cast<unsigned>(blocks), DEMO_THREADS, 0, stream>>>(out, inp);
  return cudaGetLastError();
}
