"""What `grader.check()` returns: a table in a notebook, text in a terminal, a plot on request."""
from __future__ import annotations

import html
import re
import textwrap
from dataclasses import dataclass, field

from ..config import GROUPS

MARK = {"pass": "PASS", "fail": "FAIL", "skip": "skip"}
# An identifier, a qualified name or a kernel's signature: kept on one line in the HTML table.
_IDENT = re.compile(r"(?:\(anonymous namespace\)::)?[A-Za-z_][\w:<>.*]*(?:_|::)[\w:<>.*]*(?:\([^()]*\))?")
COLOR = {"pass": "#1a7f37", "fail": "#cf222e", "skip": "#6e7781"}


@dataclass
class Item:
    group: str
    name: str
    status: str  # "pass" | "fail" | "skip"
    detail: str = ""
    metrics: dict = field(default_factory=dict)


UNTOUCHED_STUB = "your code"  # the row that says the file is still the generated stub


@dataclass
class Result:
    exercise: str
    source: str
    mode: str
    items: list[Item] = field(default_factory=list)
    build_seconds: float | None = None
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds, in the order they ran
    # what ran beside the stages: process -> stage -> seconds from the check's start to that stage's end
    # (a learner's check: the grading processes started ahead, their torch, CUDA context and CUPTI)
    background: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, group, name, status, detail="", metrics=None):
        self.items.append(Item(group, name, status, detail, metrics or {}))

    def add_time(self, stage: str, seconds: float) -> None:
        """Where the check spent its time (a stage seen twice adds up)."""
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds

    def timing_line(self) -> str:
        """'time: source and SASS checks 2.1 s · build 7.9 s · ... · total 24.6 s' ('' before any stage)."""
        if not self.timings:
            return ""
        parts = [f"{stage} {s:.1f} s" for stage, s in self.timings.items()]
        line = "time: " + " · ".join(parts) + (f" · total {self.seconds:.1f} s" if self.seconds else "")
        for process, stages in self.background.items():
            if stages:
                line += f"\n  beside it, {process}: " + " · ".join(f"{s} at {t:.1f} s" for s, t in stages.items())
        return line

    # ----------------------------------------------------------------- verdict
    @property
    def failures(self) -> list[Item]:
        return [i for i in self.items if i.status == "fail"]

    @property
    def ok(self) -> bool:
        """No check failed (some may have been skipped, e.g. without a GPU)."""
        return not self.failures

    @property
    def complete(self) -> bool:
        return not any(i.status == "skip" for i in self.items)

    @property
    def passed(self) -> bool:
        """Everything ran and passed: the exercise is done."""
        return self.ok and self.complete

    @property
    def graded(self) -> bool:
        """Some correctness case ran (needs a GPU): without one only the static checks ran."""
        return any(i.group == "correctness" and i.status != "skip" for i in self.items)

    @property
    def verdict(self) -> str:
        """'fail', 'pass', 'pass (some checks skipped)', or 'not graded' when no correctness case
        ran (compile-only mode: an empty stub passes the static checks, which is no pass)."""
        if self.failures:
            return "fail"
        if self.complete:
            return "pass"
        return "pass (some checks skipped)" if self.graded else "not graded"

    @property
    def not_started(self) -> bool:
        """The file judged is the exercise's stub, untouched (the check names it UNTOUCHED_STUB)."""
        return any(i.group == "source" and i.name == UNTOUCHED_STUB and i.status == "fail" for i in self.items)

    @property
    def headline(self) -> str:
        """The verdict as a learner reads it first."""
        if self.not_started:
            return "NOT STARTED: this is the exercise's stub, untouched: write your code at its TODOs"
        if self.verdict == "not graded":
            return "NOT GRADED: static checks passed; correctness and speed need a GPU"
        return self.verdict.upper()

    def first_failure(self) -> str:
        f = self.failures
        return f"{f[0].group} / {f[0].name}: {f[0].detail}" if f else ""

    def performance(self) -> list[Item]:
        return [i for i in self.items if i.group == "performance" and i.metrics]

    def as_dict(self) -> dict:
        return {"exercise": self.exercise, "source": self.source, "mode": self.mode, "verdict": self.verdict,
                "build_seconds": self.build_seconds, "seconds": self.seconds, "timings": dict(self.timings),
                "background": {p: dict(st) for p, st in self.background.items()}, "items": [i.__dict__ for i in self.items]}

    # --------------------------------------------------------------- rendering
    def _rows(self):
        """Rows to show: every failure and skip, passing correctness cases folded into one line."""
        rows = []
        for g in GROUPS:
            items = [i for i in self.items if i.group == g]
            passing = [i for i in items if i.status == "pass"]
            if g == "correctness" and len(items) > 3:
                failing = [i for i in items if i.status not in ("pass", "skip")]
                run = [i for i in items if i.status != "skip"]  # (a skipped case, e.g. too large for this GPU, shows apart)
                if passing:
                    rows.append(Item(g, f"{len(passing)} of {len(run)} cases", "pass",
                                     "these match the reference; e.g. " + passing[-1].name + ": " + passing[-1].detail))
                rows += failing[:3]
                if len(failing) > 3:
                    rows.append(Item(g, f"{len(failing) - 3} more cases", "fail",
                                     "also fail: " + ", ".join(i.name for i in failing[3:])))
                rows += [i for i in items if i.status == "skip"]
            else:
                rows += items
        return rows

    def __str__(self) -> str:
        head = f"{self.exercise}: {self.headline}   ({self.source}, {self.mode} mode"
        head += f", built in {self.build_seconds:.1f} s)" if self.build_seconds is not None else ")"
        lines = [head]
        for i in self._rows():
            lines.append(f"  {MARK[i.status]:4}  {i.group:<11} {i.name}")
            if i.detail:
                lines.append(f"        {i.detail}")
        if self.timing_line():
            lines.append(self.timing_line())
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color = COLOR["fail" if self.failures else ("pass" if self.verdict.startswith("pass") else "skip")]
        out = [f"<div class='course-result'><p><b>{html.escape(self.exercise)}</b>: "
               f"<b style='color:{color}'>{html.escape(self.headline)}</b>"
               f" &nbsp;<code>{html.escape(self.source)}</code>, {self.mode} mode"]
        if self.build_seconds is not None:
            out.append(f", built in {self.build_seconds:.1f} s")
        # Break lines only between words: JupyterLab's output CSS breaks anywhere, which cut kernel
        # names in two; identifiers (names with _ or ::, signatures) never break at all.
        cell = "text-align:left;vertical-align:top;word-break:normal;overflow-wrap:normal"
        out.append("</p><table><tr><th>check</th><th></th><th>result</th>"
                   "<th style='text-align:left'>detail</th></tr>")
        for i in self._rows():
            out.append(f"<tr><td style='{cell}'>{html.escape(i.group)}</td><td style='{cell}'>{_words(i.name)}</td>"
                       f"<td style='color:{COLOR[i.status]};vertical-align:top'><b>{MARK[i.status]}</b></td>"
                       f"<td style='{cell}'><div style='white-space:pre-wrap;{cell}'>{_words(i.detail)}</div></td></tr>")
        out.append("</table>")
        if self.timing_line():
            out.append(f"<p style='color:{COLOR['skip']};font-size:smaller;white-space:pre-wrap'>"
                       f"{html.escape(self.timing_line())}</p>")
        out.append("</div>")
        return "".join(out)

    def plot(self, ax=None, kernel_label: str = "your kernel", caption: str = ""):
        """Bar chart of each timed case: your kernel and the other baselines, as multiples of the
        graded baseline (the copy, cuBLAS, ...; latency: x faster), against the target. `caption`
        (e.g. where and when it was measured) goes under the title. Without a GPU, notebooks call
        grader.nb.plot_result, which shows the committed GPU report's run instead."""
        import matplotlib.pyplot as plt

        perf = [i for i in self.performance() if i.metrics.get("baselines") is not None]
        if ax is None:  # 2.2 in per case for its wrapped name, and room at the right for the legend
            _, ax = plt.subplots(figsize=(max(4.4, 2.2 * len(perf)) + 3.0, 3.4))
        if not perf:
            ax.text(0.5, 0.5, "no performance measured\n(" + ("no GPU" if self.mode != "gpu" else "not timed") + ")",
                    ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            return ax
        m0 = perf[0].metrics
        others = [n for n in m0["baselines"] if n != m0["baseline"]]
        width = 0.8 / (1 + len(others))
        xs = range(len(perf))
        ax.bar([x - 0.4 + width / 2 for x in xs], [i.metrics["ratio"] for i in perf], width=width, label=kernel_label)
        for k, name in enumerate(others, 1):  # where each other baseline stands against the graded one
            ax.bar([x - 0.4 + width * (k + 0.5) for x in xs],
                   [i.metrics["ratio"] / i.metrics["baselines"][name]["ratio"] for i in perf], width=width,
                   label=textwrap.fill(m0["baselines"][name]["label"], 30))
        ax.axhline(m0["target"], color="k", ls="--", lw=1, label="target")
        ax.axhline(1.0, color="gray", ls=":", lw=1)
        # long case names wrap on their own lines rather than run into each other; the y label wraps too
        ax.set_xticks(list(xs), [textwrap.fill(i.name, 22) for i in perf], fontsize=8)
        ax.set_ylabel(textwrap.fill(("x faster than " if m0["kind"] == "latency" else "x ") + m0["baseline_label"], 28),
                      fontsize=8)
        ax.set_title(self.exercise + (f"\n{caption}" if caption else ""), fontsize=10 if caption else None)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.figure.tight_layout()
        return ax


def _words(text: str) -> str:
    """HTML-escaped text whose identifiers are <code> spans that never break."""
    out, last = [], 0
    for m in _IDENT.finditer(text):
        out.append(html.escape(text[last:m.start()]))
        out.append(f"<code style='white-space:nowrap;word-break:keep-all'>{html.escape(m.group(0))}</code>")
        last = m.end()
    out.append(html.escape(text[last:]))
    return "".join(out)
