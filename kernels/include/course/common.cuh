// course/common.cuh: small helpers every course kernel uses.
// Framework-free on purpose (no torch headers), like FlashInfer's include/flashinfer/:
// kernels take raw pointers and a cudaStream_t and report a cudaError_t.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Marks a host function that the course's build turns into a Python function.
// The grader reads the prototype that follows it; it expands to nothing.
#define COURSE_EXPORT

namespace course {

// Number of blocks of size `b` needed to cover `a` items.
template <typename T>
__host__ __device__ constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

// Number of blocks to launch for a grid-stride loop over `n` items: enough to
// cover the work, but no more than a few waves of the GPU (more blocks only add
// scheduling overhead once every SM is full).
inline int grid_stride_blocks(int64_t n, int threads_per_block, int blocks_per_sm = 8) {
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  int64_t needed = ceil_div<int64_t>(n, threads_per_block);
  int64_t cap = static_cast<int64_t>(sms) * blocks_per_sm;
  int64_t blocks = needed < cap ? needed : cap;
  return static_cast<int>(blocks > 0 ? blocks : 1);
}

// Device ids 0 .. MAX_DEVICES - 1: what a launcher asks of a device is kept per id.
constexpr int MAX_DEVICES = 64;

// The current device: its id (-1 from MAX_DEVICES on), SM count and compute capability, asked of the
// driver once per device and kept, as a launcher runs before every call of its kernel.
struct Device {
  int id, sms, major, minor;
};

inline Device current_device() {
  static Device known[MAX_DEVICES] = {};  // sms 0: not asked yet
  int id = 0;
  cudaGetDevice(&id);
  if (id < 0 || id >= MAX_DEVICES) return {-1, 0, 0, 0};
  if (known[id].sms == 0) {
    int sms = 0, major = 0, minor = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, id);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, id);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, id);
    known[id] = {id, sms > 0 ? sms : 1, major, minor};
  }
  return known[id];
}

// Conversions between storage types and the fp32 the math is done in.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

}  // namespace course
