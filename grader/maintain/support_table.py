"""docs/support.md: which GPUs run each exercise and day, generated from the exercise specs
(Exercise.min_arch, arch_specific, arch_gaps) and config.ARCHS.

    python -m grader.maintain.support_table           # write docs/support.md
    python -m grader.maintain.support_table --check   # exit 1 if it differs from what the specs give
"""
from __future__ import annotations

import sys

from .. import config, exercises, paths
from ..spec import arch_key

PATH = paths.ROOT / "docs" / "support.md"
RAN = ("9.0",)  # the architectures whose GPUs ran the kernels, the notebooks and the grader's GPU tests


def _cell(ex, arch: str) -> str:
    if ex.arch_specific:
        if not ex.runs_here(arch):
            return "compiled for sm_" + ex.arch_specific.replace(".", "") + ", not run"
        return "runs, graded"
    if not ex.runs_here(arch):
        return f"compiled for sm_{ex.min_arch.replace('.', '')}, not run"
    return "runs, graded" + (" (known gap)" if arch in ex.arch_gaps else "")


def render() -> str:
    archs = list(config.ARCHS)
    head = "| exercise | " + " | ".join(f"sm_{a.replace('.', '')} ({config.ARCHS[a].split(': ')[1]})"
                                        for a in archs) + " |"
    rows = [head, "|" + "---|" * (len(archs) + 1)]
    for ex in exercises.all_exercises().values():
        rows.append(f"| `{ex.id}` | " + " | ".join(_cell(ex, a) for a in archs) + " |")
    days = sorted({ex.day for ex in exercises.all_exercises().values()})
    day_rows = ["| day | runs its notebook's GPU steps on |", "|---|---|"]
    for day in days:
        oldest = exercises.day_min_arch(day)
        day_rows.append(f"| {day} | compute capability {oldest} and newer "
                        f"({', '.join(config.ARCHS[a].split(': ')[1] for a in archs if arch_key(a) >= arch_key(oldest))})"
                        " |")
    gaps = [f"- `{ex.id}` on sm_{a.replace('.', '')}: {why}." for ex in exercises.all_exercises().values()
            for a, why in ex.arch_gaps.items()]
    ran = ", ".join(f"sm_{a.replace('.', '')} ({config.ARCHS[a]})" for a in RAN)
    return "\n".join([
        "# Which GPUs run what",
        "",
        "Generated from the exercise specs by `python -m grader.maintain.support_table`; not edited by hand.",
        "",
        f"Only {ran} ran the course's kernels, notebooks and the grader's GPU tests. For every other "
        "architecture below, every solution, stub and kernel version is compiled for it in `make test` "
        "(tests/test_archs.py), with each exercise's required SASS and no spills: built and checked there, "
        "not run. \"runs, graded\": a check on such a GPU runs the kernel and grades it; \"compiled for "
        "sm_XX, not run\": the GPU is older than the exercise needs, so the check compiles it for the oldest "
        "GPU that runs it, checks its SASS and says why its runs are skipped (`python -m grader doctor` lists "
        "this for your GPU). Targets are ratios to baselines timed in the same run, on whatever GPU runs them.",
        "",
        "## Exercises",
        "",
        *rows,
        "",
        "## Notebooks",
        "",
        "A notebook's cells that run kernels skip, saying why, on a GPU older than its day needs; cells of a",
        "version that needs a newer GPU than its day (Day 7's bulk copy, Day 10's wgmma versions: Hopper)",
        "skip on the others.",
        "",
        *day_rows,
        "",
        "## Known gaps",
        "",
        *(gaps or ["None."]),
        "",
    ])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        if not PATH.exists() or PATH.read_text() != text:
            print(f"{PATH} is out of date: run python -m grader.maintain.support_table", file=sys.stderr)
            return 1
        print(f"ok       {PATH}")
        return 0
    PATH.write_text(text)
    print(f"wrote    {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
