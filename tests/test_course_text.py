"""The course speaks of itself only: no words from how it was made, which a learner has no context for.

A learner sees the notebooks, the kernels, the solutions and the README. None of them may point at
a ticket, a work session or a review ("the issue's measurement", "issue #12", "this session's
probe"): say what was measured, where, and how, or leave the claim out. The phrases are matched
whole, case-insensitively, so that course language stays free: "issue the loads", "the issue
slots" of a scheduler, "helpers" in a header.

Nor do comments anywhere in the grader, the tests, the kernels and solutions, or the notebooks' prose cite
commits: a comment states its rule, its evidence is a report or docs/decisions.md, its history is in git.
"""
import json
import re

import pytest

from grader import paths

ROOT = paths.ROOT

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
    files = sorted(paths.NOTEBOOKS.glob("day*.ipynb"))
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


# No commit hashes in code comments, kernel and solution headers, stubs or the notebooks' prose: a comment
# states its rule, evidence goes in reports/ and docs/decisions.md, history lives in git. A hash is 7 to 40
# lowercase hex digits with at least one digit and one letter, standing alone: not part of a longer word or
# identifier (mangled names, SASS opcodes), of a hex literal (0x...), of a decimal number (0.7071067811865476f),
# of a UUID or of a file name (reports/learner-loop-<hash>-h100.log names its run, which is where it belongs).
COMMIT_HASH = re.compile(r"(?<![\w./\\-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w/\\-]|\.\w)")
# `grader release`'s header of a stub: a digest of the solution, not a commit
STUB_HASH = re.compile(r"\(stub-hash [0-9a-f]+\)")


def commit_hashes(text):
    """The commit hashes in `text` (a comment, a docstring, a markdown cell): (line, hash, context)."""
    text = STUB_HASH.sub("(stub-hash)", text)
    for m in COMMIT_HASH.finditer(text):
        context = text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
        yield text.count("\n", 0, m.start()) + 1, m.group(0), context


def _python_prose(path):
    """(first line, text) of each comment and each string statement (docstrings) of a Python file."""
    import ast
    import io
    import tokenize

    source = path.read_text()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            yield node.lineno, node.value.value


def _prose(path):
    """(where, text) pairs of what a reader takes for prose: a Python file's comments and docstrings; a
    kernel's or solution's whole text (comments, and code where a hash has nothing to do); a notebook's
    markdown cells and its code cells' comment lines."""
    if path.suffix == ".py":
        for line, text in _python_prose(path):
            yield line, text
    elif path.suffix == ".ipynb":
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] != "markdown":
                source = "\n".join(l if l.lstrip().startswith(("#", "//")) else "" for l in source.split("\n"))
            yield f"cell {i}, ", source
    else:
        yield 1, path.read_text(errors="replace")


def _commented_files():
    files = sorted(paths.NOTEBOOKS.glob("day*.ipynb"))
    for top, pattern in (("grader", "*.py"), ("tests", "*.py"), ("kernels", "*"), ("solutions", "*")):
        files += sorted(p for p in (ROOT / top).rglob(pattern) if p.is_file())
    return [p for p in files if ".ipynb_checkpoints" not in p.parts and "__pycache__" not in p.parts]


@pytest.mark.parametrize("path", _commented_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_commit_hashes_in_comments(path):
    found = []
    for where, text in _prose(path):
        for line, found_hash, context in commit_hashes(text):
            at = f"{where}line {line}" if isinstance(where, str) else f"line {where + line - 1}"
            found.append(f"{at}: {found_hash!r}: ...{context}...")
    assert not found, (f"{path.relative_to(ROOT)} cites commits (say the rule; the evidence goes in reports/ or "
                       "docs/decisions.md, history in git):\n" + "\n".join(found))


@pytest.mark.parametrize("text", [
    "# Kept short (1.0 s until 35a5927; lower: a neighbour's long kernels count sooner.)",
    "at b14134c, 3 of the 8 hang mutants were stopped",
    "the self-test at 6abee3e",
    "since 426179d the preparation goes at the lanes' pace",
    "as of commit 3424a6e0f1b2c3d4e5f60718293a4b5c6d7e8f90.",
    "35a5927's run",
    "(see 9ecf890)",
])
def test_the_check_catches_commit_hashes(text):
    assert list(commit_hashes(text)), text


@pytest.mark.parametrize("text", [
    "// Your exercise: fill in the TODOs (about 5 lines). Generated from x.cu by `grader release` (stub-hash 03ef1105892a).",
    "/*0070*/  IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;  /* 0x00000a00ff017624 */",
    "constexpr float K = 0.7071067811865476f; return 1.5957691216057308f * x;",
    "_Z17silu_and_mul_fp16P6__halfPKS_ll and __nv_bf16x2",
    "GPU-6b1c0b0e-1c3a-4b5e-9d2f-0123456789ab",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "reports/learner-loop-cb33999-h100.log and reports/cupti-start-f23237f-h100.log, reports/x-35a5927.json",
    "a cafe with deadbeef and 1234567 of 2025-11-23, e4m3 at 4096x4096, HMMA.16816.F32.BF16",
])
def test_legitimate_hex_is_no_commit_hash(text):
    assert not list(commit_hashes(text)), text
