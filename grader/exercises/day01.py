"""Day 1 exercise: scale-add with a grid-stride loop, correct for every size."""
from __future__ import annotations

from ..spec import Case, Exercise, Tolerance, empty_like_offset, offset_view

# Tails around a warp and a block (1, 2, 3, 127, 128, 129), sizes past the capped
# grid (which need the grid-stride loop), misaligned base pointers, and one case
# of 3 x 268 MB, more than 13x the H200's 60 MB L2, which is also timed.
SIZES = [1, 2, 3, 31, 127, 128, 129, 255, 257, 1000, 4097, 65537, 1_000_003, 3_000_017]


def _cases():
    cases = [Case(f"n={n}", {"n": n, "offset": 0}) for n in SIZES]
    cases += [Case(f"n={n} misaligned by 1", {"n": n, "offset": 1}) for n in (129, 100_001)]
    cases.append(Case("n=67108865 (past L2)", {"n": (1 << 26) + 1, "offset": 0}, perf=True))
    return cases


def _inputs(p, gen):
    import torch

    n, off = p["n"], p["offset"]
    x = torch.randn(n, generator=gen, device="cuda")
    y = torch.randn(n, generator=gen, device="cuda")
    alpha = 0.5 + 1.5 * torch.rand(1, generator=gen, device="cuda").item()
    return {"x": offset_view(x, off), "y": offset_view(y, off), "alpha": alpha}


def _outputs(p, inputs):
    import torch

    return {"out": empty_like_offset((p["n"],), torch.float32, "cuda", p["offset"])}


def _call(mod, p, inputs, outputs):
    mod.scale_add(outputs["out"], inputs["x"], inputs["y"], inputs["alpha"], p["n"])


def _reference(p, inputs):
    # fp64 from the same fp32 inputs: the kernel's FFMA rounds once, to fp32.
    return {"out": inputs["alpha"] * inputs["x"].double() + inputs["y"].double()}


def _baseline(p, inputs, outputs):
    import torch

    torch.add(inputs["y"], inputs["x"], alpha=inputs["alpha"], out=outputs["out"])


EXERCISES = [
    Exercise(
        id="day01.scale_add",
        title="Scale-add for every size",
        summary="Write out[i] = alpha * x[i] + y[i] for fp32 arrays of any length n. The launcher "
                "caps the grid at 8 blocks per SM, so use a grid-stride loop with 64-bit indices.",
        entry_points=["cudaError_t scale_add(float* out, const float* x, const float* y, float alpha, "
                      "int64_t n, cudaStream_t stream)"],
        cases=_cases(),
        make_inputs=_inputs,
        make_outputs=_outputs,
        call=_call,
        reference=_reference,
        # 8 fp32 ulp (2^-23 each) of room: FFMA or a separate multiply and add both
        # pass; anything computed in fp16/bf16 (errors ~1e-3) fails.
        tolerance=lambda p: Tolerance(1e-6, 1e-6, "fp32 result vs fp64 reference: within a few fp32 ulp"),
        bytes_moved=lambda p: 3 * 4 * p["n"],
        baseline=_baseline,
        baseline_name="torch.add(y, x, alpha=alpha)",
        target_copy_ratio=0.80,
        target_note="a scalar fp32 grid-stride kernel reaches ~0.85-0.9x the copy on an H200",
        required_sass={},
        max_registers=64,
        notebook="notebooks/day01_cuda_model_and_jit.ipynb",
    ),
]
