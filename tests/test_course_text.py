"""The course speaks of itself only: no words from how it was made, which a learner has no context for.

A learner sees the notebooks, the kernels, the solutions and the README. None of them may point at
a ticket, a work session or a review ("the issue's measurement", "issue #12", "this session's
probe"): say what was measured, where, and how, or leave the claim out. The phrases are matched
whole, case-insensitively, so that course language stays free: "issue the loads", "the issue
slots" of a scheduler, "helpers" in a header.
"""
import json
import re

import pytest

from grader import toolchain

ROOT = toolchain.ROOT

# Each pattern, and why a learner cannot follow it.
PROCESS_WORDS = {
    # a tracker's ticket; "the issue slots/rate/..." of a warp scheduler stay allowed
    r"\bthe issue\b(?!\s+(slots?|rate|width|ports?|stages?|queue|logic|stalls?|latency|cycles?|bandwidth))":
        "a ticket the learner never saw",
    r"\bissues?\s*#\s*\d": "a ticket number",
    # "issue 9" as a reference ("see issue 9", "(issue 9)"), not a verb ("a warp issues 4 LDSM")
    r"(?:\b(?:in|see|from|per|by|after)\s+|\()issues?\s+\d+\b": "a ticket number",
    r"\bissues/": "a link into a tracker",
    r"\bthis session\b": "a work session, not the learner's",
    r"\bdevelopment runs?\b": "a run the learner cannot repeat or look up",
    r"\bhelper (session|agent)s?\b": "how the course was written",
    r"\bsteering\b": "how the course was written",
    r"\bthe ticket\b": "a ticket the learner never saw",
    r"\bmaintainer'?s note\b": "a note to the authors",
    r"\bthe brief\b": "a brief the learner never saw",
    r"\bcourse-plan\b|\bshared/(style|seeds)": "the authors' planning files",
    r"\bseed notes?\b": "the authors' source notes",
}
PATTERNS = [(re.compile(p, re.IGNORECASE), why) for p, why in PROCESS_WORDS.items()]


def _learner_files():
    files = sorted(toolchain.NOTEBOOKS.glob("day*.ipynb"))
    files += sorted(p for p in (ROOT / "kernels").rglob("*") if p.suffix in (".cu", ".cuh"))
    files += sorted(p for p in (ROOT / "solutions").rglob("*") if p.is_file())
    files.append(ROOT / "README.md")
    return [p for p in files if ".ipynb_checkpoints" not in p.parts and "__pycache__" not in p.parts]


def _texts(path):
    """(where, text) pairs: a notebook's cells one by one (sources and any outputs), else the file."""
    if path.suffix == ".ipynb":
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            text = "".join(cell["source"])
            for output in cell.get("outputs", []):
                text += "\n" + "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
            yield f"cell {i}", text
    else:
        yield "file", path.read_text(errors="replace")


def _hits(text):
    for pattern, why in PATTERNS:
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            context = text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
            yield f"line {line}: {m.group(0)!r} ({why}): ...{context}..."


@pytest.mark.parametrize("path", _learner_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_words_from_how_the_course_was_made(path):
    found = [f"{where}, {hit}" for where, text in _texts(path) for hit in _hits(text)]
    assert not found, f"{path.relative_to(ROOT)} speaks of its own making:\n" + "\n".join(found)


@pytest.mark.parametrize("text", [
    "The issue's 0.26x was measured on long rows.",
    "as measured in issue #15",
    "see issue 9 for the numbers",
    "the numbers (issue 9) say",
    "https://github.com/example/course/issues/15",
    "(this session's probe)",
    "in numbers from that development run",
    "a maintainer's note: fix later",
])
def test_the_check_catches_process_words(text):
    assert list(_hits(text)), text


@pytest.mark.parametrize("text", [
    "the eight loads of a group are issued before the first store",
    "a warp issues two mma per step",
    "this issues 4 LDSM, and each warp must issue 4 loads in a row",
    "how much of the issue slots each scheduler used",
    "the helpers below print the PTX",
    "random seeds, and a seed per case",
    "a maintainer tool",
])
def test_course_language_stays_allowed(text):
    assert not list(_hits(text)), text
