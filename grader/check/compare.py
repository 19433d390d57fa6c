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
            head += (f" ({self.unwritten} NaN where a number was expected: never written, or computed from "
                     "shared memory never written; the grader fills both with NaN)")
        return head + "; first: " + "; ".join(self.examples)


def _fmt(v: float) -> str:
    return f"{v:.6g}"


# Elements compared at a time: the fp64 copies and masks of one chunk take ~0.6 GB, whatever the output's size.
# Whole, a 16384 x 8192 output (day02's timed case) took ~7 GB of temporaries (the fp64 copies, the
# masks, the indices of its finite elements): more than many a learner's GPU has free beside the case,
# and GPU memory allocated from the driver and given back in every grading, which serialises across the
# GPUs of a host in class grading (benchmarks/gpu_neighbours).
CHUNK_ELEMENTS = 1 << 24


def _chunks(*tensors):
    """(offset, and each of `tensors` flattened from there) CHUNK_ELEMENTS at a time."""
    flat = [t.detach().reshape(-1) for t in tensors]
    for start in range(0, flat[0].numel(), CHUNK_ELEMENTS):
        yield (start, *(f[start:start + CHUNK_ELEMENTS] for f in flat))


def _positions(shape: tuple, flat_indices: list[int]) -> list[list[int]]:
    """The positions in a tensor of `shape` of its elements numbered `flat_indices` (row-major).
    Plain arithmetic: torch.unravel_index imports sympy and mpmath (487 modules, 3 s per grading
    process on an H100 host without their bytecode), paid by every failing comparison."""
    out = []
    for flat in flat_indices:
        at = []
        for size in reversed(shape):
            flat, i = divmod(flat, size)
            at.append(i)
        out.append(at[::-1])
    return out


def mismatched(got, expected, rtol: float, atol: float):
    """Elementwise, on the device: |got - expected| > atol + rtol * |expected| in fp64; NaN matches
    only NaN, +-Inf only the same Inf (rtol = atol = 0: equal, bit for bit but for NaN payloads)."""
    import torch

    return ~torch.isclose(got.double(), expected.to(got.device).double(), rtol=rtol, atol=atol, equal_nan=True)


def compare(name: str, got, expected, rtol: float, atol: float, show: int = 5) -> Comparison:
    """|got - expected| <= atol + rtol * |expected|, elementwise, in fp64 (CHUNK_ELEMENTS at a time).
    NaN matches only NaN, +-Inf only the same Inf."""
    import torch

    if tuple(got.shape) != tuple(expected.shape):
        return Comparison(name, False, max(got.numel(), expected.numel()), expected.numel(), 0, float("inf"),
                          [f"shape {tuple(got.shape)} vs expected {tuple(expected.shape)}"])
    count, unwritten, max_err = 0, 0, 0.0
    examples: list[str] = []
    for start, g, e in _chunks(got, expected):
        g, e = g.double(), e.to(g.device).double()
        bad = mismatched(g, e, rtol, atol)
        finite = torch.isfinite(g) & torch.isfinite(e)
        # (the largest error over the finite pairs: 0 where there is none; errors are never negative)
        max_err = max(max_err, float(torch.where(finite, (g - e).abs(), g.new_zeros(())).max()))
        here = int(bad.sum())
        count += here
        unwritten += int((torch.isnan(g) & ~torch.isnan(e)).sum())
        if here and len(examples) < show:
            idx = bad.nonzero()[:show - len(examples), 0].tolist()
            for i, at in zip(idx, _positions(tuple(got.shape), [start + i for i in idx])):
                examples.append(f"{at}: yours {_fmt(float(g[i]))} vs expected {_fmt(float(e[i]))}")
    return Comparison(name, count == 0, count, expected.numel(), unwritten, max_err, examples)


def unchanged(name: str, before, after) -> str | None:
    """None if `after` is bit-identical to `before`, else a message (CHUNK_ELEMENTS at a time)."""
    import torch

    if before.dtype != after.dtype or before.shape != after.shape:
        return f"input '{name}' changed shape or dtype"
    changed, first = 0, None
    for start, b, a in _chunks(before, after):
        differ = ~((b == a) | (torch.isnan(b) & torch.isnan(a)) if b.is_floating_point() else b == a)
        here = int(differ.sum())
        if here and first is None:
            first = _positions(tuple(before.shape), [start + int(differ.nonzero()[0, 0])])[0]
        changed += here
    if changed:
        return f"input '{name}' was modified: {changed} elements changed, first at {first}"
    return None
