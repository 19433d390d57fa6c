// What compute-sanitizer racecheck sees of a write-after-read race in shared memory, by how the
// read and the write are done. Warp 0 reads a 512-byte region; warp 1 waits (nanosleep) and then
// writes the same region; no barrier between them: a real hazard in every mode.
//   mode 0: read with LDS (plain shared loads),  write with STS (a plain shared store)
//   mode 1: read with LDSM (ldmatrix.x4),        write with STS
//   mode 2: read with LDS,                       write with LDGSTS (cp.async, global -> shared)
//   mode 3: read with LDSM,                      write with LDGSTS  (a cp.async pipeline's refill
//                                                racing with the tensor-core loads of Days 11-12)
// Why: Days 11 and 12's misplaced-barrier mutants (tests/mutants) pass racecheck on the H200, also
// when their copies were rebuilt as plain stores; this says which of the two accesses it misses.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_fp16.h>

__global__ void probe(int mode, float* out, const uint4* src) {
  __shared__ __align__(16) __half buf[256];  // four 8x8 fp16 matrices, 512 bytes
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) buf[i] = __float2half(1.0f);
  __syncthreads();
  if (warp == 0) {
    if (mode == 1 || mode == 3) {
      uint32_t r[4];
      const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(buf + lane * 8));
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
      out[lane] = __uint_as_float(r[0] ^ r[1] ^ r[2] ^ r[3]);
    } else {
      float s = 0.0f;
      for (int i = 0; i < 8; ++i) s += __half2float(buf[lane * 8 + i]);
      out[lane] = s;
    }
  } else if (warp == 1) {
    for (int i = 0; i < 1000; ++i) __nanosleep(1000);  // ~1 ms: the reads happen first
    if (mode >= 2) {
      const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(buf + lane * 8));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src + lane));
      asm volatile("cp.async.commit_group;\n" ::);
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    } else {
      reinterpret_cast<uint4*>(buf)[lane] = src[lane];
    }
  }
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 0;
  float* out;
  uint4* src;
  cudaMalloc(&out, 32 * sizeof(float));
  cudaMalloc(&src, 32 * sizeof(uint4));
  cudaMemset(src, 0, 32 * sizeof(uint4));
  probe<<<1, 64>>>(mode, out, src);
  printf("mode %d: %s\n", mode, cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
