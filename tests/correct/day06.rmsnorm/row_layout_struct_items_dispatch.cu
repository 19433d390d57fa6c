// CORRECT the row's layout a struct of __host__ __device__ constexpr member functions shared by launcher and kernel, the vectors-per-thread table a constexpr std::array, ITEMS picked by a learner's dispatch macro, static_asserts
// Day 6's reference RMSNorm kernel with its index arithmetic gathered into one type and its
// launcher rewritten around it.
#include <array>
#include <cstdint>

#include "course/block.cuh"
#include "course/vec.cuh"

// Turn a runtime count of vectors per thread into the compile-time ITEMS the kernel is built for.
#define DISPATCH_ITEMS(COUNT, ...)                                 \
  [&]() -> cudaError_t {                                           \
    switch (COUNT) {                                               \
      case 1: { constexpr int ITEMS = 1; return __VA_ARGS__(); }   \
      case 2: { constexpr int ITEMS = 2; return __VA_ARGS__(); }   \
      case 4: { constexpr int ITEMS = 4; return __VA_ARGS__(); }   \
      case 8: { constexpr int ITEMS = 8; return __VA_ARGS__(); }   \
      default: return cudaErrorInvalidValue;                       \
    }                                                              \
  }()

namespace {

// Blocks of at most 256 threads, each thread holding at most 8 16-byte vectors of its row
// (and as many of the weight): rows of up to 256 x 8 x 8 = 16384 fp16/bf16 elements.
constexpr int RMSNORM_MAX_THREADS = 256;
constexpr std::array<int, 4> ITEM_COUNTS = {1, 2, 4, 8};  // vectors per thread the kernel is built for
constexpr int RMSNORM_MAX_ITEMS = ITEM_COUNTS.back();
static_assert(RMSNORM_MAX_THREADS % 32 == 0 && RMSNORM_MAX_THREADS <= 1024, "a block of whole warps");

// Where a thread's slots lie in the row: the same arithmetic on the host (to size the launch) and
// in the kernel (to index), so the two cannot disagree.
struct RowLayout {
  int hidden;  // elements in the row
  int vec;     // elements per slot
  __host__ __device__ constexpr int slots() const { return (hidden + vec - 1) / vec; }
  __host__ __device__ constexpr int whole_vectors() const { return hidden / vec; }
  // Vector (vectorized rows) of slot `it` of thread `tid` in a block of `threads`.
  __host__ __device__ constexpr int vector_index(int it, int tid, int threads) const { return it * threads + tid; }
  // Element j of slot `it` (rows loaded one element at a time): 32 neighbours per warp load.
  __host__ __device__ constexpr int element_index(int it, int j, int tid, int threads) const {
    return (it * vec + j) * threads + tid;
  }
};
static_assert(RowLayout{16384, 8}.slots() == RMSNORM_MAX_THREADS * RMSNORM_MAX_ITEMS, "16384 fits exactly");

// One block per row; the row stays in registers between the reduction and the output.
// ITEMS: vectors per thread (1, 2, 4 or 8), chosen by the launcher from the row length.
// vectorized: the row and weight can be read with 16-byte loads (hidden % VEC == 0 and
// aligned pointers); otherwise every element is loaded on its own.
template <typename T, int ITEMS>
__global__ void __launch_bounds__(RMSNORM_MAX_THREADS)
    rmsnorm_kernel(T* __restrict__ out, const T* __restrict__ input, const T* __restrict__ weight,
                   int hidden, float eps, bool vectorized) {
  constexpr int VEC = course::vec_size_16B<T>();  // 8 halves = 16 bytes
  const T* x = input + static_cast<int64_t>(blockIdx.x) * hidden;  // (hidden,) this block's row
  T* y = out + static_cast<int64_t>(blockIdx.x) * hidden;          // (hidden,)

  const T zero = course::from_float<T>(0.0f);
  course::vec_t<T, VEC> xs[ITEMS], ws[ITEMS];  // (ITEMS, VEC): this thread's part of row and weight
  const RowLayout layout{hidden, VEC};
  const int num_vecs = layout.whole_vectors();

  // 1. The row's loads (and the weight's), issued back to back: all in flight at once.
  if (vectorized) {
    // Slot `it` is vector it * blockDim.x + threadIdx.x: a warp reads 512 contiguous bytes.
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int v = layout.vector_index(it, threadIdx.x, blockDim.x);
      if (v < num_vecs) {
        xs[it].load(x + v * VEC);
        ws[it].load(weight + v * VEC);
      } else {
        xs[it].fill(zero);  // zeros add nothing to the sum of squares
        ws[it].fill(zero);
      }
    }
  } else {
    // The same registers filled one element per load. Element j of slot `it` is
    // (it * VEC + j) * blockDim.x + threadIdx.x: a warp's 32 loads are 32 neighbours.
    // The weight waits until step 3 here: every scalar load in flight needs a register.
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int i = layout.element_index(it, j, threadIdx.x, blockDim.x);
        xs[it][j] = i < hidden ? x[i] : zero;
      }
    }
  }

  // 2. Level 0 in registers, then warp -> shared memory -> warp; every thread gets the sum.
  float sum_sq = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = course::to_float(xs[it][j]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(course::block_reduce_sum(sum_sq) / static_cast<float>(hidden) + eps);

  // 3. Normalize the registers; each result goes back to the address its input came from.
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    if (vectorized) {
      const int v = layout.vector_index(it, threadIdx.x, blockDim.x);
      course::vec_t<T, VEC> ys;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        ys[j] = course::from_float<T>(course::to_float(xs[it][j]) * inv_rms * course::to_float(ws[it][j]));
      }
      if (v < num_vecs) ys.store(y + v * VEC);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int i = layout.element_index(it, j, threadIdx.x, blockDim.x);
        if (i < hidden) {
          y[i] = course::from_float<T>(course::to_float(xs[it][j]) * inv_rms * course::to_float(weight[i]));
        }
      }
    }
  }
}

template <typename T>
cudaError_t launch_rmsnorm(T* out, const T* input, const T* weight, int64_t rows, int64_t hidden,
                           float eps, cudaStream_t stream) {
  constexpr int VEC = course::vec_size_16B<T>();
  if (rows < 0 || rows > INT32_MAX || hidden < 0) return cudaErrorInvalidValue;
  if (rows == 0 || hidden == 0) return cudaSuccess;
  if (hidden > int64_t{RMSNORM_MAX_THREADS} * RMSNORM_MAX_ITEMS * VEC) return cudaErrorInvalidValue;
  const bool vectorized = hidden % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(weight) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const RowLayout layout{static_cast<int>(hidden), VEC};
  // The fewest vectors per thread that fit the row in a block of at most 256 threads.
  int items = RMSNORM_MAX_ITEMS;
  for (const int candidate : ITEM_COUNTS) {
    if (layout.slots() <= RMSNORM_MAX_THREADS * candidate) {
      items = candidate;
      break;
    }
  }
  const int per_thread = (layout.slots() + items - 1) / items;
  const int threads = (per_thread + 31) / 32 * 32;
  return DISPATCH_ITEMS(items, [&] {
    rmsnorm_kernel<T, ITEMS><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
        out, input, weight, layout.hidden, eps, vectorized);
    return cudaGetLastError();
  });
}

}  // namespace

COURSE_EXPORT cudaError_t rmsnorm_fp16(__half* out, const __half* input, const __half* weight,
                                       int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  return launch_rmsnorm(out, input, weight, rows, hidden, eps, stream);
}

COURSE_EXPORT cudaError_t rmsnorm_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                       const __nv_bfloat16* weight, int64_t rows, int64_t hidden,
                                       float eps, cudaStream_t stream) {
  return launch_rmsnorm(out, input, weight, rows, hidden, eps, stream);
}
