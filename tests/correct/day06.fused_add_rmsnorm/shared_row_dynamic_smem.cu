// CORRECT the rounded row h kept in dynamic shared memory as fp32 (FlashInfer's layout) instead of registers, cudaFuncSetAttribute for rows past 48 KB, loops over the row instead of a register tile
// Day 6's fused add + RMSNorm in FlashInfer's shape: pass 1 reads x and r once, writes h = x + r
// to `residual` and to shared memory; after the reduction pass 2 reads h back from shared memory
// (not from global memory) with the weight and writes the output into `input`.
#include <cstdint>
#include <cstdio>

#include "course/block.cuh"
#include "course/vec.cuh"

namespace {

constexpr int MAX_THREADS = 1024;

// h lives in shared memory as floats. Vectorized: vector v's first four floats at h4[v] and its
// last four at h4[num_vecs + v], so a warp's 16-byte accesses are contiguous (no bank conflicts).
template <typename T, bool VECTORIZED>
__global__ void __launch_bounds__(MAX_THREADS)
fused_add_rmsnorm_smem(T* __restrict__ input, T* __restrict__ residual, const T* __restrict__ weight, int hidden,
                       float eps) {
  extern __shared__ float4 smem[];  // hidden floats
  constexpr int VEC = course::vec_size_16B<T>();
  static_assert(VEC == 8, "16-byte vectors of 2-byte elements");
  T* x = input + static_cast<int64_t>(blockIdx.x) * hidden;
  T* r = residual + static_cast<int64_t>(blockIdx.x) * hidden;
  const int tid = threadIdx.x, nt = blockDim.x;
  float sum_sq = 0.0f;

  if constexpr (VECTORIZED) {
    const int num_vecs = hidden / VEC;
    for (int v = tid; v < num_vecs; v += nt) {
      course::vec_t<T, VEC> xv, rv;
      xv.load(x + v * VEC);
      rv.load(r + v * VEC);
      float h[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        rv[j] = course::from_float<T>(course::to_float(xv[j]) + course::to_float(rv[j]));  // rounded once
        h[j] = course::to_float(rv[j]);
        sum_sq += h[j] * h[j];
      }
      rv.store(r + v * VEC);
      smem[v] = make_float4(h[0], h[1], h[2], h[3]);
      smem[num_vecs + v] = make_float4(h[4], h[5], h[6], h[7]);
    }
    const float inv_rms = rsqrtf(course::block_reduce_sum(sum_sq) / static_cast<float>(hidden) + eps);
    // block_reduce_sum's barriers also make every thread's h visible to the whole block.
    for (int v = tid; v < num_vecs; v += nt) {
      course::vec_t<T, VEC> wv, yv;
      wv.load(weight + v * VEC);
      const float4 lo = smem[v], hi = smem[num_vecs + v];
      const float h[VEC] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int j = 0; j < VEC; ++j) yv[j] = course::from_float<T>(h[j] * inv_rms * course::to_float(wv[j]));
      yv.store(x + v * VEC);
    }
  } else {
    float* hs = reinterpret_cast<float*>(smem);
    for (int i = tid; i < hidden; i += nt) {
      const T h = course::from_float<T>(course::to_float(x[i]) + course::to_float(r[i]));
      r[i] = h;
      const float hf = course::to_float(h);
      hs[i] = hf;
      sum_sq += hf * hf;
    }
    const float inv_rms = rsqrtf(course::block_reduce_sum(sum_sq) / static_cast<float>(hidden) + eps);
    for (int i = tid; i < hidden; i += nt) x[i] = course::from_float<T>(hs[i] * inv_rms * course::to_float(weight[i]));
  }
}

template <typename T, bool VECTORIZED>
cudaError_t launch(T* input, T* residual, const T* weight, int64_t rows, int hidden, int work_items, float eps,
                   cudaStream_t stream) {
  const int threads = work_items >= MAX_THREADS ? MAX_THREADS : (work_items + 31) / 32 * 32;
  const size_t smem_bytes = static_cast<size_t>(hidden) * sizeof(float);
  // Past the default 48 KB a kernel must opt in to more dynamic shared memory.
  cudaError_t err = cudaFuncSetAttribute(fused_add_rmsnorm_smem<T, VECTORIZED>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));
  if (err != cudaSuccess) {
    fprintf(stderr, "fused_add_rmsnorm: %zu bytes of shared memory refused: %s\n", smem_bytes, cudaGetErrorString(err));
    return err;
  }
  fused_add_rmsnorm_smem<T, VECTORIZED><<<static_cast<unsigned>(rows), threads, smem_bytes, stream>>>(
      input, residual, weight, hidden, eps);
  return cudaGetLastError();
}

template <typename T>
cudaError_t fused_add_rmsnorm(T* input, T* residual, const T* weight, int64_t rows, int64_t hidden, float eps,
                              cudaStream_t stream) {
  constexpr int VEC = course::vec_size_16B<T>();
  if (rows < 0 || rows > INT32_MAX || hidden < 0) return cudaErrorInvalidValue;
  if (rows == 0 || hidden == 0) return cudaSuccess;
  if (hidden > 16384) return cudaErrorInvalidValue;  // the row must fit in shared memory
  const bool vectorized = hidden % VEC == 0 && reinterpret_cast<uintptr_t>(input) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(residual) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(weight) % 16 == 0;
  const int h = static_cast<int>(hidden);
  if (vectorized) return launch<T, true>(input, residual, weight, rows, h, h / VEC, eps, stream);
  return launch<T, false>(input, residual, weight, rows, h, h, eps, stream);
}

}  // namespace

COURSE_EXPORT cudaError_t fused_add_rmsnorm_fp16(__half* input, __half* residual, const __half* weight,
                                                 int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  return fused_add_rmsnorm(input, residual, weight, rows, hidden, eps, stream);
}

COURSE_EXPORT cudaError_t fused_add_rmsnorm_bf16(__nv_bfloat16* input, __nv_bfloat16* residual,
                                                 const __nv_bfloat16* weight, int64_t rows, int64_t hidden,
                                                 float eps, cudaStream_t stream) {
  return fused_add_rmsnorm(input, residual, weight, rows, hidden, eps, stream);
}
