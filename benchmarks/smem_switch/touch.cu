// A kernel that only asks for dynamic shared memory: launched after the L2 flush it puts every SM in
// the shared-memory configuration a shared-memory-heavy kernel needs, so the time a timed call pays
// for switching the SMs' L1 / shared split can be told apart from the call's own work.
#include "course/common.cuh"

namespace {
__global__ void smem_touch(int* sink) {
  extern __shared__ int s[];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (s[(threadIdx.x + 1) % blockDim.x] == -1) sink[0] = 1;  // never: keeps the store
}
}  // namespace

COURSE_EXPORT cudaError_t touch(int32_t* sink, int64_t smem_bytes, int64_t blocks, cudaStream_t stream) {
  cudaError_t err = cudaFuncSetAttribute(smem_touch, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes));
  if (err != cudaSuccess) return err;
  smem_touch<<<static_cast<unsigned>(blocks), 128, static_cast<size_t>(smem_bytes), stream>>>(sink);
  return cudaGetLastError();
}
