"""Day 9 exercises: tensor cores through ldmatrix and mma.sync (fp16 / bf16 in, fp32 accumulation).

- day09.mma_tile          one warp, one 16 x 16 tile of C += A B from shared memory (fp32 C)
- day09.tensor_core_gemm  C = A B^T at any shape, fp16 / bf16 out, against torch.matmul
"""
from __future__ import annotations

import math

from ..spec import (UNIT_ROUNDOFF, Case, Exercise, Tolerance, compute_bound, dot_tolerance, empty_like_offset,
                    matmul_baseline, misaligned_alone, offset_view, pointer_offset, torch_dtype)

DTYPES = ("fp16", "bf16")

HMMA_AND_LDSM = {
    "HMMA.16816.F32": "tensor-core mma.sync m16n8k16 with fp32 accumulators (HMMA.16816.F32, "
                      "HMMA.16816.F32.BF16 for bf16: course::mma_m16n8k16)",
    "LDSM": "fragments loaded from shared memory with ldmatrix (course::ldmatrix_x4)",
}


# ------------------------------------------------------------------------------ mma_tile
# (tiles, k): tile counts 1/2/3/127/128/129/989 (blocks of 4 warps: tails of 1-3 tiles); k from one
# mma step (16) to the long rows of real models, with slices of 64 that end short (48, 80, 112, 1040).
# (1, 128): two slices in 10 KB, under a learner's racecheck limit: warps 1-3 own no tile and reach the
# second slice's stores at once, while warp 0 still reads the first without the barrier between them.
TILE_SHAPES = [(1, 16), (2, 32), (3, 48), (1, 128), (127, 64), (128, 80), (129, 112), (989, 16), (19, 256),
               (33, 1040), (7, 4096), (3, 14336)]


def _tile_params(dt, tiles, k):
    return {"dtype": dt, "tiles": tiles, "k": k}


def _tile_inputs(p, gen, device="cuda"):
    import torch

    dt = torch_dtype(p["dtype"])
    t, k = p["tiles"], p["k"]
    return {"a": torch.randn(t, 16, k, generator=gen, device=device).to(dt),
            "b": torch.randn(t, k, 16, generator=gen, device=device).to(dt),
            "c": torch.randn(t, 16, 16, generator=gen, device=device)}  # fp32, updated in place


def _tile_call(mod, p, inputs, outputs):
    getattr(mod, f"mma_tile_{p['dtype']}")(inputs["c"], inputs["a"], inputs["b"], p["tiles"], p["k"])


def _tile_reference(p, inputs):
    # fp64 from the same fp16/bf16 inputs and fp32 c: exact products and sums, rounded nowhere.
    return {"c": inputs["c"].double() + inputs["a"].double() @ inputs["b"].double()}


# Tensor-core fp32 accumulation is close to, not exactly, IEEE fp32: products of fp16/bf16 values
# are exact, but each mma.sync adds its 16 products and C after aligning them to the largest, with
# truncation (measured on V100 to A100: Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of
# NVIDIA tensor cores", PeerJ CS 2021). Bound: a few fp32 ulps of the largest addend per mma step,
# here 8 ulps of 4x the typical running sum sqrt(k + 1), with 2x slack: 2^-17 sqrt(k + 1) per step.
TC_STEP_ERR = 2.0 ** -17


def _tile_tolerance(p):
    k = p["k"]
    steps = k // 16 + 1  # mma steps, and the add of C
    atol = TC_STEP_ERR * steps * math.sqrt(k + 1)
    return Tolerance(2.0 ** -20, atol,
                     f"fp32 C += A B with k = {k}: the products of fp16/bf16 values are exact in fp32; each of "
                     f"the {steps} mma steps may truncate a few fp32 ulps of its running sum (tensor cores round "
                     f"toward zero when they add), bounded by 2^-17 sqrt(k + 1) each: atol {atol:.2g}. An fp16 or "
                     "bf16 accumulator errs 2^-11 or 2^-8 of the sum per step and fails")


# --------------------------------------------------------------------- tensor_core_gemm
# (m, n, k): tails in every dimension (1-3, 127-129: tiles of 128 x 128 and steps of 32 in k), k
# that is not a multiple of 8 (no 16-byte loads: 1, 3, 129, 4095) or of 32 (4104: a short last
# step), and Llama 3 8B's projections at token counts from decode (1) to prefill (4096): q/o
# 4096 -> 4096, k/v 4096 -> 1024, gate/up 4096 -> 14336, down 14336 -> 4096.
GEMM_SHAPES = [(1, 1, 1), (2, 2, 2), (3, 3, 3), (1, 129, 16), (127, 128, 129), (128, 127, 128),
               (129, 129, 127), (65, 96, 4104), (33, 200, 4095), (300, 7, 64)]
LLAMA3_8B = [(1, 4096, 4096), (7, 1024, 4096), (19, 14336, 4096), (128, 4096, 14336), (989, 4096, 4096),
             (4096, 14336, 4096)]
# Misaligned base pointers by one element (a tensor slice can start anywhere): (m, n, k, offset of
# a and b, offset of c).
MISALIGNED = [(3, 1024, 256, 1, 1), (129, 4096, 4096, 1, 0), (64, 128, 4096, 0, 1)]
# One pointer misaligned alone (the others aligned) by 2, 4 and 8 bytes, in bf16 (Days 9 and 10): a
# kernel that decides from one pointer's alignment for all, or checks % 4 or % 8 where its 16-byte
# loads or stores need % 16, faults. K % 8 == 0 and N % 8 == 0: every vector path is open when aligned.
ALONE = (67, 200, 264)
ALONE_POINTERS = {"a": 2, "b": 2, "c": 2}
# Block order: the reference (solutions/day09/tensor_core_gemm.cu) tiles C in blocks of BM x BN =
# 128 x 128 and walks them in groups of GROUP_M = 8 block rows, column by column; the last group
# has min(8, block rows left). Every other case has at most 8 block rows or a multiple of 8, where
# an order that sizes every group as the first one still covers C: these have 11 and 9 block rows
# (last groups of 3 and 1), 5 and 7 block columns, and tails in M, N and K (under 0.12 GFLOP each).
BM, BN, GROUP_M = 128, 128, 8
# Integer entries of 16..32 (b's rows of either sign), K = 56: every product and partial sum is an
# integer below 2^16, so any fp32 accumulation order is exact and C's one rounding is the only
# error: held to round-to-nearest (u |c|). A conversion that truncates (__float2half_rz, bf16 by
# dropping the low 16 bits) errs up to 2u |c|, which the other cases' tolerance allows.
INTEGERS = (130, 260, 56)
RASTER = [("fp16", 1300, 600, 72), ("bf16", 1030, 850, 40)]


def raster_label(m, n, bm, bn, group):
    """What a block-order case covers: its grid of bm x bn blocks and the rows of its last group."""
    rows, cols = -(-m // bm), -(-n // bn)
    return f"{rows} x {cols} blocks of {bm} x {bn} in groups of {group} block rows: the last has {rows % group}"


def _gemm_params(dt, m, n, k, offset=0, offset_c=0):
    """offset: elements by which a and b start off 16 bytes, offset_c: c's."""
    return {"dtype": dt, "m": m, "n": n, "k": k, "offset": offset, "offset_c": offset_c}


def gemm_cases(shapes, misaligned, perf_sizes, raster=(), tile=(BM, BN, GROUP_M)):
    """C = A B^T cases (Days 9 and 10): `shapes` and Llama 3 8B's projections in both dtypes, the
    `misaligned` ones, each of a, b and c misaligned alone (ALONE), the block-order cases `raster`
    ((dtype, m, n, k) for blocks of `tile` = (BM, BN, GROUP_M)), and square GEMMs of `perf_sizes` timed."""
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} {m}x{n}x{k}", _gemm_params(dt, m, n, k)) for m, n, k in shapes]
        cases += [Case(f"{dt} {m}x{n}x{k} (Llama 3 8B)", _gemm_params(dt, m, n, k)) for m, n, k in LLAMA3_8B]
        cases += [Case(f"{dt} {m}x{n}x{k} misaligned by 1 ({'a, b' if o else ''}{' and ' if o and oc else ''}"
                       f"{'c' if oc else ''})", _gemm_params(dt, m, n, k, o, oc)) for m, n, k, o, oc in misaligned]
    m, n, k = ALONE
    cases += misaligned_alone(f"bf16 {m}x{n}x{k}", _gemm_params("bf16", m, n, k), ALONE_POINTERS)
    cases += [Case(f"{dt} {m}x{n}x{k} ({raster_label(m, n, *tile)})", _gemm_params(dt, m, n, k))
              for dt, m, n, k in raster]
    m, n, k = INTEGERS
    cases += [Case(f"{dt} {m}x{n}x{k} integer entries (C rounded to nearest)",
                   {**_gemm_params(dt, m, n, k), "values": "integers"}) for dt in DTYPES]
    cases += [Case(f"{dt} {s}x{s}x{s}", _gemm_params(dt, s, s, s), perf=True) for s in perf_sizes for dt in DTYPES]
    return cases


def gemm_inputs(p, gen, device="cuda"):
    import torch

    dt = torch_dtype(p["dtype"])
    if p.get("values") == "integers":  # (INTEGERS)
        a = torch.randint(16, 33, (p["m"], p["k"]), generator=gen, device=device).to(dt)
        sign = torch.randint(0, 2, (p["n"], 1), generator=gen, device=device) * 2 - 1
        b = (torch.randint(16, 33, (p["n"], p["k"]), generator=gen, device=device) * sign).to(dt)
    else:
        a = torch.randn(p["m"], p["k"], generator=gen, device=device).to(dt)
        b = torch.randn(p["n"], p["k"], generator=gen, device=device).to(dt)
    return {"a": offset_view(a, pointer_offset(p, "a", p["offset"])),
            "b": offset_view(b, pointer_offset(p, "b", p["offset"]))}


def gemm_outputs(p, inputs):
    offset = pointer_offset(p, "c", p["offset_c"])
    return {"c": empty_like_offset((p["m"], p["n"]), torch_dtype(p["dtype"]), "cuda", offset)}


def _gemm_call(mod, p, inputs, outputs):
    getattr(mod, f"tensor_core_gemm_{p['dtype']}")(outputs["c"], inputs["a"], inputs["b"], p["m"], p["n"], p["k"])


def gemm_tolerance(p):
    """C = A B^T's tolerance (Days 9 and 10): dot_tolerance over K; for integer entries (INTEGERS) the
    exact result rounded once to nearest."""
    if p.get("values") == "integers":
        return Tolerance(UNIT_ROUNDOFF[p["dtype"]], 0.0,
                         "integer entries, every sum exact (below 2^16): C is the exact result rounded once to "
                         "nearest, within u |c|; a conversion that truncates errs up to 2u |c| and fails")
    return dot_tolerance(p["dtype"], max(p["k"], 1))


def gemm_reference(p, inputs):
    return {"c": inputs["a"].double() @ inputs["b"].double().t()}  # exact products and sums, fp64


def gemm_matmul(p, inputs, outputs):
    import torch

    torch.matmul(inputs["a"], inputs["b"].t(), out=outputs["c"])


EXERCISES = [
    Exercise(
        id="day09.mma_tile",
        title="One warp, one 16 x 16 tile, on the tensor cores",
        summary="c[t] += a[t] b[t] for a batch of 16 x 16 tiles (a [tiles, 16, k] row-major, b [tiles, k, 16] "
                "row-major, c [tiles, 16, 16] fp32 in place), k a multiple of 16: one warp per tile, fragments "
                "loaded from shared memory with ldmatrix (.trans for b) and multiplied with mma.sync m16n8k16.",
        entry_points=[
            "cudaError_t mma_tile_fp16(float* c, const __half* a, const __half* b, int64_t tiles, int64_t k, "
            "cudaStream_t stream)",
            "cudaError_t mma_tile_bf16(float* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t tiles, "
            "int64_t k, cudaStream_t stream)",
        ],
        cases=[Case(f"{dt} tiles={t} k={k}", _tile_params(dt, t, k)) for dt in DTYPES for t, k in TILE_SHAPES]
        + [Case(f"{dt} tiles=8192 k=1024 (past L2)", _tile_params(dt, 8192, 1024), perf=True) for dt in DTYPES],
        make_inputs=_tile_inputs,
        make_outputs=lambda p, inputs: {},
        call=_tile_call,
        reference=_tile_reference,
        tolerance=_tile_tolerance,
        # A and B read once (2 bytes each), c read and written (4 bytes each way).
        bytes_moved=lambda p: p["tiles"] * (2 * 2 * 16 * p["k"] + 2 * 4 * 256),
        target_copy_ratio=0.60,
        target_note="8 flops per byte: the tiles stream through at memory speed, the tensor cores are idle "
                    "most of the time; the target is a floor for staging through shared memory without a "
                    "pipeline",
        required_sass=HMMA_AND_LDSM,
        inplace=("c",),
        notebook="notebooks/day09_tensor_cores.ipynb",
    ),
    Exercise(
        id="day09.tensor_core_gemm",
        title="A first tensor-core GEMM",
        summary="C[M, N] = A[M, K] B[N, K]^T (B as nn.Linear stores its weight), fp16 and bf16 in and out, fp32 "
                "accumulation rounded once; any M, N, K >= 1 and any base pointer; ldmatrix + mma.sync from "
                "shared memory, no pipeline yet. Timed against torch.matmul at 4096^3.",
        entry_points=[
            "cudaError_t tensor_core_gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n, "
            "int64_t k, cudaStream_t stream)",
            "cudaError_t tensor_core_gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b, "
            "int64_t m, int64_t n, int64_t k, cudaStream_t stream)",
        ],
        cases=gemm_cases(GEMM_SHAPES, MISALIGNED, [4096], RASTER),
        make_inputs=gemm_inputs,
        make_outputs=gemm_outputs,
        call=_gemm_call,
        reference=gemm_reference,
        # randn inputs: each product a_i b_i has RMS 1.
        tolerance=gemm_tolerance,
        target=compute_bound(flops=lambda p: 2 * p["m"] * p["n"] * p["k"],
                             bytes_moved=lambda p: 2 * (p["m"] * p["k"] + p["n"] * p["k"] + p["m"] * p["n"]),
                             baseline=matmul_baseline(gemm_matmul), ratio=0.30, dtype=lambda p: p["dtype"]),
        target_note="mma.sync peaks near 636 TFLOP/s on an H200 and cuBLAS (wgmma) reached ~780 at 4096^3: "
                    "the target is reachable without cp.async (Day 10)",
        required_sass=HMMA_AND_LDSM,
        notebook="notebooks/day09_tensor_cores.ipynb",
    ),
]
