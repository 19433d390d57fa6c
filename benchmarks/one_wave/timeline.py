"""Globaltimer traces patched into a copy of a solution: per block, its SM and four times (start,
first tile landed, loop end, end), read back with trace_copy / sm_copy."""
import torch
HDR = ("__device__ unsigned long long g_trace[16384][4];\n__device__ int g_sm[16384];\n"
       "__device__ __forceinline__ unsigned long long gt() { unsigned long long x; asm volatile(\"mov.u64 %0, %globaltimer;\" : \"=l\"(x)); return x; }\n")
TAIL = ("\nCOURSE_EXPORT cudaError_t trace_copy(int64_t* out, cudaStream_t stream) {\n"
        "  return cudaMemcpyFromSymbolAsync(out, g_trace, sizeof(g_trace), 0, cudaMemcpyDeviceToDevice, stream);\n}\n"
        "COURSE_EXPORT cudaError_t sm_copy(int32_t* out, cudaStream_t stream) {\n"
        "  return cudaMemcpyFromSymbolAsync(out, g_sm, sizeof(g_sm), 0, cudaMemcpyDeviceToDevice, stream);\n}\n"
        "COURSE_EXPORT cudaError_t trace_clear(cudaStream_t stream) {\n  void* p; cudaGetSymbolAddress(&p, g_trace);\n  return cudaMemsetAsync(p, 0, sizeof(g_trace), stream);\n}\n")

def rep(t, a, b, n=1):
    assert t.count(a) >= 1, a
    return t.replace(a, b, n)

def traced11(t):
    t = rep(t, "namespace {\n", "namespace {\n" + HDR)
    a = "  const int kv_head = blockIdx.x, b = blockIdx.y, split = blockIdx.z;\n"
    t = rep(t, a, a + "  const int tr = phase == 1 ? 8192 + blockIdx.x + blockIdx.y * gridDim.x : blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
            "  if (threadIdx.x == 0) { g_trace[tr][0] = gt(); int sm; asm volatile(\"mov.u32 %0, %smid;\" : \"=r\"(sm)); g_sm[tr] = sm; }\n")
    a = "    merge_splits<T, HEAD_DIM>(o, lse, workspace, qo_heads, splits);\n"
    t = rep(t, a, a + "    if (threadIdx.x == 0) g_trace[tr][3] = gt();\n")
    a = "    __syncthreads();  // every thread's copies (and, the first time, q_s) are visible to all warps\n"
    t = rep(t, a, a + "    if (tile == 0 && threadIdx.x == 0) g_trace[tr][1] = gt();\n")
    a = "  park_warp_states<HEAD_DIM>(o_acc, m, d, o_part, m_part, d_part, group, warp, group_row, pair);\n"
    t = rep(t, a, "  if (threadIdx.x == 0) g_trace[tr][2] = gt();\n" + a)
    i = t.index("  // END SOLUTION\n}", t.index("park_warp_states<HEAD_DIM>(o_acc"))
    t = t[:i] + "  __syncthreads();\n  if (threadIdx.x == 0) g_trace[tr][3] = gt();\n" + t[i:]
    return t + TAIL

def traced7(t):
    t = rep(t, "namespace {\n", "namespace {\n" + HDR)
    a = "  float acc[MTOK / 8][4] = {};\n"
    t = rep(t, a, a + "  if (threadIdx.x == 0) { g_trace[blockIdx.x][0] = gt(); int sm; asm volatile(\"mov.u32 %0, %smid;\" : \"=r\"(sm)); g_sm[blockIdx.x] = sm; }\n")
    a = "    __syncthreads();                      // ... and everyone else's\n"
    t = rep(t, a, a + "    if (f == 0 && threadIdx.x == 0) g_trace[blockIdx.x][1] = gt();\n")
    a = "  course::cp_async_wait<0>();  // leave no copy in flight (the trailing groups are empty)\n"
    t = rep(t, a, "  if (threadIdx.x == 0) g_trace[blockIdx.x][2] = gt();\n" + a + "  __syncthreads();\n  if (threadIdx.x == 0) g_trace[blockIdx.x][3] = gt();\n")
    return t + TAIL

def q(x, base):
    if len(x) == 0:
        return []
    return [round(float(v), 2) for v in torch.quantile((x - base) / 1e3, torch.tensor([0, .1, .5, .9, 1.0], dtype=torch.float64))]
