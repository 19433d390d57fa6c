"""`python -m grader` / `course-grader`: list, check, doctor, release, days-table, grade, and the
maintainers' GPU runs: verify, self-test, class-benchmark, ncu-jupyter.

The options of `check` are defined once in options.py and shared with the pytest
plugin (`pytest --grader day02.silu_and_mul ...`), so both accept the same flags.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from . import config
from .options import OPTIONS, check_kwargs

def cmd_list(args) -> int:
    from . import exercises, paths
    from .maintain import corpus

    right = Counter(sub.exercise for sub in corpus.correct_submissions().values())
    rel = lambda p: p.relative_to(paths.ROOT)  # noqa: E731
    for ex in exercises.all_exercises().values():
        print(f"{ex.id:<22} {ex.title}")
        print(f"    {ex.summary}")
        print(f"    your file  {rel(ex.stub_path)} (about {ex.lines_to_write} lines to write)\n"
              f"    solution   {rel(ex.solution_path)}")
        print(f"    spec       {rel(ex.spec_path)}\n    notebook   {ex.notebook}  (cell 'Exercise: {ex.name}')")
        print(f"    target     {ex.target.describe()}; required SASS: "
              f"{', '.join(ex.required_sass) or 'none'}")
        wrong = corpus.MUTANTS_DIR / f"{ex.id}.toml"
        if wrong.exists():
            print(f"    wrong code {rel(wrong)} ({len(corpus.mutants_for(ex.id))} mutants the grader must fail)")
        if ex.id in right:
            print(f"    right code {rel(corpus.CORRECT_DIR / ex.id)}/ ({right[ex.id]} files written unlike the "
                  "solution, each must pass)")
        for bench in sorted(paths.ROOT.glob(f"benchmarks/{ex.day}_*/")):
            print(f"    benchmark  {rel(bench)}/")
    return 0


@contextlib.contextmanager
def _working(what: str):
    """On a terminal: `what` with the seconds ticking while it runs, wiped when done (the build inside
    prints its own lines); elsewhere (a log, a pipe) nothing."""
    if not sys.stderr.isatty():
        yield
        return
    from .jit.extension import BUILDING

    done, t0 = threading.Event(), time.perf_counter()

    def tick():
        while not done.wait(1.0):
            if not BUILDING.is_set():  # a build shows its own progress line meanwhile
                sys.stderr.write(f"\r{what} {time.perf_counter() - t0:.0f} s")
                sys.stderr.flush()

    sys.stderr.write(what)
    sys.stderr.flush()
    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        sys.stderr.write("\r" + " " * (len(what) + 8) + "\r")
        sys.stderr.flush()


def cmd_check(args) -> int:
    from .check import check

    from . import exercises, machine

    code = 0
    for ex_id in args.exercise:
        try:
            exercises.get(ex_id)
        except KeyError as e:
            print(e.args[0], file=sys.stderr)
            code |= 2
            continue
        # (a device node, not torch: the grading process imports torch beside this one's import)
        how = "build, run on the GPU, time" if machine.gpu_present() else "compile and inspect; no GPU here"
        started = _process_age() if ex_id == args.exercise[0] else None
        with _working(f"checking {ex_id} ({how})..."):
            result = check(ex_id, **check_kwargs(lambda k: getattr(args, k.replace("-", "_"))))
        if started is not None:  # the command's own start (Python, torch, the GPU), before the check
            result.timings = {"start (Python, torch)": started, **result.timings}
            result.seconds += started
        print(json.dumps(result.as_dict(), indent=1) if args.json else result)
        code |= 0 if result.ok else 1
    return code


def _process_age() -> float | None:
    """Seconds since this process started (Linux), or None."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def cmd_doctor(args) -> int:
    from .doctor import doctor

    return doctor()


def cmd_release(args) -> int:
    from .release import release

    return release(check=args.check, force=args.force)


def cmd_days_table(args) -> int:
    from .maintain.days_table import days_table

    return days_table(check=args.check)


def cmd_grade(args) -> int:
    from .classroom import grade_class

    return grade_class(args.submissions, args.out, only=args.only, force=args.force, jobs=args.jobs,
                       timeout=args.timeout, memory_gb=args.memory_gb, secret_seed=args.secret_seed,
                       seeds=args.seeds, gpus=args.gpus, ray=args.ray, lanes=args.lanes)


def cmd_verify(args) -> int:
    from .maintain.verify import verify

    return verify(args.out, notebooks=not args.no_notebooks, grading=not args.notebooks_only, only=args.only,
                  notebook_timeout=args.notebook_timeout, gpus=args.gpus, executed=args.executed)


def cmd_self_test(args) -> int:
    from .maintain.self_test import self_test

    return self_test(args.out, args.only, gpus=args.gpus)


def cmd_class_benchmark(args) -> int:
    from .maintain.class_benchmark import class_benchmark

    return class_benchmark(args.out, args.students, gpus=args.gpus, lanes=args.lanes)


def cmd_ncu_jupyter(args) -> int:
    from .maintain.ncu_jupyter import ncu_jupyter

    return ncu_jupyter(args.out)


# Commands that build or run kernels: they need the course's interpreter (torch and the CUDA tools).
NEEDS_TORCH = {"check", "grade", "verify", "self-test", "class-benchmark", "ncu-jupyter"}


def _course_python() -> str:
    venv = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
    return str(venv.relative_to(Path.cwd())) if venv.is_relative_to(Path.cwd()) else str(venv)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description="Build, check and time the course's CUDA kernels.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every exercise, with its file, solution, spec and notebook").set_defaults(fn=cmd_list)
    p = sub.add_parser("check", help="grade exercises (correctness, SASS, speed)")
    p.add_argument("exercise", nargs="+", help="e.g. day02.silu_and_mul")
    for name, help_, kw in OPTIONS:
        p.add_argument(f"--{name}", help=help_, **kw)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(fn=cmd_check)
    sub.add_parser("doctor", help="what this machine has and which mode the course runs in").set_defaults(fn=cmd_doctor)
    p = sub.add_parser("release", help="generate the exercise stubs in kernels/ from solutions/")
    p.add_argument("--check", action="store_true", help="fail if a stub differs from its solution's")
    p.add_argument("--force", action="store_true", help="overwrite stubs with edits (keeps a .bak)")
    p.set_defaults(fn=cmd_release)
    p = sub.add_parser("days-table", help="render the README's table of days from the exercise specs")
    p.add_argument("--check", action="store_true", help="fail if the README's table differs from the specs")
    p.set_defaults(fn=cmd_days_table)
    p = sub.add_parser("grade", help="grade a class: a folder of submissions, one per student")
    p.add_argument("submissions", help="folder: one folder (mirroring kernels/) or archive per student")
    p.add_argument("--out", required=True, help="folder for the gradebook, results and feedback")
    p.add_argument("--only", action="append", help="a day (day02) or exercise (day02.silu_and_mul); repeatable")
    p.add_argument("--force", action="store_true", help="grade again what an earlier run already graded")
    p.add_argument("--jobs", type=int, default=None, help="parallel builds (default: half the CPUs this run may use)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per submission on the GPU")
    p.add_argument("--memory-gb", type=float, default=config.CLASS_MEMORY_GB, help="host memory limit per grading process")
    p.add_argument("--secret-seed", type=int, default=None, help="default: random, kept in OUT/run.json")
    p.add_argument("--seeds", type=int, default=config.PUBLIC_SEEDS, help="public seeds per correctness case")
    p.add_argument("--gpus", default="all", metavar="all|N|0,1",
                   help="the GPUs that grade, each with its own baseline figures: "
                        "all visible (default), the first N, or these indices")
    p.add_argument("--lanes", type=int, default=config.CLASS_LANES, metavar="N",
                   help=f"submissions graded side by side on each GPU, each timed with the GPU to itself "
                        f"(default {config.CLASS_LANES}; 1: one at a time)")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="grade on a Ray cluster, one GPU per grading task: the cluster at ADDRESS ('auto': the one "
                        "this host is in), or without ADDRESS a local one started for the run with --gpus GPUs "
                        "(needs the optional extra: pip install -e '.[ray]')")
    p.set_defaults(fn=cmd_grade)
    p = sub.add_parser("verify", help="the GPU verification: builds, every solution and stub graded, the notebooks "
                       "(reports)")
    p.add_argument("--out", default="reports", help="folder for the reports (.md and .json)")
    p.add_argument("--no-notebooks", action="store_true", help="builds, solutions and stubs only")
    p.add_argument("--notebooks-only", action="store_true",
                   help="only the notebooks (nbval), into gpu-notebooks.md/.json: the halves fit a 10-minute command each")
    p.add_argument("--only", action="append", metavar="PART",
                   help="a part of the course: a day (day07), days (day07-day09), an exercise; repeatable. "
                        "Reports are named after it")
    p.add_argument("--notebook-timeout", type=int, default=None, metavar="S",
                   help="seconds the notebooks' nbval run may take before it is stopped (the report says so); "
                        "default: what is left of a 10-minute command (540 with --notebooks-only, 330 after the grading)")
    p.add_argument("--gpus", default=None, metavar="all|N|0,1",
                   help="the GPUs of this host that the gradings and the notebooks spread over, one check or notebook "
                        "on each at a time (default 1)")
    p.add_argument("--executed", action="store_true",
                   help="the notebooks one at a time through nbclient instead of nbval, each executed copy written to "
                        "site/executed/ (the site's GPU outputs and the notebook report from one run; one GPU)")
    p.set_defaults(fn=cmd_verify)
    p = sub.add_parser("self-test", help="the grader's self-test on the GPU: every known-wrong and known-right "
                       "submission, the grader's GPU tests, solutions over 20 seeds (reports)")
    p.add_argument("--out", default="reports", help="folder for the reports (.md and .json)")
    p.add_argument("--only", action="append", metavar="PART",
                   help="a part of it: a day (day07), days (day07-day09), an exercise, `grader` (its own GPU "
                        "tests) or `correct` (the known-right submissions alone); repeatable. Reports are named "
                        "after it")
    p.add_argument("--gpus", default=None, metavar="all|N|0,1",
                   help="the GPUs of this host that its tests spread over (default 1)")
    p.set_defaults(fn=cmd_self_test)
    p = sub.add_parser("class-benchmark", help="grade a synthetic class of N students and time it (reports)")
    p.add_argument("students", type=int, metavar="N", help="students in the class")
    p.add_argument("--out", default="reports", help="folder for the reports (.md and .json)")
    p.add_argument("--gpus", default="all", metavar="all|N|0,1",
                   help="the GPUs of this host it grades on (default all; run it on 1 and on N to measure the scaling)")
    p.add_argument("--lanes", type=int, default=config.CLASS_LANES, metavar="N",
                   help="submissions graded side by side on each GPU")
    p.set_defaults(fn=cmd_class_benchmark)
    p = sub.add_parser("ncu-jupyter", help="a Jupyter server with jupyterlab-nvidia-nsight, a kernel started through "
                       "it, `%%ncu enable`, a restart and a %%ncu cell on Day 6's kernels (gpu-ncu-jupyter.md)")
    p.add_argument("--out", default="reports", help="folder for the reports (.md and .json)")
    p.set_defaults(fn=cmd_ncu_jupyter)
    args = parser.parse_args(argv)
    if args.command in NEEDS_TORCH and importlib.util.find_spec("torch") is None:
        print(f"This Python ({sys.executable}) has no PyTorch, which `{args.command}` needs. Run the grader with "
              f"the course's interpreter: {_course_python()} -m grader {args.command} ... "
              "(`make setup` creates it; or `make check EX=day02.silu_and_mul`).", file=sys.stderr)
        return 2
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
