"""NaN/Inf-aware comparison that reports what differs, never a bare False."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Comparison:
    name: str
    ok: bool
    mismatches: int
    total: int
    unwritten: int            # elements still holding the NaN poison where a number was expected
    max_abs_err: float
    examples: list[str]       # "[3, 17]: yours 0.5 vs expected 0.25"
    headline: str = ""        # says it all where counting elements does not fit (samplers)

    def message(self) -> str:
        if self.headline:
            return self.headline + ("" if self.ok else "; first: " + "; ".join(self.examples))
        if self.ok:
            return f"{self.name}: all {self.total} elements match (max abs err {self.max_abs_err:.3g})"
        head = f"{self.name}: {self.mismatches} of {self.total} elements differ"
        if self.unwritten:
            head += f" ({self.unwritten} never written: still the NaN the grader filled in)"
        return head + "; first: " + "; ".join(self.examples)


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def compare(name: str, got, expected, rtol: float, atol: float, show: int = 5) -> Comparison:
    """|got - expected| <= atol + rtol * |expected|, elementwise, in fp64.
    NaN matches only NaN, +-Inf only the same Inf."""
    import torch

    if tuple(got.shape) != tuple(expected.shape):
        return Comparison(name, False, max(got.numel(), expected.numel()), expected.numel(), 0, float("inf"),
                          [f"shape {tuple(got.shape)} vs expected {tuple(expected.shape)}"])
    g = got.detach().double()
    e = expected.detach().to(g.device).double()
    close = torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    bad = ~close
    count = int(bad.sum())
    finite = torch.isfinite(g) & torch.isfinite(e)
    diff = (g - e).abs()
    max_err = float(diff[finite].max()) if bool(finite.any()) else 0.0
    unwritten = int((torch.isnan(g) & ~torch.isnan(e)).sum())
    examples = []
    if count:
        idx = bad.nonzero()[:show]
        for row in idx.tolist():
            at = tuple(row)
            examples.append(f"{list(at)}: yours {_fmt(float(g[at]))} vs expected {_fmt(float(e[at]))}")
    return Comparison(name, count == 0, count, e.numel(), unwritten, max_err, examples)


def unchanged(name: str, before, after) -> str | None:
    """None if `after` is bit-identical to `before`, else a message."""
    import torch

    if before.dtype != after.dtype or before.shape != after.shape:
        return f"input '{name}' changed shape or dtype"
    same = (before == after) | (torch.isnan(before) & torch.isnan(after)) if before.is_floating_point() else before == after
    changed = int((~same).sum())
    if changed:
        first = (~same).nonzero()[0].tolist()
        return f"input '{name}' was modified: {changed} elements changed, first at {first}"
    return None
