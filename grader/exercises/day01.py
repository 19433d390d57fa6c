"""Day 1 exercise: scale-add with a grid-stride loop, correct for every size."""
from __future__ import annotations

from ..spec import Case, Exercise, Tolerance, empty_like_offset, misaligned_alone, offset_view, pointer_offset

# Tails around a warp and a block (1, 2, 3, 127, 128, 129), sizes past the capped grid (which
# need the grid-stride loop), misaligned base pointers, and one case of 3 x 268 MB, more than
# 13x the H200's 60 MB L2, which is also timed.
SIZES = [1, 2, 3, 31, 127, 128, 129, 255, 257, 1000, 4097, 65537, 1_000_003, 3_000_017]

# The sizes an update of a real model's tensors has (a residual stream, a row of logits, a
# slice of weights), at most 22 MB moved: a hidden state of 8192 x 7 tokens, the vocabularies
# of Llama 3 (128256), Qwen2 (151936) and Gemma (256000), an MLP activation of 14336 x 7
# tokens, and 128 tokens x 14336 (1,835,008: the capped grid of 8 blocks x 256 threads per SM
# covers 270,336 elements per pass on an H200, so about 7 passes).
REAL_SIZES = [("hidden 8192 x 7 tokens", 57344), ("Llama 3 vocabulary", 128256),
              ("Qwen2 vocabulary", 151936), ("Gemma vocabulary", 256000),
              ("intermediate 14336 x 7 tokens", 100352), ("intermediate 14336 x 128 tokens", 1835008)]

# Where the math still defines the answer: alpha = 0 (out = y exactly), x all zero (padding:
# out = y exactly), and inputs scaled to ~1e-30 and ~1e30 (fp32 holds both, and the tolerance
# scales with them: a blanket atol of 1e-6 would pass anything at 1e-30).
SPECIAL = [("alpha = 0", {"alpha": 0.0}), ("x all zero (padding)", {"x_zero": True}),
           ("inputs ~1e-30", {"scale": 1e-30}), ("inputs ~1e30", {"scale": 1e30})]


# One case past 2^31 elements, where an index kept in 32 bits wraps, on GPUs with the memory for it:
# x, y and out (8.6 GB each), the inputs' copies (the unmodified-input check) and an fp32 reference.
PAST_32_BIT_N = (1 << 31) + 129
PAST_32_BIT_GIB = 64
# From this size the reference is fp32 (each element rounded once from fp64, a chunk at a time): an
# fp64 reference and its temporaries would not fit beside the case.
FP32_REFERENCE_FROM = 1 << 28
REFERENCE_CHUNK = 1 << 26

# Each pointer misaligned alone (the others aligned) by 4 and 8 bytes: a kernel that vectorizes
# after checking one pointer's alignment, or checks % 8 where a 16-byte access needs % 16, faults.
ALONE_POINTERS = {"x": 4, "y": 4, "out": 4}


def _case(n, offset=0, **extra):
    return {"n": n, "offset": offset, **extra}


def _cases():
    cases = [Case(f"n={n}", _case(n)) for n in SIZES]
    cases += [Case(f"n={n} misaligned by 1", _case(n, 1)) for n in (129, 100_001)]
    cases += misaligned_alone("n=100001", _case(100_001), ALONE_POINTERS)
    cases += [Case(f"n={n} ({label})", _case(n)) for label, n in REAL_SIZES]
    cases += [Case(f"n=100003 {label}", _case(100_003, **extra)) for label, extra in SPECIAL]
    cases.append(Case("n=67108865 (past L2)", _case((1 << 26) + 1), perf=True))
    cases.append(Case(f"n={PAST_32_BIT_N} (past 2^31 elements: 64-bit indices)", _case(PAST_32_BIT_N),
                      gpu_gib=PAST_32_BIT_GIB))
    return cases


def _inputs(p, gen, device="cuda"):
    import torch

    n, off = p["n"], p["offset"]
    scale = p.get("scale", 1.0)
    x = torch.randn(n, generator=gen, device=device) * scale
    y = torch.randn(n, generator=gen, device=device) * scale
    alpha = 0.5 + 1.5 * torch.rand(1, generator=gen, device=device).item()
    if "alpha" in p:
        alpha = p["alpha"]
    if p.get("x_zero"):
        x.zero_()
    return {"x": offset_view(x, pointer_offset(p, "x", off)), "y": offset_view(y, pointer_offset(p, "y", off)),
            "alpha": alpha}


def _outputs(p, inputs):
    import torch

    return {"out": empty_like_offset((p["n"],), torch.float32, "cuda", pointer_offset(p, "out", p["offset"]))}


def _call(mod, p, inputs, outputs):
    mod.scale_add(outputs["out"], inputs["x"], inputs["y"], inputs["alpha"], p["n"])


def _reference(p, inputs):
    # fp64 from the same fp32 inputs: the kernel's FFMA rounds once, to fp32.
    import torch

    x, y, alpha = inputs["x"], inputs["y"], inputs["alpha"]
    if p["n"] < FP32_REFERENCE_FROM:
        return {"out": alpha * x.double() + y.double()}
    out = torch.empty(p["n"], dtype=torch.float32, device=x.device)
    for s in range(0, p["n"], REFERENCE_CHUNK):
        out[s:s + REFERENCE_CHUNK] = alpha * x[s:s + REFERENCE_CHUNK].double() + y[s:s + REFERENCE_CHUNK].double()
    return {"out": out}


def _tolerance(p):
    # FFMA rounds once: <= 2^-24 |out|. A separate multiply and add round twice: <= 2^-24 (|alpha x| +
    # |out|), and |alpha x| <= 2 * 5.5 * scale (randn stays within 5.5 sigma). rtol 1e-6 (8 ulp)
    # and atol 1e-6 * scale (~16 ulp of alpha x) hold both; anything computed in fp16/bf16
    # (errors ~1e-3 relative) fails, at every scale, and so does a zero output.
    scale = p.get("scale", 1.0)
    return Tolerance(1e-6, 1e-6 * scale,
                     f"fp32 result vs fp64 reference: within a few fp32 ulp of the result and of alpha x "
                     f"(rtol 1e-6, atol 1e-6 x the inputs' scale {scale:g}): FFMA or a separate multiply and add")


def _baseline(p, inputs, outputs):
    import torch

    torch.add(inputs["y"], inputs["x"], alpha=inputs["alpha"], out=outputs["out"])


EXERCISES = [
    Exercise(
        id="day01.scale_add",
        min_arch="7.5",  # Days 1-6 need nothing newer than Turing
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
        tolerance=_tolerance,
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
