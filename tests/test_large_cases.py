"""Cases that need a large GPU's memory (spec.Case.gpu_gib): Day 1's arrays and Day 11's cache past 2^31
elements, where an index or offset kept in 32 bits wraps. On a GPU with less memory the case is skipped,
saying so; compute-sanitizer, Nsight Compute and the side-stream run leave it out."""
from types import SimpleNamespace

import pytest
import torch

from grader import exercises
from grader.check import judge, worker
from grader.exercises import day01, day11

DECODE = exercises.get("day11.batch_decode")
SCALE_ADD = exercises.get("day01.scale_add")


def _large(ex=DECODE):
    return [c for c in ex.cases if c.gpu_gib]


def test_day01_has_arrays_past_2_31_elements_and_an_fp32_reference_that_fits_beside_them(monkeypatch):
    (case,) = _large(SCALE_ADD)
    n = case.params["n"]
    assert n > 2 ** 31 and not case.perf and "2^31" in case.label
    # x, y, out, the inputs' copies and an fp32 reference: 5 arrays of n fp32 fit the GPU memory asked for
    assert 5 * 4 * n < case.gpu_gib * 2 ** 30 * 0.8
    assert n >= day01.FP32_REFERENCE_FROM > max(c.params["n"] for c in SCALE_ADD.cases if not c.gpu_gib)
    # the fp32 reference, a chunk at a time, is the fp64 one rounded once (shown small)
    monkeypatch.setattr(day01, "FP32_REFERENCE_FROM", 100)
    monkeypatch.setattr(day01, "REFERENCE_CHUNK", 7)
    p = {"n": 1000, "offset": 0}
    inputs = day01._inputs(p, torch.Generator().manual_seed(0), "cpu")
    got = day01._reference(p, inputs)["out"]
    exact = inputs["alpha"] * inputs["x"].double() + inputs["y"].double()
    assert got.dtype == torch.float32 and torch.equal(got, exact.float())


def test_day11_has_a_cache_past_2_31_elements_with_every_request_page_past_it():
    (case,) = _large()
    p = case.params
    assert not case.perf and "past 4 GiB" in case.label
    indptr, indices, last, num_pages = day11.page_table(p["lens"], p["page_size"], torch.Generator().manual_seed(1),
                                                        "cpu", p["pool_pages"])
    row = p["kv_heads"] * p["head_dim"]
    assert num_pages * 2 * p["page_size"] * row > 2 ** 31
    # every token's K row starts past 2^31 elements: kept in an int32, each offset wraps
    first_row = indices.long() * 2 * p["page_size"] * row
    assert int(first_row.min()) >= 2 ** 31
    assert len(set(indices.tolist())) == len(indices) == int(indptr[-1])
    # ... and the cases without a pool keep the page tables they had (the same draws from the generator)
    small = day11.page_table([5, 40, 17], 16, torch.Generator().manual_seed(1), "cpu")
    assert [t.tolist() for t in small[:3]] + [small[3]] == [[0, 1, 4, 6], [4, 0, 6, 5, 7, 2], [5, 8, 1], 9]


def test_a_large_case_is_left_out_of_the_sanitizers_and_python_modules_have_none():
    assert _large() and _large(SCALE_ADD)
    for ex in exercises.all_exercises().values():
        indices = {u.index for u in judge.untimed_cases(ex, 1 << 40)}
        assert not indices & {i for i, c in enumerate(ex.cases) if c.gpu_gib}, ex.id
        if ex.learner_file == "python":  # (its outputs are judged apart, case by case: none may be skipped)
            assert not [c for c in ex.cases if c.gpu_gib], ex.id


def test_a_gpu_with_less_memory_skips_the_case(monkeypatch):
    (case,) = _large()
    monkeypatch.setattr(worker, "_gpu_gib", lambda: case.gpu_gib - 1)
    assert not worker.fits_gpu(case) and worker.fits_gpu(DECODE.cases[0])
    monkeypatch.setattr(worker, "_gpu_gib", lambda: case.gpu_gib)
    assert worker.fits_gpu(case)


def test_the_side_stream_run_takes_the_largest_case_of_no_particular_memory(monkeypatch):
    seen = []
    monkeypatch.setattr(worker, "run_on_side_stream", lambda ex, mod, case, seed: seen.append(case) or (True, "ok"))
    ex = SimpleNamespace(case_bytes=lambda p: p["bytes"])
    big = SimpleNamespace(params={"bytes": 10}, gpu_gib=0.0, label="big")
    huge = SimpleNamespace(params={"bytes": 99}, gpu_gib=20.0, label="huge")
    assert worker.stream_case(ex, None, [big, huge], 0, lambda **_: None)
    assert seen == [big]


def test_a_case_the_worker_skipped_is_not_judged_apart(tmp_path, monkeypatch):
    """judge_apart judges every run the grading process handed over: a case it failed or skipped (a large
    GPU's case on a smaller GPU) handed nothing over, and is not judged again."""
    from grader.check.result import Result
    from grader.check.worker_config import Seed, WorkerConfig

    ex = SimpleNamespace(id="x", cases=[SimpleNamespace(label=n, perf=False, gpu_gib=0.0, params={}) for n in "abc"],
                         case_bytes=lambda p: 1, timeout_s=10)
    result = Result("x", "x.py", "gpu")
    result.add("correctness", "a", "pass", "")
    result.add("correctness", "b", "skip", "skipped: ...")
    result.add("correctness", "c", "fail", "differ")
    class Judged(Exception):
        pass

    def judge_is_started(attempt):  # (its config is written by then)
        raise Judged

    monkeypatch.setattr(judge, "with_memory", judge_is_started)
    cfg = WorkerConfig(exercise="x", seeds=[Seed("1", 1)], handover=str(tmp_path))
    config_seen = []
    real = judge.JudgeConfig.to_json
    monkeypatch.setattr(judge.JudgeConfig, "to_json", lambda self: config_seen.append(self) or real(self))
    with pytest.raises(Judged):
        judge.judge_apart(ex, SimpleNamespace(gate=None, timeout=None, runtime_root=None, calibrated=None), cfg, result)
    assert [r.case_index for r in config_seen[0].runs] == [0]


def test_a_skipped_case_shows_apart_from_the_cases_run():
    from grader.check.result import Result

    res = Result("day11.batch_decode", "x.cu", "gpu")
    for name in "abcd":
        res.add("correctness", name, "pass", "matches")
    res.add("correctness", "e", "fail", "differ")
    res.add("correctness", "pages past 4 GiB", "skip", "skipped: this case needs a GPU with 20 GiB of memory")
    text = str(res)
    assert "4 of 5 cases" in text and "differ" in text and "skipped: this case needs a GPU" in text
    assert "also fail" not in text
