"""The judge apart (grader/check/judge.py): a Python module's outputs, handed over as files, judged in a
process the module never ran in. Here on the CPU, with a small exercise of the same shape."""
import os
from types import SimpleNamespace

import pytest
import torch

from grader.check import judge
from grader.spec import Case, Tolerance


def _exercise():
    """y = 2 x, inputs from the seed: what the judge needs of an exercise, no more."""
    def make_inputs(p, gen):
        return {"x": torch.randn(p["n"], generator=gen, device=gen.device)}

    return SimpleNamespace(
        cases=[Case("n=5", {"n": 5}), Case("n=7", {"n": 7}), Case("timed", {"n": 9}, perf=True)],
        make_inputs=make_inputs,
        make_outputs=lambda p, inputs: {"y": torch.empty(p["n"])},
        reference=lambda p, inputs: {"y": 2 * inputs["x"]},
        tolerance=lambda p: Tolerance(1e-6, 1e-6, "fp32"),
        case_bytes=lambda p: 8 * p["n"],
    )


SEEDS = [["1", 11], ["2", 22]]


def _hand_over_right(ex, folder, skip=(), wrong=()):
    for index, case in judge.untimed_cases(ex):
        for label, seed in SEEDS:
            if (index, label) in skip:
                continue
            x = ex.make_inputs(case.params, torch.Generator().manual_seed(seed))["x"]
            y = 2 * x + (1.0 if (index, label) in wrong else 0.0)
            judge.hand_over(folder, index, label, {"y": y})


def _runs(ex):
    return [judge.JudgeRun(i, label, seed) for i, _ in judge.untimed_cases(ex) for label, seed in SEEDS]


def test_right_outputs_pass_and_the_timed_case_is_not_judged(tmp_path):
    ex = _exercise()
    _hand_over_right(ex, tmp_path)
    assert [i for i, _ in judge.untimed_cases(ex)] == [0, 1]
    assert judge.judge_all(ex, _runs(ex), tmp_path, device="cpu") == {"judged": 4, "problems": []}


def test_wrong_or_missing_outputs_fail_with_the_case_and_seed(tmp_path):
    ex = _exercise()
    _hand_over_right(ex, tmp_path, skip={(1, "2")}, wrong={(0, "2")})
    got = judge.judge_all(ex, _runs(ex), tmp_path, device="cpu")
    assert len(got["problems"]) == 2, got
    assert got["problems"][0].startswith("n=5, seed 2: y: 5 of 5 elements differ")
    assert got["problems"][1] == "n=7, seed 2: no outputs were handed over for this run"


def test_what_is_not_a_file_of_named_tensors_is_refused_unread(tmp_path):
    ex = _exercise()
    run = [judge.JudgeRun(0, "1", 11)]
    target = judge.handover_file(tmp_path, 0, "1")
    os.symlink("/dev/zero", target)
    assert "not a plain file" in judge.judge_all(ex, run, tmp_path, device="cpu")["problems"][0]
    target.unlink()
    torch.save([torch.zeros(5)], target)
    assert "not a dict of named tensors" in judge.judge_all(ex, run, tmp_path, device="cpu")["problems"][0]
    target.write_bytes(b"\x80\x04cos\nsystem\n.")  # a pickle that would run code: never loaded as one
    assert "could not be read as tensors" in judge.judge_all(ex, run, tmp_path, device="cpu")["problems"][0]
    torch.save({"y": torch.zeros(4)}, target)
    assert "not handed over as the output it is" in judge.judge_all(ex, run, tmp_path, device="cpu")["problems"][0]
    torch.save({"y": torch.zeros(5, dtype=torch.float64)}, target)
    assert "not handed over as the output it is" in judge.judge_all(ex, run, tmp_path, device="cpu")["problems"][0]


@pytest.mark.parametrize("limit, expected", [(None, [0, 1]), (48, [0])])
def test_the_judge_takes_the_cases_the_worker_ran(limit, expected):
    assert [i for i, _ in judge.untimed_cases(_exercise(), limit)] == expected


def test_the_judge_runs_again_while_other_processes_hold_the_gpus_memory():
    """Other gradings on the GPU hold memory until their case ends: a judge that ran out of it runs again
    after each wait (outside the gate, so that a grading waiting to time can end its case); out of memory
    every time, or failing otherwise, its exit code stands."""
    def judge_exiting(*codes):
        runs = list(codes)
        return lambda: runs.pop(0)

    slept = []
    oom = judge.OUT_OF_MEMORY_EXIT
    assert judge.with_memory(judge_exiting(oom, oom, 0), (2.0, 8.0, 30.0), slept.append) == 0 and slept == [2.0, 8.0]
    slept.clear()
    assert judge.with_memory(judge_exiting(oom, oom, oom), (2.0, 8.0), slept.append) == oom and slept == [2.0, 8.0]
    slept.clear()
    assert judge.with_memory(judge_exiting(1, 0), (2.0,), slept.append) == 1 and slept == []


def test_a_failed_judge_shows_its_exception_not_the_end_of_a_long_message():
    log = ("Traceback (most recent call last):\n  File \"judge.py\", line 1, in <module>\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.19 GiB of which 1.2 GiB is free." + " Process 1 has 5.92 GiB memory in use." * 30 + "\n")
    assert judge.last_error(log).startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert judge.last_error("no traceback here\n") == "no traceback here"
