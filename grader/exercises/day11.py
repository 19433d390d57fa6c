"""Day 11 exercise: batched decode attention over a paged KV cache (GQA, split-KV).

- day11.batch_decode  o, lse = attention of one query token per request over its paged K/V

The page table is FlashInfer's (include/flashinfer/page.cuh): kv_indptr [batch + 1], kv_indices (page
numbers in token order), kv_last_page_len [batch]; the cache is [num_pages, 2, page_size, kv_heads,
head_dim] (K at [:, 0], V at [:, 1]). lse is the log-sum-exp of the scaled scores in NATURAL log, as
torch.logsumexp and FlashAttention return it. FlashInfer keeps its scores in base 2 (s * sm_scale *
log2(e), exp2) and its decode kernels return lse = m + log2(d) in base 2 (flashinfer-ai/flashinfer
issue 2113; later versions add return_lse_base_on_e for some backends): multiply theirs by ln 2 to
compare.
"""
from __future__ import annotations

import math

from ..spec import Baseline, Case, Exercise, attention_tolerance, memory_bound, torch_dtype

DTYPES = ("fp16", "bf16")
MAX_SPLITS = 1024  # partial states per query head the workspace holds (solutions/day11/batch_decode.cu)


def workspace_floats(qo_heads: int, head_dim: int) -> int:
    """The scratch a call needs: MAX_SPLITS partial states (o: head_dim floats, lse: 1) per query head.
    A kernel splits a request only while batch * splits <= MAX_SPLITS, so this never depends on batch."""
    return MAX_SPLITS * qo_heads * (head_dim + 1)


def decode_params(dt, lens, qo_heads=32, kv_heads=8, head_dim=128, page_size=16, kind="random", pool_pages=0):
    """pool_pages: a cache of that many pages, the requests' pages the last ones (else a few more than they use)."""
    return {"dtype": dt, "lens": tuple(lens), "batch": len(lens), "qo_heads": qo_heads, "kv_heads": kv_heads,
            "head_dim": head_dim, "page_size": page_size, "kind": kind, "max_len": max(lens), "pool_pages": pool_pages}


# A cache past 2^31 elements, its requests' pages the last ones: every K and V row starts past 2^31
# elements (4 GiB of bf16), where an offset computed in 32 bits wraps. Pages of 16 slots x 8 KV heads x
# head_dim 128 (x 2 for K and V): 2^15 elements; the first 2^16 pages end at 2^31.
PAST_32_BIT_PAGES = (1 << 16) + 64
PAST_32_BIT_GIB = 20  # the case's cache (4.3 GB), its copy (unmodified-input check) and the rest, with room


# Query and key entries scaled so that the scores q.k / sqrt(d) have a standard deviation of about 3:
# attention as peaked as in real models, and outputs far from zero (with std-1 scores over 32768 tokens
# the output is an average of thousands of values, ~0.01, where any tolerance passes anything).
QK_SCALE = 3.0 ** 0.5
# kind -> (scale of q and k entries, scale of v entries): the magnitudes the cases test.
KINDS = {
    "random": (QK_SCALE, 1.0),
    "equal": (0.0, 1.0),        # q = 0: every score 0, softmax uniform, lse = ln(len) exactly
    "large": (10.0, 300.0),     # scores up to ~500 (exp overflows fp32 without the max); |v| ~ 300
    "small": (1e-3, 1.0),       # q, k entries ~1e-3: products ~1e-6 (fp16 subnormal range), scores ~1e-6
}
GARBAGE = 1000.0  # unused pages and slots past last_page_len hold stale data of this size


def _cases():
    cases = []
    for dt in DTYPES:
        # tails of the batch and of the length: 1, 2, 3 tokens; 127, 128, 129 (pages of 16: a last page
        # of 15, 16 and 1 token; tiles of 64: two full, one past); ragged batches of 127-129 requests.
        cases += [Case(f"{dt} batch 1, len {n}", decode_params(dt, [n])) for n in (1, 2, 3, 127, 128, 129)]
        cases += [Case(f"{dt} batch {b} ragged 1..300", decode_params(dt, [1 + (37 * i) % 300 for i in range(b)]))
                  for b in (2, 3, 127, 128, 129)]
        # every head_dim, group size and page size (page size 1: every token its own page)
        for hd in (64, 128, 256):
            for qo, kv in ((8, 8), (32, 8), (64, 8)):
                for ps in (1, 16):
                    cases.append(Case(f"{dt} head_dim {hd}, group {qo // kv}, page {ps}, lens 1/100/777",
                                      decode_params(dt, [1, 100, 777], qo, kv, hd, ps)))
        # A page size that does not divide the 64-token tile: a token's slot (or page) taken from its row
        # in the tile instead of its index in the request, or a shift for the division, is wrong there.
        cases.append(Case(f"{dt} page 24 (not a divisor of the 64-token tile), lens 1/100/777",
                          decode_params(dt, [1, 100, 777], 32, 8, 128, 24)))
        # Group 16 (Llama 3.1 405B: 128 query heads on 8 KV heads): every row of the mma tile is a query
        # head, and large scores show a state of rows 8..15 that does not start at m = -inf.
        cases.append(Case(f"{dt} group 16 (128 / 8 heads), large scores, ragged 1..5000",
                          decode_params(dt, [1, 5000, 129, 16], 128, 8, kind="large")))
        # Llama 3 8B (32 / 8 heads) and 70B (64 / 8 heads), head_dim 128, page 16: ragged 1 .. 32768 in
        # one batch; one request of 32768 (split-KV fills the GPU); a batch of length-1 requests.
        cases += [Case(f"{dt} Llama 3 8B ragged 1..32768", decode_params(dt, [1, 17, 500, 4096, 32768, 3, 1000, 16])),
                  Case(f"{dt} Llama 3 70B ragged 1..32768", decode_params(dt, [32768, 1, 2049, 7, 16, 255], 64)),
                  Case(f"{dt} Llama 3 8B batch 1 x 32768", decode_params(dt, [32768])),
                  Case(f"{dt} Llama 3 70B batch 4 x 8191", decode_params(dt, [8191] * 4, 64)),
                  Case(f"{dt} Llama 3 8B 64 requests of length 1", decode_params(dt, [1] * 64))]
        # Small enough for racecheck in a learner's check (<= config.CHECK_SANITIZE_MAX_BYTES), with 3 tiles
        # in every block (a split holds whole tiles, at least 4: a request of 3 tiles stays in one block),
        # so a stage is refilled while warps may still read it; the other small cases' blocks get at most
        # 2 tiles, which 2 stages hold without a refill: a missing barrier hides.
        cases.append(Case(f"{dt} 5 requests of 192, group 8 on 1 KV head, head_dim 64 (3 tiles a block)",
                          decode_params(dt, [192] * 5, 8, 1, 64)))
        if dt == "bf16":  # (one dtype: the offsets are the same)
            cases.append(Case("bf16 pages past 4 GiB of cache (64-bit offsets), lens 1/100/777",
                              decode_params(dt, [1, 100, 777], pool_pages=PAST_32_BIT_PAGES), gpu_gib=PAST_32_BIT_GIB))
        # magnitudes: all-equal scores, very large and very small entries
        for kind in ("equal", "large", "small"):
            cases += [Case(f"{dt} {kind} scores, ragged 1..5000", decode_params(dt, [1, 5000, 129, 16], kind=kind)),
                      Case(f"{dt} {kind} scores, batch 1 x 20000 (split)", decode_params(dt, [20000], kind=kind))]
    cases += [Case(f"{dt} Llama 3 8B batch 1 x 32768 (past L2 after the flush)", decode_params(dt, [32768]), perf=True)
              for dt in DTYPES]
    cases += [Case("bf16 Llama 3 8B batch 64 x 4096", decode_params("bf16", [4096] * 64), perf=True),
              Case("bf16 Llama 3 8B batch 256 x 1024", decode_params("bf16", [1024] * 256), perf=True)]
    return cases


def page_table(lens, page_size, gen, device, pool_pages=0):
    """FlashInfer's page table for requests of `lens` tokens, pages scattered in a random order over a
    cache with a few unused pages: (kv_indptr, kv_indices, kv_last_page_len, num_pages). With
    `pool_pages`, the cache has that many and the requests' pages are scattered over its last ones."""
    import torch

    counts = [(n + page_size - 1) // page_size for n in lens]
    used = sum(counts)
    num_pages = max(pool_pages, used + 3)
    order = (num_pages - used - 3 + torch.randperm(used + 3, generator=gen, device=device)[:used]).to(torch.int32)
    indptr = torch.tensor([0] + list(_cumsum(counts)), dtype=torch.int32, device=device)
    last = torch.tensor([n - (c - 1) * page_size for n, c in zip(lens, counts)], dtype=torch.int32, device=device)
    return indptr, order, last, num_pages


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total


def decode_inputs(p, gen, device="cuda"):
    import torch

    dt = torch_dtype(p["dtype"])
    qk, vs = KINDS[p["kind"]]
    hd, kvh, ps = p["head_dim"], p["kv_heads"], p["page_size"]
    indptr, indices, last, num_pages = page_table(p["lens"], ps, gen, device, p.get("pool_pages", 0))
    # Every slot starts as stale data (GARBAGE; in a pool past 2^31 elements, all of it that value), then
    # each request's tokens are written in place.
    if p.get("pool_pages"):
        cache = torch.full((num_pages, 2, ps, kvh, hd), GARBAGE, dtype=dt, device=device)
    else:
        cache = (torch.randn(num_pages, 2, ps, kvh, hd, generator=gen, device=device) * GARBAGE).to(dt)
    tokens = sum(p["lens"])
    k = torch.randn(tokens, kvh, hd, generator=gen, device=device) * qk
    v = torch.randn(tokens, kvh, hd, generator=gen, device=device) * vs
    if p["kind"] == "equal":
        k = torch.randn(tokens, kvh, hd, generator=gen, device=device)  # any keys: q = 0 makes scores 0
    page, slot = token_slots(p["lens"], ps, indptr, indices)
    cache[page, 0, slot] = k.to(dt)
    cache[page, 1, slot] = v.to(dt)
    q = (torch.randn(p["batch"], p["qo_heads"], hd, generator=gen, device=device) * qk).to(dt)
    return {"q": q, "kv_cache": cache, "kv_indptr": indptr, "kv_indices": indices, "kv_last_page_len": last}


def token_slots(lens, page_size, indptr, indices):
    """(page, slot) of every token of every request, in order: a [sum(lens)] pair of index tensors."""
    import torch

    device = indices.device
    pages, slots = [], []
    for b, n in enumerate(lens):
        t = torch.arange(n, device=device)
        pages.append(indices[int(indptr[b]) + t // page_size].long())
        slots.append(t % page_size)
    return torch.cat(pages), torch.cat(slots)


def sm_scale(p) -> float:
    return 1.0 / math.sqrt(p["head_dim"])


def _outputs(p, inputs):
    import torch

    dev = inputs["q"].device
    return {"o": torch.empty(p["batch"], p["qo_heads"], p["head_dim"], dtype=torch_dtype(p["dtype"]), device=dev),
            "lse": torch.empty(p["batch"], p["qo_heads"], dtype=torch.float32, device=dev),
            # scratch, not compared (poisoned with NaN before each call: read only what you wrote)
            "workspace": torch.empty(workspace_floats(p["qo_heads"], p["head_dim"]), dtype=torch.float32,
                                     device=dev)}


def _call(mod, p, inputs, outputs):
    getattr(mod, f"batch_decode_{p['dtype']}")(
        outputs["o"], outputs["lse"], inputs["q"], inputs["kv_cache"], inputs["kv_indptr"], inputs["kv_indices"],
        inputs["kv_last_page_len"], outputs["workspace"], outputs["workspace"].numel(), p["batch"], p["qo_heads"],
        p["kv_heads"], p["head_dim"], p["page_size"], sm_scale(p))


def reference(p, inputs, dtype=None):
    """o and lse in fp64 (fp32 for the large timed cases) from the same fp16/bf16 inputs, request by
    request: gather the request's pages, softmax over its tokens, lse in natural log."""
    import torch

    if dtype is None:
        dtype = torch.float64 if sum(p["lens"]) * p["kv_heads"] * p["head_dim"] <= 64 * 2 ** 20 else torch.float32
    q, cache = inputs["q"], inputs["kv_cache"]
    indptr, indices = inputs["kv_indptr"].tolist(), inputs["kv_indices"]
    last = inputs["kv_last_page_len"].tolist()
    ps, group, hd = p["page_size"], p["qo_heads"] // p["kv_heads"], p["head_dim"]
    o = torch.empty(p["batch"], p["qo_heads"], hd, dtype=dtype, device=q.device)
    lse = torch.empty(p["batch"], p["qo_heads"], dtype=dtype, device=q.device)
    for b in range(p["batch"]):
        pages = indices[indptr[b]:indptr[b + 1]].long()
        n = (len(pages) - 1) * ps + last[b]
        kv = cache[pages].to(dtype)                          # (pages, 2, ps, kv_heads, hd)
        k = kv[:, 0].reshape(-1, p["kv_heads"], hd)[:n]      # (n, kv_heads, hd)
        v = kv[:, 1].reshape(-1, p["kv_heads"], hd)[:n]
        qb = q[b].to(dtype).view(p["kv_heads"], group, hd)   # query head kv * group + g reads KV head kv
        s = torch.einsum("hgd,nhd->hgn", qb, k) * sm_scale(p)
        lse[b] = torch.logsumexp(s, dim=-1).reshape(-1)
        o[b] = torch.einsum("hgn,nhd->hgd", torch.softmax(s, dim=-1), v).reshape(-1, hd)
    return {"o": o, "lse": lse}


def _tolerance(p):
    """attention_tolerance (grader/spec.py) over max_len tokens, with this case's |v| scale and largest score."""
    return attention_tolerance(p["dtype"], p["max_len"], KINDS[p["kind"]][1], 1e3 if p["kind"] == "large" else 64.0,
                               "tokens")


def kv_bytes(p):
    """The fewest bytes a call moves: every token's K and V of every KV head once, q in, o and lse out."""
    item = 2
    tokens = sum(p["lens"])
    return (2 * tokens * p["kv_heads"] * p["head_dim"] * item + 2 * p["batch"] * p["qo_heads"] * p["head_dim"] * item
            + 4 * p["batch"] * p["qo_heads"])


class _Gathered:
    """The second baseline's contiguous K and V ([batch, kv_heads, len, head_dim]), gathered from the
    pages once, on its first (untimed warm-up) call; every request of a timed case has the same length."""

    def __init__(self):
        self.kv = None


def _sdpa(p, inputs, outputs):
    import torch.nn.functional as F

    holder = inputs.setdefault("_gathered", _Gathered())
    if holder.kv is None:
        n = p["lens"][0]
        pages = inputs["kv_indices"].long().view(p["batch"], -1)         # equal lengths: a rectangle
        kv = inputs["kv_cache"][pages]                                    # (batch, pages, 2, ps, kvh, hd)
        kv = kv.transpose(2, 3).reshape(p["batch"], -1, 2, p["kv_heads"], p["head_dim"])[:, :n]
        holder.kv = (kv[:, :, 0].transpose(1, 2).contiguous(), kv[:, :, 1].transpose(1, 2).contiguous())
    k, v = holder.kv
    out = F.scaled_dot_product_attention(inputs["q"].unsqueeze(2), k, v, scale=sm_scale(p), enable_gqa=True)
    outputs["o"].copy_(out.squeeze(2))


SDPA_GATHERED = Baseline("sdpa", "torch SDPA on the gathered contiguous KV (unpaged)", _sdpa)


EXERCISES = [
    Exercise(
        id="day11.batch_decode",
        title="Batched decode attention over a paged KV cache",
        summary="o, lse = attention of one query token per request over its K/V in a paged cache (FlashInfer's "
                "kv_indptr / kv_indices / kv_last_page_len), GQA (query head qh reads KV head qh / group), "
                "fp16/bf16 in, fp32 math, lse in natural log; head_dim 64/128/256, groups up to 16, any page "
                "size, ragged lengths 1..32768 in one batch. Split-KV into the given workspace (>= 1024 x qo_heads x "
                "(head_dim + 1) floats) when the batch cannot fill the GPU; no allocation.",
        entry_points=[
            "cudaError_t batch_decode_fp16(__half* o, float* lse, const __half* q, const __half* kv_cache, "
            "const int32_t* kv_indptr, const int32_t* kv_indices, const int32_t* kv_last_page_len, "
            "float* workspace, int64_t workspace_floats, int64_t batch, int64_t qo_heads, int64_t kv_heads, "
            "int64_t head_dim, int64_t page_size, float sm_scale, cudaStream_t stream)",
            "cudaError_t batch_decode_bf16(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q, "
            "const __nv_bfloat16* kv_cache, const int32_t* kv_indptr, const int32_t* kv_indices, "
            "const int32_t* kv_last_page_len, float* workspace, int64_t workspace_floats, int64_t batch, "
            "int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t page_size, float sm_scale, "
            "cudaStream_t stream)",
        ],
        cases=_cases(),
        make_inputs=decode_inputs,
        make_outputs=_outputs,
        call=_call,
        reference=reference,
        tolerance=_tolerance,
        target=memory_bound(kv_bytes, 0.72, also=(SDPA_GATHERED,), traffic="read"),
        target_note="batch 1 is one wave of split blocks and a merge in ~50 us: on the H200, torch SDPA (cuDNN) "
                    "on the same KV gathered into contiguous tensors reached 0.75-0.76x of the read ceiling there, "
                    "as the reference did (0.74-0.76x), and 1.00x at batch 64 and 256, where the reference "
                    "reached 0.85-0.87x; a cp.async ring that only reads batch 1's bytes, nothing computed, "
                    "0.90-0.91x (docs/decisions.md). The sdpa ratio reported beside yours is SDPA on the same "
                    "KV gathered once, before timing",
        # batch 1 x 32768 is 134 MB of K and V, 2.2x the L2: every byte is read once after the grader's
        # L2 flush, so none of it can come from the cache.
        min_timed_bytes=120e6,
        required_sass={
            "LDGSTS": "K/V tiles copied global -> shared asynchronously (cp.async, course::cp_async_zfill)",
            "DEPBAR": "a wait for an earlier group of copies (cp.async.wait_group): a pipeline",
            "HMMA.16816.F32": "the group's query heads on the tensor cores (mma.sync m16n8k16, fp32 accumulators)",
            "LDSM": "K and V fragments loaded with ldmatrix",
        },
        notebook="notebooks/day11_decode_attention.ipynb",
    ),
]
