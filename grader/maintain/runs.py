"""What every GPU run shares: its scope (`--only`), the environment it records, pytest run under a
limit with its workers spread over the host's GPUs, and a build in a process of its own.

The GPU runs are commands of `python -m grader`, each meant to fit one 10-minute command: `verify`
(verify.py: builds, every solution and stub graded, the notebooks), `self-test` (self_test.py: the
grader tests itself), `class-benchmark N` (class_benchmark.py: a synthetic class graded, timed) and
`ncu-jupyter` (ncu_jupyter.py: `%%ncu` in a kernel a Jupyter server started). Run them on the GPU
machine every session that touches kernels, the grader or a notebook, and commit what they write
under reports/.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from .. import jit, machine, paths, pyenv, toolkit

PYTEST_GRACE_S = 30.0  # a test run stopped at its limit gets this long to write its results (junit, durations)
GRADER_TESTS = "grader"  # in --only: the grader's own GPU tests (crash, hang, sanitizer, hostile, kinds)
CORRECT_TESTS = "correct"  # in --only: the known-right submissions alone (tests/correct), of every exercise or the part's


class Scope:
    """What one run covers: everything, or the days and exercises of `--only` (day07,
    day07-day09, day09.mma_tile; `grader` for the self-test's own GPU tests, `correct` for the
    known-right submissions without the mutants). A run whose
    scope is part of the course writes its reports under a name that says so."""

    def __init__(self, only: list[str] | None = None):
        self.only = list(only or [])
        self.days: set[str] = set()
        self.ids: set[str] = set()
        for o in self.only:
            m = re.fullmatch(r"day(\d\d)-day(\d\d)", o)
            if m:
                self.days |= {f"day{d:02d}" for d in range(int(m[1]), int(m[2]) + 1)}
            elif re.fullmatch(r"day\d\d", o):
                self.days.add(o)
            elif o not in (GRADER_TESTS, CORRECT_TESTS):
                self.ids.add(o)

    @property
    def everything(self) -> bool:
        return not self.only

    @property
    def grader_tests(self) -> bool:
        return self.everything or GRADER_TESTS in self.only

    @property
    def correct_only(self) -> bool:
        """`--only correct` (with days or exercises, theirs): the known-right submissions, without the mutants
        and the solutions' 20 seeds."""
        return CORRECT_TESTS in self.only

    def has_day(self, day: str) -> bool:
        return self.everything or day in self.days or any(i.startswith(day + ".") for i in self.ids)

    def has(self, exercise_id: str) -> bool:
        return self.everything or exercise_id in self.ids or exercise_id.split(".")[0] in self.days

    def exercises(self) -> list:
        from .. import exercises

        return [ex for ex in exercises.all_exercises().values() if self.has(ex.id)]

    def stem(self, name: str) -> str:
        return name if self.everything else f"{name}-{'-'.join(self.only)}"

    def check(self) -> str:
        """An empty message, or why this scope selects nothing."""
        if self.only and not self.exercises() and not ((self.grader_tests or self.correct_only)
                                                        and not self.days and not self.ids):
            return f"--only {' '.join(self.only)} selects no exercise; `python -m grader list` shows them"
        return ""


_BUILD_SNIPPET = """
import json, sys
from grader import jit
job = json.loads(sys.argv[1])
if "day" in job:
    b = jit.build_day(job["day"], quiet=True)
else:
    from grader import exercises
    src = exercises.get(job["exercise"]).graded_source(job["file"]) if "exercise" in job else jit.Source.read(job["file"])
    b = jit.build([src], name=job["name"], quiet=True)  # (a template exercise's file is built as rendered)
print(json.dumps({"seconds": b.seconds, "cached": b.cached, "module": b.name}))
"""


def build_in_subprocess(job: dict) -> dict:
    """One build (a day's kernel versions, an exercise's file, or a source) in a fresh process: its
    seconds, whether it came from the cache, or its error."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _BUILD_SNIPPET, json.dumps(job)], capture_output=True,
                          text=True, cwd=paths.ROOT, env=env())
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"label": job["label"], "ok": False, "error": (proc.stderr or proc.stdout)[-1500:], "wall_s": wall}
    return {"label": job["label"], "ok": True, "wall_s": wall, **json.loads(proc.stdout.strip().splitlines()[-1])}


def warm_up() -> dict:
    """The first build after a torch install also makes the precompiled header: do it
    with a build of its own, before the builds that are measured or run side by side."""
    return build_in_subprocess({"label": "warm-up", "file": str(jit.WARMUP_SOURCE),
                                "name": "warmup"})


def env(**extra) -> dict:
    """The environment of a run's processes (pyenv.subprocess_env), with `extra` set."""
    return pyenv.subprocess_env(**extra)


def spread(gpus: str | None, per_gpu: int, cpus: int) -> tuple[list[str], int, list[str], dict]:
    """The GPUs a run spreads its pytest workers over (`gpus`: "all", a count or indices, as class
    grading's --gpus), how many workers, their pytest options and environment (spread.py): `per_gpu`
    workers on each GPU, as many as half the cores allow, at least 2 on one GPU."""
    from ..classroom.slots import resolve_gpus
    from .spread import GPUS_ENV

    devices = [d for d in resolve_gpus(gpus or "1") if d is not None] or ["0"]
    if not _has_module("xdist"):
        return devices[:1], 1, [], {}
    workers = max(len(devices), min(per_gpu * len(devices), cpus // 2 - 2))
    pinned = {GPUS_ENV: ",".join(devices)} if len(devices) > 1 else {}
    return devices, workers, ["-n", str(workers), "-p", "grader.maintain.spread"], pinned


# pytest, with Ctrl-C's handler even where this process was started with SIGINT ignored (a child inherits
# that, and Python then installs no handler: a test run under pytest-xdist's workers is one)
_PYTEST_MAIN = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                "import pytest\nsys.exit(pytest.main(sys.argv[1:]))")


def pytest(args: list[str], env: dict, log_path: Path, timeout: int) -> dict:
    """pytest with `args` in a process of its own, its output in `log_path`, stopped at `timeout`
    seconds as at Ctrl-C: its exit code ("timeout" where stopped), seconds and last line."""
    return command([sys.executable, "-c", _PYTEST_MAIN, *args], env, log_path, timeout)


def command(argv: list[str], env: dict, log_path: Path, timeout: int) -> dict:
    """`argv` in a process of its own (pytest, a Python module of the course), as pytest() runs it."""
    t0 = time.perf_counter()
    with open(log_path, "w") as f:
        # a session of its own: at the time limit the whole of it goes (xdist's workers and their
        # grading processes, a notebook's kernel), not only its first process
        proc = subprocess.Popen(argv, cwd=paths.ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # as Ctrl-C: pytest stops, writes its junit file (what ran) and its durations; then whatever is
            # left of the session (workers, their grading processes) goes
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=PYTEST_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
            rc = "timeout"
    tail = log_path.read_text(errors="replace").strip().splitlines()
    return {"rc": rc, "seconds": time.perf_counter() - t0, "summary": tail[-1] if tail else ""}


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _version(dist: str) -> str | None:
    """An installed distribution's version (e.g. the optional flashinfer-python), or None."""
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def commit() -> str:
    """The commit under test: COURSE_COMMIT (set it where the copy has no .git), or git's answer."""
    if os.environ.get("COURSE_COMMIT"):
        return os.environ["COURSE_COMMIT"]
    try:
        proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=paths.ROOT, capture_output=True,
                              text=True, timeout=10)
        return proc.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def env_info() -> dict:
    """What a run's report records of where it ran: commit, GPU, driver, torch, nvcc, Python, CPUs, date."""
    import torch

    p = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip().split("\n")[0]  # (a line per GPU)
    except OSError:
        driver = "unknown"
    from ..bench import theoretical_bandwidth

    peak = theoretical_bandwidth()
    return {"commit": commit(), "gpu": p.name, "sm": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
            "l2_mb": p.L2_cache_size / 2**20, "driver": driver, "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "nvcc": toolkit.nvcc_version(), "python": platform.python_version(),
            "cpus": machine.usable_cpus(), "peak_gbps": peak / 1e9 if peak else None, "flashinfer": _version("flashinfer-python"),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
