// v3, vectorized copy: adds VEC floats per load and store through course::vec_t<float, VEC>
// (VEC = 1, 2, 4: 4, 8, 16 bytes; 16 bytes is one LDG.E.128), then a scalar tail for the
// n % VEC elements a whole vector cannot cover. Same sectors as v2, but 4x fewer
// instructions and more bytes in flight per thread: expect ~0.9-0.95x of the copy bandwidth
// (~3.8 TB/s on an H200) at 16 bytes.
//
//   inp, out  (n,) fp32      viewed as (n / VEC,) vectors + (n % VEC,) tail
#include "course/vec.cuh"

namespace {

template <int VEC>
__global__ void copy_vectorized_kernel(float* __restrict__ out, const float* __restrict__ inp,
                                       int64_t n) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // Main loop: thread i moves vector i, VEC * 4 contiguous bytes; a warp covers
  // 32 * VEC * 4 contiguous bytes (512 at VEC = 4: four full 128-byte lines).
  const int64_t num_vecs = n / VEC;
  for (int64_t v = first; v < num_vecs; v += step) {
    course::vec_t<float, VEC> x;
    x.load(inp + v * VEC);  // one VEC * 4-byte load: needs a VEC * 4-byte-aligned address
    x.store(out + v * VEC);
  }
  // Tail: the last n % VEC (< VEC) elements, one per thread.
  for (int64_t i = num_vecs * VEC + first; i < n; i += step) {
    out[i] = inp[i];
  }
}

// A vector load from an address that is not a multiple of its width faults
// ("misaligned address"). cudaMalloc returns 256-byte-aligned memory, but a tensor
// slice such as x[1:] starts 4 bytes further: then fall back to 4-byte accesses.
template <int VEC>
cudaError_t launch_copy_vectorized(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr uintptr_t BYTES = VEC * sizeof(float);
  const bool aligned = reinterpret_cast<uintptr_t>(out) % BYTES == 0 &&
                       reinterpret_cast<uintptr_t>(inp) % BYTES == 0;
  const int threads = 256;
  if (!aligned) {
    const int blocks = course::grid_stride_blocks(n, threads);
    copy_vectorized_kernel<1><<<blocks, threads, 0, stream>>>(out, inp, n);
  } else {
    // One thread per vector; at most 8 blocks per SM, the grid-stride loop does the rest.
    const int blocks = course::grid_stride_blocks(course::ceil_div<int64_t>(n, VEC), threads);
    copy_vectorized_kernel<VEC><<<blocks, threads, 0, stream>>>(out, inp, n);
  }
  return cudaGetLastError();
}

}  // namespace

// One entry point per vector width: a template has to be instantiated to be called.
COURSE_EXPORT cudaError_t copy_v3_vec1(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  return launch_copy_vectorized<1>(out, inp, n, stream);
}

COURSE_EXPORT cudaError_t copy_v3_vec2(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  return launch_copy_vectorized<2>(out, inp, n, stream);
}

COURSE_EXPORT cudaError_t copy_v3_vec4(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  return launch_copy_vectorized<4>(out, inp, n, stream);
}
