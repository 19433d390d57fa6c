"""The GPU runs' reports (grader/maintain/verify.py, and what self_test.py, class_benchmark.py and
runs.py add to theirs), on parts the CPU can judge: what the verification builds, and that a failed
build is a row of the report, not the end of it."""
from grader.maintain import class_benchmark, runs, self_test, verify


def test_build_jobs_skip_days_without_versions_and_python_module_exercises():
    labels = [j["label"] for j in verify._build_jobs(runs.Scope(["day14"]))]
    # Day 14 has no kernel versions of its own, and its capstone is a Python module: only the
    # RoPE exercise (a .cu file) is built, solution and stub.
    assert labels == ["day14.rope solution", "day14.rope stub"]
    labels = [j["label"] for j in verify._build_jobs(runs.Scope(["day12"]))]
    assert labels == ["day12 kernel versions", "day12.flash_attention solution", "day12.flash_attention stub"]


def test_a_failed_build_is_a_row_of_the_report():
    env = {"date": "today", "commit": "abc", "gpu": "GPU", "sm": "9.0", "sms": 132, "l2_mb": 60.0, "peak_gbps": 4800.0,
           "driver": "1", "torch": "2", "torch_cuda": "13.0", "nvcc": "13.0", "python": "3.12", "cpus": 2}
    failed = {"label": "day12 kernel versions", "ok": False, "error": "boom", "wall_s": 1.0}
    report = {"environment": env, "grading": [], "seconds": 12.0,
              "builds": {"first_build_with_pch_s": 10.0, "pch_existed": True, "cold": [failed], "cached": [failed],
                         "target_cold_s": 20.0, "target_cached_s": 1.0}}
    text = verify._markdown(report)
    assert "| day12 kernel versions | FAILED | - |" in text


def test_a_missed_mutant_says_what_the_grader_reported_instead():
    message = ("AssertionError: day14.decoder/x: expected a correctness failure saying 'differ'\n"
               "  day14.decoder: FAIL   (x.py, gpu mode)\n    PASS  source      entry points\n        use_kernels\n"
               "    FAIL  correctness bf16 batch 1\n        seed 0: RuntimeError: operation not permitted when stream is capturing\n")
    why = self_test._missed_why(message)
    assert why.startswith("AssertionError: day14.decoder/x") and "PASS" not in why
    assert "FAIL  correctness bf16 batch 1 / seed 0: RuntimeError: operation not permitted" in why


def test_flashinfer_beside_measurements_become_a_table_of_the_report():
    from grader import beside

    env = {"date": "today", "commit": "abc", "gpu": "GPU", "sm": "9.0", "sms": 132, "l2_mb": 60.0, "peak_gbps": 4800.0,
           "driver": "1", "torch": "2", "torch_cuda": "13.0", "nvcc": "13.0", "python": "3.12", "cpus": 2,
           "flashinfer": "0.6.17"}
    mem = beside.label("day06.rmsnorm", "bf16 rows=32768 hidden=4096 (past L2)")
    lat = beside.label("day08.top_p_sampling", "128 x 128256 llm top_p~0.9")
    m = [{"label": mem, "name": "solution", "gbps": 3900.0, "copy_ratio": 0.93},
         {"label": mem, "name": "flashinfer", "gbps": 3100.0, "copy_ratio": 0.75},
         {"label": mem, "name": "copy", "gbps": 4190.0, "copy_ratio": 1.0},
         {"label": mem, "name": "flashinfer function", "function": "flashinfer.rmsnorm", "max_rel_diff": 0.004},
         {"label": lat, "name": "solution", "us": 170.0, "speedup": 0.5},
         {"label": lat, "name": "flashinfer", "us": 85.0, "speedup": 1.0}]
    text = verify._markdown({"environment": env, "grading": [], "seconds": 1.0, "notebook_measurements": m})
    assert "## FlashInfer beside the solutions" in text and "FlashInfer 0.6.17" in text
    assert "| day06.rmsnorm | bf16 rows=32768 hidden=4096 (past L2) | x copy | 0.93 | 0.75 | 1.24 | 0.004 |" in text
    # latency: the solution's speed relative to FlashInfer's is FlashInfer's time over the solution's
    assert "| day08.top_p_sampling | 128 x 128256 llm top_p~0.9 | us | 170 | 85 | 0.50 | - |" in text


def test_notebook_measurements_join_the_part_runs_newest_first(tmp_path, monkeypatch):
    """Without a GPU, a notebook shows the committed numbers: a label measured by a later notebook run
    (gpu-notebooks-dayNN-dayMM.json) replaces the older run's, and keeps its own GPU for the caption."""
    import json

    from grader import nb

    def run(gpu, date, rows):
        return {"environment": {"gpu": gpu, "date": date},
                "notebook_measurements": [{"label": lab, "name": "solution", "gbps": v} for lab, v in rows]}

    (tmp_path / "gpu-verification.json").write_text(json.dumps(run("H200", "2026-11-20 10:00 UTC", [("a", 1), ("b", 2)])))
    (tmp_path / "gpu-notebooks-day05-day06.json").write_text(json.dumps(run("H100", "2026-11-26 13:00 UTC", [("b", 3)])))
    (tmp_path / "gpu-notebooks-day01-day04.json").write_text(json.dumps(run("H100", "2026-11-25 13:00 UTC", [("b", 9), ("c", 4)])))
    monkeypatch.setattr(nb, "REPORT", tmp_path / "gpu-verification.json")
    assert nb.reported("a") == {"solution": {"gbps": 1}}
    assert nb.reported("b") == {"solution": {"gbps": 3}}  # the newest run that measured b
    assert nb.reported("c") == {"solution": {"gbps": 4}}
    assert nb.label_caption("a").startswith("measured on H200 on 2026-11-20")
    assert nb.label_caption("b").startswith("measured on H100 on 2026-11-26")
    # a whole-course run newer than the parts wins over them
    (tmp_path / "gpu-verification.json").write_text(json.dumps(run("H200", "2026-11-27 10:00 UTC", [("b", 5)])))
    assert nb.reported("b") == {"solution": {"gbps": 5}}
    assert nb.reported("c") == {"solution": {"gbps": 4}}


def test_the_reference_plot_without_a_gpu_comes_from_the_newest_report_that_graded_it(tmp_path, monkeypatch):
    """Days graded in parts (gpu-verification-day12.json, ...) still give a learner without a GPU the
    reference solution's plot, from the newest run that graded the exercise, captioned with its GPU."""
    import json

    from grader import exercises, nb

    def report(gpu, date, ratio, baseline="sdpa", target=0.5):
        item = {"group": "performance", "name": "case", "status": "pass", "detail": "",
                "metrics": {"value": 1.0, "unit": "TFLOP/s", "ratio": ratio, "baseline": baseline, "target": target}}
        return {"environment": {"gpu": gpu, "date": date},
                "grading": [{"exercise": "day12.flash_attention", "kind": "solution", "items": [item]}]}

    (tmp_path / "gpu-verification.json").write_text(json.dumps({"environment": {"gpu": "H200", "date": "2026-11-20"}}))
    (tmp_path / "gpu-verification-day12.json").write_text(json.dumps(report("H100", "2026-11-26 13:00 UTC", 0.91)))
    (tmp_path / "gpu-verification-day10-day12.json").write_text(json.dumps(report("H200", "2026-11-21 13:00 UTC", 0.8)))
    monkeypatch.setattr(nb, "REPORT", tmp_path / "gpu-verification.json")
    ref = nb.reported_result("day12.flash_attention")
    assert ref.caption.startswith("measured on H100 on 2026-11-26")
    assert [i.metrics["ratio"] for i in ref.performance()] == [0.91]
    # judged against the spec's target as it is now, not the one the report recorded
    target = exercises.get("day12.flash_attention").target.ratio
    assert [(i.metrics["target"], i.status) for i in ref.performance()] == [(target, "pass" if 0.91 >= target else "fail")]
    assert nb.reported_result("day11.batch_decode") is None
    # a run timed against another baseline than the spec's is not shown as this exercise's result
    (tmp_path / "gpu-verification-day12.json").write_text(json.dumps(report("H100", "2026-11-26 13:00 UTC", 0.91, "copy")))
    (tmp_path / "gpu-verification-day10-day12.json").unlink()
    assert nb.reported_result("day12.flash_attention") is None


def test_a_stub_fails_as_expected_by_its_outputs_or_its_own_template_checks():
    """A stub is as expected when a correctness case failed, or (a template) when the exercise's
    own template check refused it; a stub that did not compile or render never is. Day 13's stub is
    refused by "one source per specialization" before it runs."""
    from grader import exercises
    from conftest import check
    from grader.check.result import Result

    day13, day02 = exercises.get("day13.act_and_mul_template"), exercises.get("day02.silu_and_mul")
    stub = check(day13.id, solutions=False, perf=False, seeds=1)  # the real stub, compile-only here
    assert any(i.name == "one source per specialization" and i.status == "fail" for i in stub.items), str(stub)
    assert verify.stub_as_expected(day13, stub)
    for ex, group, name in [(day02, "correctness", "tail 129"), (day13, "build", "one source per specialization")]:
        r = Result(ex.id, "x", "gpu")
        r.add(group, name, "fail", "differs")
        assert verify.stub_as_expected(ex, r)
    for ex, name in [(day13, "compiles (nvcc, sm_90)"), (day13, "renders (Jinja2)"), (day02, "one source")]:
        r = Result(ex.id, "x", "gpu")
        r.add("build", name, "fail", "error")
        assert not verify.stub_as_expected(ex, r), name


def test_the_self_test_and_notebooks_spread_their_workers_over_the_hosts_gpus(monkeypatch):
    """verify --gpus and self-test --gpus: each pytest-xdist worker pinned to one GPU in turn (before it starts CUDA), with
    that GPU's gate, so that every timing still has its GPU alone; nothing changes outside a worker."""
    from grader import config
    from grader.classroom import slots
    from grader.maintain import spread

    env = {spread.GPUS_ENV: "0,1,2,3", spread.GATES_ENV: "/tmp/gates", "PYTEST_XDIST_WORKER": "gw6"}
    assert spread.pin(env) == "2" and env["CUDA_VISIBLE_DEVICES"] == "2"
    assert env[config.GATE_ENV] == "/tmp/gates/gpu-2"
    assert spread.pin({spread.GPUS_ENV: "0,1"}) is None  # not an xdist worker: the parent is left alone
    monkeypatch.setattr(slots, "visible_gpus", lambda: ["0", "1", "2", "3"])
    monkeypatch.setattr(runs, "_has_module", lambda name: True)
    devices, workers, args, env = runs.spread("all", 6, 64)
    assert devices == ["0", "1", "2", "3"] and workers == 24 and args == ["-n", "24", "-p", "grader.maintain.spread"]
    assert env == {spread.GPUS_ENV: "0,1,2,3"}
    assert runs.spread("all", 1, 64)[1] == 4  # the notebooks: one per GPU at a time
    assert runs.spread(None, 6, 16)[:2] == (["0"], 6)  # one GPU by default; half the cores, less 2
    assert runs.spread("2", 6, 16)[1] == 6  # never more than the cores allow
    monkeypatch.setattr(runs, "_has_module", lambda name: False)
    assert runs.spread("all", 6, 64) == (["0"], 1, [], {})  # no pytest-xdist: one at a time, one GPU


def test_the_grading_spreads_over_the_hosts_gpus_with_the_same_verdicts(tmp_path, monkeypatch):
    # verify --gpus N grades its exercises in processes pinned one to a GPU (class grading's slots), one
    # check on each GPU at a time: the rows, their order and verdicts are those of a run on one GPU. On a
    # CPU the slots are pretend GPUs and the checks compile only.
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    scope = runs.Scope(["day01", "day02"])
    said: list[str] = []
    one = verify.grade("stub", said.append, scope)
    two = verify.grade("stub", said.append, scope, gpus="2")
    assert [r["exercise"] for r in two] == [r["exercise"] for r in one] == ["day01.scale_add", "day02.silu_and_mul"]
    assert [(r["verdict"], r["as_expected"]) for r in two] == [(r["verdict"], r["as_expected"]) for r in one]
    assert {r["gpu"] for r in two} == {"0", "1"} and all("log" not in r for r in two)
    assert any(line.endswith(("on GPU 0", "on GPU 1")) for line in said[2:])


def test_the_solutions_20_seeds_start_with_the_longest_and_report_in_the_courses_order(monkeypatch):
    """The self-test's 20-seed runs go four at a time: the exercise given the longest time limit
    (day14.decoder) starts first, so that a short one does not leave it past the deadline; the rows
    keep the course's order and say how long each took."""
    import importlib
    import threading

    from grader.check import Result

    started, lock = [], threading.Lock()

    def fake_check(exercise, **kw):
        with lock:
            started.append(exercise)
        return Result(exercise, "solution", "gpu")

    monkeypatch.setattr(importlib.import_module("grader.check.shared_gpu"), "check_sharing_gpu", fake_check)
    scope = runs.Scope(["day13-day14"])
    rows = self_test.many_seeds(lambda m: None, scope)
    assert started[0] == "day14.decoder"
    assert [r["exercise"] for r in rows] == [e.id for e in scope.exercises()]
    assert all(r["ok"] and r["seconds"] >= 0 for r in rows)


def test_a_class_run_says_what_each_gpus_first_grading_waited_for():
    timing = {"per_gpu": {"0": {"setup_s": 12.7, "ready_s": 15.2}, "1": {"setup_s": 13.1, "ready_s": 17.9}},
              "first_prepared_s": 9.4}
    assert class_benchmark._start_note(timing) == ("; waited for: calibration 13 s, lanes started 18 s, "
                                                   "first submission built 9 s")
    assert class_benchmark._start_note({"per_gpu": {"0": {"setup_s": 12.7}}}) == ""  # (an older run's record)
    timing.update(bindings_built_s=8.6, before_gpu_phase_s=3.2)
    assert class_benchmark._start_note(timing) == ("; waited for: calibration 13 s, lanes started 18 s, "
                                                   "binding built 9 s, first submission built 9 s; "
                                                   "3 s before the GPU phase")


def test_the_executed_notebook_run_executes_the_parts_days_into_the_site():
    """`verify --notebooks-only --executed`: the notebooks of the part run through the site's execute (each
    executed copy kept in site/executed/), one day per --only; the whole course without one."""
    import sys

    from grader.maintain.runs import Scope
    from grader.maintain.verify import site_command

    head = [sys.executable, "-m", "grader.maintain.site", "execute"]
    assert site_command(Scope(["day09.mma_tile", "day08"])) == head + ["--only", "day08", "--only", "day09"]
    assert site_command(Scope(["day07-day08"])) == head + ["--only", "day07", "--only", "day08"]
    assert site_command(Scope()) == head
