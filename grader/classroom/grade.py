"""Grade a whole class: `python -m grader grade SUBMISSIONS --out OUT [--only day02 ...]`.

SUBMISSIONS holds one folder per student mirroring kernels/ (STUDENT/day02/silu_and_mul.cu,
or STUDENT/kernels/day02/...), or one archive per student (STUDENT.zip, .tar, .tar.gz, .tgz).

1. Every (student, exercise) is prepared in parallel on half the cores: source and SASS
   checks, then the extension build (a process pool; nvcc and g++ run side by side). Each goes
   to the GPUs as soon as it is prepared.
2. Every GPU of the host grades (`--gpus all|N|0,2`, slots.py): a slot per GPU, its processes
   pinned to it with CUDA_VISIBLE_DEVICES; each measures its GPU's baseline (the copy
   bandwidth, ...) once for the run and grades with its own figures. A slot grades `--lanes`
   submissions side by side, each in its own process with a time limit and a host-memory limit,
   in a scratch directory, with the run's secret seed, from a copy of the grader that has no
   solutions/ in it; each timing has the GPU to itself (the others pause: check/gate.py); a free
   lane takes the next submission. With `--ray [ADDRESS]` the gradings are Ray tasks of one GPU
   each instead (ray_backend.py), after every submission is prepared.
3. Each result is written as soon as it exists (OUT/results/STUDENT/EXERCISE.json): an
   interrupted run resumes where it stopped; --force grades everything again.
4. OUT/gradebook.csv and .json, OUT/STUDENT/results.json (Gradescope's format),
   OUT/STUDENT/feedback.md and .html (failures explained, hidden inputs not shown), and
   OUT/class-summary.png.

Preparing compiles and inspects only (the link checks reject load-time code and calls outside
the launch API); the students' code runs only in the grading processes, each in the bubblewrap
sandbox (grader/check/sandbox.py) where it works: no network, the course read-only, the
submissions, OUT, the solutions and the build cache hidden, only its scratch folder writable.
The run's first lines say whether it works; where not, see the container recipe in docs/instructors.md.
"""
from __future__ import annotations

import concurrent.futures as cf
import functools
import json
import multiprocessing
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from .. import config, machine, paths, pyenv
from .. import exercises as _exercises
from ..check import Prepared, Result, RunOptions, prepare, sandbox
from .reports import write_reports
from .cpu import CpuMeter
from .orphans import adopt_orphans, stop_orphans
from .lane import GradingItem, calibrate_all, grade_one, prime_lane, record_of
from .slots import resolve_gpus, run_on_slots
from .submissions import discover, locate


class PrepareJob(NamedTuple):
    """One submission to prepare, in a preparation process (_prepare_job)."""
    exercise: str       # the exercise's id
    path: str | None    # the submitted file; None where there is none (its row is added by the run)
    display: str        # how the results name the file (STUDENT/DAY/FILE)


def _prepare_job(job: PrepareJob):
    ex = _exercises.get(job.exercise)
    try:
        if job.path is None:
            return Prepared(Result(job.exercise, job.display, machine.mode()))
        try:
            return prepare(ex, Path(job.path), display=job.display)
        except Exception:  # the grader's own trouble, not the submission's (prepare makes rows of those): once more
            # (an exec of nvcc can fail on a fresh host: EFAULT, reports/class-benchmark-84-lanes4-1gpu-e3af72f-nvcc-efault.log)
            time.sleep(1)
            return prepare(ex, Path(job.path), display=job.display)
    finally:
        _below_the_gradings()


_NICED = []


def _prebuild_binding(ex_id: str, path: str) -> None:
    """An exercise's binding object compiled from its solution (jit.prebuild_binding) as the run starts,
    where the submissions will be linked (a GPU: compile-only runs link none)."""
    if machine.has_gpu():
        from ..jit import prebuild_binding

        ex = _exercises.get(ex_id)
        prebuild_binding(ex.graded_source(path), ex.build_name)


def _bindings_ahead(exs, echo, built_at: list) -> cf.ThreadPoolExecutor | None:
    """Each exercise's binding (what every submission with the solution's entry points links in), compiled
    from its solution in threads of this process (a run with a GPU: the caller's), started right after the
    warm-up build: beside the grading processes' bytecode, the GPUs' calibration and the first submissions'
    checks, not after a preparation process's start, where the first submissions' links would wait for it."""
    todo = [ex for ex in exs if ex.learner_file != "python" and ex.solution_path.is_file()]
    if not todo:
        return None
    # (each a g++ process of its own, 8 s on an idle core: a run of every exercise makes BINDINGS_AHEAD at a time)
    ahead = cf.ThreadPoolExecutor(max_workers=min(BINDINGS_AHEAD, len(todo)), thread_name_prefix="binding")
    for ex in todo:
        fut = ahead.submit(_prebuild_binding, ex.id, str(ex.solution_path))
        fut.add_done_callback(functools.partial(_said_if_failed, echo, ex.id))
        fut.add_done_callback(lambda _: built_at.append(time.perf_counter()))  # (when: timing.json)
    return ahead


BINDINGS_AHEAD = 4


def _said_if_failed(echo, ex_id: str, fut) -> None:
    """A binding that could not be built ahead: said (the first submission that needs it builds it, and
    a failure of its own is that submission's row)."""
    e = fut.exception()
    if e is not None:
        echo(f"{ex_id}: its binding was not built ahead ({type(e).__name__}: {e}); the first submission builds it")


def _below_the_gradings() -> None:
    """After its first submission, a preparation process works below the grading processes' priority
    (config.PREPARE_NICE): builds beside them at the same priority slow each grading.
    Its first is not: nothing grades before the first submission is prepared, and niced it would wait
    behind every lane's processes starting."""
    if not _NICED:
        _NICED.append(os.nice(config.PREPARE_NICE))


def _preparation_process() -> None:
    """A preparation process's start: torch's import (the build's) as a grading process's
    (pyenv.grading_env: its threads, its bytecode)."""
    import sys

    env = pyenv.grading_env()
    os.environ.setdefault("OMP_NUM_THREADS", env["OMP_NUM_THREADS"])
    if "PYTHONPYCACHEPREFIX" in env:
        sys.pycache_prefix = env["PYTHONPYCACHEPREFIX"]


def _said_bytecode(echo, wrote: list) -> None:
    if wrote and wrote[0] is not None:
        echo(f"the grading processes' Python bytecode (this install keeps none): {pyenv.bytecode_prefix()}, "
             f"{wrote[0]:.0f} s")


def _runtime_copy(work: Path) -> str:
    """The grader package alone (no solutions/, no maintainer tools): what the grading processes import."""
    rt = work / "runtime"
    shutil.rmtree(rt, ignore_errors=True)
    # Maintainer tools (verify, the self-test) are not part of a student's grading run.
    shutil.copytree(paths.ROOT / "grader", rt / "grader", ignore=shutil.ignore_patterns("__pycache__", "maintain"))
    return str(rt)


def write_result(out: Path, student: str, ex_id: str, record: dict) -> None:
    dest = out / "results" / student / f"{ex_id}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(dest)  # written whole or not at all: a resumed run never reads half a result


def _line(student: str, ex_id: str, record: dict, where: str = "") -> str:
    res_fail = next((f"{i['group']} / {i['name']}: {i['detail']}" for i in record["items"] if i["status"] == "fail"), "")
    return f"{student:<20} {ex_id:<26} {record['verdict']:<6} {record['score']:5.1f}  {where}{res_fail[:70]}"


def grade_class(submissions: str | Path, out: str | Path, only: list[str] | None = None, force: bool = False,
                jobs: int | None = None, timeout: float | None = None,
                memory_gb: float = config.CLASS_MEMORY_GB,
                secret_seed: int | None = None, seeds: int = config.PUBLIC_SEEDS, echo=print,
                gpus: str | int | None = None, ray: str | None = None, ray_options: dict | None = None,
                lanes: int = config.CLASS_LANES) -> int:
    """Grade every submission in `submissions` into `out` (see the module's text). `gpus`: "all"
    (default), a count or indices ("0,1") of the GPUs this host grades on; `lanes`: submissions
    graded side by side on each (each timed with the GPU to itself). `ray`: grade on a Ray
    cluster instead, at that address ("local": one started for the run, with `gpus` GPUs);
    `ray_options` are passed to ray_backend.RaySession (tests: a pretend cluster's resources, a task)."""
    submissions, out = Path(submissions), Path(out)
    if not submissions.is_dir():
        echo(f"no such folder: {submissions}")
        return 2
    exs = list(_exercises.all_exercises().values())
    if only:
        exs = [e for e in exs if any(e.id == o or e.day == o for o in only)]
        if not exs:
            echo(f"no exercise matches {only}; `python -m grader list` shows them")
            return 2
    try:
        devices = resolve_gpus(gpus)
    except ValueError as e:
        echo(str(e))
        return 2
    if lanes < 1:
        echo(f"--lanes {lanes}: at least 1")
        return 2
    if ray is not None:
        from . import ray_backend

        why = ray_backend.unavailable()
        if why:
            echo(why)
            return 2
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
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
    sandbox_known = _sandbox_gpu_check(machine.has_gpu() and bool(todo), echo)
    session = None
    adopted = adopt_orphans()  # (a grading process whose lane died comes to this process: stopped at the end)
    if ray is not None and todo:  # a local cluster starts while the submissions are prepared
        from .ray_backend import RaySession

        session = RaySession(None if ray == "local" else ray, devices, echo, **(ray_options or {}))
    try:
        return _grade(submissions, out, exs, todo, problems, secret, jobs, timeout, memory_gb, seeds, echo,
                      devices, session, run_file, t0, lanes, sandbox_known)
    finally:
        if session:
            session.close()
        left = stop_orphans(adopted)
        if left:
            echo(f"grading processes that outlived their lane, stopped at the end of the run: {len(left)} "
                 f"(the first: {left[0][:200]})")


def _sandbox_gpu_check(needed: bool, echo):
    """Whether CUDA works inside the sandbox (sandbox.check_gpu: a process of its own with torch and a
    CUDA context, 3-5 s), found in a thread beside the run's start (the runtime's copy, the warm-up build,
    the first preparations, the GPUs' calibration: none runs a submission's code). The call returned
    waits for it, turns the sandbox off where CUDA fails inside it (raises where the check itself failed),
    says where the submissions' code will run (once), and returns why it runs outside the sandbox (None:
    inside), what each slot's processes are told."""
    found: list = []  # (problem or None, or the exception the check raised)

    def probe_gpu():
        try:
            found.append(sandbox.check_gpu())
        except BaseException as e:  # (said where the answer is needed: no grading runs on a guess)
            found.append(e)

    probe = threading.Thread(target=probe_gpu, daemon=True) if needed and sandbox.available() is None else None
    said: list = []
    lock = threading.Lock()  # (each GPU's slot asks as its processes start)
    if probe is not None:
        probe.start()
    else:  # (known now: said among the run's first lines)
        said.append(True)
        echo(sandbox.banner())

    def known() -> str | None:
        with lock:
            if said:
                return sandbox.available()
            if probe is not None:
                probe.join()
                if isinstance(found[0], BaseException):
                    raise RuntimeError(f"the sandbox's GPU check failed: {type(found[0]).__name__}: {found[0]}")
                if found[0]:
                    sandbox.disable(found[0])
            said.append(True)
            echo(sandbox.banner())  # where the submissions' code will run: in the sandbox, or plainly not
            return sandbox.available()

    return known


def prepared_ahead(jobs: Iterable, submit: Callable, ahead: int) -> Iterator:
    """(job, its future) for each of `jobs` as its future is done, in the order they end; `submit(job)`
    starts one and returns its future. At most `ahead` are started and not yet handed on: the first
    `ahead` start at this call, one more as each is handed on (before it is, the caller may keep it).
    Class grading's preparation: once the first submissions are ready, the builds go at the pace the
    lanes take them, not all at once beside the first gradings, which builds on every CPU slow
    (reports/class-benchmark-168-lanes4-*-d9b34fe.log). Where the builds are slower than the gradings,
    every preparation process stays at work."""
    waiting = iter(jobs)
    pending: dict = {}  # future: its job, in the order started

    def start_next() -> None:
        for job in waiting:
            pending[submit(job)] = job
            return

    for _ in range(max(1, ahead)):
        start_next()

    def handed_on():
        while pending:
            done, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for fut in [f for f in pending if f in done]:
                job = pending.pop(fut)
                start_next()
                yield job, fut

    return handed_on()


def _grade(submissions, out, exs, todo, problems, secret, jobs, timeout, memory_gb, seeds, echo, devices,
           session, run_file, t0, lanes, sandbox_known) -> int:
    t_build = time.perf_counter()
    runtime = _runtime_copy(out / ".work")
    # The grading processes' bytecode, where the install keeps none (pyenv.bytecode_prefix), beside the
    # first build. Where torch's is there already (written once per install, the profiler's modules with
    # it), nothing waits for the rest (the grader's copy for this run: its processes compile what they import
    # meanwhile), and it touches no GPU (a CUDA context beside the calibration's timing).
    wrote: list = []
    torch_compiled = pyenv.torch_bytecode_written()
    bytecode = threading.Thread(target=lambda: wrote.append(pyenv.write_bytecode(runtime, gpu=not torch_compiled)),
                                daemon=True)
    bytecode.start()
    ahead, bindings_built = None, []
    if machine.has_gpu():  # make the shared precompiled header once, before the parallel builds
        from ..jit import WARMUP_SOURCE, build

        build([WARMUP_SOURCE], name="warmup", quiet=True)
        ahead = _bindings_ahead({ex.id: ex for _, ex, _, _ in todo}.values(), echo, bindings_built)
    if not torch_compiled:
        bytecode.join()
        _said_bytecode(echo, wrote)
    jobs = jobs or max(1, machine.usable_cpus() // 2)
    opts = RunOptions(seeds=[[str(s), s] for s in range(seeds)] + [["secret", secret]],
                      timeout=timeout or config.CLASS_TIMEOUT_S, memory_limit_gb=memory_gb, runtime_root=runtime,
                      sanitizers=config.CLASS_SANITIZERS, case_memory_kept=config.CASE_MEMORY_KEPT_BYTES,
                      hide=(str(submissions.resolve()), str(out.resolve())))  # + the solutions, the build cache
    run_info = {"secret_seed": secret, "calibration": {}, "exercises": [e.id for e in exs]}

    def save_run():
        run_file.write_text(json.dumps(run_info, indent=1))

    save_run()
    counts = {"graded": 0, "errors": []}
    write_lock = threading.Lock()

    def done(student, ex, record, where=""):
        sandbox_known()  # (where submissions run is said before the first row, even when none runs)
        with write_lock:
            write_result(out, student, ex.id, record)
            counts["graded"] += 1
            echo(_line(student, ex.id, record, where))

    prepared_at = {"s": 0.0}
    unprepared: list[str] = []

    def prepared_items(pool) -> Iterator:
        """Each submission as soon as it is prepared: what no GPU can change is written now
        (submissions that are missing, unreadable, or failed a check before the build: nothing of theirs
        would run); the rest go to the GPUs, which grade while the others are still being prepared.
        At most `jobs` of them are prepared or being prepared ahead of the lanes (prepared_ahead)."""
        def finished(_):  # when the last one was ready (not when a lane took it)
            prepared_at["s"] = max(prepared_at["s"], time.perf_counter() - t_build)

        def submit(job):
            student, ex, p, d = job
            fut = pool.submit(_prepare_job, PrepareJob(ex.id, str(p) if p else None, d))
            fut.add_done_callback(finished)
            return fut

        ready = prepared_ahead(todo, submit, jobs)  # (the first ones start now, not at the first item taken)

        def items():
            for (student, ex, path, display), fut in ready:
                try:
                    prep = fut.result()
                except Exception as e:  # failed twice (_prepare_job): no verdict, left to the next run; the others go on
                    unprepared.append(f"{student} {ex.id}: its preparation failed (the grader's, not the "
                                      f"submission's): {type(e).__name__}: {e}")
                    continue
                if (student, ex.id) in problems:
                    prep.result.add("source", "readable", "fail", problems[(student, ex.id)])
                    done(student, ex, record_of(student, ex, prep.result, 0.0))
                elif prep.module_dir is None and prep.result.failures:
                    done(student, ex, record_of(student, ex, prep.result, 0.0))
                else:
                    yield GradingItem(student, ex.id, prep, opts, str(path), display)
            echo(f"prepared (static checks, SASS, builds) in {prepared_at['s']:.0f} s with {jobs} processes")

        return items()

    t_run = time.perf_counter()
    # (the preparation's processes and the slots' are waited for inside: their CPU seconds count)
    with CpuMeter() as meter, \
            cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_preparation_process) as pool:
        prepared = prepared_items(pool)
        if session is not None:
            sandbox_known()  # (before any grading process starts)
            items = list(prepared)  # (a Ray run takes them all at once)
            t_run = time.perf_counter()
            try:
                stats = session.grade(items, [e.id for e in exs], done, run_info, save_run)
            except RuntimeError as e:  # no cluster, or one without GPUs: what was graded is kept
                echo(f"ray: {e}")
                return 1
        else:
            stats = _grade_on_slots(prepared, devices, runtime, exs, done, echo, run_info, save_run,
                                    lanes, out / ".work" / "gates", opts, bool(todo), sandbox_known)
    build_s = prepared_at["s"]
    counts["errors"] = unprepared + stats.get("errors", [])
    run_s = time.perf_counter() - t_run
    if torch_compiled:  # (done long since: it ran beside the first builds)
        bytecode.join()
        _said_bytecode(echo, wrote)
    if ahead is not None:
        ahead.shutdown(wait=True)
    rows = write_reports(out, exs)
    total = time.perf_counter() - t0
    per_gpu = stats.get("per_gpu", {})
    cpu = meter.result()  # (of this host: a Ray run's workers use their own nodes' CPUs)
    (out / "timing.json").write_text(json.dumps({
        "graded": len(todo), "prepare_s": build_s, "run_s": run_s, "total_s": total, "jobs": jobs,
        "gpus": len(per_gpu) or 1, "backend": "ray" if session is not None else "slots",
        "lanes": lanes if session is None else 1, "overlapped": session is None,
        "gpu_busy_s": sum(g["busy_s"] for g in per_gpu.values()),
        "calibrate_s": max((g.get("setup_s", 0.0) for g in per_gpu.values()), default=0.0),
        "per_gpu": per_gpu, "first_prepared_s": stats.get("first_item_s"),
        "bindings_built_s": max(bindings_built) - t_run if bindings_built else None,
        "before_gpu_phase_s": t_run - t0,
        "has_gpu": machine.has_gpu(), "cpu": cpu}, indent=1))
    echo(f"graded {len(todo)} submissions in {total:.0f} s (prepare {build_s:.0f} s, GPU {run_s:.0f} s "
         f"on {len(per_gpu) or 1} GPU{'s' if len(per_gpu) > 1 else ''}"
         + (", preparing and grading side by side" if session is None else "")
         + f"); gradebook: {out / 'gradebook.csv'} ({len(rows)} rows)")
    if cpu["busy"] is not None:
        echo(f"this host's {cpu['cpus']} CPUs were {cpu['busy']:.0%} busy on average (at least 90% busy "
             f"{cpu['saturated']:.0%} of the time): {cpu['busy_cpu_s'] / max(1, len(todo)):.0f} busy CPU-seconds "
             f"per submission")
    for err in counts["errors"]:
        echo(f"not graded: {err}")
    if counts["errors"]:
        echo("run the same command again to grade what is left (what was graded is kept)")
        return 1
    return 0


def _grade_on_slots(items, devices, runtime, exs, done, echo, run_info, save_run, lanes, gates, opts,
                    early, sandbox_known) -> dict:
    """This host's GPUs, a slot each with `lanes` processes (slots.py); `items` arrive as they are prepared.
    `early`: there are submissions to grade, so each GPU's calibration and its lanes' processes start
    at once, beside the first builds, not after the first submission is built."""
    ex_by_id = {e.id: e for e in exs}
    gpu = machine.has_gpu()
    names = ", ".join(d or "the one visible" for d in devices)
    echo(f"grading on {len(devices)} GPU{'s' if len(devices) > 1 else ''} ({names}), "
         + ("one submission at a time on each" if lanes == 1 else
            f"{lanes} submissions side by side on each, each timed with its GPU to itself")
         + ("" if gpu else "; no GPU here: compile-only stages"))
    errors = []

    def on_setup(device, calibration):
        run_info["calibration"][str(device)] = calibration
        save_run()
        for ex_id, figures in (calibration or {}).items():
            ex = ex_by_id[ex_id]
            for label, measured in (figures or {}).items():
                echo(f"{ex.target.baseline.label}, measured once for this run on GPU {device}: {ex_id} {label}: "
                     f"{measured['value']:.1f} {ex.target.unit}")

    def on_done(item: GradingItem, record, device, seconds, error):
        if record is None:
            errors.append(f"{item.student} {item.exercise}: {error}")
            return
        done(item.student, ex_by_id[item.exercise], record, f"[GPU {device}] " if len(devices) > 1 else "")

    setup = functools.partial(calibrate_all, runtime, [e.id for e in exs]) if gpu else None
    # (the warm processes' start overlaps the calibration; a run of Python exercises alone needs none)
    prime = functools.partial(prime_lane, opts) if gpu and any(e.learner_file != "python" for e in exs) else None
    stats = run_on_slots(devices, items, grade_one, on_done, setup=setup, on_setup=on_setup,
                         sandbox_off=sandbox_known, lanes=lanes, gate_root=gates, prime=prime, setup_early=early)
    return {"per_gpu": stats["per_gpu"], "errors": stats["errors"] + errors, "first_item_s": stats["first_item_s"]}
