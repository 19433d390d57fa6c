"""The learner's calls as they are timed, each one checked: a kernel may not do less work, or other
work, when it is timed than when it is judged.

Before each timed call (untimed, before the L2 flush) the inputs are given the next of CONTENTS
contents in the same buffers, and the outputs are poisoned: a call that skips part of its work (a
row, a tile, half of its blocks on every other call), that returns a result it kept from an earlier
call with the same pointers, or that finishes its work after the call returned, leaves poison or a
stale answer. After each call (untimed, after its end event) a random sample of every output is
compared on the GPU with the reference's answer for that content, under the exercise's tolerance;
the counts are read once the timing is over. The kernel file's own variables are put back as the module
loaded them before each call (device_state.py): nothing is carried from one call to the next.

The second content is the first with every floating-point input rolled along its last dimension,
each by a different shift: the same shapes, value distributions and integer inputs (page tables,
lengths, seeds), so the same work, but other answers.
"""
from __future__ import annotations

from dataclasses import dataclass

CONTENTS = 2
SAMPLE = 1 << 16  # elements of each output compared after each call (all of a smaller output)
VARY_STEP = 1 << 20  # between the values of an Exercise.call_varies input in successive timed calls


@dataclass
class TimedFailure:
    calls: int  # timed calls checked (warm-up included)
    wrong: int  # of them, with a sampled element wrong
    first: int  # the first wrong call's index
    name: str  # its first wrong output
    elements: int  # wrong elements in that output's sample
    sampled: int
    why: str = ""  # a sampler's draws while timed: what the test of them found (instead of the counts)
    state_restored: bool = False  # the file's own variables were put back before each call

    def message(self) -> str:
        if self.why:
            return self.why
        return (f"{self.wrong} of {self.calls} calls made while timing gave wrong results (the first, call "
                f"{self.first + 1}: {self.elements} of {self.sampled} sampled elements of '{self.name}' wrong "
                "or unwritten). Between timed calls the inputs change and the outputs are filled with NaN; "
                "does the kernel skip work when called again, keep results from an earlier call, or finish "
                "after it returns?" + (" Its own __device__ and __constant__ variables are also put back as loaded "
                                      "before each timed call: a table made or uploaded only on the first call is "
                                      "gone; make it on every call." if self.state_restored else ""))


def other_content(inputs: dict) -> dict:
    """A copy of the tensors of `inputs` with each floating-point one rolled along its last
    dimension by its own shift (1, 2, ...); the others copied as they are."""
    import torch

    out, shift = {}, 0
    for name, t in inputs.items():
        if not torch.is_tensor(t):
            continue
        if t.is_floating_point() and t.dim() and t.shape[-1] > 1:
            shift += 1
            out[name] = torch.roll(t, shifts=shift % t.shape[-1] or 1, dims=-1)
        else:
            out[name] = t.clone()
    return out


class TimedCalls:
    """`call` with `prepare` before and `verify` after it, for bench_interleaved; `failure()` once
    the timing is over. `contents`: [(input tensors, expected outputs)], the first the case's own;
    `state`: the file's own variables (device_state.DeviceState), or None."""

    def __init__(self, ex, mod, p, inputs: dict, outputs: dict, contents: list, tolerances: dict, poison,
                 state=None):
        import torch

        self.ex, self.mod, self.p, self.inputs, self.outputs = ex, mod, p, inputs, outputs
        self.contents, self.tolerances, self.poison, self.state = contents, tolerances, poison, state
        self.k = 0
        self.counts: list = []  # per call: a device tensor of wrong elements per expected output
        self.gen = torch.Generator(device=next(iter(outputs.values())).device).manual_seed(0x5A4D)
        self.names = list(contents[0][1])
        self.varied = {name: inputs[name] for name in ex.call_varies}
        # a sampler's draws of each call, per content: [(content, {output: draws})]
        self.draws: list = []

    def prepare(self) -> None:
        if self.state is not None:
            self.state.restore()
        src, _ = self.contents[self.k % len(self.contents)]
        for name, t in src.items():
            self.inputs[name].copy_(t)
        for name, first in self.varied.items():
            self.inputs[name] = first + (self.k + 1) * VARY_STEP
        for name, t in self.outputs.items():
            if name not in self.ex.inplace:
                self.poison(t)

    def call(self) -> None:
        self.ex.call(self.mod, self.p, self.inputs, self.outputs)

    def verify(self) -> None:
        import torch

        _, expected = self.contents[self.k % len(self.contents)]
        content = self.k % len(self.contents)
        self.k += 1
        wrong = []
        kept = {name: self.outputs[name].reshape(-1).clone() for name in self.names
                if self.tolerances[name].kind == "distribution" and self.varied}
        if kept:
            self.draws.append((content, kept))
        for name in self.names:
            tol = self.tolerances[name]
            got, exp = self.outputs[name].reshape(-1), expected[name].reshape(-1)
            n = got.numel()
            if n == 0:
                wrong.append(torch.zeros((), dtype=torch.int64, device=got.device))
                continue
            if n > SAMPLE:
                idx = torch.randint(n, (SAMPLE,), device=got.device, generator=self.gen)
                got = got[idx]
                exp = exp if tol.kind == "distribution" else exp.to(got.device)[idx]
            wrong.append(_wrong(got, exp, tol).to(torch.int64))
        self.counts.append(torch.stack(wrong))

    def failure(self) -> TimedFailure | None:
        """The calls whose sample was wrong, or None (reads the counts: after the timing)."""
        import torch

        for name, first in self.varied.items():
            self.inputs[name] = first  # the run after the timing calls at the case's own offset again
        if not self.counts:
            return None
        counts = torch.stack(self.counts).cpu()  # [calls, outputs]
        bad = (counts > 0).any(dim=1)
        if not bool(bad.any()):
            return self._draws_failure()
        first = int(bad.nonzero()[0, 0])
        j = int((counts[first] > 0).nonzero()[0, 0])
        sampled = min(SAMPLE, self.outputs[self.names[j]].numel())
        return TimedFailure(len(self.counts), int(bad.sum()), first, self.names[j], int(counts[first, j]), sampled,
                            state_restored=self.state is not None)

    def _draws_failure(self) -> TimedFailure | None:
        """A sampler's draws while timed (each call at its own offset): within the support, and no more
        equal to the previous call's draws of the same row (same content) than fresh draws would be."""
        import torch

        from .stats import repeat_bound

        for name in {n for _, kept in self.draws for n in kept}:
            alpha = self.tolerances[name].alpha
            for content, (_, expected) in enumerate(self.contents):
                runs = [kept[name] for c, kept in self.draws if c == content and name in kept]
                if len(runs) < 2:
                    continue
                probs = expected[name].to(runs[0].device, dtype=torch.float64)  # [rows, vocab]
                draws = torch.stack(runs)  # [calls, rows]
                p_drawn = probs.gather(1, draws.clamp(0, probs.shape[1] - 1).t()).t()
                outside = ((draws < 0) | (draws >= probs.shape[1]) | (p_drawn <= 0)).sum().item()
                if outside:
                    return TimedFailure(self.k, len(runs), 0, name, int(outside), draws.numel(),
                                        f"{int(outside)} of {draws.numel()} draws made while timing fall outside the "
                                        "nucleus (tokens of probability 0 after top-p): the timed calls must "
                                        "sample as the judged ones do")
                pairs = draws[: len(runs) // 2 * 2].view(-1, 2, draws.shape[1])  # disjoint pairs of calls
                equal = int((pairs[:, 0] == pairs[:, 1]).sum().item())
                n = pairs.shape[0] * pairs.shape[2]
                mean = float((probs ** 2).sum(1).sum().item()) * pairs.shape[0]  # sum over pair-rows of sum p^2
                bound = repeat_bound(equal, n, mean / n)
                if bound < alpha:
                    return TimedFailure(self.k, len(runs), 0, name, equal, n,
                                        f"the draws of calls made while timing repeat each other: {equal} of {n} "
                                        f"row draws equal the same row's draw in the previous call on the same inputs, where "
                                        f"fresh draws are equal about {mean:.0f} times (p <= {bound:.2g} < {alpha:g}); each "
                                        "timed call had its own offset: does the sampler draw afresh at every "
                                        "offset, at this size too?")
        return None


def _wrong(got, exp, tol):
    """How many of the sampled elements are wrong, as compare.compare judges them; a sampled
    distribution's elements only have to be written."""
    import torch

    from ..spec import poison_value
    from .compare import mismatched

    if tol.kind == "distribution":
        unwritten = torch.isnan(got) if got.is_floating_point() else got == poison_value(got.dtype)
        return unwritten.sum()
    if not (got.is_floating_point() or exp.is_floating_point()):
        return (got != exp.to(got.device)).sum()
    exact = tol.kind == "exact"
    return mismatched(got, exp, 0.0 if exact else tol.rtol, 0.0 if exact else tol.atol).sum()
