"""Exercise stubs are generated from the solutions, so the two cannot drift (nbgrader style).

In `solutions/dayNN/NAME.cu` (or a Jinja2 template of one, `NAME.cu.j2`, or a Python module,
`NAME.py`, whose markers are `#` comments), the code between
`// BEGIN SOLUTION` and `// END SOLUTION` is removed from the stub; lines in that block written as
`// STUB: text` become `text` in the stub (a TODO, or a line that keeps it
compiling). The stub `kernels/dayNN/NAME.cu` (`.cu.j2`) records the hash of what was
generated, so `release` never overwrites a file a learner has edited (unless
forced, and then it keeps a `.bak` copy). `@TARGET@` in a solution becomes, in its stub, the
exercise's performance target as its spec states it (`target_text`): the number is written once.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from . import paths
from .stubs import ReleaseError, lines_to_write, make_stub, markers, stub_hash, untouched_stub

TARGET_TOKEN = "@TARGET@"


def target_text(target) -> str:
    """A spec's `Target` in words: its own `describe()`, then each `also` baseline that must be
    reached too (`required`), worded the same way."""
    parts = [target.describe()]
    parts += [replace(target, ratio=b.required, baseline=b, also=()).describe()
              for b in target.also if b.required is not None]
    return "; and ".join(parts)


def fill_target(text: str, solution: Path, name: str = "<solution>") -> str:
    """`text` with TARGET_TOKEN replaced by the target of the exercise whose solution is `solution`
    (specs are read only where the token is used)."""
    if TARGET_TOKEN not in text:
        return text
    from . import exercises

    found = [ex for ex in exercises.all_exercises().values()
             if (ex.day, ex.solution_path.name) == (solution.parent.name, solution.name)]
    if not found:
        raise ReleaseError(f"{name}: {TARGET_TOKEN} in a file that is no exercise's solution")
    return text.replace(TARGET_TOKEN, target_text(found[0].target))


@dataclass
class Planned:
    solution: Path
    stub: Path
    text: str
    state: str  # "up to date" | "new" | "stale" | "edited"


def plan() -> list[Planned]:
    planned = []
    for sol in sorted([*paths.SOLUTIONS.glob("day*/*.cu"), *paths.SOLUTIONS.glob("day*/*.cu.j2"),
                       *paths.SOLUTIONS.glob("day*/*.py")]):
        rel = sol.relative_to(paths.ROOT)
        _, _, _, header, header_rx = markers(sol)
        solution = sol.read_text(encoding="utf-8")
        body = fill_target(make_stub(solution, str(rel)), sol, str(rel))
        text = header.format(n=lines_to_write(solution, str(rel)), src=rel.as_posix(), h=stub_hash(body)) + body
        stub = paths.KERNELS / sol.parent.name / sol.name
        if not stub.exists():
            state = "new"
        else:
            current = stub.read_text(encoding="utf-8", errors="replace")
            if current == text:
                state = "up to date"
            elif untouched_stub(current, stub):
                state = "stale"  # an untouched generated stub of an older solution
            else:
                state = "edited"
        planned.append(Planned(sol, stub, text, state))
    return planned


def release(check: bool = False, force: bool = False, echo=print) -> int:
    """Write the stubs (or with check=True, report drift). Returns an exit code."""
    code = 0
    for p in plan():
        rel_stub = p.stub.relative_to(paths.ROOT)
        if p.state == "up to date":
            echo(f"ok       {rel_stub}")
            continue
        if check:
            echo(f"DRIFT    {rel_stub} is {p.state}: run `python -m grader release`")
            code = 1
            continue
        if p.state == "edited" and not force:
            echo(f"KEPT     {rel_stub} has your edits; `release --force` overwrites it (keeping a .bak)")
            code = 1
            continue
        if p.state == "edited":
            p.stub.with_name(p.stub.name + ".bak").write_text(p.stub.read_text(encoding="utf-8", errors="replace"))
        p.stub.parent.mkdir(parents=True, exist_ok=True)
        p.stub.write_text(p.text, encoding="utf-8")
        echo(f"wrote    {rel_stub} ({p.state})")
    return code
