// v5, bulk copy (Hopper, sm_90): replaces v4's 12 16-byte cp.async per thread and tile (1536 per block) by one
// cp.async.bulk per row, issued by the 32 lanes of warp 0 (SASS UBLKCP), and the per-thread
// wait_group + barrier by an mbarrier per stage that counts the bytes that landed. The copy
// engine writes rows as they are, so rows are padded by 64 bytes instead of swizzled (a 576-byte
// stride also keeps the reads free of bank conflicts). Napkin math as v4 at 4 stages; what it
// saves is issue slots and registers, not bandwidth. TMA (cp.async.bulk.tensor, with swizzling
// and 2D tiles) is the next step; it needs a tensor map made on the host.
//
//   x [M, K], weight [N, K], y [M, N] bf16/fp16; M <= 16, N % 32 == 0, K % 256 == 0, aligned
#include "course/skinny_versions.cuh"

// Its own namespace: build_day compiles the day's files as one translation unit.
namespace skinny_v5 {

using namespace skinny;  // the shared problem and helpers: course/skinny_versions.cuh

constexpr int ROW_STRIDE = Padded::STRIDE;  // 512 bytes of a row + 64 bytes of padding
constexpr int STAGE_ELEMS = (ROWS + MTOK) * ROW_STRIDE;  // 27 KB per stage in bf16
constexpr int STAGES = 4;

template <typename T>
__global__ void __launch_bounds__(THREADS) skinny_bulk_kernel(T* y, const T* x, const T* w, int64_t M, int64_t N, int64_t K) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);  // (STAGES, ROWS + MTOK, ROW_STRIDE)
  __shared__ __align__(8) uint64_t full[STAGES];  // one barrier per stage: "its bytes have landed"
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rg = warp % 2, kh = warp / 2;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * ROWS;
  const int tiles = static_cast<int>(K / K_TILE);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) course::mbarrier_init(&full[s], 1);  // one arrival per phase
    course::fence_barrier_init();
  }
  for (int i = threadIdx.x; i < STAGES * MTOK * ROW_STRIDE; i += THREADS) {  // x rows past M stay zero
    const int s = i / (MTOK * ROW_STRIDE), m = i / ROW_STRIDE % MTOK;
    if (m >= M) stages[s * STAGE_ELEMS + (ROWS + m) * ROW_STRIDE + i % ROW_STRIDE] = course::from_float<T>(0.0f);
  }
  __syncthreads();
  auto issue = [&](int kt) {  // warp 0: lane r copies weight row r and, if r < M, x row r
    if (warp != 0) return;
    T* stage = stages + (kt % STAGES) * STAGE_ELEMS;
    uint64_t* bar = &full[kt % STAGES];
    constexpr uint32_t ROW_BYTES = K_TILE * sizeof(T);
    if (lane == 0) course::mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>(ROWS + M) * ROW_BYTES);
    __syncwarp();
    const int64_t k0 = static_cast<int64_t>(kt) * K_TILE;
    course::cp_async_bulk(stage + lane * ROW_STRIDE, w + (n0 + lane) * K + k0, ROW_BYTES, bar);
    if (lane < M) course::cp_async_bulk(stage + (ROWS + lane) * ROW_STRIDE, x + lane * K + k0, ROW_BYTES, bar);
  };
  float acc[2][4] = {};
  for (int kt = 0; kt < STAGES - 1 && kt < tiles; ++kt) issue(kt);
  for (int kt = 0; kt < tiles; ++kt) {
    course::mbarrier_wait(&full[kt % STAGES], (kt / STAGES) % 2);  // phase parity of this use
    __syncthreads();  // every warp is done with tile kt - 1, whose buffer is refilled next
    if (kt + STAGES - 1 < tiles) issue(kt + STAGES - 1);
    const T* stage = stages + (kt % STAGES) * STAGE_ELEMS;
    warp_tile_mma<Padded>(stage, stage + ROWS * ROW_STRIDE, rg, kh, M > 8, acc);
  }
  store_block(y, acc, rg, kh, M, N, n0);
}

}  // namespace skinny_v5

COURSE_EXPORT cudaError_t skinny_v5_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                         int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  using namespace skinny_v5;
  if (!shape_ok(y, x, weight, M, N, K)) return cudaErrorInvalidValue;
  constexpr int SMEM = STAGES * STAGE_ELEMS * static_cast<int>(sizeof(__nv_bfloat16));
  auto kernel = skinny_bulk_kernel<__nv_bfloat16>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(N / ROWS), THREADS, SMEM, stream>>>(y, x, weight, M, N, K);
  return cudaGetLastError();
}
