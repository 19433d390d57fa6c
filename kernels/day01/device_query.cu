// device_query: what the GPU is made of, asked from the CUDA runtime (no kernel runs).
// The peak DRAM bandwidth follows from two attributes: memory clock x bus width x 2 (double data
// rate: two transfers per clock). On the course's H200 that is about 4.8 TB/s; a large copy
// reaches ~4.2 TB/s of it, and that measured copy is what kernels are compared against.
#include "course/common.cuh"

namespace {

// One attribute of the current device, or -1 when the runtime cannot answer (e.g. no GPU).
int query_device_attribute(cudaDeviceAttr attribute) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  int value = 0;
  if (cudaDeviceGetAttribute(&value, attribute, device) != cudaSuccess) return -1;
  return value;
}

}  // namespace

// Streaming multiprocessors: the units that blocks are scheduled onto.
COURSE_EXPORT int device_sm_count() { return query_device_attribute(cudaDevAttrMultiProcessorCount); }

// Threads one SM can hold at once (from all its resident blocks together).
COURSE_EXPORT int device_max_threads_per_sm() {
  return query_device_attribute(cudaDevAttrMaxThreadsPerMultiProcessor);
}

COURSE_EXPORT int device_max_threads_per_block() {
  return query_device_attribute(cudaDevAttrMaxThreadsPerBlock);
}

COURSE_EXPORT int device_warp_size() { return query_device_attribute(cudaDevAttrWarpSize); }

// L2 is shared by all SMs; data that fits in it is not a DRAM bandwidth measurement.
COURSE_EXPORT int64_t device_l2_bytes() { return query_device_attribute(cudaDevAttrL2CacheSize); }

COURSE_EXPORT int device_memory_clock_khz() {
  return query_device_attribute(cudaDevAttrMemoryClockRate);
}

COURSE_EXPORT int device_memory_bus_bits() {
  return query_device_attribute(cudaDevAttrGlobalMemoryBusWidth);
}

// Theoretical peak in GB/s (1e9 bytes): clock (kHz -> Hz) x 2 transfers x bus width (bits -> bytes).
COURSE_EXPORT double device_peak_bandwidth_gbps() {
  const int clock_khz = device_memory_clock_khz();
  const int bus_bits = device_memory_bus_bits();
  if (clock_khz <= 0 || bus_bits <= 0) return -1.0;
  return clock_khz * 1e3 * 2.0 * (bus_bits / 8.0) / 1e9;
}
