"""Day 12 exercise: FlashAttention-2 forward (prefill attention) on the tensor cores.

- day12.flash_attention  o, lse = softmax(sm_scale q k^T, causal or not) v per (request, query head), GQA

q [batch, seq_q, qo_heads, head_dim], k and v [batch, seq_kv, kv_heads, head_dim], fp16 / bf16, head_dim 64
or 128; q, k and v may be slices of one fused qkv projection (q_stride, kv_stride: elements from one token
to the next). Query head qh reads KV head qh / group. The causal mask is aligned bottom-right, as
FlashInfer's (include/flashinfer/attention/mask.cuh, prefill.cuh): query i attends key j iff
j <= i + seq_kv - seq_q, so the newest query of a chunk appended to a KV cache sees every key. (torch
SDPA's is_causal aligns top-left instead; the two agree only when seq_q = seq_kv.) A query that may
attend no key (i + seq_kv - seq_q < 0) has o = 0 and lse = -inf, as FlashInfer returns them. lse is in
NATURAL log, as torch.logsumexp and FlashAttention return it (FlashInfer keeps base 2 inside, as Day 11
explains).
"""
from __future__ import annotations

import math

from ..spec import Case, Exercise, attention_tolerance, compute_bound, sdpa_flash_baseline, torch_dtype

DTYPES = ("fp16", "bf16")
QK_SCALE = 3.0 ** 0.5  # q, k entries of this size give scores q.k / sqrt(d) of standard deviation ~3 (Day 11)
# kind -> (scale of q and k entries, scale of v entries): the magnitudes the cases test (Day 11's).
KINDS = {
    "random": (QK_SCALE, 1.0),
    "equal": (0.0, 1.0),        # q = 0: every score 0, softmax uniform over the keys a row may see
    "large": (10.0, 300.0),     # scores up to ~500: exp overflows fp32 without the max; |v| ~ 300
    "small": (1e-3, 1.0),       # q, k entries ~1e-3: products ~1e-6 (fp16 subnormal range)
}


def params(dt, batch, seq_q, seq_kv, qo_heads=32, kv_heads=8, head_dim=128, causal=False, kind="random",
            fused=False):
    """A case's params: dtype ("fp16", "bf16"), shapes, causal, the magnitudes `kind` (KINDS), fused qkv."""
    return {"dtype": dt, "batch": batch, "seq_q": seq_q, "seq_kv": seq_kv, "qo_heads": qo_heads,
            "kv_heads": kv_heads, "head_dim": head_dim, "causal": causal, "kind": kind, "fused": fused}


def _case(p, note="", perf=False):
    mask = "causal" if p["causal"] else "full"
    label = (f"{p['dtype']} batch {p['batch']}, {p['seq_q']} x {p['seq_kv']} {mask}, heads {p['qo_heads']}/"
             f"{p['kv_heads']}, d {p['head_dim']}{note}")
    return Case(label, p, perf=perf)


def _cases():
    cases = []
    for dt in DTYPES:
        # Tails of the 128-row query tile and the 32-key tile: 1, 2, 3, 127, 128, 129 tokens, with and
        # without the mask (8 query heads on 2 KV heads).
        cases += [_case(params(dt, 1, n, n, 8, 2, causal=c)) for n in (1, 2, 3, 127, 128, 129) for c in (False, True)]
        # seq_q != seq_kv: a chunk of new queries on a longer KV (chunked prefill: the causal mask aligned
        # bottom-right), one query (decode), one key; more queries than keys (causal: the first rows may
        # attend no key at all: o = 0, lse = -inf).
        cases += [_case(params(dt, 2, sq, skv, 8, 2, causal=c))
                  for sq, skv, c in ((1, 1000, True), (1000, 1, False), (129, 1, True), (300, 77, True),
                                     (77, 300, True), (200, 333, False), (63, 4097, True))]
        # Small enough for racecheck (<= 1 MB), with 10 K/V tiles of 32 keys a block through the ring of 2
        # stages: a stage is refilled while the warps may still be reading it.
        cases.append(_case(params(dt, 1, 128, 320, 2, 1, 64), " (10 K/V tiles of 32 keys a block)"))
        # every head_dim and group size (1, 4, 8)
        cases += [_case(params(dt, 2, 257, 257 if qo != 32 else 700, qo, kv, hd, causal=qo != 32))
                  for hd in (64, 128) for qo, kv in ((8, 8), (32, 8), (64, 8))]
        # Llama 3 8B (32 query heads on 8 KV heads, head_dim 128): a prompt of 2048 tokens; 1000 new tokens
        # appended to 3096 cached ones; q, k, v as slices of one fused qkv projection.
        cases += [_case(params(dt, 2, 2048, 2048, causal=True), " (Llama 3 8B)"),
                  _case(params(dt, 1, 1000, 4096, causal=True), " (Llama 3 8B, chunked prefill)"),
                  _case(params(dt, 3, 999, 999, causal=True, fused=True), " (Llama 3 8B, fused qkv: strided)")]
        # magnitudes: all-equal scores, very large and very small entries
        for kind in ("equal", "large", "small"):
            cases += [_case(params(dt, 2, 513, 513, causal=True, kind=kind), f", {kind} scores"),
                      _case(params(dt, 1, 300, 3000, kind=kind), f", {kind} scores")]
    # Timed: 16384 tokens per call at Llama 3 8B's heads, as 8 prompts of 2048 and as one of 16384.
    cases += [_case(params(dt, b, n, n, causal=c), " (Llama 3 8B)", perf=True)
              for dt, b, n, c in (("bf16", 8, 2048, True), ("fp16", 8, 2048, False), ("bf16", 1, 16384, False),
                                  ("fp16", 1, 16384, True))]
    return cases


def make_inputs(p, gen, device="cuda"):
    """q, k and v for a case's params (`params`), with its KINDS magnitudes; if fused, views into one qkv buffer."""
    import torch

    dt = torch_dtype(p["dtype"])
    qk, vs = KINDS[p["kind"]]
    b, sq, skv, qo, kv, hd = p["batch"], p["seq_q"], p["seq_kv"], p["qo_heads"], p["kv_heads"], p["head_dim"]
    q = torch.randn(b, sq, qo, hd, generator=gen, device=device) * qk
    k = torch.randn(b, skv, kv, hd, generator=gen, device=device) * (qk if p["kind"] != "equal" else 1.0)
    v = torch.randn(b, skv, kv, hd, generator=gen, device=device) * vs
    if not p["fused"]:
        return {"q": q.to(dt), "k": k.to(dt), "v": v.to(dt)}
    # One [batch, seq, (qo + 2 kv) * head_dim] buffer, as a fused qkv projection of the same tokens writes it
    # (so seq_q = seq_kv); q, k, v are views into it, token stride (qo + 2 kv) * head_dim.
    qkv = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2)], dim=2).to(dt)
    return {"q": qkv[..., :qo * hd].unflatten(2, (qo, hd)), "k": qkv[..., qo * hd:(qo + kv) * hd].unflatten(2, (kv, hd)),
            "v": qkv[..., (qo + kv) * hd:].unflatten(2, (kv, hd))}


def sm_scale(p) -> float:
    return 1.0 / math.sqrt(p["head_dim"])


def make_outputs(p, inputs):
    """o [batch, seq_q, qo_heads, head_dim] and lse [batch, seq_q, qo_heads] (fp32), uninitialized, for
    the call to write."""
    import torch

    dev = inputs["q"].device
    return {"o": torch.empty(p["batch"], p["seq_q"], p["qo_heads"], p["head_dim"], dtype=torch_dtype(p["dtype"]),
                             device=dev),
            "lse": torch.empty(p["batch"], p["seq_q"], p["qo_heads"], dtype=torch.float32, device=dev)}


def _call(mod, p, inputs, outputs):
    q, k = inputs["q"], inputs["k"]
    getattr(mod, f"flash_attention_{p['dtype']}")(
        outputs["o"], outputs["lse"], q, k, inputs["v"], p["batch"], p["seq_q"], p["seq_kv"], p["qo_heads"],
        p["kv_heads"], p["head_dim"], q.stride(1), k.stride(1), p["causal"], sm_scale(p))


def allowed_keys(p, device):
    """[seq_q, seq_kv] bool: may query i attend key j? All, or (causal) j <= i + seq_kv - seq_q."""
    import torch

    i = torch.arange(p["seq_q"], device=device)[:, None]
    j = torch.arange(p["seq_kv"], device=device)[None, :]
    if not p["causal"]:
        return torch.ones(p["seq_q"], p["seq_kv"], dtype=torch.bool, device=device)
    return j <= i + (p["seq_kv"] - p["seq_q"])


def reference(p, inputs, dtype=None):
    """o and lse in fp64 (fp32 for the large cases) from the same fp16/bf16 inputs, per request and in
    chunks of query rows (the timed cases' full score matrix would not fit in memory). A row with no key
    it may attend: o = 0, lse = -inf."""
    import torch

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    b, sq, skv, qo, kv, hd = p["batch"], p["seq_q"], p["seq_kv"], p["qo_heads"], p["kv_heads"], p["head_dim"]
    if dtype is None:
        dtype = torch.float64 if b * qo * sq * skv <= 2 ** 27 else torch.float32
    group = qo // kv
    allowed = allowed_keys(p, q.device)
    o = torch.zeros(b, sq, qo, hd, dtype=dtype, device=q.device)
    lse = torch.full((b, sq, qo), -math.inf, dtype=dtype, device=q.device)
    rows = max(1, 2 ** 27 // max(1, qo * skv))  # ~1 GB of scores per chunk at most
    for bi in range(b):
        kb, vb = k[bi].to(dtype), v[bi].to(dtype)  # (skv, kv, hd)
        for i0 in range(0, sq, rows):
            i1 = min(sq, i0 + rows)
            qb = q[bi, i0:i1].to(dtype).reshape(i1 - i0, kv, group, hd)     # head kv * group + g reads KV head kv
            s = torch.einsum("ihgd,jhd->hgij", qb, kb) * sm_scale(p)     # (kv, group, rows, skv)
            s.masked_fill_(~allowed[i0:i1], -math.inf)
            m = torch.logsumexp(s, dim=-1)                               # (kv, group, rows); -inf: no key
            w = torch.exp(s - torch.where(torch.isinf(m), 0.0, m)[..., None])  # softmax; 0 for a row without keys
            o[bi, i0:i1] = torch.einsum("hgij,jhd->ihgd", w, vb).reshape(i1 - i0, qo, hd)
            lse[bi, i0:i1] = m.permute(2, 0, 1).reshape(i1 - i0, qo)
    return {"o": o, "lse": lse}


def _tolerance(p):
    """attention_tolerance (grader/spec.py) over seq_kv keys, with this case's |v| scale and largest score."""
    return attention_tolerance(p["dtype"], p["seq_kv"], KINDS[p["kind"]][1], 1e3 if p["kind"] == "large" else 64.0,
                               "keys")


def attended_pairs(p) -> int:
    """(query, key) pairs the mask lets through, per request and query head: seq_q seq_kv, or (causal)
    sum over rows i of min(seq_kv, max(0, i + 1 + seq_kv - seq_q))."""
    sq, skv = p["seq_q"], p["seq_kv"]
    if not p["causal"]:
        return sq * skv
    off = skv - sq
    first = max(0, -off)               # rows before this one see no key
    lo, hi = first + off + 1, skv      # row `first` sees lo keys, each next row one more, the last row all skv
    return (lo + hi) * (hi - lo + 1) // 2 if hi >= lo else 0


def flops(p):
    """2 flops per multiply-add, two products (q.k and p.v) of head_dim per attended pair."""
    return 4 * p["batch"] * p["qo_heads"] * attended_pairs(p) * p["head_dim"]


def bytes_moved(p):
    """The fewest bytes a call moves: q, k and v read once, o and lse written once."""
    item = 2
    b, hd = p["batch"], p["head_dim"]
    return (item * b * hd * (2 * p["seq_q"] * p["qo_heads"] + 2 * p["seq_kv"] * p["kv_heads"])
            + 4 * b * p["seq_q"] * p["qo_heads"])


def _sdpa(p, inputs, outputs):
    # [batch, seq, heads, d] viewed as SDPA's [batch, heads, seq, d] (no copy); the timed cases have
    # seq_q = seq_kv, where SDPA's top-left causal mask is the same as the bottom-right one.
    import torch.nn.functional as F

    q, k, v = (inputs[n].transpose(1, 2) for n in ("q", "k", "v"))
    F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"], scale=sm_scale(p), enable_gqa=True)


EXERCISES = [
    Exercise(
        id="day12.flash_attention",
        title="FlashAttention-2 forward: prefill attention with causal masking, GQA and the lse",
        summary="o, lse = softmax(sm_scale q k^T) v for q [batch, seq_q, qo_heads, d] on k, v [batch, seq_kv, "
                "kv_heads, d] (query head qh reads KV head qh / group), fp16/bf16 in, fp32 math, d 64 or 128, "
                "any lengths from 1; causal masks aligned bottom-right (query i sees keys j <= i + seq_kv - "
                "seq_q; a query with no key: o = 0, lse = -inf); lse in natural log; q, k, v may be strided "
                "slices of one fused qkv. Q fragments by ldmatrix, K/V tiles through a cp.async pipeline into swizzled "
                "shared memory, mma.sync + ldmatrix, online softmax, masked tiles skipped. Timed against SDPA's "
                "FLASH backend in TFLOP/s.",
        entry_points=[
            "cudaError_t flash_attention_fp16(__half* o, float* lse, const __half* q, const __half* k, "
            "const __half* v, int64_t batch, int64_t seq_q, int64_t seq_kv, int64_t qo_heads, int64_t kv_heads, "
            "int64_t head_dim, int64_t q_stride, int64_t kv_stride, bool causal, float sm_scale, "
            "cudaStream_t stream)",
            "cudaError_t flash_attention_bf16(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q, "
            "const __nv_bfloat16* k, const __nv_bfloat16* v, int64_t batch, int64_t seq_q, int64_t seq_kv, "
            "int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t q_stride, int64_t kv_stride, "
            "bool causal, float sm_scale, cudaStream_t stream)",
        ],
        cases=_cases(),
        make_inputs=make_inputs,
        make_outputs=make_outputs,
        call=_call,
        reference=reference,
        tolerance=_tolerance,
        target=compute_bound(flops=flops, bytes_moved=bytes_moved, baseline=sdpa_flash_baseline(_sdpa), ratio=0.90,
                             dtype=lambda p: p["dtype"]),
        target_note="TFLOP/s counts only the (query, key) pairs the mask lets through. On an H100, SDPA's FLASH "
                    "backend (FlashAttention-2) ran at ~358 / 311 TFLOP/s non-causal / causal at 8 x 2048 "
                    "(reports/gpu-notebooks-day12.md) and FlashInfer's FA2 template at 353-395 "
                    "(reports/gpu-notebooks.md); mma.sync itself tops out near 627-650 (reports/mma-rate.log)",
        required_sass={
            "HMMA.16816.F32": "S = Q K^T and O += P V on the tensor cores (mma.sync m16n8k16, fp32 accumulators)",
            "LDSM": "K and V fragments loaded with ldmatrix (V with .trans)",
            "LDGSTS": "K/V tiles copied global -> shared asynchronously (cp.async, course::cp_async_zfill)",
            "DEPBAR": "a wait for an earlier group of copies (cp.async.wait_group): a pipeline",
        },
        notebook="notebooks/day12_prefill_attention.ipynb",
    ),
]
