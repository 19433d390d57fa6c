// v2, one pass: adds keeping the row in registers. Each thread loads exactly one 16-byte
// vector of the row, and its vector of the weight, before the reduction, and normalizes those
// same registers after it: every byte of the row is read from memory once, and the weight's
// latency hides behind the row's. The price: a block has one thread per vector, so rows are
// limited to 1024 x 8 = 8192 elements. On the H100 of reports/gpu-notebooks.json: a few percent
// above v1, 0.97x of the copy at hidden 4096 and 0.94x at 8192.
//
//   input, out  [rows, hidden] fp16/bf16, hidden a multiple of 8 and <= 8192, aligned pointers
//   weight      [hidden]
#include "course/block.cuh"
#include "course/vec.cuh"

namespace {

template <typename T>
__global__ void rmsnorm_one_pass_kernel(T* __restrict__ out, const T* __restrict__ input,
                                        const T* __restrict__ weight, int hidden, float eps) {
  constexpr int VEC = course::vec_size_16B<T>();  // 8 halves = 16 bytes
  const T* x = input + static_cast<int64_t>(blockIdx.x) * hidden;  // (hidden,) this block's row
  T* y = out + static_cast<int64_t>(blockIdx.x) * hidden;          // (hidden,)
  const int v = threadIdx.x;                  // this thread's one vector of the row
  const bool active = v < hidden / VEC;       // the last warp may reach past the row's end

  // The only global loads of the kernel: row and weight, issued together.
  course::vec_t<T, VEC> xv, wv;
  if (active) {
    xv.load(x + v * VEC);
    wv.load(weight + v * VEC);
  } else {
    xv.fill(course::from_float<T>(0.0f));  // zeros add nothing to the sum of squares
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float f = course::to_float(xv[j]);
    sum_sq += f * f;
  }
  // Every thread, active or not, takes part: block_reduce_sum has __syncthreads inside.
  const float inv_rms = rsqrtf(course::block_reduce_sum(sum_sq) / static_cast<float>(hidden) + eps);

  if (active) {  // normalize the registers loaded above: no second read
    course::vec_t<T, VEC> yv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      yv[j] = course::from_float<T>(course::to_float(xv[j]) * inv_rms * course::to_float(wv[j]));
    }
    yv.store(y + v * VEC);
  }
}

template <typename T>
cudaError_t launch_rmsnorm_one_pass(T* out, const T* input, const T* weight, int64_t rows,
                                    int64_t hidden, float eps, cudaStream_t stream) {
  constexpr int VEC = course::vec_size_16B<T>();
  const bool aligned = reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(weight) % 16 == 0;
  // One thread per vector and at most 1024 threads: hidden <= 8192 for fp16 / bf16.
  if (hidden <= 0 || hidden % VEC != 0 || hidden > 1024 * VEC || !aligned) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int threads = static_cast<int>(course::ceil_div<int64_t>(hidden / VEC, 32) * 32);
  rmsnorm_one_pass_kernel<T><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      out, input, weight, static_cast<int>(hidden), eps);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t rmsnorm_v2_fp16(__half* out, const __half* input, const __half* weight,
                                          int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  return launch_rmsnorm_one_pass(out, input, weight, rows, hidden, eps, stream);
}

COURSE_EXPORT cudaError_t rmsnorm_v2_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                          const __nv_bfloat16* weight, int64_t rows, int64_t hidden,
                                          float eps, cudaStream_t stream) {
  return launch_rmsnorm_one_pass(out, input, weight, rows, hidden, eps, stream);
}
