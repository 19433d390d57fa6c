"""Day 14's RoPE exercise on the CPU: the spec's reference against HF Transformers' formula, and its
tolerance against the kernel's arithmetic emulated in fp32 (course/rope.cuh: exact reduction to a
fraction of a turn, sincospi) and against what the known-wrong kernels compute."""
import math

import pytest
import torch

from grader.exercises import day14
from grader.spec import torch_dtype


def _case(label):
    return next(c for c in day14.ROPE.cases if c.label == label)


def _inputs(p, seed=0):
    return day14._rope_inputs(p, torch.Generator().manual_seed(seed), device="cpu")


def _kernel_fp32(x, positions, theta, dtype, pairs="half", angle_dtype=None, pos_shift=0, cos_dtype=None):
    """What the solution computes, in fp32 like the GPU, rounded once to `dtype`; the keyword
    arguments turn it into the mutants' arithmetic."""
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float32)
    log2_theta = torch.tensor(math.log2(theta), dtype=torch.float32)
    turns = torch.exp2(-(2 * i) / d * log2_theta - torch.tensor(2.6514961294723187, dtype=torch.float32))
    p = (positions + pos_shift).to(torch.float32)[:, None]
    hi = p * turns
    lo = (p.double() * turns.double() - hi.double()).float()  # the FMA's exact remainder
    frac = (hi - torch.round(hi)) + lo
    if angle_dtype is not None:
        angle = (p * turns * 2 * math.pi).to(angle_dtype).float()
        cos, sin = torch.cos(angle), torch.sin(angle)
    else:
        cos, sin = torch.cos(2 * math.pi * frac.double()).float(), torch.sin(2 * math.pi * frac.double()).float()
    if cos_dtype is not None:
        cos, sin = cos.to(cos_dtype).float(), sin.to(cos_dtype).float()
    cos, sin = cos[:, None, :], sin[:, None, :]
    xf = x.float()
    if pairs == "half":
        x1, x2 = xf[..., :d // 2], xf[..., d // 2:]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:  # GPT-J's interleaved pairs (2m, 2m + 1)
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return out.to(dtype)


def _passes(p, x, got, which="q"):
    tol = day14.rope_tolerance(p)[which]
    exp = day14.rope_reference(x[which], x["positions"], p["theta"])
    err = (got.double() - exp).abs()
    return bool((err <= tol.atol + tol.rtol * exp.abs()).all())


def test_reference_is_hf_rotate_half():
    p = day14.rope_params("bf16", 7, 4, 2, 64)
    x = _inputs(p)
    q = x["q"].double()
    d = q.shape[-1]
    inv_freq = 1.0 / (p["theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    emb = torch.cat([x["positions"].double()[:, None] * inv_freq] * 2, dim=-1)[:, None, :]
    rotate_half = torch.cat([-q[..., d // 2:], q[..., :d // 2]], dim=-1)
    assert torch.allclose(day14.rope_reference(x["q"], x["positions"], p["theta"]),
                          q * emb.cos() + rotate_half * emb.sin(), atol=1e-12)


@pytest.mark.parametrize("label", ["bf16 tokens=129", "fp16 tokens=129", "fp16 positions up to 131072",
                                   "bf16 head_dim 256, heads 8/8, tokens 33", "fp16 large entries (x 1000)",
                                   "fp16 small entries (x 1e-3)", "bf16 rope_theta 10000 (Llama 2)"])
def test_the_kernels_fp32_arithmetic_passes(label):
    p = _case(label).params
    x = _inputs(p)
    got = _kernel_fp32(x["q"], x["positions"], p["theta"], torch_dtype(p["dtype"]))
    assert _passes(p, x, got)


@pytest.mark.parametrize("mutant", ["interleaved", "theta_10000", "off_by_one", "cos_in_storage_type",
                                    "angle_in_storage_type"])
def test_known_wrong_arithmetic_fails(mutant):
    for dt in ("fp16", "bf16"):
        p = _case(f"{dt} positions up to 256, tokens 989").params
        x = _inputs(p)
        kw = {"interleaved": dict(pairs="interleaved"), "off_by_one": dict(pos_shift=1),
              "cos_in_storage_type": dict(cos_dtype=torch_dtype(dt)),
              "angle_in_storage_type": dict(angle_dtype=torch_dtype(dt))}.get(mutant, {})
        theta = 10000.0 if mutant == "theta_10000" else p["theta"]
        got = _kernel_fp32(x["q"], x["positions"], theta, torch_dtype(dt), **kw)
        assert not _passes(p, x, got), f"{mutant} passes the {dt} tolerance"


def test_fused_inputs_are_slices_of_one_buffer():
    p = _case("bf16 fused qkv tokens=129").params
    x = _inputs(p)
    assert x["q"].stride(0) == x["k"].stride(0) == (32 + 16) * 128
    assert x["v"].data_ptr() == x["k"].data_ptr() + 8 * 128 * 2
