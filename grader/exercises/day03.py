"""Day 3 exercises: GELU-tanh-and-mul with tanh.approx (fp16 / bf16), and a warp reduction
through PTX butterfly shuffles."""
from __future__ import annotations

from ..spec import Case, Exercise, Tolerance, offset_view
from ._rounding import FP16_SUBNORMAL, PerOutput
from .day02 import gated_cases, gated_outputs, uniform_gated_inputs, zero_padding_rows

NOTEBOOK = "notebooks/day03_ptx_and_fast_math.ipynb"

# ------------------------------------------------------------------ gelu_tanh_and_mul
# Day 2's shapes and cases (tails, unaligned d, batch 1/19/99/989, a misaligned pointer, the
# intermediate sizes of real models, padding rows, small and large inputs, and 16384 x 8192
# timed) and its output: the same gated shape [tokens, 2d] -> [tokens, d].
INPUT_BOUND = 4.0  # inputs are uniform in [-4, 4]: GELU's bend and both of its tails

# tanh.approx.f32's documented error (PTX ISA): 2^-11 relative; the fp16 form's 2^-10.987
# absolute is the larger of the two readings, and the bound below uses it.
TANH_APPROX_ERR = 2.0 ** -10.987
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}  # rounding the fp32 result once


def gelu_bounds(p):
    """(bound of |gate|, bound of |up|) of a case's inputs: uniform in [-bound, bound]."""
    magnitude = p.get("magnitude", "normal")
    if magnitude == "small":
        return INPUT_BOUND / 64, INPUT_BOUND / 64
    if magnitude == "large":  # gates of hundreds: tanh saturates, GELU is x or 0 there
        return 256.0, 8.0
    return INPUT_BOUND, INPUT_BOUND


def _gelu_inputs(p, gen, device="cuda"):
    return uniform_gated_inputs(p, gen, *gelu_bounds(p), device)


def _gelu_call(mod, p, inputs, outputs):
    getattr(mod, f"gelu_tanh_and_mul_{p['dtype']}")(outputs["out"], inputs["input"], p["tokens"], p["d"])


def _gelu_reference(p, inputs):
    import torch.nn.functional as F

    x = inputs["input"].double()  # exact tanh, in fp64, from the same fp16/bf16 inputs
    d = p["d"]
    return {"out": F.gelu(x[:, :d], approximate="tanh") * x[:, d:]}


def _gelu_baseline(p, inputs, outputs):
    import torch.nn.functional as F

    x, d = inputs["input"], p["d"]
    outputs["out"].copy_(F.gelu(x[:, :d], approximate="tanh") * x[:, d:])  # eager: two kernels, a temporary


def _gelu_tolerance(p):
    # out = 0.5 v (1 + t) u with t = tanh(...). An error e_t <= TANH_APPROX_ERR in t moves out by
    # 0.5 |v u| e_t <= 0.5 * V * U * 2^-10.987 for gates |v| <= V and up values |u| <= U (the
    # case's input bounds: 3.94e-3 for the usual [-4, 4]) (atol, for v < 0, where out is near 0);
    # for v >= 0, 1 + t >= 1, so that is also <= e_t |out| (rtol). Rounding the result to the
    # output type adds UNIT_ROUNDOFF |out| (fp16 subnormals: 2^-25 absolute); fp32 arithmetic
    # adds ~1e-6 relative, inside the 1% slack.
    # Not separable at this bound: the exact (erf) GELU. |erf(v / sqrt 2) - t| <= 4.67e-4 |t| < 2^-11 |t|
    # for every v (largest at |v| = 1.14), so GELU-erf lies inside tanh.approx's documented error of
    # GELU-tanh everywhere, for any inputs (tests/test_near_formulas.py): no case can tell an erf GELU apart,
    # so the source check refuses erf in this exercise (source_deny; mutant erf_gelu_with_dead_tanh).
    u = UNIT_ROUNDOFF[p["dtype"]]
    gate_bound, up_bound = gelu_bounds(p)
    atol = 0.5 * gate_bound * up_bound * TANH_APPROX_ERR + (FP16_SUBNORMAL if p["dtype"] == "fp16" else 0.0)
    rtol = TANH_APPROX_ERR + u
    rejects = "A zero output, or a result rounded through bf16 (2^-8), is rejected." if p["dtype"] == "fp16" \
        else "A zero output is rejected."
    return Tolerance(
        round(rtol * 1.01, 6), float(f"{atol * 1.01:.3g}"),
        f"tanh.approx.f32 errs by at most 2^-10.987 (PTX ISA); in 0.5 v (1 + t) u with |v| <= {gate_bound:g}, "
        f"|u| <= {up_bound:g} that is <= {atol:.3g} absolute, and <= 2^-10.987 relative where v >= 0; plus one "
        f"{p['dtype']} rounding ({u:.3g} relative); 1% slack. {rejects}")


# ------------------------------------------------------------------------ warp_reduce
# (rows, cols): rows of 1/2/3/127/128/129 columns (one lane's share is empty, or 1, 4 or 5
# elements), a row longer than a warp covers many times, columns not a multiple of the
# 4-float vector, a misaligned base pointer, and 65536 x 4096 fp32 (1.07 GB read), timed.
REDUCE_SHAPES = [(1, 1), (2, 2), (3, 3), (1, 127), (5, 128), (7, 129), (127, 31), (128, 32), (129, 33),
                 (19, 1000), (3, 4100), (989, 4), (2, 65536), (1000, 4097)]

# (label, rows, cols, data, scale): rows as real models reduce them. "positive": entries in
# [0, 1), a softmax's numerators exp(x - max), over the vocabularies of current open models
# (Llama 2 32000, Llama 3 128256, Qwen2 151936, Gemma 256000; 250-2000 passes of a warp's
# 128-element loop) and hidden sizes (8192, 16384); "negative": log-probabilities in [-30, 0),
# where the maximum is negative; "zero_rows": every third row all zeros (padding); "uniform"
# entries in [-1, 1) scaled by 1e-30 and 1e30 (the fp32 sums still hold them exactly enough).
REDUCE_DATA = [("softmax numerators", 3, 32000, "positive", 1.0), ("softmax numerators", 2, 128256, "positive", 1.0),
               ("softmax numerators", 2, 151936, "positive", 1.0), ("softmax numerators", 2, 256000, "positive", 1.0),
               ("hidden states", 7, 8192, "uniform", 1.0), ("hidden states", 3, 16384, "uniform", 1.0),
               ("log-probabilities", 2, 128256, "negative", 1.0), ("log-probabilities", 99, 1000, "negative", 1.0),
               ("zero rows (padding)", 12, 4096, "zero_rows", 1.0),
               ("entries ~1e-30", 7, 4096, "uniform", 1e-30), ("entries ~1e30", 7, 4096, "uniform", 1e30)]
DATA_BOUND = {"uniform": 1.0, "positive": 1.0, "negative": 31.0, "zero_rows": 1.0}  # |entry| <= bound * scale


def _reduce_params(rows, cols, offset=0, data="uniform", scale=1.0):
    return {"rows": rows, "cols": cols, "offset": offset, "data": data, "scale": scale}


def _reduce_cases():
    cases = [Case(f"rows={r} cols={c}", _reduce_params(r, c)) for r, c in REDUCE_SHAPES]
    cases.append(Case("rows=33 cols=1024 misaligned by 1", _reduce_params(33, 1024, offset=1)))
    cases += [Case(f"rows={r} cols={c} {label}", _reduce_params(r, c, data=d, scale=sc))
              for label, r, c, d, sc in REDUCE_DATA]
    cases.append(Case("rows=65536 cols=4096 (past L2)", _reduce_params(65536, 4096), perf=True))
    return cases


def _reduce_inputs(p, gen, device="cuda"):
    import torch

    x = torch.rand(p["rows"], p["cols"], generator=gen, device=device)  # in [0, 1)
    data = p.get("data", "uniform")
    if data in ("uniform", "zero_rows"):
        x = x * 2 - 1  # in [-1, 1)
    elif data == "negative":
        x = -30.0 * x - 1e-3  # log-probabilities: in (-30.001, -0.001], every entry negative
    if data == "zero_rows":
        zero_padding_rows(x)
    x = x * p.get("scale", 1.0)
    return {"input": offset_view(x, p["offset"])}


def _reduce_outputs(p, inputs):
    import torch

    return {"row_sum": torch.empty(p["rows"], device="cuda"), "row_max": torch.empty(p["rows"], device="cuda")}


def _reduce_call(mod, p, inputs, outputs):
    mod.warp_reduce_rows(outputs["row_sum"], outputs["row_max"], inputs["input"], p["rows"], p["cols"])


def _reduce_reference(p, inputs):
    x = inputs["input"].double()
    return {"row_sum": x.sum(dim=1), "row_max": x.amax(dim=1)}


def _reduce_baseline(p, inputs, outputs):
    x = inputs["input"]
    torch_sum, torch_max = x.sum(dim=1), x.amax(dim=1)  # eager: two kernels, two passes over x
    outputs["row_sum"].copy_(torch_sum)
    outputs["row_max"].copy_(torch_max)


def _reduce_tolerance(p):
    # Summing n floats in fp32 in any order where no term passes through more than k additions
    # errs by at most k * 2^-24 * sum|x| (first order, Higham). A lane adds its ceil(cols / 32)
    # elements one after another (or fewer, in pairs), then 5 butterfly steps: k <= cols/32 + 8.
    # With |x| <= B (the case's bound: 1, or 30 for log-probabilities, times its scale),
    # sum|x| <= B cols. The maximum is exact: fmaxf returns one of its operands.
    cols = p["cols"]
    bound = DATA_BOUND[p.get("data", "uniform")] * p.get("scale", 1.0)
    k = -(-cols // 32) + 8
    atol = k * 2.0 ** -24 * cols * bound
    return PerOutput(
        row_sum=Tolerance(
            0.0, atol,
            f"fp32 sum with at most {k} additions per term (a lane's ceil(cols/32) elements, then 5 "
            f"butterfly steps, 3 spare): <= {k} * 2^-24 * cols * max|x| = {atol:.2g} for entries of at most "
            f"{bound:g}; a zero output or a bf16 accumulation is rejected"),
        row_max=Tolerance.exact("the maximum of fp32 values is one of them: exact (an all-negative row's "
                                "maximum is negative, a padding row's 0)"))


EXERCISES = [
    Exercise(
        id="day03.gelu_tanh_and_mul",
        min_arch="7.5",  # Days 1-6 need nothing newer than Turing
        title="GELU-tanh-and-mul with tanh.approx and 16-byte loads",
        summary="out[t, i] = gelu_tanh(x[t, i]) * x[t, d + i] for fp16 and bf16, x of shape [tokens, 2d], "
                "gelu_tanh(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))). Compute tanh with "
                "course::ptx_tanh (one MUFU.TANH), move 16 bytes per load, handle any d, aligned or not.",
        entry_points=[
            "cudaError_t gelu_tanh_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens, int64_t d, "
            "cudaStream_t stream)",
            "cudaError_t gelu_tanh_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input, "
            "int64_t num_tokens, int64_t d, cudaStream_t stream)",
        ],
        cases=gated_cases(),
        make_inputs=_gelu_inputs,
        make_outputs=gated_outputs,
        call=_gelu_call,
        reference=_gelu_reference,
        tolerance=_gelu_tolerance,
        bytes_moved=lambda p: 3 * 2 * p["tokens"] * p["d"],
        baseline=_gelu_baseline,
        baseline_name="F.gelu(x[:, :d], approximate='tanh') * x[:, d:] (eager)",
        target_copy_ratio=0.95,
        target_note="on an H100, FlashInfer's gelu_tanh_and_mul measured 1.01x the copy, eager PyTorch 0.36x "
                    "(reports/gpu-notebooks.json)",
        required_sass={
            "MUFU.TANH": "tanh in one hardware instruction (tanh.approx.f32 through course::ptx_tanh)",
            "LDG.E.128": "16-byte vector loads (course::vec_t<T, 8>::load)",
        },
        max_registers=64,
        source_deny=((r"\b(erff?|erfcf?|normcdff?)\s*\(",
                      "computes GELU with erf: this exercise is GELU's tanh form, 0.5 v (1 + tanh(sqrt(2/pi) "
                      "(v + 0.044715 v^3))), with course::ptx_tanh; the erf form differs from it by less than "
                      "tanh.approx's own error, so only the formula tells them apart"),),
        notebook=NOTEBOOK,
    ),
    Exercise(
        id="day03.warp_reduce",
        min_arch="7.5",  # Days 1-6 need nothing newer than Turing
        title="Row sum and row max, one warp per row, through PTX butterfly shuffles",
        summary="row_sum[r] = sum(x[r, :]), row_max[r] = max(x[r, :]) for fp32 x of shape [rows, cols], any "
                "cols >= 1. Combine the 32 lanes' partials with shfl.sync.bfly (course::shfl_xor or your "
                "own asm): five steps, no shared memory.",
        entry_points=[
            "cudaError_t warp_reduce_rows(float* row_sum, float* row_max, const float* input, int64_t rows, "
            "int64_t cols, cudaStream_t stream)",
        ],
        cases=_reduce_cases(),
        make_inputs=_reduce_inputs,
        make_outputs=_reduce_outputs,
        call=_reduce_call,
        reference=_reduce_reference,
        tolerance=_reduce_tolerance,
        bytes_moved=lambda p: 4 * p["rows"] * p["cols"] + 2 * 4 * p["rows"],
        baseline=_reduce_baseline,
        baseline_name="x.sum(1) and x.amax(1) (eager, two passes)",
        target_copy_ratio=0.85,
        target_note="a read-only stream runs at about the copy's bandwidth (no write-backs); the target leaves "
                    "room for the one-row-per-warp tail. Eager torch reads x twice",
        required_sass={"SHFL.BFLY": "butterfly shuffles (shfl.sync.bfly.b32): every lane gets the result"},
        max_registers=64,
        notebook=NOTEBOOK,
    ),
]
