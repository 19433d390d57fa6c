"""The text rules of exercise stubs (grader/release.py writes them): in a solution, the code between
`// BEGIN SOLUTION` and `// END SOLUTION` is left out of the stub, and `// STUB: text` lines in it
become `text`; a stub's header records the hash of what was generated (`#` comments for a Python
module)."""
from __future__ import annotations

import hashlib
import re

BEGIN = re.compile(r"^(\s*)//\s*BEGIN SOLUTION\b.*$")
END = re.compile(r"^\s*//\s*END SOLUTION\b.*$")
STUB = re.compile(r"^\s*//\s*STUB:\s?(.*)$")
HEADER = "// Your exercise: fill in the TODOs (about {n} lines). Generated from {src} by `grader release` (stub-hash {h}).\n"
HEADER_RE = re.compile(r"^// Your exercise: .* \(stub-hash ([0-9a-f]{12})\)\.\n")
# A Python module's markers are `#` comments: the same patterns with `#` for `//`.
PY_MARKERS = tuple(re.compile(rx.pattern.replace("//", "#")) for rx in (BEGIN, END, STUB, HEADER_RE))
PY_HEADER = "# " + HEADER[3:]


def markers(path) -> tuple:
    """(BEGIN, END, STUB, HEADER, HEADER_RE) for a solution file: `#` comments for .py, else `//`."""
    if str(path).endswith(".py"):
        return (*PY_MARKERS[:3], PY_HEADER, PY_MARKERS[3])
    return BEGIN, END, STUB, HEADER, HEADER_RE


class ReleaseError(ValueError):
    pass


def make_stub(solution_text: str, name: str = "<solution>") -> str:
    """The stub body for a solution: solution blocks replaced by their STUB lines (`#` markers
    when `name` is a .py file)."""
    begin_rx, end_rx, stub_rx, _, _ = markers(name)
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
    begin_rx, end_rx, stub_rx, _, _ = markers(name)
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


def stub_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def untouched_stub(text: str, path) -> bool:
    """Whether `text` (of the file at `path`) is a stub exactly as `release` generated it: its header's
    hash is that of the rest, so nothing has been written in it yet."""
    m = markers(path)[4].match(text)
    return bool(m) and stub_hash(text[m.end():]) == m.group(1)
