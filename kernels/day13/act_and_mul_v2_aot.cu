// Day 13, v2: a kernel per specialization, every one compiled ahead of time (C++ templates).
//
//   input  [num_tokens, 2 * d]   the gate half x1 = input[:, :d], the up half x2 = input[:, d:]
//   out    [num_tokens, d]       out = act(x1) * x2
//
// What it adds over v1: the activation and the vector width are template parameters, so each
// instantiation is a kernel of its own with its activation inlined and VEC known to the compiler:
// 16-byte loads (LDG.E.128) and no branch. This is FlashInfer's include/flashinfer/activation.cuh,
// whose act_and_mul_kernel<T, Activation> takes the activation as a template argument. The price
// is paid at build time: every instantiation named below is compiled whether or not a model ever
// calls it, 4 activations x 2 dtypes here, and a new activation means editing this file. The
// exercise's template (act_and_mul_template.cu.j2) compiles one specialization when it is asked for.
//
// Napkin math: as Days 2 and 3, 805 MB for 16384 x 8192 in bf16, ~190 us at an H200's ~4.2 TB/s: each
// kernel should reach >= 0.95x the copy. Build time grows with the number of instantiations:
// the notebook times this file against one rendered specialization.
#include "course/vec.cuh"

namespace {

// An activation is a type with a call operator: a template argument the compiler inlines.
struct AotSilu {
  __device__ __forceinline__ float operator()(float x) const { return x / (1.0f + __expf(-x)); }
};
struct AotGeluTanh {  // 0.5 x (1 + tanh(z)) = x / (1 + exp(-2z))
  __device__ __forceinline__ float operator()(float x) const {
    return x / (1.0f + __expf(-1.5957691216057308f * x * fmaf(0.044715f, x * x, 1.0f)));
  }
};
struct AotGelu {
  __device__ __forceinline__ float operator()(float x) const { return 0.5f * x * (1.0f + erff(0.7071067811865476f * x)); }
};
struct AotRelu2 {
  __device__ __forceinline__ float operator()(float x) const { return x > 0.0f ? x * x : 0.0f; }
};

template <typename T, int VEC, typename Act>
__global__ void act_and_mul_aot_kernel(T* __restrict__ out, const T* __restrict__ input, int64_t d, bool vectorized) {
  const Act act;
  const int64_t row = blockIdx.x;  // one block per token
  const T* x1 = input + row * 2 * d;  // (d,) gate half
  const T* x2 = x1 + d;               // (d,) up half
  T* y = out + row * d;               // (d,)
  int64_t done = 0;
  if (vectorized) {  // VEC elements of each half per load: one LDG.E.128 each for VEC * sizeof(T) = 16
    const int64_t num_vecs = d / VEC;
    for (int64_t v = threadIdx.x; v < num_vecs; v += blockDim.x) {
      course::vec_t<T, VEC> a, b, r;
      a.load(x1 + v * VEC);
      b.load(x2 + v * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        r[j] = course::from_float<T>(act(course::to_float(a[j])) * course::to_float(b[j]));
      }
      r.store(y + v * VEC);
    }
    done = num_vecs * VEC;
  }
  for (int64_t i = done + threadIdx.x; i < d; i += blockDim.x) {  // the tail, or unaligned rows
    y[i] = course::from_float<T>(act(course::to_float(x1[i])) * course::to_float(x2[i]));
  }
}

template <typename Act, typename T>
cudaError_t launch_act_and_mul_aot(T* out, const T* input, int64_t num_tokens, int64_t d, cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return cudaSuccess;
  constexpr int VEC = course::vec_size_16B<T>();  // 8 halves = 16 bytes
  const bool vectorized = d % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t work_per_row = vectorized ? d / VEC : d;
  const int threads = static_cast<int>(work_per_row < 1024 ? (work_per_row + 31) / 32 * 32 : 1024);
  act_and_mul_aot_kernel<T, VEC, Act><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
      out, input, d, vectorized);
  return cudaGetLastError();
}

}  // namespace

// Every specialization the library ships: each line below instantiates one kernel.
COURSE_EXPORT cudaError_t aot_silu_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens, int64_t d,
                                                cudaStream_t stream) {
  return launch_act_and_mul_aot<AotSilu>(out, input, num_tokens, d, stream);
}
COURSE_EXPORT cudaError_t aot_silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input, int64_t num_tokens,
                                                int64_t d, cudaStream_t stream) {
  return launch_act_and_mul_aot<AotSilu>(out, input, num_tokens, d, stream);
}
COURSE_EXPORT cudaError_t aot_gelu_tanh_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens, int64_t d,
                                                     cudaStream_t stream) {
  return launch_act_and_mul_aot<AotGeluTanh>(out, input, num_tokens, d, stream);
}
COURSE_EXPORT cudaError_t aot_gelu_tanh_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                                     int64_t num_tokens, int64_t d, cudaStream_t stream) {
  return launch_act_and_mul_aot<AotGeluTanh>(out, input, num_tokens, d, stream);
}
COURSE_EXPORT cudaError_t aot_gelu_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens, int64_t d,
                                                cudaStream_t stream) {
  return launch_act_and_mul_aot<AotGelu>(out, input, num_tokens, d, stream);
}
COURSE_EXPORT cudaError_t aot_gelu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input, int64_t num_tokens,
                                                int64_t d, cudaStream_t stream) {
  return launch_act_and_mul_aot<AotGelu>(out, input, num_tokens, d, stream);
}
COURSE_EXPORT cudaError_t aot_relu2_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens, int64_t d,
                                                 cudaStream_t stream) {
  return launch_act_and_mul_aot<AotRelu2>(out, input, num_tokens, d, stream);
}
COURSE_EXPORT cudaError_t aot_relu2_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input, int64_t num_tokens,
                                                 int64_t d, cudaStream_t stream) {
  return launch_act_and_mul_aot<AotRelu2>(out, input, num_tokens, d, stream);
}
