"""Day 8 exercise: top-p (nucleus) sampling without a sort, graded statistically.

The nucleus of a row p (fp32, sums to 1) for a given top_p in (0, 1]: every token i with

    sum_{j : p_j > p_i} p_j  <  top_p,

the smallest set of most probable tokens whose mass reaches top_p, together with every token
tied with its least probable member. Ties: all tokens of the boundary probability are in, none
is cut by its index (a sort that keeps the first of several equal probabilities draws from
another distribution and fails); the set does not depend on how the vocabulary is ordered, and it
is what FlashInfer's rejection sampler computes. top_p >= 1 keeps every token of p > 0; a top_p
below the largest probability keeps only the most probable token(s): argmax.

Grading (grader/check/stats.py): each case repeats a few distinct rows over many rows, one draw
per row; no draw may fall outside the nucleus (a hard check: a token of the row outside it, or of
probability 0), and the draws of each distinct row must follow its nucleus renormalized,
p_i / (mass of the nucleus), by Pearson's chi-square test. A right sampler fails a case with
probability at most ALPHA = 1e-6 (Bonferroni over the case's distinct rows; Pearson's
approximation with bins of >= 5 expected draws): the 32 cases x 3 seeds of a check fail a right
sampler with probability about 1e-4, and the self-test's 20 seeds about 6e-4. The samplers that learners get wrong (top_p ignored, the
boundary token dropped, no renormalization, one random number for all rows, argmax always) give
p-values far below it or draw outside the nucleus.

Rounding cannot move the boundary: every case's top_p is the midpoint of the step that the
cumulative mass takes at the boundary (a tie group of mass >= MIN_STEP), so a kernel's fp32 sums
(error ~1e-6 for 256000 terms) decide as exact arithmetic would.
"""
from __future__ import annotations

from .. import config
from ..spec import Baseline, Case, Exercise, Tolerance, latency, offset_view

ALPHA = 1e-6          # false-failure rate of a right sampler, per case
MIN_STEP = 2e-4       # the boundary's tie group holds at least this mass: top_p is >= 1e-4 from any
                      # "mass above a token", 100x what fp32 sums of 256000 probabilities can err by
OFFSET_STEP = 1 << 20  # untimed cases call twice: offset, then offset + OFFSET_STEP (the next step)
TWICE_MAX_VOCAB = 16384  # ... those up to this vocabulary (longer rows: one call, to keep a check short)

# Row families, each built so that its boundary is a tie group of mass >= MIN_STEP near the target:
#   llm     a head of up to 50 tokens holding 97% of the mass (probabilities from exp(N(0, 1)),
#           within e^4 of each other) and a long flat tail holding 3%: a language model's row
#   peaked  as llm, one head token holding 80% of the head's mass
#   zeros   as llm with 90% of the tail (a third of the tokens of a short row) exactly 0
#   tiers   every token at one of 8 levels (1..8, renormalized): flat rows full of exact ties
#   ties    every token at one of 3 levels: few, large tie groups, the boundary inside one
FAMILIES = ("llm", "peaked", "zeros", "tiers", "ties")
HEAD = 50

# (vocab, family, target top_p, distinct rows, draws of each). Target 0: the most probable
# group (argmax); 1: exactly 1.0, every token of p > 0; otherwise the midpoint of the boundary
# step nearest the target. Short rows get many draws (the chi-square's power), long rows fewer
# (memory and time: the reference and the test handle 8 B x vocab per draw).
SHAPES = [
    (1, "llm", 0.9, 1, 64),
    (2, "llm", 0.5, 2, 2000), (2, "llm", 1.0, 2, 2000),
    (3, "ties", 0.5, 2, 2000), (3, "zeros", 0.9, 2, 2000),
    (31, "llm", 0.9, 3, 3000), (31, "ties", 0.6, 3, 3000), (31, "tiers", 0.3, 2, 3000),
    (127, "llm", 0.9, 2, 2000), (128, "peaked", 0.9, 2, 2000), (129, "llm", 0.7, 2, 2000),
    (1000, "llm", 0.5, 2, 2000), (1000, "llm", 0.9, 2, 2000), (1000, "llm", 0.95, 2, 2000),
    (1000, "llm", 1.0, 2, 2000), (1000, "peaked", 0.0, 2, 2000), (1000, "llm", 0.0, 2, 2000),
    (1000, "zeros", 0.9, 2, 2000), (1000, "tiers", 0.9, 2, 4000), (1000, "ties", 0.4, 2, 2000),
    (4097, "llm", 0.95, 2, 1000), (16384, "zeros", 0.8, 2, 500),
    (32000, "llm", 0.9, 2, 250), (32000, "tiers", 0.6, 1, 250),
    (128256, "llm", 0.9, 2, 64), (128256, "peaked", 0.0, 1, 32),
    (151936, "zeros", 0.9, 1, 64), (256000, "tiers", 0.9, 1, 64), (256000, "llm", 1.0, 1, 32),
]
MISALIGNED = [(1000, "llm", 0.9, 2, 2000), (128256, "zeros", 0.9, 1, 32)]  # base pointer 1 float off
PERF = (128, 128256, 0.9)  # batch x vocab at top_p ~0.9: 128 distinct llm rows, one draw each


def _params(vocab, family, target, dists, each, offset=0, twice=None):
    twice = vocab <= TWICE_MAX_VOCAB if twice is None else twice
    return {"vocab": vocab, "family": family, "target": target, "distributions": dists, "rows_each": each,
            "offset": offset, "twice": twice}


def _cases():
    cases = [Case(f"vocab {v} {fam} top_p~{t:g} ({d} rows x {n} draws)", _params(v, fam, t, d, n))
             for v, fam, t, d, n in SHAPES]
    cases += [Case(f"vocab {v} {fam} top_p~{t:g} misaligned by 1", _params(v, fam, t, d, n, offset=1))
              for v, fam, t, d, n in MISALIGNED]
    batch, vocab, target = PERF
    cases.append(Case(f"{batch} x {vocab} llm top_p~{target:g}", _params(vocab, "llm", target, batch, 1, twice=False),
                      perf=True))
    return cases


# --------------------------------------------------------------------------------- rows
def family_row(family: str, vocab: int, gen, device="cuda"):
    """One row of a family (fp64, sums to 1), its tokens in random order."""
    import torch

    def rand(n):
        return torch.rand(n, generator=gen, device=device, dtype=torch.float64)

    if family in ("tiers", "ties"):
        levels = 8 if family == "tiers" else 3
        w = torch.randint(1, levels + 1, (vocab,), generator=gen, device=device).double()
        return w / w.sum()
    head = min(vocab, HEAD)
    z = torch.randn(head, generator=gen, device=device, dtype=torch.float64).clamp(-2.0, 2.0)
    w = torch.exp(z)
    if family == "peaked" and head > 1:
        w[0] = 4.0 * w[1:].sum()  # 80% of the head's mass on one token
    tail = vocab - head
    row = torch.empty(vocab, device=device, dtype=torch.float64)
    row[:head] = w / w.sum() * (0.97 if tail else 1.0)
    if tail:
        t = 0.5 + 0.5 * rand(tail)
        if family == "zeros":
            t = t.masked_fill(rand(tail) < 0.9, 0.0)
            t[0] = 1.0  # the tail keeps a token
        row[head:] = t / t.sum() * 0.03
    elif family == "zeros" and vocab > 2:
        row = row.masked_fill(rand(vocab) < 1 / 3, 0.0)
        row[0] = row[0].clamp_min(0.1)
        row = row / row.sum()
    return row[torch.randperm(vocab, generator=gen, device=device)]


def groups(row):
    """The row's distinct probabilities, largest first, with the mass above each and of each."""
    import torch

    values, counts = torch.unique(row.double(), sorted=True, return_counts=True)
    values, counts = values.flip(0), counts.flip(0)
    mass = values * counts
    above = torch.cumsum(mass, 0) - mass
    return values, mass, above


def choose_top_p(row32, target: float) -> float:
    """top_p for a row (fp32 values): 1.0 for target 1, else the midpoint of the step (tie group
    of mass >= MIN_STEP, p > 0) nearest the target; target 0 takes the most probable group."""
    if target >= 1.0:
        return 1.0
    values, mass, above = groups(row32)
    keep = (mass >= MIN_STEP) & (values > 0)
    if target <= 0.0:
        g = 0
    else:
        mid = above + mass / 2
        dist = (mid - target).abs().masked_fill(~keep, float("inf"))
        g = int(dist.argmin())
    if not bool(keep[g]):
        raise ValueError("no boundary step of mass >= MIN_STEP near the target (a spec bug)")
    return float(above[g] + mass[g] / 2)


def nucleus(row, top_p: float):
    """The row's nucleus renormalized (fp64): the exact distribution a draw must follow."""
    import torch

    p = row.double()
    if top_p >= 1.0:
        keep = p > 0
    else:
        values, _, above = groups(p)
        # "mass above" of each token: that of its group (groups are sorted descending)
        idx = torch.searchsorted(values.flip(0).contiguous(), p)  # ascending position of p
        above_token = above.flip(0)[idx]
        keep = (above_token < top_p) & (p > 0)
    q = torch.where(keep, p, torch.zeros_like(p))
    return q / q.sum()


# ------------------------------------------------------------------------------- spec parts
def make_inputs(p, gen, device="cuda"):
    """A case's inputs (`p`: a case's params): `probs`, rows of `p["distributions"]` distributions each
    repeated `p["rows_each"]` times, their `top_p`, and the Philox `seed` and `philox_offset`."""
    import torch

    rows32 = []
    for _ in range(p["distributions"]):
        r = family_row(p["family"], p["vocab"], gen, device).float()
        rows32.append(r / r.double().sum().float())  # fp32 values summing to 1 within rounding
    rows32 = torch.stack(rows32)
    # The boundaries are found on the host, after one copy: a GPU shared by several checks makes
    # each of the few small synchronizing calls per row wait its turn.
    tops = [choose_top_p(r, p["target"]) for r in rows32.cpu()]
    each = p["rows_each"]
    probs = rows32.repeat_interleave(each, dim=0).contiguous()
    top_p = torch.tensor(tops, dtype=torch.float32, device=device).repeat_interleave(each).contiguous()
    seed, offset = torch.randint(0, 2**31, (2,), generator=gen, device=device).tolist()
    return {"probs": offset_view(probs, p["offset"]), "top_p": top_p, "seed": seed, "philox_offset": offset}


def _outputs(p, inputs):
    import torch

    rows = inputs["probs"].shape[0]
    return {"tokens": torch.empty(rows * (2 if p["twice"] else 1), dtype=torch.int64, device=inputs["probs"].device)}


def _call(mod, p, inputs, outputs):
    probs, top_p = inputs["probs"], inputs["top_p"]
    rows, vocab = probs.shape
    tokens = outputs["tokens"]
    mod.top_p_sampling(tokens[:rows], probs, top_p, rows, vocab, inputs["seed"], inputs["philox_offset"])
    if p["twice"]:  # the caller's next step: fresh draws, pooled with the first ones by the test
        mod.top_p_sampling(tokens[rows:], probs, top_p, rows, vocab, inputs["seed"],
                           inputs["philox_offset"] + OFFSET_STEP)


def reference(p, inputs):
    """{"tokens": the exact renormalized nucleus of each row}, the distribution the draws must follow."""
    import torch

    probs, top_p = inputs["probs"], inputs["top_p"]
    each = p["rows_each"]
    firsts = probs[::each].cpu()  # one row of each distinct distribution; on the host, as make_inputs
    exact = torch.stack([nucleus(r, float(t)) for r, t in zip(firsts, top_p[::each].tolist())])
    exact = exact.repeat_interleave(each, dim=0)
    return {"tokens": exact.repeat(2, 1) if p["twice"] else exact}


def sort_based_top_p(probs, top_p):
    """torch's usual top-p sampling: sort, cumulative sum, mask the tokens whose mass before them
    already reaches top_p, multinomial over what is left."""
    import torch

    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    sorted_p = sorted_p.masked_fill(before >= top_p[:, None], 0.0)
    pick = torch.multinomial(sorted_p, 1)
    return order.gather(1, pick).squeeze(1)


def _torch_baseline(p, inputs, outputs):
    outputs["tokens"].copy_(sort_based_top_p(inputs["probs"], inputs["top_p"]))


def _tolerance(p):
    rows = p["distributions"] * p["rows_each"]
    # Rows are independent (each its own Philox subsequence), and so are two calls at different offsets:
    # neighbouring rows, and the same row in the two calls, may not repeat each other more than chance.
    return Tolerance.distribution(
        f"draws follow the renormalized nucleus (chi-square per distinct row, false-failure rate <= {ALPHA:g} per "
        f"case); never a token outside the nucleus; ties at the boundary all kept; rows independent" + (
            f"; drawn twice (offset, offset + {OFFSET_STEP}), pooled, the second call's draws independent of the "
            f"first's" if p["twice"] else ""), alpha=ALPHA, pairs=(1, rows) if p["twice"] else (1,))


EXERCISES = [
    Exercise(
        id="day08.top_p_sampling",
        title="Top-p sampling without a sort",
        summary="tokens[r] ~ the nucleus of probs[r, :] (the most probable tokens whose mass reaches top_p[r], "
                "ties at the boundary all kept), renormalized; Philox random numbers from (seed, offset): the "
                "same seed and offset give the same tokens. No sort: a few rounds of draws and pivot sums per "
                "row, a block per row. Vocabularies of 1 to 256000, peaked, flat and zero-filled rows; timed "
                "against torch's sort + cumsum + mask + multinomial for 128 x 128256 at top_p ~0.9.",
        entry_points=["cudaError_t top_p_sampling(int64_t* tokens, const float* probs, const float* top_p, "
                      "int64_t batch, int64_t vocab, int64_t seed, int64_t offset, cudaStream_t stream)"],
        cases=_cases(),
        make_inputs=make_inputs,
        make_outputs=_outputs,
        call=_call,
        reference=reference,
        tolerance=_tolerance,
        target=latency(Baseline("torch", "torch sort + cumsum + mask + multinomial", _torch_baseline),
                       speedup=15.0,
                       bytes_read=lambda p: 4 * p["vocab"] * p["distributions"] * p["rows_each"]),
        target_note="FlashInfer's sort-free top_p_sampling_from_probs measured 26x on the course's H200 "
                    "(90 us vs 2.3 ms for 128 x 128k)",
        repeatable=True,
        call_varies=("philox_offset",),
        # The timed case is the model-sized call (66 MB, past the L2 once the grader flushed it); a
        # sampler reads it one to three times: its speed is in the rounds, not in a bandwidth.
        min_timed_bytes=4 * PERF[0] * PERF[1],
        max_registers=128,
        device_globals_limit=config.DEVICE_GLOBALS_WITH_CURAND,
        notebook="notebooks/day08_cub_and_sampling.ipynb",
    ),
]
