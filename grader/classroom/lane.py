"""One submission graded in a lane: a slot process pinned to its GPU (slots.run_on_slots) or a Ray task
holding one (ray_backend), with that GPU's baselines measured once for the run, and the grading
processes of a lane's next submission started while it grades this one."""
from __future__ import annotations

import copy
import json
import os
import socket
import time
from dataclasses import replace
from typing import NamedTuple

from .. import exercises as _exercises
from .. import machine, pyenv
from ..check import Prepared, Result, RunOptions, run
from ..check.gate import ALONE_PHASE, GpuGate, first_run_phase
from ..check.supervise import WarmWorker
from .reports import score
from .slots import Later, slot_gate


class GradingItem(NamedTuple):
    """One prepared submission to grade, handed to a slot process (slots.run_on_slots) or a Ray task."""
    student: str
    exercise: str       # the exercise's id
    prepared: Prepared
    opts: RunOptions
    path: str | None = None     # the submitted file (a Ray task builds it where the driver could not)
    display: str | None = None  # how the results name the file
    alone: bool = False         # graded once more with the GPU to itself (grade_one)


def measure_baselines(runtime: str, exercise_ids: list[str], device: str | None = None) -> dict[str, dict | None]:
    """Each exercise's timed cases' graded baselines (the copy's GB/s, cuBLAS's TFLOP/s, ...), measured
    once for the run on each GPU (a slot's setup, calibrate_all; a Ray node's, ray_backend), in one process
    of its own (pinned to `device`, else the GPU its caller is pinned to; Python, torch and the CUDA context
    start once for all the exercises): {exercise id: worker.calibrate's {case label: {"value", "clocks"}},
    or None where that exercise's could not be measured}."""
    import subprocess
    import sys

    code = ("import json, sys\nfrom grader.check.worker import calibrate\nout = {}\n"
            f"for ex_id in {list(exercise_ids)!r}:\n"
            "    try:\n        out[ex_id] = calibrate(ex_id)\n"
            "    except Exception as e:\n        print(f'{ex_id}: {type(e).__name__}: {e}', file=sys.stderr)\n"
            "        out[ex_id] = None\n"
            "print(json.dumps(out))\n")
    env = pyenv.grading_env(runtime)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    try:
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        got = {}
    return {ex_id: got.get(ex_id) for ex_id in exercise_ids}


def calibrate_all(runtime: str, exercise_ids: list[str], device: str | None = None) -> dict:
    """A slot's setup: the baseline of its GPU (`device`) for every exercise of the run ({} without a GPU).
    Started by the run's own process as the GPU phase starts: not after the sandbox's GPU check, nor in
    the slot's process, both of which come first (it would wait seconds for the sandbox's check)."""
    if not machine.has_gpu():
        return {}
    return measure_baselines(runtime, exercise_ids, device)


# This lane's grading process for its next submission, started while it grades the one before: Python,
# torch and the CUDA context cost every grading seconds of its lane otherwise. One process per submission
# (besides compute-sanitizer's): the "kernels launched" check runs last in it, after the timing, where
# CUPTI's start can slow nothing timed. (A learner's check starts a second one with the profiler started,
# for its latency; here a second Python, torch and CUDA context per grading cost more than it saved:
# reports/class-benchmark-84-lanes4-*-af51a64-*.log. A context's start and teardown serialise in the
# driver with the other GPUs' work.) "key": the options it
# was started for; "warm": pipeline.run's `warm`; "sanitizers": {tool: WarmWorker(sanitize=tool)}, each
# waiting until a grading uses it.
GRADING_PROCESSES = 1  # per submission (the class benchmark's runs record it)
_NEXT: dict = {}


def _warm_key(opts: RunOptions) -> tuple:
    """What processes started ahead were started for: the options they were isolated with, and the
    GPU they see (a Ray worker process may run its next task on another of its node's GPUs)."""
    return opts.runtime_root, tuple(opts.hide), os.environ.get("CUDA_VISIBLE_DEVICES")


def _alive(w) -> bool:
    return w.proc.poll() is None


def _warm_processes(ex, prep: Prepared, opts: RunOptions) -> tuple[tuple | None, dict]:
    """(pipeline.run's `warm`, its `warm_sanitizers`): the processes started for this lane's next
    submission, where this one can use them (a new one is started for the next one now);
    (None, {}) to start its own."""
    global _NEXT
    if ex.learner_file == "python" or not prep.module_dir or prep.cpu_only or opts.sanitize \
            or not machine.gpu_present():
        return None, {}
    if not _NEXT:
        import multiprocessing.util

        multiprocessing.util.Finalize(None, _discard_next, exitpriority=10)  # at the slot process's end
    key = _warm_key(opts)
    if _NEXT.get("key") != key:  # (started for other options)
        _discard_next()
    warm, sanitizers = _NEXT.get("warm"), _NEXT.get("sanitizers", {})
    _NEXT = {"key": key, "warm": _start_warm(opts), "sanitizers": {}}
    if warm is not None and not all(_alive(w) for w in warm):  # it has ended meanwhile
        _discard(warm)
        warm = None
    _discard([w for w in sanitizers.values() if not _alive(w)])
    return warm, {tool: w for tool, w in sanitizers.items() if _alive(w)}


def prime_lane(opts: RunOptions) -> None:
    """A lane's processes for its first submission, started as its slot process starts (beside its
    GPU's calibration and the first builds): without them the first submission of every lane paid
    Python's, torch's and CUPTI's start under the load of the builds (seconds of each), a cost each GPU
    pays once per run, which no second GPU shortens."""
    global _NEXT
    if _NEXT or not machine.gpu_present():
        return
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _discard_next, exitpriority=10)
    _NEXT = {"key": _warm_key(opts), "warm": _start_warm(opts), "sanitizers": {}}
    if "memcheck" in opts.sanitizers:
        # (its CUDA context once the grading process has made its own: at a run's start every lane of
        # every GPU makes its contexts at once, and the driver serialises them)
        w = _started(opts, sanitize="memcheck", after=(_NEXT["warm"] or (None,))[0])
        if w is not None:
            _NEXT["sanitizers"]["memcheck"] = w


def _after_run(prep: Prepared, opts: RunOptions, warm, sanitizers: dict) -> None:
    """The grading process is spent. A compute-sanitizer process that was not used waits for the next submission;
    one that was is started again for it (the tools this one needed)."""
    _discard(warm or ())
    waiting = _NEXT.get("sanitizers")
    if waiting is None:  # (no processes kept for this lane)
        _discard(sanitizers.values())
        return
    for tool, w in sanitizers.items():
        if w.used or tool in waiting:
            w.discard()
        else:
            waiting[tool] = w
    for tool in opts.sanitizers:
        if tool not in waiting and (tool == "memcheck" or prep.uses_shared_memory) and prep.module_dir:
            w = _started(opts, sanitize=tool)
            if w is not None:
                waiting[tool] = w


def _start_warm(opts: RunOptions) -> tuple | None:
    """pipeline.run's `warm` for a lane's next submission (its one grading process), or None where it
    could not start."""
    one = _started(opts)
    return (one,) if one is not None else None


def _started(opts: RunOptions, **kind):
    """A WarmWorker, or None where it cannot start (the grading then starts its own, as ever)."""
    try:
        return WarmWorker(opts, **kind)
    except Exception:  # (a process that cannot start now fails the grading's own start, saying why)
        return None


def _discard(workers) -> None:
    for w in workers:
        w.discard()


def _discard_next() -> None:
    global _NEXT
    _discard(_NEXT.get("warm") or ())
    _discard(_NEXT.get("sanitizers", {}).values())
    _NEXT = {}


def grade_one(item: GradingItem, calibration: dict | None) -> dict:
    """One (student, exercise) graded where this runs (a slot process pinned to its GPU, or a Ray
    task holding one): the prepared submission run in its isolated process with this GPU's
    baseline figures. The record written to OUT/results/STUDENT/EXERCISE.json."""
    student, prep = item.student, item.prepared
    ex = _exercises.get(item.exercise)
    t1, started = time.perf_counter(), time.time()
    opts = replace(item.opts, calibrated=(calibration or {}).get(item.exercise))
    gate = slot_gate()
    alone = bool(gate) and item.alone  # graded once more, with the GPU to itself: only this run counts
    untouched = copy.deepcopy(prep) if gate and not alone else None
    warm, sanitizers = _warm_processes(ex, prep, opts)  # (the alone run's window is shorter by their start)
    try:
        if alone:
            with GpuGate(gate).alone() as lone:
                run(ex, prep, opts, warm, warm_sanitizers=sanitizers)
                if prep.timed_out:  # (a call stuck on this GPU right after is no verdict: supervise.run_worker)
                    lone.note_stopped()
        else:
            run(ex, prep, replace(opts, gate=gate), warm, warm_sanitizers=sanitizers)
    finally:
        _after_run(prep, opts, warm, sanitizers)
    if alone:
        prep.result.add_time(ALONE_PHASE, time.perf_counter() - t1)
        return record_of(student, ex, prep.result, time.perf_counter() - t1, graded_on(started))
    if gate and prep.judged_alone_only():
        # Beside the other lanes a kernel that hangs elsewhere on this GPU slows this one's cases too
        # (the GPU shares its time between the processes): a time limit reached there is not a verdict.
        # Graded again with the GPU to itself, after every other submission on one GPU (the other lanes
        # wait meanwhile; at the end they have little left to do), next on several (slots.Later). The
        # record keeps what this run cost.
        # Not a call of its own stopped past the run limit while no other grading on this GPU was in a
        # long call (config.CONTENDED_CALL_S; ncu counts as one): the others' short calls take the GPU
        # only for their kernels' microseconds, so that call hangs on its own (and a hang's second, lone
        # run costs its GPU another whole run limit).
        untouched.result.add_time(first_run_phase(prep), time.perf_counter() - t1)
        return Later(item._replace(prepared=untouched, alone=True))
    return record_of(student, ex, prep.result, time.perf_counter() - t1, graded_on(started))


def graded_on(started: float | None = None) -> dict:
    """Where a grading ran: the host and the GPU its process was pinned to; with `started` (time.time()),
    when it ran there, from start to end (a run's timeline: which gradings shared a GPU at a moment)."""
    where = {"host": socket.gethostname(), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if started is not None:
        where.update(started=round(started, 2), ended=round(time.time(), 2))
    return where


def record_of(student: str, ex, res: Result, seconds: float, where: dict | None = None) -> dict:
    res.seconds = seconds + (res.build_seconds or 0)
    return dict(res.as_dict(), student=student, score=score(res, ex), graded_on=where)
