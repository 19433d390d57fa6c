// Day 13, v1: one kernel for every activation: the activation is a run-time argument.
//
//   input  [num_tokens, 2 * d]   the gate half x1 = input[:, :d], the up half x2 = input[:, d:]
//   out    [num_tokens, d]       out = act(x1) * x2, act one of SiLU, GELU-tanh, GELU-erf, squared ReLU
//
// What it adds: nothing is specialized but the storage type. One kernel serves every
// activation: a `switch` on `act` for every element, the code of all four in one kernel, and
// no vector width at all, since a width known only at run time cannot size a register array:
// every element is loaded on its own (2-byte LDG, no LDG.E.128). Nothing is ever recompiled.
//
// Napkin math: the same 805 MB as Days 2 and 3 for 16384 x 8192 (~190 us at an H200's ~4.2 TB/s), but
// with 2-byte loads a warp moves 64 bytes per load instruction instead of 512: 8x the load
// instructions for the same bytes, and each element pays for the branch too. Expect it short of
// the copy, where v2's 16-byte loads reach it.
#include "course/common.cuh"

namespace {

// The four activations, chosen per call by number (FlashInfer's names: silu, gelu_tanh, gelu).
enum RuntimeActivation : int { RT_SILU = 0, RT_GELU_TANH = 1, RT_GELU = 2, RT_RELU2 = 3 };

__device__ __forceinline__ float runtime_activation(int act, float x) {
  switch (act) {  // the same branch for every thread of the grid: no divergence, but an extra
                  // compare and jump per element, and the code of all four cases in the kernel
    case RT_SILU: return x / (1.0f + __expf(-x));
    case RT_GELU_TANH: return x / (1.0f + __expf(-1.5957691216057308f * x * fmaf(0.044715f, x * x, 1.0f)));
    case RT_GELU: return 0.5f * x * (1.0f + erff(0.7071067811865476f * x));
    default: return x > 0.0f ? x * x : 0.0f;
  }
}

template <typename T>
__global__ void act_and_mul_runtime_kernel(T* __restrict__ out, const T* __restrict__ input, int64_t d, int act) {
  const int64_t row = blockIdx.x;  // one block per token
  const T* x1 = input + row * 2 * d;  // (d,) gate half
  const T* x2 = x1 + d;               // (d,) up half
  T* y = out + row * d;               // (d,)
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    y[i] = course::from_float<T>(runtime_activation(act, course::to_float(x1[i])) * course::to_float(x2[i]));
  }
}

template <typename T>
cudaError_t launch_act_and_mul_runtime(T* out, const T* input, int64_t num_tokens, int64_t d, int64_t act,
                                       cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return cudaSuccess;
  if (act < RT_SILU || act > RT_RELU2) return cudaErrorInvalidValue;
  const int threads = static_cast<int>(d < 1024 ? (d + 31) / 32 * 32 : 1024);
  act_and_mul_runtime_kernel<T><<<static_cast<unsigned>(num_tokens), threads, 0, stream>>>(
      out, input, d, static_cast<int>(act));
  return cudaGetLastError();
}

}  // namespace

// act: 0 SiLU, 1 GELU-tanh, 2 GELU-erf, 3 squared ReLU.
COURSE_EXPORT cudaError_t act_and_mul_runtime_fp16(__half* out, const __half* input, int64_t num_tokens, int64_t d,
                                                   int64_t act, cudaStream_t stream) {
  return launch_act_and_mul_runtime(out, input, num_tokens, d, act, stream);
}

COURSE_EXPORT cudaError_t act_and_mul_runtime_bf16(__nv_bfloat16* out, const __nv_bfloat16* input,
                                                   int64_t num_tokens, int64_t d, int64_t act, cudaStream_t stream) {
  return launch_act_and_mul_runtime(out, input, num_tokens, d, act, stream);
}
