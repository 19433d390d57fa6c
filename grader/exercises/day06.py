"""Day 6 exercises: RMSNorm and fused residual-add + RMSNorm (fp16 / bf16), the row read once."""
from __future__ import annotations

from ..spec import (PAST_GRID_Y, UNIT_ROUNDOFF, Case, Exercise, Tolerance, empty_like_offset, misaligned_alone,
                    offset_view, pointer_offset, torch_dtype)
from ._rounding import FLUSH32, FP16_SUBNORMAL, PerOutput, round_up

EPS = 1e-6
# (rows, hidden): tails 1/2/3/127/128/129, hidden sizes that are not a multiple of the 8-element
# vector (111, 127, 129, 500, 16383), vector counts that are not a multiple of the block
# (1032 = 129 vectors, 2056 = 257), every register-tile size (1, 2, 4, 8 vectors per thread up
# to hidden 16384), batch 1/19/99/989.
SHAPES = [(1, 1), (2, 2), (3, 3), (2, 8), (19, 127), (99, 128), (989, 129), (989, 111), (19, 500),
          (1, 1024), (99, 1032), (19, 2056), (99, 3072), (19, 4096), (989, 4096), (19, 8192),
          (1, 16384), (3, 16383)]
# Misaligned base pointers (a tensor slice can start anywhere): everything, or only the weight.
MISALIGNED = [(33, 1024, 1, 1), (19, 16384, 1, 1), (7, 4096, 0, 1), (3, 5120, 1, 1)]
# The hidden sizes of current open models not already above, a few rows each: Llama 3.2 1B 2048,
# Qwen2 7B 3584, Qwen2.5 14B / Mistral Nemo 5120, and 12288. With 4096 (Llama 3 8B), 8192 (Llama
# 3 70B) and 16384 (Llama 3.1 405B) above, the sizes from 2048 to 16384; each takes 2-8 vectors
# per thread (more than one pass of the block over the row) and blocks of 160-256 threads.
REAL_HIDDEN = [(7, 2048), (5, 3584), (3, 5120), (2, 12288)]
# (label, rows, hidden, magnitude): rows where the math still defines the answer. "zero_rows":
# every third row all zeros (padding tokens: mean(x^2) = 0, and the output is 0 only with eps
# inside the root); "1e-3": entries ~1e-3, mean(x^2) ~ eps, where eps inside or outside the root
# (or none) differ by 10-40%; "1e-4": mean(x^2) << eps, the output ~1000 x the row; "large":
# entries of thousands (fp16: up to 3e4; bf16 ~1e12), whose squares only fp32 holds; "offset":
# rows with mean 2 (a LayerNorm would subtract it: RMSNorm does not).
MAGNITUDES = [("zero rows (padding)", 12, 4096, "zero_rows"), ("entries ~1e-3", 7, 4096, "1e-3"),
              ("entries ~1e-4", 7, 4096, "1e-4"), ("large entries", 7, 4096, "large"),
              ("rows with mean 2", 7, 4096, "offset")]
# Another model's eps (Llama 2/3, Mistral: 1e-5) on entries ~1e-3, where mean(x^2) ~ eps: a kernel
# that uses a constant of its own instead of the eps it is given is off by ~100% there.
OTHER_EPS = 1e-5
# Each pointer misaligned alone (the others aligned) by 2, 4 and 8 bytes, in bf16 at 7 x 4096 (the
# vector path open when aligned): a launcher that decides the alignment of all from some of them,
# or checks a smaller modulus than the 16 bytes of a vector, faults.
ALONE = ("bf16", 7, 4096)
RMS_POINTERS = {"input": 2, "weight": 2, "out": 2}
FUSED_POINTERS = {"input": 2, "residual": 2, "weight": 2}
DTYPES = ("fp16", "bf16")


def _params(dt, rows, hidden, offset=0, weight_offset=0, magnitude="normal", eps=EPS):
    return {"dtype": dt, "rows": rows, "hidden": hidden, "eps": eps, "offset": offset,
            "weight_offset": weight_offset, "magnitude": magnitude}


def _cases(perf_shapes, alone_pointers):
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} rows={r} hidden={h}", _params(dt, r, h)) for r, h in SHAPES]
        cases += [Case(f"{dt} rows={r} hidden={h} misaligned by 1 ({'all pointers' if o else 'weight only'})",
                       _params(dt, r, h, o, wo)) for r, h, o, wo in MISALIGNED]
        cases += [Case(f"{dt} rows={r} hidden={h} (real model)", _params(dt, r, h)) for r, h in REAL_HIDDEN]
        cases += [Case(f"{dt} rows={r} hidden={h} {label}", _params(dt, r, h, magnitude=m))
                  for label, r, h, m in MAGNITUDES]
        cases.append(Case(f"{dt} rows=7 hidden=4096 entries ~1e-3, eps {OTHER_EPS:g}",
                          _params(dt, 7, 4096, magnitude="1e-3", eps=OTHER_EPS)))
    dt, r, h = ALONE
    cases += misaligned_alone(f"{dt} rows={r} hidden={h}", _params(dt, r, h), alone_pointers)
    cases.append(Case(f"bf16 rows={PAST_GRID_Y} hidden=520 (more rows than a grid's y holds)",
                      _params("bf16", PAST_GRID_Y, 520)))
    cases += [Case(f"{dt} rows={r} hidden={h} (past L2)", _params(dt, r, h), perf=True)
              for dt in DTYPES for r, h in perf_shapes]
    return cases


def _weight(p, gen, device="cuda"):
    import torch

    # Around 1 like a trained norm weight, with spread (some near 0, some near 2.5).
    w = 1.0 + 0.5 * torch.randn(p["hidden"], generator=gen, device=device)
    return offset_view(w.to(torch_dtype(p["dtype"])), pointer_offset(p, "weight", p["weight_offset"]))


def _shaped(x, p, normal_scale):
    """A case's row values from randn `x`, at its magnitude (see MAGNITUDES)."""
    magnitude = p.get("magnitude", "normal")
    if magnitude == "1e-3":
        return x * 1e-3
    if magnitude == "1e-4":
        return x * 1e-4
    if magnitude == "large":
        if p["dtype"] == "fp16":  # thousands, at most 3e4: x + r of the fused kernel stays < 65504
            return (x * 8000.0).clamp(-30000.0, 30000.0)
        return x * 1e12  # squares ~1e24: the fp32 sum of 16384 of them is still finite
    if magnitude == "offset":
        return x + 2.0
    x = x * normal_scale
    if magnitude == "zero_rows":
        x[::3] = 0.0
    return x


def _rms_normalize(h, w, eps):
    """RMSNorm of rows, in their own precision (fp64 for the references): h * rsqrt(mean(h^2) + eps) * w."""
    import torch

    return h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * w


# The fp32 result before its one rounding: the sum of squares adds <= 64 positive terms per
# thread (the launcher's <= 8 vectors of 8) and 10 butterfly steps, <= 75 ulp relative, halved by
# the root; the division by hidden, + eps, rsqrtf (<= 2 ulp) and two multiplies add ~6 ulp: ~44
# ulp in all. 2^-16 (256 ulp) covers it with room to spare.
FP32_NORM = 2.0 ** -16


def _close(p):
    u = UNIT_ROUNDOFF[p["dtype"]]
    if p["dtype"] == "fp16":
        return Tolerance(round_up(u + FP32_NORM), FP16_SUBNORMAL,
                         "fp16 output: the fp32 result (<= 2^-16 relative: sums of squares with <= 74 additions "
                         "per term, rsqrtf) rounded once: 2^-11 relative, 2^-25 absolute for subnormals. Rejects a "
                         "second rounding (the normalized row rounded to fp16 before the weight multiply, as HF "
                         "Transformers does), a sum of squares in fp16, and zeros")
    return Tolerance(round_up(u + FP32_NORM), FLUSH32,
                     "bf16 output: the fp32 result (<= 2^-16 relative: sums of squares with <= 74 additions per "
                     "term, rsqrtf) rounded once: 2^-8 relative. Rejects a second rounding (the normalized row "
                     "rounded to bf16 before the weight multiply), a sum of squares in bf16, and zeros")


# ------------------------------------------------------------------------ rmsnorm
def _rms_inputs(p, gen, device="cuda"):
    import torch

    # Scale 3: a sum of squares kept in fp16 would overflow (> 65504) from hidden ~7300 on.
    x = _shaped(torch.randn(p["rows"], p["hidden"], generator=gen, device=device), p, 3.0)
    return {"input": offset_view(x.to(torch_dtype(p["dtype"])), pointer_offset(p, "input", p["offset"])),
            "weight": _weight(p, gen, device)}


def _rms_outputs(p, inputs):
    return {"out": empty_like_offset((p["rows"], p["hidden"]), torch_dtype(p["dtype"]), "cuda",
                                     pointer_offset(p, "out", p["offset"]))}


def _rms_call(mod, p, inputs, outputs):
    getattr(mod, f"rmsnorm_{p['dtype']}")(outputs["out"], inputs["input"], inputs["weight"],
                                          p["rows"], p["hidden"], p["eps"])


def _rms_reference(p, inputs):
    # fp64 from the same fp16/bf16 inputs, rounded nowhere.
    return {"out": _rms_normalize(inputs["input"].double(), inputs["weight"].double(), p["eps"])}


def _rms_baseline(p, inputs, outputs):
    import torch.nn.functional as F

    F.rms_norm(inputs["input"], (p["hidden"],), inputs["weight"], p["eps"])  # eager, its own output


# ---------------------------------------------------------------- fused_add_rmsnorm
def _fused_inputs(p, gen, device="cuda"):
    import torch

    dt = torch_dtype(p["dtype"])
    x = _shaped(torch.randn(p["rows"], p["hidden"], generator=gen, device=device), p, 1.0)  # a layer's output
    r = _shaped(torch.randn(p["rows"], p["hidden"], generator=gen, device=device), p, 2.0)  # the residual stream
    return {"input": offset_view(x.to(dt), pointer_offset(p, "input", p["offset"])),
            "residual": offset_view(r.to(dt), pointer_offset(p, "residual", p["offset"])),
            "weight": _weight(p, gen, device)}


def _fused_call(mod, p, inputs, outputs):
    getattr(mod, f"fused_add_rmsnorm_{p['dtype']}")(inputs["input"], inputs["residual"], inputs["weight"],
                                                    p["rows"], p["hidden"], p["eps"])


def _fused_reference(p, inputs):
    # h = x + r in fp32, rounded to the storage dtype: that is the new residual, and the norm is
    # taken of exactly that stored value (as rms_norm(residual) after an eager add would be), in fp64.
    h = (inputs["input"].float() + inputs["residual"].float()).to(torch_dtype(p["dtype"]))
    return {"input": _rms_normalize(h.double(), inputs["weight"].double(), p["eps"]), "residual": h.float()}


def _fused_tolerance(p):
    # The new residual is one rounding of x + r, and x + r of two fp16/bf16 values is exact in
    # fp32 whenever the rounding can depend on it: exactly one value is right.
    return PerOutput(
        input=_close(p),
        residual=Tolerance.exact("the new residual, x + r rounded once to fp16/bf16 (x + r of two such values "
                                 "is exact in fp32 wherever it decides the rounding): one right answer"))


def _fused_baseline(p, inputs, outputs):
    import torch.nn.functional as F

    # Eager PyTorch, two kernels: the add in place, then the norm into a fresh tensor.
    inputs["residual"].add_(inputs["input"])
    F.rms_norm(inputs["residual"], (p["hidden"],), inputs["weight"], p["eps"])


EXERCISES = [
    Exercise(
        id="day06.rmsnorm",
        min_arch="7.5",  # Days 1-6 need nothing newer than Turing
        title="RMSNorm, the row read once",
        summary="out = x * rsqrt(mean(x^2) + eps) * weight per row, fp16 and bf16, in fp32 rounded once. "
                "One block per row keeps the row in registers: 16-byte loads, a block reduction "
                "(course::block_reduce_sum), any hidden size up to 16384, aligned or not.",
        entry_points=[
            "cudaError_t rmsnorm_fp16(__half* out, const __half* input, const __half* weight, int64_t rows, "
            "int64_t hidden, float eps, cudaStream_t stream)",
            "cudaError_t rmsnorm_bf16(__nv_bfloat16* out, const __nv_bfloat16* input, "
            "const __nv_bfloat16* weight, int64_t rows, int64_t hidden, float eps, cudaStream_t stream)",
        ],
        cases=_cases([(32768, 4096), (16384, 8192)], RMS_POINTERS),
        make_inputs=_rms_inputs,
        make_outputs=_rms_outputs,
        call=_rms_call,
        reference=_rms_reference,
        tolerance=_close,
        # Read the row and write the output once; the weight once (every row reuses it from cache).
        bytes_moved=lambda p: 2 * (2 * p["rows"] * p["hidden"] + p["hidden"]),
        baseline=_rms_baseline,
        baseline_name="F.rms_norm (eager)",
        target_copy_ratio=0.90,
        target_note="on an H100, FlashInfer's two-pass rmsnorm measured 0.86-0.95x the copy and eager "
                    "F.rms_norm 0.67-0.71x (reports/gpu-notebooks.json): reading the row once should beat both",
        required_sass={
            "LDG.E.128": "16-byte loads of the row (course::vec_t<T, 8>::load)",
            "SHFL.BFLY": "warp-level reduction by butterfly shuffles (course::block_reduce_sum)",
            "BAR.SYNC": "a block-wide barrier between the warps' partial sums",
        },
        notebook="notebooks/day06_block_reduction_and_rmsnorm.ipynb",
    ),
    Exercise(
        id="day06.fused_add_rmsnorm",
        min_arch="7.5",  # Days 1-6 need nothing newer than Turing
        title="Fused residual add + RMSNorm, in place",
        summary="residual = input + residual (rounded to fp16/bf16), then input = rmsnorm(residual) * weight of "
                "that rounded residual, in fp32 rounded once, both in place, in one kernel that reads each row "
                "of input and residual once.",
        entry_points=[
            "cudaError_t fused_add_rmsnorm_fp16(__half* input, __half* residual, const __half* weight, "
            "int64_t rows, int64_t hidden, float eps, cudaStream_t stream)",
            "cudaError_t fused_add_rmsnorm_bf16(__nv_bfloat16* input, __nv_bfloat16* residual, "
            "const __nv_bfloat16* weight, int64_t rows, int64_t hidden, float eps, cudaStream_t stream)",
        ],
        cases=_cases([(16384, 4096), (8192, 8192)], FUSED_POINTERS),
        make_inputs=_fused_inputs,
        make_outputs=lambda p, inputs: {},
        call=_fused_call,
        reference=_fused_reference,
        tolerance=_fused_tolerance,
        # Read input and residual, write both back; the weight once.
        bytes_moved=lambda p: 2 * (4 * p["rows"] * p["hidden"] + p["hidden"]),
        baseline=_fused_baseline,
        baseline_name="residual.add_(input); F.rms_norm(residual) (eager, two kernels)",
        target_copy_ratio=0.92,
        target_note="on an H100, FlashInfer's fused_add_rmsnorm measured 0.99-1.01x the copy, the eager "
                    "two-kernel version 0.70x (reports/gpu-notebooks.json)",
        required_sass={
            "LDG.E.128": "16-byte loads of input and residual (course::vec_t<T, 8>::load)",
            "SHFL.BFLY": "warp-level reduction by butterfly shuffles (course::block_reduce_sum)",
            "BAR.SYNC": "a block-wide barrier between the warps' partial sums",
        },
        inplace=("input", "residual"),
        notebook="notebooks/day06_block_reduction_and_rmsnorm.ipynb",
    ),
]
