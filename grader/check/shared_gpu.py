"""A check on a GPU that other checks share: the self-test runs the grader's tests side by side on each
GPU. Each timing holds the GPU's gate (gate.py) so that it has the GPU to itself, and a verdict reached
beside the others that they could have caused (a time limit reached, or a stop for not pausing while
another waited to time: Prepared.judged_alone_only) is taken again with the GPU alone, as class grading's
lanes do (classroom/lane.py). A learner's check (pipeline.check) runs alone on its GPU and uses none of it.
"""
from __future__ import annotations

import copy
import os
import time
from dataclasses import replace

from .. import config
from .gate import ALONE_PHASE, GpuGate, first_run_phase
from .pipeline import check, run
from .result import Result


def check_sharing_gpu(exercise: str, gate: str | None = None, **kw) -> Result:
    """check(exercise, **kw) on a GPU shared through the gate in folder `gate` (default: $COURSE_GPU_GATE,
    config.GATE_ENV, which the self-test sets); without one, check() as a learner runs it."""
    gate = gate or os.environ.get(config.GATE_ENV)
    if not gate:
        return check(exercise, **kw)

    def beside_others(ex, prep, opts, warm, ncu_run, warm_sanitizers):
        untouched = copy.deepcopy(prep)
        t_run = time.perf_counter()
        run(ex, prep, replace(opts, gate=gate), warm, ncu_run, warm_sanitizers=warm_sanitizers)
        if not prep.judged_alone_only():
            return prep
        untouched.result.add_time(first_run_phase(prep), time.perf_counter() - t_run)
        t_again = time.perf_counter()
        with GpuGate(gate).alone() as lone:
            run(ex, untouched, opts)
            if untouched.timed_out:  # (as a stop beside the others is: supervise.run_worker)
                lone.note_stopped()
        untouched.result.add_time(ALONE_PHASE, time.perf_counter() - t_again)
        return untouched

    return check(exercise, run_step=beside_others, **kw)
