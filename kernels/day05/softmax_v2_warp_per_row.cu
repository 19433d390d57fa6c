// v2, warp per row: adds the warp-level design. Each warp owns one row and keeps all of it in
// registers (NV float4 loads per lane), so the row is read from memory once and written once;
// the max and the sum are butterfly shuffles (course::warp_reduce_max / _sum): no shared
// memory, no __syncthreads, and a block of 4 warps works on 4 rows independently. Rows up to
// 1024 floats (32 per lane), cols a multiple of 4 (16-byte aligned rows). On the H100 of
// reports/gpu-notebooks.json: 1.00-1.01x of the copy for rows of 128-1024 floats; less for very short rows,
// where most lanes idle.
//
//   x, out  (rows, cols) fp32       lane l of the row's warp holds float4 vectors l, l + 32, ...
#include "course/vec.cuh"
#include "course/warp.cuh"

namespace {

constexpr int V2_WARPS_PER_BLOCK = 4;  // 4 rows per block of 128 threads
constexpr int V2_VEC = 4;              // floats per 16-byte load

template <int NV>  // float4 vectors per lane: the row holds at most 32 * NV * 4 floats
__global__ void softmax_warp_per_row_kernel(float* __restrict__ out, const float* __restrict__ x,
                                            int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % course::WARP_SIZE;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * V2_WARPS_PER_BLOCK + threadIdx.x / course::WARP_SIZE;
  if (row >= rows) return;  // the whole warp leaves together
  const float* xr = x + row * cols;  // (cols,)
  float* yr = out + row * cols;      // (cols,)
  const int nvec = static_cast<int>(cols / V2_VEC);  // at most 256: int indices within the row

  float v[NV][V2_VEC];  // (NV, 4) this lane's share of the row
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    // Vector i = lane + 32k: the warp's k-th load covers 512 contiguous bytes.
    const int i = lane + k * course::WARP_SIZE;
    course::vec_t<float, V2_VEC> in;
    in.fill(-INFINITY);  // past the end: neutral for the max, exp(-inf) = 0 for the sum
    if (i < nvec) in.load(xr + i * V2_VEC);
#pragma unroll
    for (int j = 0; j < V2_VEC; ++j) {
      v[k][j] = in[j];
      m = fmaxf(m, in[j]);
    }
  }
  m = course::warp_reduce_max(m);  // every lane now has the row max

  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
#pragma unroll
    for (int j = 0; j < V2_VEC; ++j) {
      v[k][j] = __expf(v[k][j] - m);  // kept in registers: no second read of x
      s += v[k][j];
    }
  }
  const float inv = 1.0f / course::warp_reduce_sum(s);

#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int i = lane + k * course::WARP_SIZE;
    if (i >= nvec) continue;
    course::vec_t<float, V2_VEC> o;
#pragma unroll
    for (int j = 0; j < V2_VEC; ++j) o[j] = v[k][j] * inv;
    o.store(yr + i * V2_VEC);
  }
}

template <int NV>
cudaError_t launch_v2(float* out, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t blocks = course::ceil_div<int64_t>(rows, V2_WARPS_PER_BLOCK);
  softmax_warp_per_row_kernel<NV><<<static_cast<unsigned>(blocks), V2_WARPS_PER_BLOCK * course::WARP_SIZE,
                                    0, stream>>>(out, x, rows, cols);
  return cudaGetLastError();
}

}  // namespace

COURSE_EXPORT cudaError_t softmax_v2_warp_per_row(float* out, const float* x, int64_t rows, int64_t cols,
                                                  cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  // Whole float4 vectors only, from 16-byte aligned rows, and at most 32 floats per lane.
  if (cols % V2_VEC != 0 || cols > 1024 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  // The register array's size is a compile-time constant: pick the smallest that holds the row.
  const int64_t per_lane = course::ceil_div<int64_t>(cols / V2_VEC, course::WARP_SIZE);  // float4s per lane
  if (per_lane <= 1) return launch_v2<1>(out, x, rows, cols, stream);
  if (per_lane <= 2) return launch_v2<2>(out, x, rows, cols, stream);
  if (per_lane <= 4) return launch_v2<4>(out, x, rows, cols, stream);
  return launch_v2<8>(out, x, rows, cols, stream);
}
