"""Day 10 exercises: GEMM optimization (tiling, swizzle, cp.async pipeline, rasterization, epilogue).

- day10.gemm          C = A B^T at any shape, fp16 / bf16 in and out, fp32 accumulation, timed against torch.matmul
- day10.fp8_quantize  dynamic per-token e4m3 quantization (row absmax, fp32 scale), bit-exact, timed against a copy
- day10.wgmma_gemm    C = A B^T on Hopper's own path (sm_90a: wgmma, TMA, mbarriers), timed against torch.matmul
"""
from __future__ import annotations

from ..spec import (PAST_GRID_Y, Baseline, Case, Exercise, Tolerance, compute_bound, empty_like_offset,
                    matmul_baseline, memory_bound, misaligned_alone, offset_view, pointer_offset, torch_dtype)
from .day09 import (DTYPES, LLAMA3_8B, _gemm_params, gemm_cases, gemm_inputs, gemm_matmul, gemm_outputs,
                    gemm_reference, gemm_tolerance, raster_label)

GEMM_SASS = {
    "HMMA.16816.F32": "tensor-core mma.sync m16n8k16 with fp32 accumulators (HMMA.16816.F32, "
                      "HMMA.16816.F32.BF16 for bf16: course::mma_m16n8k16)",
    "LDSM": "fragments loaded from shared memory with ldmatrix (ldsm_x4 or course::ldmatrix_x4)",
    "LDGSTS": "K tiles copied global -> shared asynchronously (cp.async: cp_async16 or course::cp_async_zfill)",
    "DEPBAR": "a wait for an earlier group of copies (cp.async.wait_group, course::cp_async_wait)",
}


# --------------------------------------------------------------------------------- gemm
# (m, n, k): tails of the 128 x 256 block tile in every dimension (1-3, 127-129, 255-257), K that is
# not a multiple of 8 (no 16-byte copies: 1, 3, 127, 129, 4095) or of the 64-wide K tile (40, 4104),
# K shorter than the pipeline's prologue (16, 40, 64: fewer K tiles than the 2 issued ahead) and
# exactly as long (96, 128), K = 16384 (the longest rows of the day), and Llama 3 8B's projections
# (day09.LLAMA3_8B).
GEMM_SHAPES = [(1, 1, 1), (2, 2, 2), (3, 3, 3), (1, 257, 16), (127, 255, 129), (128, 256, 128), (129, 257, 127),
               (256, 512, 40), (200, 300, 96), (65, 96, 4104), (33, 200, 4095), (300, 7, 64), (130, 513, 16384)]
# Misaligned base pointers by one element (a tensor slice can start anywhere): (m, n, k, offset of
# a and b, offset of c). a, b misaligned: no cp.async (the plain-load fallback); c: 2-byte stores.
MISALIGNED = [(3, 1024, 256, 1, 1), (129, 4096, 4096, 1, 0), (300, 512, 4096, 0, 1)]
# (Each of a, b and c misaligned alone by 2, 4 and 8 bytes: day09.ALONE.)
# Block order: the reference (solutions/day10/gemm.cu) tiles C in blocks of BM x BN = 128 x 256 and
# walks them in groups of GROUP_M = 8 block rows, column by column; the last group has min(8, block
# rows left). Every other case has at most 8 block rows or a multiple of 8, where an order that sizes
# every group as the first one still covers C: these have 11 and 9 block rows (last groups of 3 and
# 1), 5 and 7 block columns, and tails in M, N and K (under 0.21 GFLOP each).
BM, BN, GROUP_M = 128, 256, 8
RASTER = [("fp16", 1300, 1100, 72), ("bf16", 1030, 1700, 40)]
# Timed: square GEMMs large enough to fill the H200 for hundreds of microseconds.
PERF = [4096, 8192]


def _gemm_call(mod, p, inputs, outputs):
    getattr(mod, f"gemm_{p['dtype']}")(outputs["c"], inputs["a"], inputs["b"], p["m"], p["n"], p["k"])


# ---------------------------------------------------------------------------- wgmma_gemm
WGMMA_SASS = {
    "HGMMA": "the warpgroup's tensor-core multiply from shared memory (wgmma.mma_async: course::hopper::"
             "wgmma_m64n256k16)",
    "UTMALDG": "tiles copied global -> shared by the tensor memory accelerator (cp.async.bulk.tensor: "
               "course::hopper::tma_load_2d)",
    "SYNCS.PHASECHK": "a wait on an mbarrier's phase (mbarrier.try_wait.parity: course::mbarrier_wait)",
}
# (m, n, k): K a multiple of 8 (the tensor map's rows are 16-byte aligned); tails of the 128 x 256 tile in
# M and N (1-3, 127-129, 255-257) and of the 64-wide K tile (8, 40, 72, 136, 4104); K shorter than the
# ring (8 .. 192: fewer K tiles than its stages) and K = 16384; N not a multiple of 8 (C's rows not
# 16-byte aligned: no tensor map can store them); 1000 x 1000 x 1000 (16 K tiles a tile: the ring's
# phase wraps within a tile); more tiles than SMs, so that a block of the persistent grid takes several
# and the ring's phase runs on across them, with K tiles not a multiple of the 3 stages (2048 x 4096 x
# 256: 256 tiles of 4 K tiles; Llama 3 8B's 4096 x 14336 x 4096 below also does, at 64 K tiles); and
# 1024 tiles of one K tile each (4096 x 8192 x 64): a stage is released at the end of every tile, so
# one released before the tile's last wgmma has finished is refilled under it about 8 times a block.
WGMMA_SHAPES = [(1, 1, 8), (2, 8, 16), (3, 3, 8), (1, 257, 16), (127, 255, 72), (128, 256, 64), (129, 257, 136),
                (256, 512, 40), (200, 300, 96), (65, 96, 4104), (300, 7, 64), (33, 200, 192), (130, 513, 16384),
                (1000, 1000, 1000), (2048, 4096, 256), (4096, 8192, 64)]
# C misaligned by one element (a slice of a larger C can start anywhere); a and b must be 16-byte aligned.
WGMMA_MISALIGNED_C = [(3, 1024, 256), (129, 4096, 512), (300, 512, 4096)]
# Block order: 11 and 9 block rows of 128 (last groups of 3 and 1 in groups of 8), an odd count (a
# cluster of two blocks along M has its second block past M), 5 and 7 block columns of 256.
WGMMA_RASTER = [("fp16", 1300, 1100, 72), ("bf16", 1030, 1700, 40), ("bf16", 384, 1280, 256)]
# Timed: square GEMMs and Llama 3 8B's MLP projections at 4096 tokens.
WGMMA_PERF = [("bf16", 4096, 4096, 4096), ("fp16", 4096, 4096, 4096), ("bf16", 8192, 8192, 8192),
              ("fp16", 8192, 8192, 8192), ("bf16", 4096, 14336, 4096), ("bf16", 4096, 4096, 14336)]


def _wgmma_cases():
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} {m}x{n}x{k}", _gemm_params(dt, m, n, k)) for m, n, k in WGMMA_SHAPES]
        cases += [Case(f"{dt} {m}x{n}x{k} (Llama 3 8B)", _gemm_params(dt, m, n, k)) for m, n, k in LLAMA3_8B]
        cases += [Case(f"{dt} {m}x{n}x{k} c misaligned by 1", _gemm_params(dt, m, n, k, 0, 1))
                  for m, n, k in WGMMA_MISALIGNED_C]
    cases += [Case(f"{dt} {m}x{n}x{k} ({raster_label(m, n, BM, BN, GROUP_M)})", _gemm_params(dt, m, n, k))
              for dt, m, n, k in WGMMA_RASTER]
    cases += [Case(f"{dt} {m}x{n}x{k}", _gemm_params(dt, m, n, k), perf=True) for dt, m, n, k in WGMMA_PERF]
    return cases


def _wgmma_call(mod, p, inputs, outputs):
    getattr(mod, f"wgmma_gemm_{p['dtype']}")(outputs["c"], inputs["a"], inputs["b"], p["m"], p["n"], p["k"])


# -------------------------------------------------------------------------- fp8_quantize
E4M3_MAX = 448.0
MIN_SCALE = 1.0 / (448.0 * 512.0)  # keeps an all-zero row finite (vLLM's lower bound)
# (m, k): tails of the row (1-3, 127-129), K not a multiple of 8 (the element path: 1, 3, 127, 129,
# 4095), the longest row held in registers (16384 = 256 threads x 8 chunks of 8) and just past it
# (16392), hidden sizes of real models (4096, 8192, 14336; 28672: Llama 3 70B's intermediate), token
# counts from 1 to 4096.
FP8_SHAPES = [(1, 1), (2, 2), (3, 3), (1, 127), (2, 128), (3, 129), (127, 4096), (128, 4095), (129, 16384),
              (19, 16392), (7, 28672), (989, 4096), (64, 8192), (33, 14336), (4096, 4096)]
# Rows of very different magnitudes (10^-3 .. 10^3: each row gets its own scale), every 7th row all
# zeros and every 7th from row 3 of |max| < 448 x MIN_SCALE = 1/512 (the lower bound on the scale
# holds for both, not only where amax = 0); misaligned x and q (a slice can start anywhere).
FP8_SPECIAL = [(129, 4096, "spread"), (64, 14336, "spread"), (5, 129, "spread")]
FP8_MISALIGNED = [(3, 129), (33, 4096)]
# One pointer misaligned alone (the others aligned), in bf16: x by 2, 4 and 8 bytes, q by 1, 2, 4 and 8
# (its 8-byte stores need % 8), the fp32 scales by 4 and 8. A kernel that decides from one pointer's
# alignment for all, or checks a smaller modulus than its vector loads or stores need, faults.
# K % 8 == 0: the vector path is open when aligned.
FP8_ALONE = (5, 1024)
FP8_ALONE_POINTERS = {"x": 2, "q": 1, "scales": 4}
# Timed: 384 and 352 MB moved, several times the L2.
FP8_PERF = [("bf16", 32768, 4096), ("fp16", 8192, 14336)]


def _fp8_params(dt, m, k, offset=0, rows="randn"):
    """offset: elements by which x and q both start off 16 bytes."""
    return {"dtype": dt, "m": m, "k": k, "offset": offset, "rows": rows}


def _fp8_cases():
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} M={m} K={k}", _fp8_params(dt, m, k)) for m, k in FP8_SHAPES]
        cases += [Case(f"{dt} M={m} K={k}, rows 1e-3..1e3, rows ~1e-4 and zero rows", _fp8_params(dt, m, k, rows=r))
                  for m, k, r in FP8_SPECIAL]
        cases += [Case(f"{dt} M={m} K={k} misaligned by 1 (x, q)", _fp8_params(dt, m, k, offset=1))
                  for m, k in FP8_MISALIGNED]
    m, k = FP8_ALONE
    cases += misaligned_alone(f"bf16 M={m} K={k}", _fp8_params("bf16", m, k), FP8_ALONE_POINTERS)
    cases.append(Case(f"bf16 M={PAST_GRID_Y} K=64 (more rows than a grid's y holds)",
                      _fp8_params("bf16", PAST_GRID_Y, 64)))
    cases += [Case(f"{dt} M={m} K={k}", _fp8_params(dt, m, k), perf=True) for dt, m, k in FP8_PERF]
    return cases


def _fp8_inputs(p, gen, device="cuda"):
    import torch

    x = torch.randn(p["m"], p["k"], generator=gen, device=device)
    if p["rows"] == "spread":
        factor = 10.0 ** (torch.rand(p["m"], 1, generator=gen, device=device) * 6 - 3)
        factor[3::7] = 1e-4  # |max| = 1e-4 x (a randn below 19.5) < 1/512: the scale is the lower bound
        x *= factor
        x[::7] = 0.0
    return {"x": offset_view(x.to(torch_dtype(p["dtype"])), pointer_offset(p, "x", p["offset"]))}


def _fp8_outputs(p, inputs):
    import torch

    return {"q": empty_like_offset((p["m"], p["k"]), torch.uint8, "cuda", pointer_offset(p, "q", p["offset"])),
            "scales": empty_like_offset((p["m"],), torch.float32, "cuda", pointer_offset(p, "scales"))}


def _fp8_call(mod, p, inputs, outputs):
    getattr(mod, f"fp8_quantize_{p['dtype']}")(outputs["q"], outputs["scales"], inputs["x"], p["m"], p["k"])


def _row_scales(x):
    """max(|max| / 448, MIN_SCALE) per row, one IEEE fp32 division as the kernel does it. Dividing by the
    Python number 448 would not do: torch divides a tensor by a scalar as a multiplication by the
    scalar's reciprocal, which is 1 ulp off for about half the rows (seen on the H200)."""
    import torch

    amax = x.abs().amax(dim=1, keepdim=True)
    return torch.clamp(amax / torch.full_like(amax, E4M3_MAX), min=MIN_SCALE)


def _fp8_reference(p, inputs):
    import torch

    x = inputs["x"].float()
    scale = _row_scales(x)
    return {"q": (x / scale).to(torch.float8_e4m3fn).view(torch.uint8), "scales": scale.squeeze(1)}


def _fp8_torch(p, inputs, outputs):
    # The same work in eager PyTorch (several kernels): reported beside, not graded.
    import torch

    x = inputs["x"].float()
    scale = _row_scales(x)
    outputs["q"].copy_((x / scale).to(torch.float8_e4m3fn).view(torch.uint8))
    outputs["scales"].copy_(scale.squeeze(1))


EXERCISES = [
    Exercise(
        id="day10.gemm",
        title="A fast GEMM: tiles, swizzle, a cp.async pipeline, rasterization, the epilogue",
        summary="C[M, N] = A[M, K] B[N, K]^T, fp16 and bf16 in and out, fp32 accumulation rounded once; any M, N, "
                "K >= 1 and any base pointer. A 128 x 256 block tile of 8 warps of 64 x 64, a multi-stage cp.async "
                "ring, swizzled shared rows for ldmatrix, double-buffered fragments, grouped block order and a "
                "staged epilogue, timed against torch.matmul (cuBLAS) at 4096^3 and 8192^3.",
        entry_points=[
            "cudaError_t gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n, int64_t k, "
            "cudaStream_t stream)",
            "cudaError_t gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m, "
            "int64_t n, int64_t k, cudaStream_t stream)",
        ],
        cases=gemm_cases(GEMM_SHAPES, MISALIGNED, PERF, RASTER, (BM, BN, GROUP_M)),
        make_inputs=gemm_inputs,
        make_outputs=gemm_outputs,
        call=_gemm_call,
        reference=gemm_reference,
        # randn inputs: each product a_i b_i has RMS 1.
        tolerance=gemm_tolerance,
        target=compute_bound(flops=lambda p: 2 * p["m"] * p["n"] * p["k"],
                             bytes_moved=lambda p: 2 * (p["m"] * p["k"] + p["n"] * p["k"] + p["m"] * p["n"]),
                             baseline=matmul_baseline(gemm_matmul), ratio=0.55, dtype=lambda p: p["dtype"]),
        # Set by physics: on Hopper cuBLAS runs wgmma, and both it and an mma.sync kernel run at the
        # card's power cap (benchmarks/gemm_clocks), where mma.sync sustains ~0.6x cuBLAS.
        target_note="mma.sync with ldmatrix is Ampere's tensor-core path; on a Hopper GPU cuBLAS uses wgmma, which "
                    "does more work per watt, and both run at the card's power cap (~670 W on an H100: "
                    "benchmarks/gemm_clocks), so a well-built mma.sync GEMM sustains about 0.6x cuBLAS there. "
                    "Look at your kernel's register use (no spills), the pipeline depth, the block order and the "
                    "epilogue before its mma loop. On an A100 or an RTX card mma.sync is what cuBLAS uses too",
        required_sass=GEMM_SASS,
        notebook="notebooks/day10_gemm_optimization.ipynb",
    ),
    Exercise(
        id="day10.fp8_quantize",
        min_arch="8.9",  # cvt.rn.satfinite.e4m3x2.f32 is Ada's and Hopper's
        title="Dynamic per-token FP8 (e4m3) quantization",
        summary="q[m, :] = e4m3(x[m, :] / scales[m]) with scales[m] = max(max |x[m, :]| / 448, 1 / (448 * 512)): "
                "fp16 or bf16 rows in, fp8 e4m3 bytes and fp32 scales out, any M and K; the saturating PTX "
                "convert cvt.rn.satfinite.e4m3x2.f32, bit-exact against torch's float8_e4m3fn conversion of the "
                "same quotients.",
        entry_points=[
            "cudaError_t fp8_quantize_fp16(uint8_t* q, float* scales, const __half* x, int64_t m, int64_t k, "
            "cudaStream_t stream)",
            "cudaError_t fp8_quantize_bf16(uint8_t* q, float* scales, const __nv_bfloat16* x, int64_t m, int64_t k, "
            "cudaStream_t stream)",
        ],
        cases=_fp8_cases(),
        make_inputs=_fp8_inputs,
        make_outputs=_fp8_outputs,
        call=_fp8_call,
        reference=_fp8_reference,
        tolerance=lambda p: Tolerance.exact(
            "bit-exact: the scale is one fp32 division of the row's |max| by 448 (then the lower bound), each "
            "quotient x / scale one IEEE fp32 division, and the conversion to e4m3 rounds to nearest even, as "
            "torch's float8_e4m3fn does; multiplying by 1 / scale instead, or another rounding, changes bytes"),
        # x read once (2 bytes), q written once (1 byte), the scales (4 bytes a row).
        target=memory_bound(lambda p: 3 * p["m"] * p["k"] + 4 * p["m"], 0.90,
                            also=(Baseline("torch", "eager PyTorch (amax, divide, convert)", _fp8_torch),)),
        target_note="one read of x and one write of q: a kernel that holds a row in registers between the "
                    "|max| and the conversion moves each byte once (not yet measured on the H200)",
        required_sass={
            "LDG.E.128": "16-byte vector loads of x (course::vec_t<T, 8>::load)",
            "F2FP.SATFINITE.E4M3": "the saturating two-value convert to e4m3 (cvt.rn.satfinite.e4m3x2.f32)",
        },
        notebook="notebooks/day10_gemm_optimization.ipynb",
    ),
    Exercise(
        id="day10.wgmma_gemm",
        title="Hopper's GEMM: wgmma fed by TMA, producer and consumer warpgroups, a persistent grid",
        summary="C[M, N] = A[M, K] B[N, K]^T, fp16 and bf16 in and out, fp32 accumulation rounded once, on "
                "Hopper (sm_90a): any M and N, K a multiple of 8, a and b 16-byte aligned. One producer thread "
                "fills a ring of shared-memory stages with TMA copies counted on mbarriers; two consumer "
                "warpgroups multiply each stage with wgmma and hand it back; one block per SM walks C's tiles. "
                "Timed against torch.matmul (cuBLAS) at 4096^3, 8192^3 and Llama 3 8B's MLP shapes.",
        entry_points=[
            "cudaError_t wgmma_gemm_fp16(__half* c, const __half* a, const __half* b, int64_t m, int64_t n, int64_t k, "
            "cudaStream_t stream)",
            "cudaError_t wgmma_gemm_bf16(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t m, "
            "int64_t n, int64_t k, cudaStream_t stream)",
        ],
        cases=_wgmma_cases(),
        make_inputs=gemm_inputs,
        make_outputs=gemm_outputs,
        call=_wgmma_call,
        reference=gemm_reference,
        tolerance=gemm_tolerance,
        target=compute_bound(flops=lambda p: 2 * p["m"] * p["n"] * p["k"],
                             bytes_moved=lambda p: 2 * (p["m"] * p["k"] + p["n"] * p["k"] + p["m"] * p["n"]),
                             baseline=matmul_baseline(gemm_matmul), ratio=0.90, dtype=lambda p: p["dtype"]),
        target_note="cuBLAS runs the same instructions (wgmma fed by TMA), so the whole of its speed is within reach. "
                    "Look at what the tensor cores wait for: a ring too shallow to hide the copies, a consumer that "
                    "waits for its own last wgmma before releasing a stage (wgmma.wait_group 1 keeps one group in "
                    "flight), a block that finishes its tile before the next one's copies have started (the "
                    "persistent loop), spills (setmaxnreg), the epilogue",
        required_sass=WGMMA_SASS,
        arch_specific="9.0a",
        notebook="notebooks/day10_gemm_optimization.ipynb",
    ),
]
