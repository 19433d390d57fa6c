"""Day 2 exercise: SiLU-and-mul (fp16 / bf16) with 16-byte vector loads."""
from __future__ import annotations

from ..spec import (PAST_GRID_Y, UNIT_ROUNDOFF, Case, Exercise, Tolerance, empty_like_offset, misaligned_alone,
                    offset_view, pointer_offset, torch_dtype)
from ._rounding import FP16_SUBNORMAL, round_up

# The gated activations (x of shape [tokens, 2d] -> out [tokens, d]) of Days 2 and 3 share
# these shapes, cases and outputs.
# (num_tokens, d): tails 1/2/3/127/128/129, hidden sizes that are not a multiple
# of the 8-element vector (111, 500, 4100), batch 1/19/99/989, a misaligned base
# pointer, and 16384 x 8192 (805 MB moved, 13x the L2), which is also timed.
SHAPES = [(1, 1), (1, 2), (2, 3), (3, 127), (19, 128), (99, 129), (989, 111), (19, 500),
          (1, 4096), (7, 4100), (128, 8192)]
# The intermediate sizes of current open models, a few tokens each (decode-sized, cheap: at most
# 2 MB moved): Llama 2 7B 11008, Llama 3 8B 14336, Qwen2 7B 18944, Llama 3 70B 28672, Qwen2 72B
# 29568, Llama 3.1 405B 53248. Every one is longer than one pass of the launcher's block (1024
# threads x 8 elements = 8192), so the block-stride loop has to come round 2-7 times; the
# misaligned one (scalar loads: 1024 elements per pass) 14 times.
REAL_SHAPES = [(1, 11008), (7, 14336), (3, 18944), (2, 28672), (5, 29568), (1, 53248)]
REAL_MISALIGNED = (3, 14336)
# (label, num_tokens, d, magnitude): rows where the math still defines the answer, read by
# each exercise's input generator: "zero rows" every third token all zeros (padding tokens),
# "small" inputs 64x smaller than the normal ones, "large" gates of thousands (fp16: up to
# 2e4; bf16 larger) where exp(-x) overflows or underflows, with outputs still in range.
MAGNITUDES = [("zero rows (padding)", 9, 4096, "zero_rows"), ("small inputs", 7, 4096, "small"),
              ("large gates", 7, 4096, "large")]
DTYPES = ("fp16", "bf16")
# input and out each misaligned alone (the other aligned) by 2, 4 and 8 bytes, in one dtype, with
# d % 8 == 0 (the vector path open when aligned): a launcher that decides the alignment of both from
# one of them, or checks a smaller modulus than the 16 bytes of a vector, faults.
ALONE = ("bf16", 5, 1024)
ALONE_POINTERS = {"input": 2, "out": 2}


def _gated(dt, tokens, d, offset=0, magnitude="normal"):
    return {"dtype": dt, "tokens": tokens, "d": d, "offset": offset, "magnitude": magnitude}


def gated_cases():
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} tokens={t} d={d}", _gated(dt, t, d)) for t, d in SHAPES]
        cases.append(Case(f"{dt} tokens=33 d=1024 misaligned by 1", _gated(dt, 33, 1024, offset=1)))
        cases += [Case(f"{dt} tokens={t} d={d} (real model)", _gated(dt, t, d)) for t, d in REAL_SHAPES]
        t, d = REAL_MISALIGNED
        cases.append(Case(f"{dt} tokens={t} d={d} (real model) misaligned by 1", _gated(dt, t, d, offset=1)))
        cases += [Case(f"{dt} tokens={t} d={d} {label}", _gated(dt, t, d, magnitude=m)) for label, t, d, m in MAGNITUDES]
    dt, t, d = ALONE
    cases += misaligned_alone(f"{dt} tokens={t} d={d}", _gated(dt, t, d), ALONE_POINTERS)
    cases.append(Case(f"bf16 tokens={PAST_GRID_Y} d=8 (more tokens than a grid's y holds)",
                      _gated("bf16", PAST_GRID_Y, 8)))
    cases += [Case(f"{dt} tokens=16384 d=8192 (past L2)", _gated(dt, 16384, 8192), perf=True) for dt in DTYPES]
    return cases


def zero_padding_rows(x):
    """Every third token all zeros: a padding token's activations."""
    x[::3] = 0.0
    return x


def uniform_gated_inputs(p, gen, gate_bound: float, up_bound: float, device="cuda") -> dict:
    """The input [tokens, 2 d] of an activation whose interesting range is bounded (Days 3 and 13):
    gates uniform in [-gate_bound, gate_bound), up halves in [-up_bound, up_bound); padding rows of
    zeros when the case asks; at the case's offset (or its own, misaligned alone)."""
    import torch

    x = torch.rand(p["tokens"], 2 * p["d"], generator=gen, device=device) * 2 - 1  # uniform in [-1, 1)
    x[:, :p["d"]] *= gate_bound
    x[:, p["d"]:] *= up_bound
    if p.get("magnitude") == "zero_rows":
        zero_padding_rows(x)
    return {"input": offset_view(x.to(torch_dtype(p["dtype"])), pointer_offset(p, "input", p["offset"]))}


def _inputs(p, gen, device="cuda"):
    import torch

    x = torch.randn(p["tokens"], 2 * p["d"], generator=gen, device=device) * 2.0
    magnitude = p.get("magnitude", "normal")
    if magnitude == "zero_rows":
        zero_padding_rows(x)
    elif magnitude == "small":
        x /= 64.0  # |x| ~ 0.03: out ~ 5e-4, many fp16 outputs subnormal
    elif magnitude == "large":
        # Gates of thousands, where exp(-x) overflows (x < -88.7) or underflows (x > 104) in
        # fp32 and silu(x) is 0 or x; the up half small enough that |out| stays in range.
        d = p["d"]
        gate_bound = 20000.0 if p["dtype"] == "fp16" else 5e6
        x[:, :d] = (x[:, :d] * (gate_bound / 8)).clamp(-gate_bound, gate_bound)
        x[:, d:] = (x[:, d:] / 4).clamp(-3.0, 3.0)  # |out| <= 6e4 < 65504 (fp16)
    return {"input": offset_view(x.to(torch_dtype(p["dtype"])), pointer_offset(p, "input", p["offset"]))}


def gated_outputs(p, inputs):
    return {"out": empty_like_offset((p["tokens"], p["d"]), torch_dtype(p["dtype"]), "cuda",
                                     pointer_offset(p, "out", p["offset"]))}


def _call(mod, p, inputs, outputs):
    getattr(mod, f"silu_and_mul_{p['dtype']}")(outputs["out"], inputs["input"], p["tokens"], p["d"])


def _reference(p, inputs):
    import torch.nn.functional as F

    x = inputs["input"].double()  # fp64 from the same fp16/bf16 inputs
    d = p["d"]
    return {"out": F.silu(x[:, :d]) * x[:, d:]}


def _baseline(p, inputs, outputs):
    import torch.nn.functional as F

    x, d = inputs["input"], p["d"]
    outputs["out"].copy_(F.silu(x[:, :d]) * x[:, d:])  # eager: three kernels, two temporaries


# The fp32 result before its one rounding: __expf(-x) errs by <= 2 + 1.173 |x| ulp, <= 107 ulp
# where it matters (|x| <= 88.7; past it exp overflows and silu(x) is 0 or x in any fp32
# formula); the division and the multiply by the up half add one rounding each. 2^-16 (256
# ulp) covers it with room to spare.
FP32_SILU = 2.0 ** -16


def _tolerance(p):
    u = UNIT_ROUNDOFF[p["dtype"]]
    rtol = round_up(u + FP32_SILU)
    if p["dtype"] == "fp16":
        return Tolerance(rtol, FP16_SUBNORMAL,
                         "fp16 output: the fp32 result (__expf: <= 2 + 1.173 |x| ulp; <= 2^-16 relative in all) "
                         "rounded once: 2^-11 relative, 2^-25 absolute for subnormals. Rejects a second "
                         "rounding (silu(x1) rounded to fp16 before the multiply) and any fp16 arithmetic")
    # bf16 keeps fp32's range: outputs down to ~1e-30 are checked relative to themselves; below
    # that, silu(x) of x < -88.7 is 0 in fp32 (exp(-x) overflows) but ~1e-37 exactly.
    return Tolerance(rtol, 1e-30,
                     "bf16 output: the fp32 result (__expf: <= 2 + 1.173 |x| ulp; <= 2^-16 relative in all) "
                     "rounded once: 2^-8 relative. Rejects a second rounding (silu(x1) rounded to bf16 before "
                     "the multiply) and bf16 arithmetic")


EXERCISES = [
    Exercise(
        id="day02.silu_and_mul",
        min_arch="7.5",  # Days 1-6 need nothing newer than Turing
        title="SiLU-and-mul with 16-byte loads",
        summary="out[t, i] = silu(x[t, i]) * x[t, d + i] for fp16 and bf16, x of shape [tokens, 2d], computed "
                "in fp32 (exp may be __expf) and rounded once. Move 16 bytes per load with course::vec_t and "
                "handle any d, aligned or not.",
        entry_points=[
            "cudaError_t silu_and_mul_fp16(__half* out, const __half* input, int64_t num_tokens, int64_t d, "
            "cudaStream_t stream)",
            "cudaError_t silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input, int64_t num_tokens, "
            "int64_t d, cudaStream_t stream)",
        ],
        cases=gated_cases(),
        make_inputs=_inputs,
        make_outputs=gated_outputs,
        call=_call,
        reference=_reference,
        tolerance=_tolerance,
        bytes_moved=lambda p: 3 * 2 * p["tokens"] * p["d"],
        baseline=_baseline,
        baseline_name="F.silu(x[:, :d]) * x[:, d:] (eager)",
        target_copy_ratio=0.95,
        target_note="on an H100, FlashInfer's silu_and_mul measured 1.01x the copy, eager PyTorch 0.36x "
                    "(reports/gpu-notebooks.json)",
        required_sass={"LDG.E.128": "16-byte vector loads (course::vec_t<T, 8>::load)"},
        max_registers=64,
        notebook="notebooks/day02_coalescing_and_vectorization.ipynb",
    ),
]
