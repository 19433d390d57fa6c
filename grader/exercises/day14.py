"""Day 14 exercises: rotary position embedding in place, and the capstone decoder.

- day14.rope     q and k rotated in place by their tokens' positions (Llama's rotate-half RoPE)
- day14.decoder  a Llama-architecture model (Llama 3 8B's layer shapes) that runs prefill and decode
                 on the learner's kernels of Days 2, 6, 8, 11, 12 and 14, registered as torch.library
                 ops, the decode step replayed as a CUDA graph (grader/exercises/day14_model.py)
"""
from __future__ import annotations

import math

from ..spec import UNIT_ROUNDOFF, Baseline, Case, Exercise, Tolerance, empty_like_offset, memory_bound, torch_dtype
from ._rounding import ULP32, PerOutput, round_up

LLAMA3_THETA = 500000.0  # rope_theta of Llama 3 (Llama 2: 10000)
DTYPES = ("fp16", "bf16")
INPUT_BOUND = 4.0  # q and k entries are randn clamped to +-4 (x scale): the tolerance knows the largest |x|


# --------------------------------------------------------------------------------------- rope
def _rope_params(dt, tokens, qo_heads=32, kv_heads=8, head_dim=128, max_pos=8192, theta=LLAMA3_THETA,
                 fused=False, offset=0, scale=1.0):
    return {"dtype": dt, "tokens": tokens, "qo_heads": qo_heads, "kv_heads": kv_heads, "head_dim": head_dim,
            "max_pos": max_pos, "theta": theta, "fused": fused, "offset": offset, "scale": scale}


def _rope_cases():
    cases = []
    for dt in DTYPES:
        # tails of the token count (1-3, 127-129, 989) at Llama 3 8B's heads; positions up to 8192
        cases += [Case(f"{dt} tokens={t}", _rope_params(dt, t)) for t in (1, 2, 3, 127, 128, 129, 989)]
        # every head_dim (Llama 3.2 1B: 64; 8B: 128; 256), MHA and GQA, one head; 80 and 96: half-rows
        # of 5 and 6 vectors (a token's threads do not divide the block); 72: half-rows of 36
        # elements, not a whole number of 16-byte vectors (the scalar path)
        for hd in (64, 80, 96, 128, 256, 72):
            for qo, kv in ((8, 8), (32, 8), (1, 1)):
                cases.append(Case(f"{dt} head_dim {hd}, heads {qo}/{kv}, tokens 33",
                                  _rope_params(dt, 33, qo, kv, hd)))
        # q, k, v as slices of one fused qkv projection (strided rows); v must stay untouched
        cases += [Case(f"{dt} fused qkv tokens={t}", _rope_params(dt, t, fused=True)) for t in (1, 129, 2048)]
        # base pointers one element off (a slice can start anywhere): the scalar path
        cases += [Case(f"{dt} tokens=77 misaligned by 1", _rope_params(dt, 77, offset=1)),
                  Case(f"{dt} fused qkv tokens=19 misaligned by 1", _rope_params(dt, 19, fused=True, offset=1))]
        # positions: a prompt's first token only (0: the identity), its first 256, Llama 3.1's 131072-token
        # context, Llama 2's theta 10000, a decode batch of 64 tokens, Llama 3 70B's 64 query heads
        cases += [Case(f"{dt} positions 0 only", _rope_params(dt, 50, max_pos=1)),
                  # a prompt's first 256 positions: fp32 angles are almost exact there, so the tolerance
                  # is the output rounding alone (cos and sin rounded to fp16/bf16 fail here)
                  Case(f"{dt} positions up to 256, tokens 989", _rope_params(dt, 989, max_pos=256)),
                  Case(f"{dt} positions up to 131072", _rope_params(dt, 500, max_pos=131072)),
                  Case(f"{dt} rope_theta 10000 (Llama 2)", _rope_params(dt, 300, theta=10000.0)),
                  Case(f"{dt} decode batch 64", _rope_params(dt, 64)),
                  Case(f"{dt} Llama 3 70B heads 64/8", _rope_params(dt, 129, 64, 8)),
                  Case(f"{dt} large entries (x 1000)", _rope_params(dt, 129, scale=1000.0)),
                  Case(f"{dt} small entries (x 1e-3)", _rope_params(dt, 129, scale=1e-3))]
    # A 32768-token prefill chunk at Llama 3 8B's heads: 335 MB of q and k, read and written.
    cases += [Case(f"{dt} tokens=32768 Llama 3 8B heads (past L2)", _rope_params(dt, 32768, max_pos=32768),
                   perf=True) for dt in DTYPES]
    cases.append(Case("bf16 fused qkv tokens=32768 (past L2)", _rope_params("bf16", 32768, max_pos=32768,
                                                                              fused=True), perf=True))
    return cases


def _rope_inputs(p, gen, device="cuda"):
    import torch

    dt = torch_dtype(p["dtype"])
    n, qo, kv, hd = p["tokens"], p["qo_heads"], p["kv_heads"], p["head_dim"]
    width = (qo + 2 * kv) * hd if p["fused"] else None

    def draw(cols):
        return (torch.randn(n, cols, generator=gen, device=device).clamp_(-INPUT_BOUND, INPUT_BOUND)
                * p["scale"]).to(dt)

    positions = torch.randint(0, p["max_pos"], (n,), generator=gen, device=device, dtype=torch.int32)
    if p["fused"]:  # one [tokens, (qo + 2 kv) hd] buffer; q, k, v are column slices of it
        buf = empty_like_offset((n, width), dt, device, p["offset"])
        buf.copy_(draw(width))
        q = buf[:, :qo * hd].view(n, qo, hd)
        k = buf[:, qo * hd:(qo + kv) * hd].view(n, kv, hd)
        v = buf[:, (qo + kv) * hd:].view(n, kv, hd)
        return {"q": q, "k": k, "v": v, "positions": positions}
    q = empty_like_offset((n, qo, hd), dt, device, p["offset"])
    k = empty_like_offset((n, kv, hd), dt, device, p["offset"])
    q.copy_(draw(qo * hd).view(n, qo, hd))
    k.copy_(draw(kv * hd).view(n, kv, hd))
    return {"q": q, "k": k, "positions": positions}


def _rope_call(mod, p, inputs, outputs):
    q, k = inputs["q"], inputs["k"]
    getattr(mod, f"rope_{p['dtype']}")(q, k, inputs["positions"], p["tokens"], p["qo_heads"], p["kv_heads"],
                                       p["head_dim"], q.stride(0), k.stride(0), p["theta"])


def rope_reference(x, positions, theta: float):
    """Llama's rotate-half RoPE of x [tokens, heads, head_dim] in fp64 (exact angles): pair i is
    (x[..., i], x[..., i + d/2]), turned by positions * theta^(-2i/d). HF Transformers' form:
    x cos + rotate_half(x) sin, with cos and sin repeated over both halves."""
    import torch

    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d // 2, dtype=torch.float64, device=x.device) * 2 / d)  # (d/2,)
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]                         # (tokens, d/2)
    cos, sin = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]                     # (tokens, 1, d/2)
    x = x.to(torch.float64)
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _rope_reference(p, inputs):
    return {"q": rope_reference(inputs["q"], inputs["positions"], p["theta"]),
            "k": rope_reference(inputs["k"], inputs["positions"], p["theta"])}


def angle_error(max_pos: int) -> float:
    """The most a right kernel's angle may be off at positions up to `max_pos`, in radians. Every
    implementation computes the angle in fp32 from an fp32 frequency: exp2f or powf of an fp32
    exponent up to log2(theta) ~ 19 (a few ulp of the frequency, weighted by the frequency: ~1.5 ulp
    of pos), the product pos x frequency (1 ulp), sin and cos (1-2 ulp). course/rope.cuh's exact
    reduction measured <= 1.9 ulp of pos over head_dim 64-256 and positions to 131072 (fp32 emulated
    in NumPy); fp32 sincosf(pos x inv_freq) about 3. 8 ulp of the largest angle, pos x 1, covers
    either with a margin."""
    return 8 * ULP32 * max(1, max_pos)


def _rope_tolerance(p):
    u = UNIT_ROUNDOFF[p["dtype"]]
    xmax = INPUT_BOUND * p["scale"]
    delta = angle_error(p["max_pos"])
    # An angle off by delta moves an output by at most (|x| + |y|) delta <= 2 xmax delta; the fp32
    # products and sum (4 roundings of terms up to xmax) add 2^-21 xmax; the output is rounded once.
    atol = round_up(xmax * (2 * delta + 2.0 ** -21))
    tol = Tolerance(round_up(u), atol,
                    f"{p['dtype']} output of an fp32 rotation rounded once (2^-{round(-math.log2(u))} relative), plus "
                    f"the fp32 angle's own rounding at positions up to {p['max_pos']} (8 ulp of the largest angle: "
                    f"{delta:.1g} rad, x 2 max|x| = {xmax:g}): atol {atol:.2g}. Rejects a second rounding, angles "
                    f"in fp16/bf16, the interleaved pairing, another rope_theta, positions off by one")
    return PerOutput(q=tol, k=tol)


def _rope_bytes(p):
    """q and k read and written once; the positions read once."""
    elems = p["tokens"] * (p["qo_heads"] + p["kv_heads"]) * p["head_dim"]
    return 2 * 2 * elems + 4 * p["tokens"]


def _rope_eager(p, inputs, outputs):
    """HF Transformers' apply_rotary_pos_emb as a PyTorch user runs it (eager, bf16/fp16: cos/sin from an
    fp32 table, x cos + rotate_half(x) sin), written back into q and k."""
    import torch

    q, k, pos = inputs["q"], inputs["k"], inputs["positions"]
    d = p["head_dim"]
    inv_freq = 1.0 / (p["theta"] ** (torch.arange(0, d, 2, device=q.device, dtype=torch.float32) / d))
    freqs = pos.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype)[:, None, :], emb.sin().to(q.dtype)[:, None, :]

    def rotate_half(x):
        return torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1)

    q.copy_(q * cos + rotate_half(q) * sin)
    k.copy_(k * cos + rotate_half(k) * sin)


ROPE_ENTRY_POINTS = [
    "cudaError_t rope_fp16(__half* q, __half* k, const int32_t* positions, int64_t tokens, int64_t qo_heads, "
    "int64_t kv_heads, int64_t head_dim, int64_t q_stride, int64_t k_stride, float rope_theta, cudaStream_t stream)",
    "cudaError_t rope_bf16(__nv_bfloat16* q, __nv_bfloat16* k, const int32_t* positions, int64_t tokens, "
    "int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t q_stride, int64_t k_stride, float rope_theta, "
    "cudaStream_t stream)",
]

ROPE = Exercise(
    id="day14.rope",
    title="Rotary position embedding, in place",
    summary="q [tokens, qo_heads, d] and k [tokens, kv_heads, d] rotated in place: pair (i, i + d/2) of every head "
            "of token t turned by positions[t] * rope_theta^(-2i/d) (Llama's rotate-half form; rope_theta 500000 "
            "for Llama 3), fp16/bf16 in, fp32 math, rounded once; rows strided (q and k may be slices of one fused "
            "qkv); even head_dim up to 256, any token count, aligned or not. The angles of a token computed once and "
            "reused for every head. At least 0.90x the copy bandwidth.",
    entry_points=ROPE_ENTRY_POINTS,
    cases=_rope_cases(),
    make_inputs=_rope_inputs,
    make_outputs=lambda p, inputs: {},
    call=_rope_call,
    reference=_rope_reference,
    tolerance=_rope_tolerance,
    target=memory_bound(_rope_bytes, 0.90, also=(Baseline("torch", "HF apply_rotary_pos_emb (eager)", _rope_eager),)),
    target_note="a rotation is a few FMAs per element once the angles are in registers: a copy's speed is "
                "within reach; eager PyTorch (HF's apply_rotary_pos_emb) makes ~10 passes over q and k",
    required_sass={
        "LDG.E.128": "16-byte loads of the half-rows (course::vec_t<T, 8>::load)",
        "STG.E.128": "16-byte stores of the rotated half-rows",
    },
    inplace=("q", "k"),
    notebook="notebooks/day14_framework_integration.ipynb",
)

EXERCISES = [ROPE]
