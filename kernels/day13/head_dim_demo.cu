// Day 13 demo: why attention kernels are specialized on the head dimension.
//
//   q       [head_dim]             one query row, read once and kept by every thread
//   k       [n, head_dim]          n keys
//   scores  [n]                    scores[t] = q . k[t]   (the inner loop of decode attention, Day 11)
//
// What it shows: the same loop twice. With HEAD_DIM a template parameter the compiler unrolls
// both loops and keeps the query row in 128 registers. With head_dim a run-time argument the
// array must be indexed by a run-time index, and registers cannot be: the row goes to local
// memory (a 1 KB stack frame per thread; LDL/STL in the SASS), read back for every key. Compile
// only, no GPU needed: the notebook reads the two kernels' resources and SASS.
//
// Napkin math: per key 4 * head_dim bytes of k are read once, 512 B at head_dim 128. The fixed
// kernel adds nothing to that (and spends 128 of its registers on the row); the run-time one reads
// the row back from local memory for every key, another 512 B per key through L1: twice the bytes
// through the load path, and local memory is the thread's slice of DRAM when L1 evicts it.
#include "course/common.cuh"

namespace {

template <int HEAD_DIM>
__global__ void scores_fixed_kernel(float* __restrict__ scores, const float* __restrict__ q,
                                    const float* __restrict__ k, int64_t n) {
  float qr[HEAD_DIM];  // (HEAD_DIM,) in registers: every index below is a constant after unrolling
#pragma unroll
  for (int i = 0; i < HEAD_DIM; ++i) qr[i] = q[i];
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < HEAD_DIM; ++i) acc = fmaf(qr[i], k[t * HEAD_DIM + i], acc);
    scores[t] = acc;
  }
}

__global__ void scores_runtime_kernel(float* __restrict__ scores, const float* __restrict__ q,
                                      const float* __restrict__ k, int64_t n, int head_dim) {
  float qr[256];  // (256,) room for the largest head dimension served: indexed at run time
  for (int i = 0; i < head_dim; ++i) qr[i] = q[i];
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < head_dim; ++i) acc = fmaf(qr[i], k[t * head_dim + i], acc);
    scores[t] = acc;
  }
}

}  // namespace

// scores = k @ q for n keys of 128 floats, through the kernel specialized on the head dimension.
COURSE_EXPORT cudaError_t scores_head_dim_128(float* scores, const float* q, const float* k, int64_t n,
                                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  scores_fixed_kernel<128><<<course::grid_stride_blocks(n, 256), 256, 0, stream>>>(scores, q, k, n);
  return cudaGetLastError();
}

// The same through the kernel that takes the head dimension (at most 256) as an argument.
COURSE_EXPORT cudaError_t scores_head_dim_runtime(float* scores, const float* q, const float* k, int64_t n,
                                                  int64_t head_dim, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (head_dim < 1 || head_dim > 256) return cudaErrorInvalidValue;
  scores_runtime_kernel<<<course::grid_stride_blocks(n, 256), 256, 0, stream>>>(scores, q, k, n,
                                                                                static_cast<int>(head_dim));
  return cudaGetLastError();
}
