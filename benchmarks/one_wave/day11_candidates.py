"""Day 11 candidates as edits of the reference of commit 8ef8d12: "balanced" (token-granular splits of
equal length, the split count that evens the blocks per SM), "weights" (the warps' merge weights once
per row), "pdl" (the merge as a programmatic dependent launch). The solution took weights and pdl."""
import re

def balanced(t):
    old = """  const int tiles = (len + TILE - 1) / TILE;  // whole tiles per split: a short request's last splits are empty
  const int per_split = max(MIN_SPLIT_TILES, (tiles + splits - 1) / splits) * TILE;
"""
    assert old in t
    t = t.replace(old, """  const int per_split = max(MIN_SPLIT_TILES * TILE, (len + splits - 1) / splits);  // a short request's last splits are empty
""", 1)
    i = t.index("inline int choose_splits(")
    j = t.index("template <typename T, int HEAD_DIM>\ncudaError_t launch_decode(")
    chooser = """inline int choose_splits(int64_t batch, int64_t kv_heads, int per_sm) {
  constexpr double SPLIT_COST = 0.05;
  int device = 0, sms = 132;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t blocks = batch * kv_heads, slots = static_cast<int64_t>(per_sm > 0 ? per_sm : 1) * sms;
  const int64_t cap = MAX_SPLITS / batch < 1 ? 1 : MAX_SPLITS / batch;
  // One wave with at least two blocks on every SM: the most even load per SM, ceil(blocks s / SMs) / s.
  int64_t pick = 0;
  double pick_cost = 0.0;
  for (int64_t s = 1; s <= cap && blocks * s <= slots; ++s) {
    if (blocks * s < 2 * sms) continue;
    const double c = static_cast<double>(course::ceil_div<int64_t>(blocks * s, sms)) / s;
    if (pick == 0 || c < pick_cost * 0.999) pick = s, pick_cost = c;
  }
  if (pick > 0) return static_cast<int>(pick);
  if (blocks >= 2 * slots) return 1;
  auto cost = [&](int64_t s) {
    return static_cast<double>(course::ceil_div<int64_t>(blocks * s, slots)) / s * (s > 1 ? 1.0 + SPLIT_COST : 1.0);
  };
  double best = cost(1);
  for (int64_t s = 2; s <= cap; ++s) best = cost(s) < best ? cost(s) : best;
  for (int64_t s = 1; s <= cap; ++s)
    if (cost(s) <= 1.10 * best) return static_cast<int>(s);
  return 1;
}

"""
    return t[:i] + chooser + t[j:]

def weights(t):
    old = """      if (pair == 0) {
        m_part[warp][row] = m[r];
        d_part[warp][row] = dr;
      }
    }
  }
  __syncthreads();
}
"""
    assert old in t
    t = t.replace(old, """      if (pair == 0) {
        m_part[warp][row] = m[r];
        d_part[warp][row] = dr;
      }
    }
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  if (warp == 0 && lane < group) {  // per row, once: warp w's weight d_w 2^(m_w - m) / sum, and the row's lse
    const int row = lane;
    float mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, m_part[w][row]);
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float x = mx == -INFINITY ? 0.0f : d_part[w][row] * course::ptx_exp2(m_part[w][row] - mx);
      d_part[w][row] = x;
      sum += x;
    }
    const float to_one = sum > 0.0f ? 1.0f / sum : 0.0f;  // the weights add up to 1
#pragma unroll
    for (int w = 0; w < WARPS; ++w) d_part[w][row] *= to_one;
    m_part[0][row] = sum > 0.0f ? mx + log2f(sum) : -INFINITY;
  }
  __syncthreads();
}
""", 1)
    i = t.index("template <int HEAD_DIM>\n__device__ __forceinline__ course::softmax_state<1> block_state(")
    j = t.index("}\n", t.index("return st;", i)) + 2
    t = t[:i] + """template <int HEAD_DIM>
__device__ __forceinline__ course::softmax_state<1> block_state(const float* o_part, const float (*m_part)[MAX_GROUP],
                                                                const float (*d_part)[MAX_GROUP], int group, int row,
                                                                int col) {
  course::softmax_state<1> st;
  st.o[0] = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) st.o[0] += d_part[w][row] * o_part[(w * group + row) * HEAD_DIM + col];
  st.m = m_part[0][row];  // the row's lse (base 2): lse2() = m + log2(1)
  st.d = 1.0f;
  return st;
}
""" + t[j:]
    return t

PDL_WAIT = "  if (phase == 1) {\n"
def pdl(t):
    assert t.count(PDL_WAIT) == 1
    t = t.replace(PDL_WAIT, """#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Programmatic dependent launch: phase 1's blocks may start before phase 0 ends; they wait here
  // for phase 0 to finish and its writes to be visible. Phase 0 lets them launch at once.
  if (phase == 1) asm volatile("griddepcontrol.wait;" ::: "memory");
  else asm volatile("griddepcontrol.launch_dependents;");
#endif
""" + PDL_WAIT, 1)
    old = re.search(r"  if \(splits > 1\) \{  // phase 1.*?\n  \}\n", t, re.S).group(0)
    new = """  if (splits > 1) {  // phase 1: merge the splits' states, after phase 0 on the same stream
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(qo_heads), static_cast<unsigned>(batch));
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = merge_smem_bytes();
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    int device = 0, major = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cfg.attrs = attr;
    cfg.numAttrs = major >= 9 ? 1 : 0;  // sm_90 and later: launched while phase 0 runs
    err = cudaLaunchKernelEx(&cfg, batch_decode_kernel<T, HEAD_DIM>, o, lse, q, kv_cache, kv_indptr, kv_indices,
                             kv_last_page_len, workspace, static_cast<int>(kv_heads), group,
                             static_cast<int>(page_size), sm_scale * course::LOG2E, splits, 1);
    if (err != cudaSuccess) return err;
  }
"""
    return t.replace(old, new, 1)

def candidate(t, parts=("balanced", "weights", "pdl")):
    for p in parts:
        t = {"balanced": balanced, "weights": weights, "pdl": pdl}[p](t)
    return t
