"""Day 2 exercise: SiLU-and-mul (fp16 / bf16) with 16-byte vector loads."""
from __future__ import annotations

from ..spec import Case, Exercise, Tolerance, empty_like_offset, offset_view, torch_dtype

# The gated activations (x of shape [tokens, 2d] -> out [tokens, d]) of Days 2 and 3 share
# these shapes, cases and outputs.
# (num_tokens, d): tails 1/2/3/127/128/129, hidden sizes that are not a multiple
# of the 8-element vector (111, 500, 4100), batch 1/19/99/989, a misaligned base
# pointer, and 16384 x 8192 (805 MB moved, 13x the L2), which is also timed.
SHAPES = [(1, 1), (1, 2), (2, 3), (3, 127), (19, 128), (99, 129), (989, 111), (19, 500),
          (1, 4096), (7, 4100), (128, 8192)]
DTYPES = ("fp16", "bf16")


def gated_cases():
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} tokens={t} d={d}", {"dtype": dt, "tokens": t, "d": d, "offset": 0})
                  for t, d in SHAPES]
        cases.append(Case(f"{dt} tokens=33 d=1024 misaligned by 1",
                          {"dtype": dt, "tokens": 33, "d": 1024, "offset": 1}))
    cases += [Case(f"{dt} tokens=16384 d=8192 (past L2)", {"dtype": dt, "tokens": 16384, "d": 8192, "offset": 0},
                   perf=True) for dt in DTYPES]
    return cases


def _inputs(p, gen):
    import torch

    x = torch.randn(p["tokens"], 2 * p["d"], generator=gen, device="cuda") * 2.0
    return {"input": offset_view(x.to(torch_dtype(p["dtype"])), p["offset"])}


def gated_outputs(p, inputs):
    return {"out": empty_like_offset((p["tokens"], p["d"]), torch_dtype(p["dtype"]), "cuda", p["offset"])}


def _call(mod, p, inputs, outputs):
    getattr(mod, f"silu_and_mul_{p['dtype']}")(outputs["out"], inputs["input"], p["tokens"], p["d"])


def _reference(p, inputs):
    import torch.nn.functional as F

    x = inputs["input"].float()  # fp32 from the same fp16/bf16 inputs
    d = p["d"]
    return {"out": F.silu(x[:, :d]) * x[:, d:]}


def _baseline(p, inputs, outputs):
    import torch.nn.functional as F

    x, d = inputs["input"], p["d"]
    outputs["out"].copy_(F.silu(x[:, :d]) * x[:, d:])  # eager: three kernels, two temporaries


def _tolerance(p):
    if p["dtype"] == "fp16":
        # fp16 rounds at 2^-11 = 4.9e-4 relative: 1e-3 passes an fp32 computation
        # rounded once and rejects one that rounds intermediates to fp16.
        return Tolerance(1e-3, 1e-3, "fp16 output: one rounding of an fp32 result (2^-11) plus slack")
    return Tolerance(8e-3, 8e-3, "bf16 output: one rounding of an fp32 result (2^-8 = 3.9e-3) plus slack")


EXERCISES = [
    Exercise(
        id="day02.silu_and_mul",
        title="SiLU-and-mul with 16-byte loads",
        summary="out[t, i] = silu(x[t, i]) * x[t, d + i] for fp16 and bf16, x of shape [tokens, 2d]. "
                "Move 16 bytes per load with course::vec_t and handle any d, aligned or not.",
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
        target_note="FlashInfer's silu_and_mul measured 0.98x on an H200, eager PyTorch 0.27x",
        required_sass={"LDG.E.128": "16-byte vector loads (course::vec_t<T, 8>::load)"},
        max_registers=64,
        notebook="notebooks/day02_coalescing_and_vectorization.ipynb",
    ),
]
