"""A grader that tests itself: known-wrong submissions and the verdict each must get.

tests/mutants/<exercise>.toml holds, per mutant, what is wrong, the group of the check
that must fail, a substring of its name or detail, and the edits that turn the current
reference solution into the mutant (grader/maintain/corpus.py). Each test grades the mutant's
source written into corpus.written_dir() (in the build cache, so builds are reused). Static defects (source, SASS, build) are caught
everywhere; the rest run on a GPU.
"""
import os
import xml.etree.ElementTree as ET

import pytest

from conftest import gpu
from grader import config, exercises
from grader.maintain import corpus
from conftest import check

MUTANTS = corpus.all_mutants()
STATIC = sorted(k for k, m in MUTANTS.items() if not m.needs_gpu)
RUNTIME = sorted(k for k, m in MUTANTS.items() if m.needs_gpu)


def _grade(key, monkeypatch, **kw):
    m = MUTANTS[key]
    # A Python module (Day 14's decoder) is graded on the kernels it builds on: the references here, so
    # that a mutant is caught for its own fault, not for the untouched stubs of kernels/.
    if exercises.get(m.exercise).learner_file == "python":
        monkeypatch.setenv("COURSE_USE_SOLUTIONS", "1")
    return check(m.exercise, source=m.write(corpus.written_dir()), quiet=True, **kw)


def _says(item, reason):
    return reason in f"{item.name} {item.detail}"


def test_every_exercise_has_mutants_and_every_mutant_says_what_is_wrong():
    ids = set(exercises.all_exercises())
    files = {p.stem for p in corpus.MUTANTS_DIR.glob("*.toml")}
    assert not ids - files, f"exercises without a tests/mutants/<id>.toml: {sorted(ids - files)}"
    assert not files - ids, f"tests/mutants/*.toml for no exercise: {sorted(files - ids)}"
    for key, m in MUTANTS.items():
        assert m.what.strip() and "\n" not in m.what, f"{key}: `what` must say, on one line, what is wrong"
        assert m.group in corpus.GROUPS, f"{key}: group {m.group!r}"
        assert m.reason.strip(), f"{key}: empty reason"
        assert m.edits, f"{key}: no edits"


def test_every_mutants_edits_apply_to_the_current_solution():
    # Fails when a solution changed under its mutants: fix the `old` the message names.
    # One test for all (not parametrized), so the GPU verification's mutant tally counts
    # only the tests that grade a mutant.
    problems = []
    for key, m in MUTANTS.items():
        try:
            src = m.source()
        except corpus.MutantError as e:
            problems.append(str(e))
            continue
        header, body = src.split("\n", 1)
        if header not in (f"// MUTANT {m.what}", f"# MUTANT {m.what}"):
            problems.append(f"{key}: the source must start with `// MUTANT <what>`")
        if body == exercises.get(m.exercise).solution_path.read_text():
            problems.append(f"{key}: the edits leave the solution unchanged")
    assert not problems, "\n".join(problems)


@pytest.mark.gpu  # needs no GPU, but `-m gpu` (the GPU verification) selects it too: all mutants in one tally
@pytest.mark.parametrize("key", STATIC)
def test_static_checks_catch(key, monkeypatch):
    want = MUTANTS[key]
    result = _grade(key, monkeypatch, perf=False, seeds=1)
    assert result.failures, f"{key} was not caught:\n{result}"
    # Static checks all report at once (a kernel without cp.async may also spill): the named one must be
    # among them, as in the runtime test below.
    assert [i for i in result.failures if i.group == want.group and _says(i, want.reason)], \
        f"{key}: expected a {want.group} failure saying '{want.reason}'\n{result}"


@gpu
@pytest.mark.parametrize("key", RUNTIME)
def test_runtime_checks_catch(key, monkeypatch):
    want = MUTANTS[key]
    timed = want.group == "performance"
    # A hang is stopped at config.RUN_LIMIT_S (25 s is the whole check's limit then); the others get
    # room for a busy GPU (the verification runs tests side by side).
    hang = want.reason == "no result within"
    # Races and reads past the end need not show in the outputs: graded as a learner's check grades
    # them (None: its default sanitizers, on its small cases, after a clean run); class grading runs
    # the same tools on more cases.
    sanitizers = None if want.sanitizer else ()
    # (a whole check of Day 8's sampler took over 120 s with 6 checks sharing one H100)
    result = _grade(key, monkeypatch, perf=timed, seeds=2, timeout=25 if hang else 2 * config.CHECK_TIMEOUT_S,
                    sanitizers=sanitizers)
    hits = [i for i in result.failures if i.group == want.group and _says(i, want.reason)]
    if want.undetected:  # a known blind spot: reported as one, and a surprise if it is ever caught
        seen = hits or any(i.name.startswith("compute-sanitizer") for i in result.failures)
        assert not seen, f"{key} is now caught: drop its `undetected` in {want.toml_path.name}\n{result}"
        pytest.xfail(f"blind spot: {want.undetected}")
    if not hits and want.sanitizer:
        _caught_by_sanitizer(key, want.sanitizer, result)
        return
    missing_tool = [i for i in result.items if i.status == "skip" and i.group == want.group
                    and _says(i, want.reason)]
    if not hits and missing_tool:  # e.g. Nsight Compute for bank conflicts
        pytest.skip(f"{key}: {missing_tool[0].detail}")
    assert not result.ok, f"{key} was not caught:\n{result}"
    if timed:  # right answers, too slow: only the performance check may fail
        assert not [i for i in result.failures if i.group == "correctness"], f"{key} should be correct:\n{result}"
    assert hits, f"{key}: expected a {want.group} failure saying '{want.reason}'\n{result}"


def _caught_by_sanitizer(key, tool, result):
    item = next((i for i in result.items if i.name == f"compute-sanitizer {tool}"), None)
    if item is not None and item.status == "skip":
        pytest.skip(f"{key}: the race did not show in the outputs, and {item.detail}")
    assert item is not None and item.status == "fail", f"{key}: compute-sanitizer {tool} did not see the race\n{result}"


def test_verify_parts_select_days_exercises_and_the_grader_tests():
    # `--only` splits the GPU runs (verify, self-test) into commands that fit 10 minutes each: what a part
    # selects must be exactly its days' exercises, mutants and notebooks.
    from grader.maintain.runs import Scope
    from grader.maintain.self_test import _self_test_pytest_args

    part = Scope(["day07-day08", "day09.mma_tile"])
    assert [e.id for e in part.exercises()] == ["day07.skinny_gemm", "day08.top_p_sampling", "day09.mma_tile"]
    assert part.has_day("day09") and not part.has_day("day06") and not part.grader_tests
    assert part.stem("gpu-self-test") == "gpu-self-test-day07-day08-day09.mma_tile"
    assert _self_test_pytest_args(part) == ["tests/test_mutants.py", "tests/test_correct.py", "-k",
                                            "day07 or day08 or day09.mma_tile"]
    rest = Scope(["grader", "day01-day06"])
    assert rest.grader_tests and len(rest.exercises()) == 8
    assert _self_test_pytest_args(rest)[-1].startswith("not test_mutants and not test_correct or day01 or")
    assert Scope([]).everything and Scope().stem("gpu-notebooks") == "gpu-notebooks"
    assert Scope(["day99"]).check() and not Scope(["grader"]).check() and not Scope(["correct"]).check()
    assert _self_test_pytest_args(Scope(["correct"])) == ["tests/test_correct.py"]
    assert _self_test_pytest_args(Scope(["correct", "day14"])) == ["tests/test_correct.py", "-k", "day14"]
    assert not Scope(["correct"]).exercises()  # (no solution's 20 seeds in that part)


def test_verify_report_shows_an_untimed_case_as_a_row():
    # A solution whose results are wrong is not timed: its row in the GPU report says so and why,
    # and the report is still written (a crash here once lost a whole part's report).
    from grader.check.result import Item
    from grader.maintain.verify import _perf_cells, _perf_row

    untimed = _perf_row(Item("performance", "bf16 M=32768 K=4096", "fail", "not timed, results are wrong: q: 3 differ"))
    assert untimed["value"] is None and "results are wrong" in untimed["not_timed"]
    assert "not timed, results are wrong" in _perf_cells(untimed)
    timed = {"case": "c", "value": 2746.0, "unit": "GB/s", "ratio": 0.835, "baseline": "copy", "target": 0.9,
             "copy_ratio": 0.835, "torch_ratio": 0.99}
    assert _perf_cells(timed) == " c | 2746 GB/s | 0.835x copy | 0.9 | 0.99x torch |"


def test_the_self_test_report_counts_blind_spots_apart(tmp_path):
    # A mutant marked `undetected` (xfail) is neither caught nor missed nor "not run here": the report
    # names it as a blind spot, so the tally cannot look better or worse than it is.
    from grader.maintain.self_test import _mutant_tally

    junit = tmp_path / "j.xml"
    junit.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.test_mutants" name="test_runtime_checks_catch[a/caught]" time="12.5"/>'
        '<testcase classname="tests.test_mutants" name="test_runtime_checks_catch[a/missed]"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_mutants" name="test_runtime_checks_catch[a/blind]">'
        '<skipped type="pytest.xfail" message="blind spot: the copies outlast the skew"/></testcase>'
        '<testcase classname="tests.test_mutants" name="test_runtime_checks_catch[a/noncu]">'
        '<skipped type="pytest.skip" message="no ncu"/></testcase>'
        '</testsuite></testsuites>')
    t = _mutant_tally(junit)
    assert (t["caught"], t["total"], t["missed"]) == (1, 2, ["a/missed"])
    assert t["blind_spots"] == ["a/blind"] and t["skipped"] == ["a/noncu"]
    assert t["slowest_tests"][0] == {"test": "test_mutants::test_runtime_checks_catch[a/caught]", "seconds": 12.5}
    # A run stopped at its time limit: the mutants it never reached are not run, not caught.
    t = _mutant_tally(junit, ["a/blind", "a/caught", "a/late", "a/missed", "a/noncu"])
    assert t["not_run"] == ["a/late"] and (t["caught"], t["total"]) == (1, 2)
    assert _mutant_tally(tmp_path / "none.xml", ["a/x"])["not_run"] == ["a/x"]


def test_a_test_run_stopped_at_its_limit_still_writes_what_it_ran(tmp_path, monkeypatch):
    # The GPU runs' test runs end at their time limit as at Ctrl-C: the junit file of what ran is written,
    # so the self-test's report says which mutants were caught and which were not reached.
    from grader.maintain import runs

    monkeypatch.setattr(runs, "PYTEST_GRACE_S", 20.0)
    (tmp_path / "test_slow.py").write_text(
        "import time\nimport pytest\n\n@pytest.mark.parametrize('i', range(30))\n"
        "def test_s(i):\n    time.sleep(0.5 if i < 2 else 60)\n")
    junit = tmp_path / "j.xml"
    r = runs.pytest([str(tmp_path / "test_slow.py"), "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                     f"--rootdir={tmp_path}", f"--junitxml={junit}"], dict(os.environ), tmp_path / "log", 15)
    # (15 s: pytest's own start on a loaded 2-core machine took most of 6 s, before test_s[0] ended)
    assert r["rc"] == "timeout" and r["seconds"] < 15 + 20
    names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert "test_s[0]" in names and "test_s[29]" not in names


def test_blind_spots_say_why():
    for key, m in MUTANTS.items():
        assert m.undetected is None or len(m.undetected) > 40, f"{key}: `undetected` must say why no check sees it"
