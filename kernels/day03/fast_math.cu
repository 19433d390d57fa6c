// Fast math against the CUDA math library: ex2 / lg2 / rsqrt / tanh.approx (course/math.cuh,
// one MUFU instruction each) against exp2f, log2f, 1.0f / sqrtf and tanhf (accurate to a few
// ulp, several instructions each). Two kernels, each templated on the function:
//
//   fast_math_eval_kernel<F>    y[i] = F(x[i]) over a sweep of inputs: the notebook compares
//                               y with an fp64 reference (error vs. input, worst-case ulp)
//   fast_math_chain_kernel<F>   CHAINS independent chains of `iters` dependent calls per thread:
//                               compute-bound, so calls per second = the function's throughput
//
//   x, y   (n,) fp32             out  (n,) fp32, one value per thread (keeps the chains alive)
#include "course/math.cuh"

namespace {

constexpr int CHAINS = 4;  // independent chains per thread: the MUFU latency is hidden by ILP
constexpr int THREADS = 256;

// Each function: f(x); step(x), f followed by one FADD that maps the result back into the
// range the chain started in, so the chain never wanders into overflow or subnormals; and
// that start range [LO, LO + SPAN].
struct Ex2Approx {
  static __device__ float f(float x) { return course::ptx_exp2(x); }
  static __device__ float step(float x) { return f(x) - 1.5f; }  // [-1, 0] -> [0.5, 1] -> [-1, -0.5]
  static constexpr float LO = -1.0f, SPAN = 1.0f;
};
struct Exp2f {
  static __device__ float f(float x) { return exp2f(x); }
  static __device__ float step(float x) { return f(x) - 1.5f; }
  static constexpr float LO = -1.0f, SPAN = 1.0f;
};
struct Lg2Approx {
  static __device__ float f(float x) { return course::ptx_log2(x); }
  static __device__ float step(float x) { return f(x) + 1.5f; }  // stays in [1, 3.2]
  static constexpr float LO = 1.0f, SPAN = 1.0f;
};
struct Log2f {
  static __device__ float f(float x) { return log2f(x); }
  static __device__ float step(float x) { return f(x) + 1.5f; }
  static constexpr float LO = 1.0f, SPAN = 1.0f;
};
struct RsqrtApprox {
  static __device__ float f(float x) { return course::ptx_rsqrt(x); }
  static __device__ float step(float x) { return f(x) + 0.5f; }  // stays in [0.5, 2]
  static constexpr float LO = 0.5f, SPAN = 1.5f;
};
struct RsqrtIeee {  // what `1 / sqrt(x)` compiles to without fast math: two correctly rounded steps
  static __device__ float f(float x) { return 1.0f / sqrtf(x); }
  static __device__ float step(float x) { return f(x) + 0.5f; }
  static constexpr float LO = 0.5f, SPAN = 1.5f;
};
struct TanhApprox {
  static __device__ float f(float x) { return course::ptx_tanh(x); }
  static __device__ float step(float x) { return f(x) + 0.5f; }  // stays in [-1, 1.5]
  static constexpr float LO = -1.0f, SPAN = 2.0f;
};
struct Tanhf {
  static __device__ float f(float x) { return tanhf(x); }
  static __device__ float step(float x) { return f(x) + 0.5f; }
  static constexpr float LO = -1.0f, SPAN = 2.0f;
};
struct Identity {  // the eval kernel's own instructions, to subtract from the others' counts
  static __device__ float f(float x) { return x; }
};

template <typename F>
__global__ void fast_math_eval_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = F::f(x[i]);  // one element per thread: the SASS is load, F, store
}

template <typename F>
__global__ void fast_math_chain_kernel(float* __restrict__ out, int64_t n, int64_t iters) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  float v[CHAINS];
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) {  // different starting points, so no two chains are equal
    v[k] = F::LO + F::SPAN * static_cast<float>((t * CHAINS + k) % 1024) / 1024.0f;
  }
  for (int64_t it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) v[k] = F::step(v[k]);  // CHAINS calls in flight
  }
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) s += v[k];
  out[t] = s;
}

template <typename F>
cudaError_t launch_eval(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(course::ceil_div<int64_t>(n, THREADS));
  fast_math_eval_kernel<F><<<blocks, THREADS, 0, stream>>>(y, x, n);
  return cudaGetLastError();
}

// n threads, each running CHAINS chains of `iters` calls: n * CHAINS * iters calls of F.
template <typename F>
cudaError_t launch_chain(float* out, int64_t n, int64_t iters, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(course::ceil_div<int64_t>(n, THREADS));
  fast_math_chain_kernel<F><<<blocks, THREADS, 0, stream>>>(out, n, iters);
  return cudaGetLastError();
}

}  // namespace

// Accuracy: y = F(x) elementwise.
COURSE_EXPORT cudaError_t eval_ex2_approx(float* y, const float* x, int64_t n, cudaStream_t stream) {
  return launch_eval<Ex2Approx>(y, x, n, stream);
}
COURSE_EXPORT cudaError_t eval_exp2f(float* y, const float* x, int64_t n, cudaStream_t stream) {
  return launch_eval<Exp2f>(y, x, n, stream);
}
COURSE_EXPORT cudaError_t eval_lg2_approx(float* y, const float* x, int64_t n, cudaStream_t stream) {
  return launch_eval<Lg2Approx>(y, x, n, stream);
}
COURSE_EXPORT cudaError_t eval_log2f(float* y, const float* x, int64_t n, cudaStream_t stream) {
  return launch_eval<Log2f>(y, x, n, stream);
}
COURSE_EXPORT cudaError_t eval_rsqrt_approx(float* y, const float* x, int64_t n, cudaStream_t stream) {
  return launch_eval<RsqrtApprox>(y, x, n, stream);
}
COURSE_EXPORT cudaError_t eval_rsqrt_ieee(float* y, const float* x, int64_t n, cudaStream_t stream) {
  return launch_eval<RsqrtIeee>(y, x, n, stream);
}
COURSE_EXPORT cudaError_t eval_tanh_approx(float* y, const float* x, int64_t n, cudaStream_t stream) {
  return launch_eval<TanhApprox>(y, x, n, stream);
}
COURSE_EXPORT cudaError_t eval_tanhf(float* y, const float* x, int64_t n, cudaStream_t stream) {
  return launch_eval<Tanhf>(y, x, n, stream);
}
COURSE_EXPORT cudaError_t eval_identity(float* y, const float* x, int64_t n, cudaStream_t stream) {
  return launch_eval<Identity>(y, x, n, stream);
}

// Throughput: n * CHAINS * iters dependent calls.
COURSE_EXPORT cudaError_t chain_ex2_approx(float* out, int64_t n, int64_t iters, cudaStream_t stream) {
  return launch_chain<Ex2Approx>(out, n, iters, stream);
}
COURSE_EXPORT cudaError_t chain_exp2f(float* out, int64_t n, int64_t iters, cudaStream_t stream) {
  return launch_chain<Exp2f>(out, n, iters, stream);
}
COURSE_EXPORT cudaError_t chain_lg2_approx(float* out, int64_t n, int64_t iters, cudaStream_t stream) {
  return launch_chain<Lg2Approx>(out, n, iters, stream);
}
COURSE_EXPORT cudaError_t chain_log2f(float* out, int64_t n, int64_t iters, cudaStream_t stream) {
  return launch_chain<Log2f>(out, n, iters, stream);
}
COURSE_EXPORT cudaError_t chain_rsqrt_approx(float* out, int64_t n, int64_t iters, cudaStream_t stream) {
  return launch_chain<RsqrtApprox>(out, n, iters, stream);
}
COURSE_EXPORT cudaError_t chain_rsqrt_ieee(float* out, int64_t n, int64_t iters, cudaStream_t stream) {
  return launch_chain<RsqrtIeee>(out, n, iters, stream);
}
COURSE_EXPORT cudaError_t chain_tanh_approx(float* out, int64_t n, int64_t iters, cudaStream_t stream) {
  return launch_chain<TanhApprox>(out, n, iters, stream);
}
COURSE_EXPORT cudaError_t chain_tanhf(float* out, int64_t n, int64_t iters, cudaStream_t stream) {
  return launch_chain<Tanhf>(out, n, iters, stream);
}

COURSE_EXPORT int chain_calls_per_thread() { return CHAINS; }
