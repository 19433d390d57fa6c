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

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path

from . import toolchain

BEGIN = re.compile(r"^(\s*)//\s*BEGIN SOLUTION\b.*$")
END = re.compile(r"^\s*//\s*END SOLUTION\b.*$")
STUB = re.compile(r"^\s*//\s*STUB:\s?(.*)$")
HEADER = "// Your exercise: fill in the TODOs (about {n} lines). Generated from {src} by `grader release` (stub-hash {h}).\n"
HEADER_RE = re.compile(r"^// Your exercise: .* \(stub-hash ([0-9a-f]{12})\)\.\n")
# A Python module's markers are `#` comments: the same patterns with `#` for `//`.
PY_MARKERS = tuple(re.compile(rx.pattern.replace("//", "#")) for rx in (BEGIN, END, STUB, HEADER_RE))
PY_HEADER = "# " + HEADER[3:]
TARGET_TOKEN = "@TARGET@"


def _markers(path) -> tuple:
    """(BEGIN, END, STUB, HEADER, HEADER_RE) for a solution file: `#` comments for .py, else `//`."""
    if str(path).endswith(".py"):
        return (*PY_MARKERS[:3], PY_HEADER, PY_MARKERS[3])
    return BEGIN, END, STUB, HEADER, HEADER_RE


class ReleaseError(ValueError):
    pass


def make_stub(solution_text: str, name: str = "<solution>") -> str:
    """The stub body for a solution: solution blocks replaced by their STUB lines (`#` markers
    when `name` is a .py file)."""
    begin_rx, end_rx, stub_rx, _, _ = _markers(name)
    todo = "# TODO: your code here" if str(name).endswith(".py") else "// TODO: your code here"
    out, inside, indent, blocks = [], False, "", 0
    for n, line in enumerate(solution_text.splitlines(), 1):
        if not inside:
            m = begin_rx.match(line)
            if m:
                inside, indent, stub_lines = True, m.group(1), []
                start = n
                continue
            if end_rx.match(line):
                raise ReleaseError(f"{name}:{n}: END SOLUTION without BEGIN SOLUTION")
            out.append(line)
        else:
            if begin_rx.match(line):
                raise ReleaseError(f"{name}:{n}: nested BEGIN SOLUTION (the block opened at line {start} is not closed)")
            if end_rx.match(line):
                inside = False
                blocks += 1
                out += stub_lines or [f"{indent}{todo}"]
                continue
            m = stub_rx.match(line)
            if m:
                stub_lines.append(indent + m.group(1))
    if inside:
        raise ReleaseError(f"{name}:{start}: BEGIN SOLUTION is never closed")
    if blocks == 0:
        raise ReleaseError(f"{name}: no BEGIN SOLUTION / END SOLUTION block")
    return "\n".join(out) + "\n"


def lines_to_write(solution_text: str, name: str = "<solution>") -> int:
    """How many lines the reference writes where its stub has TODOs: the non-blank lines of its
    solution blocks that are neither STUB lines nor comments (what a learner writes, about)."""
    begin_rx, end_rx, stub_rx, _, _ = _markers(name)
    comment = "#" if str(name).endswith(".py") else "//"
    count, inside = 0, False
    for line in solution_text.splitlines():
        if begin_rx.match(line):
            inside = True
        elif end_rx.match(line):
            inside = False
        elif inside and line.strip() and not stub_rx.match(line) and not line.strip().startswith(comment):
            count += 1
    return count


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


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def untouched_stub(text: str, path) -> bool:
    """Whether `text` (of the file at `path`) is a stub exactly as `release` generated it: its header's
    hash is that of the rest, so nothing has been written in it yet."""
    m = _markers(path)[4].match(text)
    return bool(m) and _hash(text[m.end():]) == m.group(1)


@dataclass
class Planned:
    solution: Path
    stub: Path
    text: str
    state: str  # "up to date" | "new" | "stale" | "edited"


def plan() -> list[Planned]:
    planned = []
    for sol in sorted([*toolchain.SOLUTIONS.glob("day*/*.cu"), *toolchain.SOLUTIONS.glob("day*/*.cu.j2"),
                       *toolchain.SOLUTIONS.glob("day*/*.py")]):
        rel = sol.relative_to(toolchain.ROOT)
        _, _, _, header, header_rx = _markers(sol)
        solution = sol.read_text(encoding="utf-8")
        body = fill_target(make_stub(solution, str(rel)), sol, str(rel))
        text = header.format(n=lines_to_write(solution, str(rel)), src=rel.as_posix(), h=_hash(body)) + body
        stub = toolchain.KERNELS / sol.parent.name / sol.name
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
        rel_stub = p.stub.relative_to(toolchain.ROOT)
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
