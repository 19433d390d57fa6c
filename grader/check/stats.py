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


def chi_square_p_value(stat, dof):
    """P(X >= stat) for X ~ chi-square with `dof` degrees of freedom (numbers or tensors of them)."""
    import torch

    stat = torch.as_tensor(stat, dtype=torch.float64)
    dof = torch.as_tensor(dof, dtype=torch.float64)
    p = torch.where(dof > 0, torch.special.gammaincc((dof / 2).clamp_min(0.5), stat / 2), torch.ones_like(stat))
    return float(p) if p.dim() == 0 else p


def _chi_square(counts, expected):
    """Pearson's statistic and degrees of freedom per distribution (row) of [G, vocab] counts and
    expected counts, the tokens expected fewer than MIN_EXPECTED times pooled into one bin."""
    import torch

    big = expected >= MIN_EXPECTED
    rest_obs = counts.masked_fill(big, 0).sum(1).double()
    rest_exp = expected.masked_fill(big, 0.0).sum(1)
    has_rest = rest_exp > 0
    row, token = big.nonzero(as_tuple=True)  # the tokens with a bin of their own (few in a long row)
    e = expected[row, token]
    stat = torch.zeros_like(rest_exp).index_add_(0, row, (counts[row, token].double() - e) ** 2 / e)
    stat += torch.where(has_rest, (rest_obs - rest_exp) ** 2 / rest_exp.masked_fill(~has_rest, 1.0), 0.0)
    return stat, big.sum(1) + has_rest.long() - 1


def _furthest_off(counts, expected):
    """The token of one distribution whose own bin is furthest from its expected count, or None."""
    big = expected >= MIN_EXPECTED
    if not bool(big.any()):
        return None
    terms = ((counts.double() - expected) ** 2 / expected).masked_fill(~big, -1.0)
    return int(terms.argmax())


def repeat_bound(equal: int, pairs: int, q: float) -> float:
    """An upper bound on P(X >= equal) for X the number of equal pairs among `pairs` independent ones,
    each equal with probability q on average (Chernoff-Hoeffding: exp(-n KL(equal / n || q)), which holds
    for a sum of Bernoulli trials of mean q as for a binomial): the chance that independent draws are
    equal this often. A bound, so a test that fails below its level fails a right sampler less often
    than the level says."""
    import math

    if pairs == 0 or equal <= q * pairs:
        return 1.0
    a = equal / pairs
    kl = a * math.log(a / q) + ((1 - a) * math.log((1 - a) / (1 - q)) if a < 1 else 0.0)
    return math.exp(-pairs * kl)


def compare_distribution(name: str, draws, probs, alpha: float, pairs: tuple[int, ...] = ()) -> Comparison:
    """`draws`: integer token ids, one per row ([rows] or [rows, 1]); `probs`: [rows, vocab],
    each row the exact distribution its draw must follow. `pairs`: offsets d such that draws j and
    j + d are independent where they follow the same distribution (rows of one call, the same row in
    two calls): tested on disjoint pairs (j, j + d), j // d even, by how often they are equal, against
    the chance q = sum p^2 that two independent draws of p are (a bound on the binomial tail).

    Judged on the host after one copy of each: a GPU shared by several checks time-slices every
    synchronizing call, and a test per distribution of small GPU calls waited its turn hundreds
    of times."""
    import torch

    draws = draws.detach().reshape(-1).to("cpu", torch.int64)
    probs = probs.detach().to("cpu", torch.float64)
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
    n_dist = uniq.shape[0]
    level = alpha / (n_dist * (1 + len(pairs)))  # Bonferroni over every test of the case
    counts = torch.bincount(group * vocab + draws, minlength=n_dist * vocab).view(n_dist, vocab)
    n = torch.bincount(group, minlength=n_dist)
    expected = uniq * n[:, None].double()
    stat, dof = _chi_square(counts, expected)
    pv = chi_square_p_value(stat, dof)
    fails = torch.nonzero(pv < level).flatten().tolist()
    examples = []
    for g in fails[:3]:
        token = _furthest_off(counts[g], expected[g])
        examples.append(f"distribution {g} ({int((uniq[g] > 0).sum())} tokens with p > 0, {int(n[g])} draws): "
                        f"chi-square {float(stat[g]):.1f} on {int(dof[g])} dof, p = {float(pv[g]):.2g} < {level:.2g}"
                        + (f"; furthest off: token {token} drawn {int(counts[g, token])} times, "
                           f"{float(expected[g, token]):.1f} expected" if token is not None else ""))
    repeats = _repeats(draws, group, uniq, pairs, level)
    if repeats:
        head = (f"{name}: " + (f"the draws do not follow {len(fails)} of {n_dist} distributions, and " if fails else "")
                + f"draws that must be independent repeat each other (tests at {level:.2g} each: a right sampler "
                f"fails this case with probability <= {alpha:g}): does each row, and each call at its own offset, "
                f"draw its own random numbers?")
        return Comparison(name, False, len(fails) + len(repeats), n_dist, 0, 0.0, (repeats + examples)[:3], head)
    if fails:
        head = (f"{name}: the draws do not follow {len(fails)} of {n_dist} distributions (chi-square test "
                f"at {level:.2g} each: a right sampler fails this case with probability <= {alpha:g})")
    else:
        head = (f"{name}: {rows} draws from {n_dist} distributions follow them (smallest p-value "
                f"{float(pv.min()):.2g}, each tested at {level:.2g}); none outside the support")
    return Comparison(name, not fails, len(fails), n_dist, 0, 0.0, examples, head)


def _repeats(draws, group, uniq, pairs, level) -> list[str]:
    """For each offset d and distinct distribution: the disjoint pairs (j, j + d), j // d even, that follow
    it, and whether they are equal more often than independent draws could be (at `level`)."""
    import torch

    found = []
    rows = draws.numel()
    for d in pairs:
        j = torch.arange(rows - d) if d < rows else torch.arange(0)
        j = j[(j // d) % 2 == 0]
        same = group[j] == group[j + d]
        j = j[same]
        equal = draws[j] == draws[j + d]
        for g in torch.unique(group[j]).tolist():
            mine = group[j] == g
            n, e = int(mine.sum()), int((equal & mine).sum())
            q = float((uniq[g] ** 2).sum())
            bound = repeat_bound(e, n, q)
            if bound < level:
                what = "the next row's draw" if d == 1 else f"the draw {d} rows on (the next call's, same row)"
                found.append(f"distribution {g}: {e} of {n} draws equal {what}, where independent draws are equal "
                             f"about {q * n:.0f} times (p <= {bound:.2g} < {level:.2g})")
    return found
