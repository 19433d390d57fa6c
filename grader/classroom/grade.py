"""Grade a whole class: `python -m grader grade SUBMISSIONS --out OUT [--only day02 ...]`.

SUBMISSIONS holds one folder per student mirroring kernels/ (STUDENT/day02/silu_and_mul.cu,
or STUDENT/kernels/day02/...), or one archive per student (STUDENT.zip, .tar, .tar.gz, .tgz).

1. Every (student, exercise) is prepared in parallel across the cores: source and SASS
   checks, then the extension build (a process pool; nvcc and g++ run side by side).
2. The copy bandwidth is measured once for the run; then each submission runs on the GPU,
   one after another (timing needs the GPU to itself), each in its own process with a time
   limit and a host-memory limit, in a scratch directory, with the run's secret seed, from a
   copy of the grader that has no solutions/ in it.
3. Each result is written as soon as it exists (OUT/results/STUDENT/EXERCISE.json): an
   interrupted run resumes where it stopped; --force grades everything again.
4. OUT/gradebook.csv and .json, OUT/STUDENT/results.json (Gradescope's format),
   OUT/STUDENT/feedback.md and .html (failures explained, hidden inputs not shown), and
   OUT/class-summary.png.

Preparing compiles and inspects only (the link checks reject load-time code and calls outside
the launch API); the students' code runs only in the grading processes, each in the bubblewrap
sandbox (grader/check/sandbox.py) where it works: no network, the course read-only, the
submissions, OUT, the solutions and the build cache hidden, only its scratch folder writable.
The run's first lines say whether it works; where not, see the README's container recipe.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import random
import shutil
import time
from dataclasses import replace
from pathlib import Path

from .. import config, toolchain
from .. import exercises as _exercises
from ..check import Prepared, Result, RunOptions, prepare, run, sandbox
from .reports import score, write_reports
from .submissions import discover, locate


def _prepare_job(args):
    ex_id, path, display = args
    ex = _exercises.get(ex_id)
    if path is None:
        return Prepared(Result(ex_id, display, toolchain.mode()))
    return prepare(ex, Path(path), display=display)


def _runtime_copy(work: Path) -> str:
    """The grader package alone (no solutions/, no maintainer tools): what the grading processes import."""
    rt = work / "runtime"
    shutil.rmtree(rt, ignore_errors=True)
    # Maintainer tools (verify, the self-test) are not part of a student's grading run.
    shutil.copytree(toolchain.ROOT / "grader", rt / "grader", ignore=shutil.ignore_patterns("__pycache__", "maintain"))
    return str(rt)


def _calibrate(runtime: str, exercise_id: str) -> dict | None:
    """Each timed case's graded baseline (the copy's GB/s, cuBLAS's TFLOP/s, ...), measured once
    for the run in a process of its own: {case label: value}."""
    import subprocess
    import sys

    code = f"import json; from grader.check.worker import calibrate; print(json.dumps(calibrate({exercise_id!r})))"
    env = toolchain.subprocess_env(runtime)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def grade_class(submissions: str | Path, out: str | Path, only: list[str] | None = None, force: bool = False,
                jobs: int | None = None, timeout: float | None = None,
                memory_gb: float = config.CLASS_MEMORY_GB,
                secret_seed: int | None = None, seeds: int = config.PUBLIC_SEEDS, echo=print) -> int:
    submissions, out = Path(submissions), Path(out)
    if not submissions.is_dir():
        echo(f"no such folder: {submissions}")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    exs = list(_exercises.all_exercises().values())
    if only:
        exs = [e for e in exs if any(e.id == o or e.day == o for o in only)]
        if not exs:
            echo(f"no exercise matches {only}; `python -m grader list` shows them")
            return 2
    run_file = out / "run.json"
    run_info = json.loads(run_file.read_text()) if run_file.exists() and not force else {}
    secret = secret_seed if secret_seed is not None else run_info.get("secret_seed", random.randrange(1 << 30))
    students = discover(submissions, out / ".work")
    todo, problems = [], {}
    for student, (root, err) in students.items():
        for ex in exs:
            dest = out / "results" / student / f"{ex.id}.json"
            if dest.exists() and not force:
                continue
            filename = ex.stub_path.name
            display = f"{student}/{ex.day}/{filename}"
            path = locate(root, ex.day, filename) if root else None
            if path is None:
                problems[(student, ex.id)] = err or (f"no {ex.day}/{filename} in the submission (expected "
                                                     f"STUDENT/{ex.day}/{filename}, mirroring kernels/)")
            todo.append((student, ex, path, display))
    echo(f"{len(students)} students, {len(exs)} exercises: {len(todo)} to grade "
         f"({len(students) * len(exs) - len(todo)} already graded)")
    if toolchain.has_gpu() and todo and sandbox.available() is None:
        gpu_problem = sandbox.check_gpu()  # the grading processes need the GPU inside it
        if gpu_problem:
            sandbox.disable(gpu_problem)
    echo(sandbox.banner())  # where the submissions' code will run: in the sandbox, or plainly not
    t_build = time.perf_counter()
    if toolchain.has_gpu():  # make the shared precompiled header once, before the parallel builds
        from ..build import WARMUP_SOURCE, build

        build([WARMUP_SOURCE], name="warmup", quiet=True)
    jobs = jobs or max(1, (os.cpu_count() or 2) // 2)
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        prepared = list(pool.map(_prepare_job, [(ex.id, str(p) if p else None, d) for _, ex, p, d in todo]))
    build_s = time.perf_counter() - t_build
    echo(f"prepared (static checks, SASS, builds) in {build_s:.0f} s with {jobs} processes")
    runtime = _runtime_copy(out / ".work")
    calibration = {}
    for ex in exs if toolchain.has_gpu() and todo else []:
        calibration[ex.id] = _calibrate(runtime, ex.id)
        for label, value in (calibration[ex.id] or {}).items():
            echo(f"{ex.target.baseline.label}, measured once for this run: {ex.id} {label}: "
                 f"{value:.1f} {ex.target.unit}")
    run_file.write_text(json.dumps({"secret_seed": secret, "calibration": calibration,
                                    "exercises": [e.id for e in exs]}, indent=1))
    opts = RunOptions(seeds=[[str(s), s] for s in range(seeds)] + [["secret", secret]],
                      timeout=timeout or config.CLASS_TIMEOUT_S, memory_limit_gb=memory_gb, runtime_root=runtime,
                      sanitizers=config.CLASS_SANITIZERS,
                      hide=(str(submissions.resolve()), str(out.resolve())))  # + the solutions, the build cache
    t_run = time.perf_counter()
    for (student, ex, path, display), prep in zip(todo, prepared):
        t1 = time.perf_counter()
        if (student, ex.id) in problems:
            prep.result.add("source", "readable", "fail", problems[(student, ex.id)])
        else:
            run(ex, prep, replace(opts, calibrated=calibration.get(ex.id)))
        res = prep.result
        res.seconds = time.perf_counter() - t1 + (res.build_seconds or 0)
        record = dict(res.as_dict(), student=student, score=score(res, ex))
        dest = out / "results" / student / f"{ex.id}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(dest)  # written whole or not at all: a resumed run never reads half a result
        echo(f"{student:<20} {ex.id:<26} {record['verdict']:<6} {record['score']:5.1f}  "
             f"{res.first_failure()[:70]}")
    run_s = time.perf_counter() - t_run
    rows = write_reports(out, exs)
    total = time.perf_counter() - t0
    (out / "timing.json").write_text(json.dumps({"graded": len(todo), "prepare_s": build_s, "run_s": run_s,
                                                 "total_s": total, "jobs": jobs}, indent=1))
    echo(f"graded {len(todo)} submissions in {total:.0f} s (prepare {build_s:.0f} s, GPU {run_s:.0f} s); "
         f"gradebook: {out / 'gradebook.csv'} ({len(rows)} rows)")
    return 0
