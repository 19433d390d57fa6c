"""Grading a class: every kind of bad submission becomes a row with a reason; runs resume."""
import io
import json
import shutil
import tarfile
import zipfile

import pytest

from grader import machine, paths
from grader.classroom import HIDDEN, grade_class
from grader.classroom.reports import _public

SOLUTION = paths.SOLUTIONS / "day01" / "scale_add.cu"


@pytest.fixture()
def klass(tmp_path):
    subs = tmp_path / "subs"
    (subs / "ann" / "day01").mkdir(parents=True)
    shutil.copy(SOLUTION, subs / "ann" / "day01" / "scale_add.cu")
    (subs / "ben" / "kernels" / "day01").mkdir(parents=True)          # the kernels/ layout
    (subs / "ben" / "kernels" / "day01" / "scale_add.cu").write_text(SOLUTION.read_text().replace(
        "out[i] = alpha * x[i] + y[i];", "out[i] = alpha * x[i] + y[i]"))  # compile error
    (subs / "cat" / "day01").mkdir(parents=True)
    (subs / "cat" / "day01" / "scale_add.cu").write_bytes(b"")        # empty
    (subs / "dan" / "day01").mkdir(parents=True)
    (subs / "dan" / "day01" / "scale_add.cu").write_bytes(b"\xff\xfe")  # not UTF-8
    with zipfile.ZipFile(subs / "eve.zip", "w") as z:                   # one top folder inside
        z.writestr("eve-work/day01/scale_add.cu", SOLUTION.read_text())
    with zipfile.ZipFile(subs / "fay.zip", "w") as z:                   # wrong layout
        z.writestr("notes.txt", "hello")
    with tarfile.open(subs / "gus.tar.gz", "w:gz") as t:                # escapes its folder
        info = tarfile.TarInfo("../../evil.cu")
        info.size = 1
        t.addfile(info, io.BytesIO(b"x"))
    (subs / "hal.zip").write_text("not a zip")                         # unreadable archive
    (subs / "ida" / "day01").mkdir(parents=True)
    (subs / "ida" / "day01" / "scale_add.cu").write_text(SOLUTION.read_text().replace(
        "#include \"course/common.cuh\"", "#include \"course/common.cuh\"\n#include \"../../solutions/day01/scale_add.cu\""))
    return subs, tmp_path / "out"


def _rows(out):
    return {r["student"]: r for r in json.loads((out / "gradebook.json").read_text())}


def test_every_bad_submission_is_a_row_with_a_reason(klass):
    subs, out = klass
    assert grade_class(subs, out, only=["day01"], jobs=2, echo=lambda s: None) == 0
    rows = _rows(out)
    assert set(rows) == {"ann", "ben", "cat", "dan", "eve", "fay", "gus", "hal", "ida"}
    expect = {"ben": "failed to build", "cat": "empty", "dan": "not UTF-8", "fay": "no day01/scale_add.cu",
              "gus": "outside its folder", "hal": "cannot be read", "ida": "includes"}
    for student, reason in expect.items():
        assert rows[student]["verdict"] == "fail" and reason in rows[student]["failure"], rows[student]
        assert rows[student]["score"] == 0
    for good in ("ann", "eve"):
        assert rows[good]["failure"] == "" and rows[good]["score"] > 0
    assert "scale_add.cu:" in rows["ben"]["failure"]  # the first error, with file and line
    gradescope = json.loads((out / "ann" / "results.json").read_text())
    assert gradescope["tests"][0]["name"] == "day01.scale_add" and gradescope["tests"][0]["max_score"] == 100
    assert (out / "ann" / "feedback.md").exists() and (out / "class-summary.png").stat().st_size > 0
    assert "secret_seed" in json.loads((out / "run.json").read_text())


def test_an_interrupted_run_resumes_and_force_regrades(klass):
    subs, out = klass
    grade_class(subs, out, only=["day01.scale_add"], jobs=2, echo=lambda s: None)
    (out / "results" / "cat" / "day01.scale_add.json").unlink()  # as if stopped before cat
    lines = []
    grade_class(subs, out, only=["day01.scale_add"], jobs=2, echo=lines.append)
    assert "1 to grade" in lines[0]
    lines = []
    grade_class(subs, out, only=["day01.scale_add"], jobs=2, force=True, echo=lines.append)
    assert "9 to grade" in lines[0]


def test_feedback_never_shows_hidden_inputs():
    item = {"group": "correctness", "name": "n=129", "status": "fail",
            "detail": "seed secret: out: 1 of 129 elements differ; first: [128]: yours nan vs expected 0.25"}
    assert _public(item)["detail"] == HIDDEN
    public = {"group": "correctness", "name": "n=129", "status": "fail", "detail": "seed 0: out: 1 of 129 differ"}
    assert _public(public) == public


def test_unknown_selection_and_missing_folder(tmp_path):
    assert grade_class(tmp_path / "nope", tmp_path / "out", echo=lambda s: None) == 2
    (tmp_path / "subs").mkdir()
    assert grade_class(tmp_path / "subs", tmp_path / "out", only=["day99"], echo=lambda s: None) == 2


def test_a_figure_the_worker_marked_invalid_stays_out_of_the_gradebook_and_the_score(tmp_path):
    # The worker marks a measurement invalid when it is above the GPU's peak (a stale or cached
    # result) or the results went wrong while timing; the gradebook and the score read that flag.
    from grader import exercises
    from grader.check import Result
    from grader.classroom import score, write_reports

    def perf(gbps):
        valid = gbps < 4814.0
        return {"group": "performance", "name": "n=67108865", "status": "pass" if valid else "fail",
                "detail": "...", "metrics": {"kind": "memory", "unit": "GB/s", "value": gbps, "ratio": gbps / 4150,
                                             "baseline": "copy", "target": 0.8, "valid": valid}}

    for student, gbps in (("honest", 3900.0), ("stale", 628000.0)):
        (tmp_path / "results" / student).mkdir(parents=True)
        (tmp_path / "results" / student / "day01.scale_add.json").write_text(json.dumps(
            {"exercise": "day01.scale_add", "verdict": "fail", "score": 50, "items": [perf(gbps)]}))
    rows = {r["student"]: r for r in write_reports(tmp_path, [exercises.get("day01.scale_add")])}
    assert rows["honest"]["value"] == 3900.0 and rows["honest"]["ratio"] == round(3900 / 4150, 3)
    assert rows["honest"]["unit"] == "GB/s" and rows["honest"]["baseline"] == "copy"
    assert rows["stale"]["value"] == "" and rows["stale"]["ratio"] == ""
    points = {}
    for student, gbps in (("honest", 3900.0), ("stale", 628000.0)):
        res = Result("day01.scale_add", "x.cu", "gpu")
        item = perf(gbps)
        res.add(item["group"], item["name"], item["status"], item["detail"], item["metrics"])
        points[student] = score(res, exercises.get("day01.scale_add"))
    assert points["honest"] - points["stale"] == 25  # the whole performance share


class _Warm:
    """A stand-in for supervise.WarmWorker: what a lane started, and whether it was discarded."""

    def __init__(self, started, opts, profiler=False, sanitize=None, after=None):
        self.profiler, self.sanitize, self.discarded, self.used = profiler, sanitize, False, False
        self.after = after
        self.proc = self
        self.code = None  # (its exit code: None while it runs)
        started.append(self)

    def poll(self):
        return self.code

    def discard(self):
        self.discarded = True


def _fake_lane(monkeypatch) -> list:
    """Class lanes on a pretend GPU whose processes are _Warm: returns the list of those started."""
    from grader.classroom import lane

    started = []
    monkeypatch.setattr(lane, "WarmWorker", lambda *a, **kw: _Warm(started, *a, **kw))
    monkeypatch.setattr(lane, "_NEXT", {})
    monkeypatch.setattr(lane.machine, "gpu_present", lambda: True)
    return started


def test_a_lane_starts_the_grading_processes_of_its_next_submission_while_it_grades(monkeypatch):
    """Each lane's next grading processes (torch, the CUDA context, compute-sanitizer: seconds) start while
    it grades the submission before (one grading process per submission, the profiler's check last in it): the first grading starts its own, each later one
    takes those started for it, unless they were started for other options or have ended meanwhile;
    a compute-sanitizer process waits until a grading uses it (not where the verdict was cached)."""
    from grader import exercises
    from grader.check import Prepared, Result, RunOptions
    from grader.classroom import lane

    started = _fake_lane(monkeypatch)
    ex = exercises.get("day02.silu_and_mul")
    built = Prepared(Result(ex.id, "s/day02/silu_and_mul.cu", "gpu"), module_dir="/m", module_name="m")
    opts = RunOptions(runtime_root="/rt", hide=("/subs",), sanitizers=("memcheck", "racecheck"))

    def grading(prep, options):
        warm, sanitizers = lane._warm_processes(ex, prep, options)
        for w in sanitizers.values():
            w.used = True  # (run() takes them: run_worker marks what it used)
        lane._after_run(prep, options, warm, sanitizers)
        return warm, sanitizers

    assert grading(built, opts) == (None, {})  # the first: its own processes
    first = started[:2]
    assert [(w.profiler, w.sanitize) for w in first] == [(False, None), (False, "memcheck")]
    warm, sanitizers = grading(built, opts)  # the next takes them (no racecheck: no shared memory)
    assert warm == tuple(first[:1]) and sanitizers == {"memcheck": first[1]}
    assert all(w.discarded for w in first) and not any(w.discarded for w in started[3:])
    waiting = lane._NEXT["sanitizers"]["memcheck"]
    # A cached verdict (or a run that was not clean) leaves the compute-sanitizer process for the next.
    warm, sanitizers = lane._warm_processes(ex, built, opts)
    assert sanitizers == {"memcheck": waiting}
    lane._after_run(built, opts, warm, sanitizers)
    assert lane._NEXT["sanitizers"]["memcheck"] is waiting and not waiting.discarded
    # Started for other options, or ended meanwhile: not used, discarded.
    kept = lane._NEXT
    assert grading(built, RunOptions(runtime_root="/other")) == (None, {})
    assert all(w.discarded for w in [*kept["warm"], waiting])
    kept = lane._NEXT
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # a Ray worker's next task, on another GPU
    assert grading(built, RunOptions(runtime_root="/other")) == (None, {})
    assert all(w.discarded for w in kept["warm"])
    lane._NEXT["warm"][0].code = -9
    assert grading(built, RunOptions(runtime_root="/other"))[0] is None
    # Nothing to run (it did not build), or a run under compute-sanitizer: what waits keeps waiting.
    kept = lane._NEXT
    assert grading(Prepared(Result(ex.id, "s", "gpu")), opts) == (None, {})
    assert grading(built, RunOptions(runtime_root="/other", sanitize="memcheck")) == (None, {})
    assert lane._NEXT is kept and not any(w.discarded for w in kept["warm"])
    lane._discard_next()
    assert lane._NEXT == {} and all(w.discarded for w in kept["warm"])


def test_a_lane_primed_at_its_start_grades_its_first_submission_warm(monkeypatch):
    """prime_lane (as the slot process starts) starts the grading process and a memcheck one for the lane's
    first submission, which takes them (the memcheck one makes its CUDA context after the other's: every
    lane of every GPU starts at once); primed again, it starts nothing more."""
    from grader import exercises
    from grader.check import Prepared, Result, RunOptions
    from grader.classroom import lane

    started = _fake_lane(monkeypatch)
    ex = exercises.get("day02.silu_and_mul")
    built = Prepared(Result(ex.id, "s/day02/silu_and_mul.cu", "gpu"), module_dir="/m", module_name="m")
    opts = RunOptions(runtime_root="/rt", hide=("/subs",), sanitizers=("memcheck",))
    lane.prime_lane(opts)
    lane.prime_lane(opts)
    assert [(w.profiler, w.sanitize) for w in started] == [(False, None), (False, "memcheck")]
    assert started[1].after is started[0]  # (its CUDA context after the grading process's own)
    warm, sanitizers = lane._warm_processes(ex, built, opts)
    assert warm == tuple(started[:1]) and sanitizers == {"memcheck": started[1]}
    lane._discard_next()
    monkeypatch.setattr(lane.machine, "gpu_present", lambda: False)
    lane.prime_lane(opts)
    assert lane._NEXT == {} and len(started) == 3  # (no GPU here: nothing started)


def test_a_lane_whose_next_processes_cannot_start_grades_as_ever(monkeypatch):
    """A process that cannot be started ahead (a full process table, a sandbox that fails) costs
    nothing but the head start: the grading starts its own, and nothing is left half started."""
    from grader import exercises
    from grader.check import Prepared, Result, RunOptions
    from grader.classroom import lane

    tried = []

    class Warm:
        def __init__(self, opts, profiler=False, sanitize=None):
            tried.append(sanitize)
            raise OSError("Resource temporarily unavailable")

    monkeypatch.setattr(lane, "WarmWorker", Warm)
    monkeypatch.setattr(lane, "_NEXT", {})
    monkeypatch.setattr(lane.machine, "gpu_present", lambda: True)
    ex = exercises.get("day02.silu_and_mul")
    built = Prepared(Result(ex.id, "s/day02/silu_and_mul.cu", "gpu"), module_dir="/m", module_name="m")
    opts = RunOptions(runtime_root="/rt", sanitizers=("memcheck",))
    for _ in range(2):
        warm, sanitizers = lane._warm_processes(ex, built, opts)
        assert (warm, sanitizers) == (None, {})
        lane._after_run(built, opts, warm, sanitizers)
    assert tried.count(None) == 2 and tried.count("memcheck") == 2  # each tried once per grading
    assert lane._NEXT == {"key": lane._warm_key(opts), "warm": None, "sanitizers": {}}


def test_a_grading_process_left_running_after_a_class_run_is_stopped():
    """A grading process whose lane process ended first comes to the class run's process (its
    subreaper) and is stopped at the run's end; a process of the caller's that is no grading
    process is left alone."""
    import ctypes
    import os
    import subprocess
    import sys

    from grader.classroom import orphans

    adopted = orphans.adopt_orphans()
    leave = ("import subprocess, sys\n"
             "def start(*args):\n"
             "    return subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', *args],\n"
             "                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid\n"
             "print(start('-m', 'grader.check.worker'), start(), flush=True)\n")  # and ends: its children come here
    grading, other = map(int, subprocess.run([sys.executable, "-c", leave], capture_output=True, text=True,
                                             timeout=60).stdout.split())
    try:
        stopped = orphans.stop_orphans(adopted)
        assert len(stopped) == 1 and "grader.check.worker" in stopped[0], stopped
        with pytest.raises(ProcessLookupError):
            os.kill(grading, 0)  # stopped and reaped
        os.kill(other, 0)  # still there
        # and this process is no subreaper after the run (an orphan of later work goes to init, as before)
        flag = ctypes.c_int(-1)
        ctypes.CDLL(None).prctl(orphans.PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
        assert flag.value == adopted.was_subreaper  # (0 unless something made it one before)
    finally:
        for pid in (grading, other):
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def test_the_calibration_measures_every_exercise_in_one_process_and_says_which_failed(monkeypatch):
    """One process per GPU for all the run's exercises (19 processes' start was 4 minutes of a
    whole-course run's setup at 13 s each); an exercise whose baseline cannot be measured (here: no
    GPU) is None, the others unharmed."""
    import subprocess

    from grader.classroom import lane

    started = []
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: started.append(argv) or real_run(argv, **kw))
    got = lane.measure_baselines(str(paths.ROOT), ["day01.scale_add", "day02.silu_and_mul"])
    assert list(got) == ["day01.scale_add", "day02.silu_and_mul"] and len(started) == 1
    if machine.has_gpu():  # each its timed cases' baselines
        assert all(v and all(x["value"] > 0 for x in v.values()) for v in got.values()), got
    else:
        assert all(v is None for v in got.values()), got


def test_a_case_skipped_on_a_smaller_gpu_costs_no_points():
    """Correctness is the share of the cases run: one a GPU has too little memory for (Case.gpu_gib) is
    left out, not counted against the student; a failed one counts."""
    from grader import exercises
    from grader.check import Result
    from grader.classroom import score

    def result(third):
        res = Result("day11.batch_decode", "x.cu", "gpu")
        res.add("correctness", "a", "pass", "")
        res.add("correctness", "b", "pass", "")
        res.add("correctness", "past 4 GiB", third, "")
        return score(res, exercises.get("day11.batch_decode"))

    assert result("skip") == result("pass") > result("fail")
