// Your exercise: fill in the TODOs (about 55 lines). Generated from solutions/day06/rmsnorm.cu by `grader release` (stub-hash 2c461b991c4d).
// Day 6 exercise: RMSNorm with the row read once (model: FlashInfer include/flashinfer/norm.cuh).
//
//   input   [rows, hidden]   fp16 or bf16
//   weight  [hidden]
//   out     [rows, hidden]   out[r, i] = input[r, i] * rsqrt(mean(input[r, :]^2) + eps) * weight[i]
//
// Arithmetic in fp32, one rounding when a result is stored. Memory-bound: each element is read
// once and written once (the weight, a few KB, is read by every row but stays in cache).
// Napkin math for fp16, 32768 x 4096: 2 * 2 B * 32768 * 4096 = 537 MB; at an H200's ~4.2 TB/s
// that is ~130 us. On an H100, FlashInfer's two-pass rmsnorm measured 0.86-0.95x the copy and
// eager F.rms_norm 0.67-0.71x (reports/gpu-notebooks.json).
// Target (grader/exercises/day06.py): >= 0.90x device-to-device copy (GB/s).
#include "course/block.cuh"
#include "course/vec.cuh"

namespace {

// Blocks of at most 256 threads, each thread holding at most 8 16-byte vectors of its row
// (and as many of the weight): rows of up to 256 x 8 x 8 = 16384 fp16/bf16 elements.
constexpr int RMSNORM_MAX_THREADS = 256;
constexpr int RMSNORM_MAX_ITEMS = 8;

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

  // TODO: y = x * rsqrt(mean(x^2) + eps) * weight, computed in fp32, reading x once.
  // 1. Load this thread's share of the row and of the weight into registers:
  //    course::vec_t<T, VEC> xs[ITEMS], ws[ITEMS]. With `vectorized`, slot `it` is the
  //    16-byte vector number it * blockDim.x + threadIdx.x (one vec_t::load each);
  //    otherwise element j of slot `it` is x[(it * VEC + j) * blockDim.x + threadIdx.x].
  //    Slots past the end of the row hold zeros.
  // 2. Sum the squares of your elements in fp32, then course::block_reduce_sum (every
  //    thread of the block must call it) and inv_rms = rsqrtf(sum / hidden + eps).
  // 3. Scale the registers by inv_rms * weight and store them where they came from.
}

template <typename T, int ITEMS>
cudaError_t launch_rmsnorm_items(T* out, const T* input, const T* weight, int64_t rows, int hidden,
                                 float eps, bool vectorized, int threads, cudaStream_t stream) {
  rmsnorm_kernel<T, ITEMS><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      out, input, weight, hidden, eps, vectorized);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_rmsnorm(T* out, const T* input, const T* weight, int64_t rows, int64_t hidden,
                           float eps, cudaStream_t stream) {
  constexpr int VEC = course::vec_size_16B<T>();
  if (rows < 0 || rows > INT32_MAX || hidden < 0) return cudaErrorInvalidValue;
  if (rows == 0 || hidden == 0) return cudaSuccess;
  // 16-byte loads need every row start and the weight 16-byte aligned: hidden a multiple of
  // VEC and aligned base pointers (a tensor slice can start anywhere).
  const bool vectorized = hidden % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(weight) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out) % 16 == 0;
  // The row in slots of VEC elements; the fewest vectors per thread that fit the row in a
  // block of at most 256 threads. Small blocks holding several 16-byte loads per thread keep
  // more bytes in flight per SM than big blocks holding one, and wait less at the barriers.
  const int64_t slots = course::ceil_div<int64_t>(hidden, VEC);
  int items = 1;
  while (items < RMSNORM_MAX_ITEMS && slots > int64_t{RMSNORM_MAX_THREADS} * items) items *= 2;
  const int64_t threads = course::ceil_div<int64_t>(course::ceil_div<int64_t>(slots, items), 32) * 32;
  // Rows longer than 16384 elements do not fit in registers (a two-pass kernel would do them).
  if (threads > RMSNORM_MAX_THREADS) return cudaErrorInvalidValue;
  const int h = static_cast<int>(hidden), t = static_cast<int>(threads);
  switch (items) {
    case 1: return launch_rmsnorm_items<T, 1>(out, input, weight, rows, h, eps, vectorized, t, stream);
    case 2: return launch_rmsnorm_items<T, 2>(out, input, weight, rows, h, eps, vectorized, t, stream);
    case 4: return launch_rmsnorm_items<T, 4>(out, input, weight, rows, h, eps, vectorized, t, stream);
    default: return launch_rmsnorm_items<T, 8>(out, input, weight, rows, h, eps, vectorized, t, stream);
  }
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
