// course/vec.cuh: vec_t<T, N>, N values of T moved with one memory instruction.
// The teaching-size version of FlashInfer's vec_dtypes.cuh: one generic template
// instead of hand specializations. With sizeof(T) * N == 16 a load is one
// LDG.E.128 (16 bytes per thread, 512 bytes per warp: four full 128-byte lines).
#pragma once

#include "course/common.cuh"

namespace course {

// The unsigned integer (or CUDA vector) type that is exactly BYTES wide: copying
// one of these is a single load or store instruction of that width.
template <int BYTES> struct raw_bits;
template <> struct raw_bits<1> { using type = uint8_t; };
template <> struct raw_bits<2> { using type = uint16_t; };
template <> struct raw_bits<4> { using type = uint32_t; };
template <> struct raw_bits<8> { using type = uint2; };
template <> struct raw_bits<16> { using type = uint4; };

template <typename T, int N>
struct alignas(sizeof(T) * N) vec_t {
  static constexpr int BYTES = sizeof(T) * N;
  static_assert(BYTES == 1 || BYTES == 2 || BYTES == 4 || BYTES == 8 || BYTES == 16,
                "a vec_t must be 1, 2, 4, 8 or 16 bytes wide");
  using bits_t = typename raw_bits<BYTES>::type;

  T data[N];

  __device__ __forceinline__ T& operator[](int i) { return data[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return data[i]; }

  // One BYTES-wide load. `ptr` must be aligned to BYTES (cudaMalloc gives 256).
  __device__ __forceinline__ void load(const T* ptr) {
    *reinterpret_cast<bits_t*>(data) = *reinterpret_cast<const bits_t*>(ptr);
  }
  // One BYTES-wide store, same alignment rule.
  __device__ __forceinline__ void store(T* ptr) const {
    *reinterpret_cast<bits_t*>(ptr) = *reinterpret_cast<const bits_t*>(data);
  }
  __device__ __forceinline__ void fill(T value) {
#pragma unroll
    for (int i = 0; i < N; ++i) data[i] = value;
  }
};

// How many T fit in 16 bytes: the widest single load a thread can issue.
template <typename T>
__host__ __device__ constexpr int vec_size_16B() {
  return 16 / static_cast<int>(sizeof(T));
}

}  // namespace course
