"""Cases that need a large GPU's memory (spec.Case.gpu_gib): Day 11's cache past 2^31 elements, where an
offset kept in 32 bits wraps. On a GPU with less memory the case is skipped, saying so; compute-sanitizer,
Nsight Compute and the side-stream run leave it out."""
from types import SimpleNamespace

import torch

from grader import exercises
from grader.check import judge, worker
from grader.exercises import day11

DECODE = exercises.get("day11.batch_decode")


def _large():
    return [c for c in DECODE.cases if c.gpu_gib]


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
    # ... and the cases without a pool keep their page tables as they were: a few unused pages, in random order
    small = day11.page_table([5, 40], 16, torch.Generator().manual_seed(1), "cpu")
    assert small[3] == 1 + 3 + 3 and set(small[1].tolist()) < set(range(small[3]))


def test_a_large_case_is_left_out_of_the_sanitizers_and_python_modules_have_none():
    assert _large()
    indices = {u.index for u in judge.untimed_cases(DECODE, 1 << 40)}
    assert not indices & {i for i, c in enumerate(DECODE.cases) if c.gpu_gib}
    for ex in exercises.all_exercises().values():
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
