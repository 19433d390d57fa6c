"""A grader that tests itself: known-wrong submissions and the verdict each must get.

tests/mutants/<exercise>/<mutant>.cu is a solution with one deliberate defect (its
first line says which); tests/mutants/expected.json gives the group of the check
that must fail and a substring of its name or detail. Static defects (source,
SASS, build) are caught everywhere; the rest run on a GPU.
"""
import json
from pathlib import Path

import pytest

from conftest import gpu
from grader.checks import check

MUTANTS = Path(__file__).parent / "mutants"
EXPECTED = json.loads((MUTANTS / "expected.json").read_text())
STATIC = sorted(k for k, v in EXPECTED.items() if not v["needs_gpu"])
RUNTIME = sorted(k for k, v in EXPECTED.items() if v["needs_gpu"])


def _grade(key, **kw):
    exercise, _ = key.split("/")
    return check(exercise, source=MUTANTS / f"{key}.cu", quiet=True, **kw)


def _says(item, reason):
    return reason in f"{item.name} {item.detail}"


def test_every_mutant_has_a_verdict_and_says_what_is_wrong():
    files = {f"{p.parent.name}/{p.stem}": p for p in MUTANTS.glob("*/*.cu")}
    assert sorted(files) == sorted(EXPECTED), "every .cu needs an entry in expected.json, and vice versa"
    for key, p in files.items():
        assert p.read_text().startswith("// MUTANT "), f"{key}: the first line must say what is wrong"
        assert EXPECTED[key]["group"] in ("source", "sass", "build", "correctness", "work", "performance"), key


@pytest.mark.gpu  # needs no GPU, but `-m gpu` (the GPU verification) selects it too: all mutants in one tally
@pytest.mark.parametrize("key", STATIC)
def test_static_checks_catch(key):
    want = EXPECTED[key]
    result = _grade(key, perf=False, seeds=1)
    assert result.failures, f"{key} was not caught:\n{result}"
    first = result.failures[0]
    assert first.group == want["group"] and _says(first, want["reason"]), f"{key}: expected {want}\n{result}"


@gpu
@pytest.mark.parametrize("key", RUNTIME)
def test_runtime_checks_catch(key):
    want = EXPECTED[key]
    timed = want["group"] == "performance"
    # 25 s stops a hang; the others get room for a busy GPU (the verification runs tests side by side).
    hang = want["reason"] == "no result within"
    result = _grade(key, perf=timed, seeds=2, timeout=25 if hang else 120)
    hits = [i for i in result.failures if i.group == want["group"] and _says(i, want["reason"])]
    if not hits and want.get("sanitizer"):  # a race need not show in the outputs; the sanitizer sees it
        _caught_by_sanitizer(key, want["sanitizer"])
        return
    missing_tool = [i for i in result.items if i.status == "skip" and i.group == want["group"]
                    and _says(i, want["reason"])]
    if not hits and missing_tool:  # e.g. Nsight Compute for bank conflicts
        pytest.skip(f"{key}: {missing_tool[0].detail}")
    assert not result.ok, f"{key} was not caught:\n{result}"
    if timed:  # right answers, too slow: only the performance check may fail
        assert not [i for i in result.failures if i.group == "correctness"], f"{key} should be correct:\n{result}"
    assert hits, f"{key}: expected a {want['group']} failure saying '{want['reason']}'\n{result}"


def _caught_by_sanitizer(key, tool):
    result = _grade(key, sanitize=tool, seeds=1)
    item = next((i for i in result.items if i.name == f"compute-sanitizer {tool}"), None)
    if item is not None and item.status == "skip":
        pytest.skip(f"{key}: the race did not show in the outputs, and {item.detail}")
    assert item is not None and item.status == "fail", f"{key}: compute-sanitizer {tool} did not see the race\n{result}"
