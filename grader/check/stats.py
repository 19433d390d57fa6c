"""Grading a sampler: are its draws the distribution they should be?

A sampler's output is random, so it cannot be compared element by element. Instead:
- hard checks, which a right sampler never fails: every draw is a valid index whose exact
  probability is above zero (never a token outside the nucleus);
- a statistical test, which a right sampler fails with a small probability we state: rows
  with the same exact distribution are pooled (a case repeats each distribution over many
  rows, one draw per row), the draws counted per token, and Pearson's chi-square statistic
  compared with its distribution. Tokens expected fewer than 5 times are pooled into one bin,
  so that the chi-square approximation holds. With G distinct distributions in a case, each
  is tested at level alpha / G (Bonferroni): a right sampler fails a case with probability at
  most alpha (1e-4 by default), while a sampler that ignores top-p, draws from the unsorted
  prefix, or is off by one token fails with near certainty at the case sizes the specs use.

The survival function of chi-square is the regularized upper incomplete gamma function,
`torch.special.gammaincc(dof / 2, stat / 2)`: no SciPy needed.
"""
from __future__ import annotations

from .compare import Comparison

MIN_EXPECTED = 5.0  # the usual rule for Pearson's chi-square approximation


def chi_square_p_value(stat: float, dof: int) -> float:
    """P(X >= stat) for X ~ chi-square with `dof` degrees of freedom."""
    import torch

    if dof <= 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def _test_one(counts, probs, n: int):
    """(stat, dof, worst token, its observed and expected count) for one distribution."""
    import torch

    expected = probs * n
    big = expected >= MIN_EXPECTED
    obs = counts[big].double()
    exp = expected[big]
    rest_obs, rest_exp = float(counts[~big].sum()), float(expected[~big].sum())
    if rest_exp > 0:
        obs = torch.cat([obs, obs.new_tensor([rest_obs])])
        exp = torch.cat([exp, exp.new_tensor([rest_exp])])
    terms = (obs - exp) ** 2 / exp
    dof = int(exp.numel()) - 1
    idx = torch.nonzero(big).flatten()
    worst = int(torch.argmax(terms[: idx.numel()])) if idx.numel() else None
    token = int(idx[worst]) if worst is not None else None
    return float(terms.sum()), dof, token, (int(counts[token]), float(expected[token])) if token is not None else None


def compare_distribution(name: str, draws, probs, alpha: float) -> Comparison:
    """`draws`: integer token ids, one per row ([rows] or [rows, 1]); `probs`: [rows, vocab],
    each row the exact distribution its draw must follow."""
    import torch

    draws = draws.detach().reshape(-1).to(torch.int64)
    probs = probs.detach().to(device=draws.device, dtype=torch.float64)
    rows, vocab = probs.shape
    if draws.numel() != rows:
        return Comparison(name, False, rows, rows, 0, float("inf"), [],
                          f"{name}: {draws.numel()} draws for {rows} rows: one token per row is expected")
    outside = (draws < 0) | (draws >= vocab)
    safe = draws.clamp(0, vocab - 1)
    p_drawn = probs.gather(1, safe[:, None]).squeeze(1)
    bad = outside | (p_drawn <= 0)
    if bool(bad.any()):
        first = torch.nonzero(bad).flatten()[:5].tolist()
        ex = [f"row {r}: drew {int(draws[r])}" + (" (not a token id)" if bool(outside[r]) else
                                                  " (probability 0: outside the support)") for r in first]
        return Comparison(name, False, int(bad.sum()), rows, 0, float("inf"), ex,
                          f"{name}: {int(bad.sum())} of {rows} draws fall outside the support (tokens of "
                          f"probability 0 must never be drawn)")
    uniq, group = torch.unique(probs, dim=0, return_inverse=True)
    level = alpha / uniq.shape[0]
    worst_p, examples, failing = 1.0, [], 0
    for g in range(uniq.shape[0]):
        members = group == g
        n = int(members.sum())
        counts = torch.bincount(draws[members], minlength=vocab)
        stat, dof, token, seen = _test_one(counts, uniq[g], n)
        pv = chi_square_p_value(stat, dof)
        worst_p = min(worst_p, pv)
        if pv < level:
            failing += 1
            if len(examples) < 3:
                support = int((uniq[g] > 0).sum())
                examples.append(f"distribution {g} ({support} tokens with p > 0, {n} draws): chi-square {stat:.1f} "
                                f"on {dof} dof, p = {pv:.2g} < {level:.2g}"
                                + (f"; furthest off: token {token} drawn {seen[0]} times, {seen[1]:.1f} expected"
                                   if token is not None else ""))
    if failing:
        head = (f"{name}: the draws do not follow {failing} of {uniq.shape[0]} distributions (chi-square test "
                f"at {level:.2g} each: a right sampler fails this case with probability <= {alpha:g})")
    else:
        head = (f"{name}: {rows} draws from {uniq.shape[0]} distributions follow them (smallest p-value "
                f"{worst_p:.2g}, each tested at {level:.2g}); none outside the support")
    return Comparison(name, failing == 0, failing, int(uniq.shape[0]), 0, 0.0, examples, head)
