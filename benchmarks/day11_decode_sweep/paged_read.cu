// The speed of light of Day 11's memory work: every K and V byte of the requests read once, page by
// page through the page table, nothing computed. Block b reads pages b, b + G, ... (G blocks): the
// page's number is loaded once (the next one early, while this page streams), then its 2 x page_size
// rows of all KV heads (one contiguous span) with 16-byte streaming loads, UNROLL in flight per thread.
#include "course/common.cuh"

namespace {
template <int UNROLL>
__global__ void __launch_bounds__(256) paged_read_kernel(const uint4* __restrict__ cache, const int32_t* __restrict__ indices,
                                                         int32_t* sink, int pages, int page_words) {
  uint32_t acc = 0;
  int i = blockIdx.x;
  int page = i < pages ? indices[i] : 0;
  for (; i < pages; i += gridDim.x) {
    const int next = i + gridDim.x < pages ? indices[i + gridDim.x] : 0;  // in flight while this page streams
    const uint4* src = cache + static_cast<int64_t>(page) * page_words;
    for (int w = threadIdx.x; w < page_words; w += UNROLL * 256) {
      uint4 v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        v[u] = make_uint4(0, 0, 0, 0);
        if (w + u * 256 < page_words)
          asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(src + w + u * 256));
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    page = next;
  }
  if (acc == 0x5EED1E55u) sink[0] = static_cast<int32_t>(acc);  // never, in practice: no load is dead
}
}  // namespace

// Every page of kv_indices[0 .. pages); page_words = 2 x page_size x kv_heads x head_dim x 2 B / 16.
COURSE_EXPORT cudaError_t paged_read(const __nv_bfloat16* kv_cache, const int32_t* kv_indices, int32_t* sink,
                                     int64_t pages, int64_t page_words, int64_t unroll, int64_t blocks_per_sm,
                                     cudaStream_t stream) {
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const unsigned grid = static_cast<unsigned>(blocks_per_sm * sms);
  const uint4* cache = reinterpret_cast<const uint4*>(kv_cache);
  const int n = static_cast<int>(pages), pw = static_cast<int>(page_words);
  switch (unroll) {
    case 4: paged_read_kernel<4><<<grid, 256, 0, stream>>>(cache, kv_indices, sink, n, pw); break;
    case 8: paged_read_kernel<8><<<grid, 256, 0, stream>>>(cache, kv_indices, sink, n, pw); break;
    case 16: paged_read_kernel<16><<<grid, 256, 0, stream>>>(cache, kv_indices, sink, n, pw); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
