"""Class grading at scale, on a CPU machine: every GPU of a host (one slot process per GPU, each
pinned to its GPU), and Ray (a local cluster with pretend GPUs; the tasks run the compile-only
stages). Both must give the same records as one GPU, resume the same way, and lose nothing when a
grading process or a Ray worker dies."""
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from grader import config, machine, paths, pyenv
from grader.classroom import grade_class
from grader.classroom import slots
from grader.classroom.slots import resolve_gpus, run_on_slots

SOLUTION = paths.SOLUTIONS / "day01" / "scale_add.cu"
EXERCISE = "day01.scale_add"
# What depends on where and when a grading ran, not on what it found.
VOLATILE = ("seconds", "timings", "graded_on", "build_seconds")


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """Four good submissions (the same file: the cubin cache makes their checks cheap), a compile
    error, an empty file and a student without the exercise; and what a run on one GPU writes
    (tmp/one, secret seed 7), which the other runs must match."""
    tmp_path = tmp_path_factory.mktemp("class")
    subs = tmp_path / "subs"
    for student in ("ann", "bob", "cid", "dan"):
        (subs / student / "day01").mkdir(parents=True)
        shutil.copy(SOLUTION, subs / student / "day01" / "scale_add.cu")
    (subs / "eve" / "day01").mkdir(parents=True)
    (subs / "eve" / "day01" / "scale_add.cu").write_text(SOLUTION.read_text().replace(
        "out[i] = alpha * x[i] + y[i];", "out[i] = alpha * x[i] + y[i]"))
    (subs / "fay" / "day01").mkdir(parents=True)
    (subs / "fay" / "day01" / "scale_add.cu").write_bytes(b"")
    (subs / "gus").mkdir()
    assert grade_class(subs, tmp_path / "one", only=[EXERCISE], gpus=1, secret_seed=7, jobs=2, echo=lambda s: None) == 0
    return subs, tmp_path


def _records(out):
    recs = {}
    for f in sorted((out / "results").glob("*/*.json")):
        rec = json.loads(f.read_text())
        recs[(f.parent.name, rec["exercise"])] = {k: v for k, v in rec.items() if k not in VOLATILE}
    return recs


def test_resolve_gpus(monkeypatch):
    monkeypatch.setattr(slots, "visible_gpus", lambda: [])  # a CPU machine
    assert resolve_gpus(None) == resolve_gpus("all") == [None]
    assert resolve_gpus("2") == ["0", "1"] and resolve_gpus(2) == ["0", "1"] and resolve_gpus("0,3") == ["0", "3"]
    monkeypatch.setattr(slots, "visible_gpus", lambda: ["4", "6"])  # CUDA_VISIBLE_DEVICES=4,6
    assert resolve_gpus("all") == ["4", "6"] and resolve_gpus("1") == ["4"] and resolve_gpus("1,0") == ["6", "4"]
    for bad, why in (("3", "only 2"), ("0,2", "no GPU 2"), ("0,0", "each GPU once"), ("x", "indices"), ("0", "at least")):
        with pytest.raises(ValueError, match=why):
            resolve_gpus(bad)


def test_two_slots_run_side_by_side_each_on_its_own_gpu():
    done = []
    stats = run_on_slots(["0", "1"], list(range(4)), slots.probe,
                         lambda item, result, device, seconds, error: done.append((device, result, error)))
    assert sorted(r["item"] for _, r, _ in done) == [0, 1, 2, 3] and not any(e for _, _, e in done)
    assert all(r["device"] == device for device, r, _ in done)  # each slot's process sees its GPU alone
    assert {d for d, _, _ in done} == {"0", "1"} and stats["per_gpu"]["0"]["graded"] >= 1
    assert len({r["pid"] for _, r, _ in done}) == 2  # one process per slot, kept for its items
    overlap = [(a, b) for _, a, _ in done for _, b, _ in done
               if a["device"] != b["device"] and a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlap, "the two slots never ran at the same time"


def test_two_gpus_grade_as_one_and_resume(klass):
    subs, tmp = klass
    lines2 = []
    assert grade_class(subs, tmp / "two", only=[EXERCISE], gpus=2, secret_seed=7, jobs=2, echo=lines2.append) == 0
    one, two = _records(tmp / "one"), _records(tmp / "two")
    assert len(one) == 7 and one == two
    assert any("grading on 2 GPUs (0, 1)" in line for line in lines2)
    timing = json.loads((tmp / "two" / "timing.json").read_text())
    assert timing["gpus"] == 2 and set(timing["per_gpu"]) == {"0", "1"}
    assert timing["cpu"]["cpu_s"] > 1.0  # (the builds' processes, the slots': waited for, counted)
    assert any("CPU-seconds per submission" in line for line in lines2)
    graded = [json.loads(f.read_text())["graded_on"] for f in (tmp / "two" / "results").glob("*/*.json")]
    assert {g["gpu"] for g in graded if g} <= {"0", "1"} and sum(1 for g in graded if g) == 4
    # an interrupted run resumes where it stopped, on two GPUs as on one
    (tmp / "two" / "results" / "bob" / f"{EXERCISE}.json").unlink()
    (tmp / "two" / "results" / "eve" / f"{EXERCISE}.json").unlink()
    lines = []
    assert grade_class(subs, tmp / "two", only=[EXERCISE], gpus=2, jobs=2, echo=lines.append) == 0
    assert "2 to grade" in lines[0] and _records(tmp / "two") == one
    assert json.loads((tmp / "two" / "run.json").read_text())["secret_seed"] == 7
    rows = json.loads((tmp / "two" / "gradebook.json").read_text())
    assert len(rows) == 7 and {r["student"] for r in rows if r["failure"] == ""} == {"ann", "bob", "cid", "dan"}


def test_gpus_option_refused_with_the_reason(klass, monkeypatch):
    subs, tmp = klass
    monkeypatch.setattr(slots, "visible_gpus", lambda: ["0"])
    lines = []
    assert grade_class(subs, tmp / "refused", only=[EXERCISE], gpus="2", echo=lines.append) == 2
    assert "only 1 GPU" in lines[0] and not (tmp / "refused").exists()


def test_ray_without_ray_says_how_to_install_it(klass, monkeypatch):
    from grader.classroom import ray_backend

    subs, tmp = klass
    real = importlib.util.find_spec
    monkeypatch.setattr(ray_backend.importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    lines = []
    assert grade_class(subs, tmp / "no-ray", only=[EXERCISE], ray="local", echo=lines.append) == 2
    assert "pip" in lines[0] and ".[ray]" in lines[0]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="Ray is not installed (the optional extra: pip install -e '.[ray]')")
def test_ray_distributes_retries_and_merges(klass):
    """A local Ray cluster with two pretend GPUs: bob's task dies (its worker process exits) the
    first time and cid's raises the first time; Ray runs both again, and every record is the one a
    local run on one GPU writes, merged into one gradebook by the driver."""
    from grader.classroom import ray_backend

    subs, tmp = klass
    faults = tmp / "faults"
    faults.mkdir()

    def flaky(payload):  # pickled by value (a closure): the workers need not import this test
        mark = faults / payload["student"]
        if payload["student"] in ("bob", "cid") and not mark.exists():
            mark.write_text(str(os.getpid()))
            if payload["student"] == "bob":
                os._exit(1)  # the worker dies mid-task
            raise RuntimeError("a task that fails once")
        return ray_backend.ray_grade(payload)

    lines = []
    code = grade_class(subs, tmp / "ray", only=[EXERCISE], gpus=2, secret_seed=7, jobs=2, echo=lines.append,
                       ray="local", ray_options={"num_cpus": 2, "task": flaky})
    assert code == 0, "\n".join(lines)
    assert (faults / "bob").exists() and (faults / "cid").exists()  # both faults happened ...
    assert _records(tmp / "ray") == _records(tmp / "one")            # ... and nothing was lost
    graded = [json.loads(f.read_text())["graded_on"] for f in (tmp / "ray" / "results").glob("*/*.json")]
    assert len({g["gpu"] for g in graded if g}) == 2, graded         # both GPUs had tasks
    assert any("4 grading tasks of one GPU each" in line for line in lines), lines
    timing = json.loads((tmp / "ray" / "timing.json").read_text())
    assert timing["backend"] == "ray" and sum(g["graded"] for g in timing["per_gpu"].values()) == 4
    assert len(json.loads((tmp / "ray" / "gradebook.json").read_text())) == 7


# ------------------------------------------------------------------ the projection (issue 16, item 4)
def _run(gpus, run_s, prepare_s=40.0, graded=30, verdicts=None, calibrate_s=3.0):
    per_gpu = {str(i): {"graded": graded // gpus, "busy_s": run_s, "setup_s": calibrate_s} for i in range(gpus)}
    rows = [{"student": f"s{i}", "verdict": (verdicts or {}).get(f"s{i}", "pass"), "score": 100.0, "ratio": 1.0,
             "baseline": "copy", "failure": ""} for i in range(graded)]
    return {"students": graded, "exercise": "day02.silu_and_mul", "gpus": gpus, "seconds": prepare_s + run_s + 5,
            "sanitize_s": 10.0, "rows": rows, "roster": {},
            "environment": {"date": "today", "gpu": "NVIDIA H200", "cpus": 32, "torch": "2", "commit": f"c{gpus}"},
            "timing": {"graded": graded, "prepare_s": prepare_s, "run_s": run_s, "jobs": 8, "gpus": gpus,
                       "gpu_busy_s": run_s * gpus, "calibrate_s": calibrate_s, "per_gpu": per_gpu}}


def test_projection_from_measured_runs(tmp_path):
    from grader.maintain.class_benchmark import PROJECTION_TARGET_S, class_report, projection

    one = _run(1, 300.0)
    p = projection(dict(one, runs=[one]), exercises=16)
    assert p["gradings"] == 300 * 16 and p["rate_s"] == 10.0 and not p["scaling"]["measured"]
    assert "ideal scaling assumed" in p["scaling"]["how"]
    single, host, four = p["rows"]
    assert single["gpu_s"] == 4800 * 10.0 and host["gpu_s"] == 4800 * 10.0 / 8 and four["gpu_s"] == 4800 * 10.0 / 32
    assert host["prepare_s"] == 4800 * (40.0 * 8 / 30) / 64 and host["calibrate_s"] == 16 * 3.0
    assert host["total_s"] == host["prepare_s"] + host["calibrate_s"] + host["gpu_s"]
    assert p["meets_target"] == (host["total_s"] <= PROJECTION_TARGET_S)
    # a run on two GPUs measures the scaling: each GPU busy 150 s of its 160 s GPU phase (its first grading
    # 10 s in) for 15 gradings, 10.0 s each as on one GPU: ideal pace, plus the start, paid once
    two = _run(2, 160.0, verdicts={"s3": "fail"})
    for g in two["timing"]["per_gpu"].values():
        g.update(busy_s=150.0, first_s=10.0)
    two["timing"]["gpu_busy_s"] = 300.0
    two["timing"]["cpu"] = {"cpus": 32, "cpu_s": 300.0, "busy": 0.5, "saturated": 0.25}
    p2 = projection(dict(two, runs=[one, two]), exercises=16)
    assert p2["scaling"]["measured"] and abs(p2["scaling"]["speedup"] - 300 / 160) < 1e-9
    assert p2["scaling"]["efficiency"] == 1.0 and p2["scaling"]["start_s"] == 10.0
    assert abs(p2["rows"][1]["gpu_s"] - (10.0 + 4800 * 10.0 / 8)) < 1e-6
    # each GPU slower beside the other (the host's CPUs shared): 12.5 s per grading is 80% of ideal
    for g in two["timing"]["per_gpu"].values():
        g["busy_s"] = 187.5
    two["timing"]["gpu_busy_s"] = 375.0
    p2 = projection(dict(two, runs=[one, two]), exercises=16)
    assert abs(p2["scaling"]["efficiency"] - 0.8) < 1e-9
    assert abs(p2["rows"][1]["gpu_s"] - (10.0 + 4800 * 10.0 / (8 * 0.8))) < 1e-6
    (tmp_path / "class-grading.json").write_text(json.dumps(dict(two, runs=[one, two])))
    md = class_report(tmp_path)
    assert "| 2 | 1 | today, c2 |" in md and "1 differ: s3" in md
    assert "each GPU 12.50 s of busy time per grading against 10.00 s (80% of ideal)" in md
    assert "the GPU phase of these 30 students was 1.88x faster" in md
    # how busy its CPUs were: a run from before busy CPU-seconds were measured gives the floor it had
    assert ("| 32 CPUs 50% busy (25% of seconds at 90% or more), 10.0 CPU-s per submission by the processes "
            "waited for (a floor) | 1 differ") in md
    two["timing"]["cpu"]["busy_cpu_s"] = 2400.0
    (tmp_path / "class-grading.json").write_text(json.dumps(dict(two, runs=[one, two])))
    assert "| 32 CPUs 50% busy (25% of seconds at 90% or more), 80 busy CPU-s per submission | 1 differ" in class_report(tmp_path)
    assert "| - | - |" in md  # a run from before the CPUs were measured
    assert "## Projection: a class of 300" in md and "| one 8-GPU host | 8 |" in md
    assert "Were the preparation to run beside the GPU phase" in md
    # a run with lanes prepares and grades side by side: the longer of the two counts, not their sum
    lanes = dict(_run(1, 300.0), lanes=4)
    lanes["timing"].update(overlapped=True, lanes=4)
    p3 = projection(dict(lanes, runs=[one, lanes]), exercises=16)
    host = p3["rows"][1]
    assert p3["overlapped"] and p3["lanes"] == 4
    assert host["total_s"] == max(host["prepare_s"], host["calibrate_s"] + host["gpu_s"])
    (tmp_path / "class-grading.json").write_text(json.dumps(dict(lanes, runs=[one, lanes])))
    md = class_report(tmp_path)
    assert "The preparation runs beside the GPU phase" in md and "4 submissions at a time on each GPU" in md
    # a preparation at the lanes' pace (its processes idle between submissions, its wall time the GPU
    # phase's): its process-seconds are its stages summed over the gradings, not processes x wall time
    lanes["stage_s"] = {"source and SASS checks": 90.0, "extension linked": 30.0, "44 cases x 4 seeds": 500.0}
    p4 = projection(dict(lanes, runs=[one, lanes]), exercises=16)
    assert p4["prepare_per_submission_s"] == 120.0 / 30 and p4["rows"][1]["prepare_s"] == 4800 * 4.0 / 64


def test_the_class_report_says_where_the_gradings_time_went(tmp_path):
    # From each grading's timing line, summed: where a class run's lane-seconds go (the 2 s per grading
    # that one 8-GPU host needs for 300 students is found there, not guessed).
    from grader.maintain.class_benchmark import _stage_seconds, class_report

    stages = _stage_seconds([{"timings": {"cases": 3.0, "grading processes launched": 4.0}},
                             {"timings": {"cases": 5.0, "compute-sanitizer memcheck": 1.0}}, {"timings": {}}])
    assert list(stages.items()) == [("cases", 8.0), ("grading processes launched", 4.0), ("compute-sanitizer memcheck", 1.0)]
    run = dict(_run(1, 300.0, graded=2), stage_s=stages)
    (tmp_path / "class-grading.json").write_text(json.dumps(dict(run, runs=[run])))
    md = class_report(tmp_path)
    assert "## Where the gradings' time went" in md and "| cases | 8 | 62% | 4.0 s |" in md
    no_stages = _run(1, 300.0)
    (tmp_path / "class-grading.json").write_text(json.dumps(dict(no_stages, runs=[no_stages])))
    assert "Where the gradings' time went" not in class_report(tmp_path)  # a report from before the table


def test_the_class_report_says_where_each_gpus_time_went(tmp_path):
    # On several GPUs, each GPU's gradings apart: one GPU may grade fewer in the same time, holding more of
    # the hang mutants (each holds its GPU's timings back for the pause limit), which a table of sums hides.
    from grader.maintain.class_benchmark import _stage_seconds, _stages_by_gpu, class_report

    records = [{"timings": {"waiting for the GPU alone": 9.0, "cases": 1.0}, "graded_on": {"gpu": "0"}},
               {"timings": {"waiting for the GPU alone": 8.0, "cases": 1.0}, "graded_on": {"gpu": "0"}},
               {"timings": {"cases": 2.0}, "graded_on": {"gpu": "1"}},
               {"timings": {"source and SASS checks": 3.0}, "graded_on": None}]  # a build failure: no GPU
    by_gpu = _stages_by_gpu(records)
    assert by_gpu == {"0": {"graded": 2, "stage_s": {"waiting for the GPU alone": 17.0, "cases": 2.0}},
                      "1": {"graded": 1, "stage_s": {"cases": 2.0}}}
    assert _stages_by_gpu(records[:2]) == {}  # one GPU: the sums say it all
    run = dict(_run(2, 100.0, graded=4), stage_s=_stage_seconds(records), stage_s_by_gpu=by_gpu)
    (tmp_path / "class-grading.json").write_text(json.dumps(dict(run, runs=[run])))
    md = class_report(tmp_path)
    assert "| stage | seconds | share | per grading | GPU 0 (2 graded) | GPU 1 (1 graded) |" in md
    assert "| waiting for the GPU alone | 17 | 71% | 4.2 s | 17 | 0 |" in md
    assert "| cases | 4 | 17% | 1.0 s | 2 | 2 |" in md


def test_lanes_grade_side_by_side_on_one_gpu_from_a_feed_that_grows(tmp_path):
    """Two lanes on one GPU take items as a generator hands them over (class grading's preparation
    runs beside the GPUs); both lanes' processes get that GPU's gate folder."""
    import time

    def feed():
        for i in range(4):
            time.sleep(0.1)  # an item prepared a little later than the one before
            yield i

    done = []
    stats = run_on_slots(["0"], feed(), slots.probe,
                         lambda item, result, device, seconds, error: done.append((result, error)),
                         lanes=2, gate_root=tmp_path)
    assert sorted(r["item"] for r, _ in done) == [0, 1, 2, 3] and not any(e for _, e in done)
    assert {r["gate"] for r, _ in done} == {str(tmp_path / "gpu-0")}
    assert len({r["pid"] for r, _ in done}) == 2  # a process per lane
    overlap = [(a, b) for a, _ in done for b, _ in done
               if a is not b and a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlap, "the two lanes never ran at the same time"
    g = stats["per_gpu"]["0"]
    assert g["graded"] == 4 and g["lane_s"] > g["busy_s"] > 0  # the GPU's busy time counts overlaps once


def _later_once(item, context=None):
    """A probe whose first item asks to be run again after the others (as a grading re-run alone)."""
    if item == 0:
        return slots.Later("0 again")
    return slots.probe(item, context, seconds=0.2)


def test_an_item_run_later_comes_after_every_other():
    done = []
    stats = run_on_slots(["0"], list(range(5)), _later_once, lambda item, r, d, s, e: done.append((item, r)), lanes=2)
    assert [item for item, _ in done][-1] == "0 again" and len(done) == 5 and stats["per_gpu"]["0"]["graded"] == 5


def test_on_several_gpus_an_item_run_later_comes_next():
    # Its GPU's lanes wait for it while the other GPUs grade on: left to the end, one GPU would run it alone
    # while the others had nothing left to do.
    done = []
    stats = run_on_slots(["0", "1"], list(range(8)), _later_once, lambda item, r, d, s, e: done.append(item), lanes=1)
    assert sorted(map(str, done)) == sorted(["0 again", *map(str, range(1, 8))])
    assert done.index("0 again") < len(done) - 2  # (taken right after item 0, the first taken)
    assert sum(g["graded"] for g in stats["per_gpu"].values()) == 8


def test_a_failing_feed_is_said_not_lost():
    def feed():
        yield 0
        raise RuntimeError("the preparation pool died")

    done = []
    stats = run_on_slots(["0"], feed(), slots.probe, lambda *a: done.append(a), lanes=2)
    assert len(done) == 1 and any("preparation pool died" in e for e in stats["errors"])


def _lane_grading(tmp_path, monkeypatch, beside):
    """grade_one in a lane of GPU 0 (its gate under tmp_path) with the run stubbed: beside the other
    lanes `beside(prep)` says how it went; with the GPU alone it passes. Returns (the lane module, the item,
    the gate, the runs as (gate, alone: the gate's turn held, every other process paused))."""
    from grader.check import Prepared, Result, RunOptions
    from grader.check.gate import GpuGate
    from grader.classroom import lane

    gate = tmp_path / "gpu-0"
    GpuGate(gate)
    calls = []

    def fake_run(ex, prep, opts, warm=None, warm_sanitizers=None):
        calls.append((opts.gate, (gate / "timing").exists()))
        if opts.gate:
            beside(prep)
        else:
            prep.result.add("correctness", "run", "pass", "alone")
        return prep.result

    monkeypatch.setattr(lane, "run", fake_run)
    monkeypatch.setattr(lane, "slot_gate", lambda: str(gate))
    item = lane.GradingItem("s", EXERCISE, Prepared(Result(EXERCISE, "s/day01/scale_add.cu", "gpu")), RunOptions(),
                             "path", "display")
    return lane, item, gate, calls


def test_a_time_limit_reached_beside_other_lanes_is_graded_again_alone(tmp_path, monkeypatch):
    """A kernel hanging in another lane slows this one's cases too (the GPU shares its time between
    processes): a time limit reached beside others is no verdict; the submission is graded again with
    the GPU to itself (every other lane paused), and only that run counts."""
    def beside(prep):
        prep.timed_out = True
        prep.result.add("correctness", "run", "fail", "no result within 60 s")

    lane, item, gate, calls = _lane_grading(tmp_path, monkeypatch, beside)
    later = lane.grade_one(item, None)
    assert isinstance(later, slots.Later) and calls == [(str(gate), False)]
    assert later.item.prepared.result.items == [] and later.item.alone  # the submission as it was before the run
    record = lane.grade_one(later.item, None)  # its turn comes after every other submission
    assert calls == [(str(gate), False), (None, True)]
    assert [i["detail"] for i in record["items"]] == ["alone"] and record["verdict"] == "pass"
    assert any("graded again with the GPU alone" in k for k in record["timings"])
    assert any("first run beside other gradings (stopped: its time limit)" in k for k in record["timings"])
    assert not (gate / "timing").exists()  # the turn given back


@pytest.mark.parametrize("contended", [False, True])
def test_a_call_stopped_as_a_hang_is_graded_again_alone_only_beside_a_long_call(tmp_path, monkeypatch, contended):
    """One call of its own code stopped past the run limit while the other lanes' calls were all short
    (not `contended`): the GPU was its own but for their kernels, the verdict stands and nothing runs
    again; beside another's long call (a hang, compute-sanitizer, ncu) it is graded again alone."""
    def beside(prep):
        prep.timed_out = prep.stuck = True
        prep.contended = contended
        prep.result.add("correctness", "run", "fail", "no result within 10 s from one call of your code")

    lane, item, gate, calls = _lane_grading(tmp_path, monkeypatch, beside)
    got = lane.grade_one(item, None)
    if contended:
        assert isinstance(got, slots.Later)
        record = lane.grade_one(got.item, None)
        assert calls == [(str(gate), False), (None, True)] and record["verdict"] == "pass"
    else:
        assert isinstance(got, dict) and calls == [(str(gate), False)]
        assert got["verdict"] == "fail" and "from one call of your code" in got["items"][0]["detail"]
        assert not any("graded again" in k for k in got["timings"])


def _setup_marks(folder, device=None):
    (folder / f"setup-{os.getpid()}-{device}").touch()
    return None


def test_a_slot_with_nothing_to_grade_runs_no_setup(tmp_path):
    """A resumed run with everything graded measures no baseline (seconds per GPU and exercise)."""
    import functools

    stats = run_on_slots(["0", "1"], [], slots.probe, lambda *a: None,
                         setup=functools.partial(_setup_marks, tmp_path), lanes=2)
    assert not list(tmp_path.iterdir()) and stats["per_gpu"]["0"]["graded"] == 0
    done = []
    run_on_slots(["0"], [1], slots.probe, lambda *a: done.append(a), setup=functools.partial(_setup_marks, tmp_path))
    assert len(list(tmp_path.iterdir())) == 1 and len(done) == 1


def _prime_marks(folder):
    (folder / f"prime-{os.getpid()}").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))


def test_every_lane_of_a_slot_starts_with_it_and_primes_beside_the_setup(tmp_path):
    """A slot's lane processes all start with the slot, each running prime() (class grading: the
    grading processes for its first submission) beside the setup, however few items there are:
    not when a first item comes (a cost each GPU paid at its start, which no second GPU shortens)."""
    import functools

    marks, setups = tmp_path / "marks", tmp_path / "setups"
    marks.mkdir()
    setups.mkdir()
    done = []
    stats = run_on_slots(["0"], [1], slots.probe, lambda *a: done.append(a), lanes=3,
                         setup=functools.partial(_setup_marks, setups), prime=functools.partial(_prime_marks, marks))
    primed = {int(f.name.split("-")[1]): f.read_text() for f in marks.iterdir()}
    assert len(primed) == 3 and set(primed.values()) == {"0"}  # every lane, pinned to its GPU first
    assert done[0][1]["pid"] in primed and len(list(setups.iterdir())) == 1
    g = stats["per_gpu"]["0"]
    assert 0 <= g["first_s"] <= g["end_s"] and g["graded"] == 1
    # what the first item waited for, said: the other lanes' start, and the item itself
    assert 0 < g["ready_s"] <= g["first_s"] and 0 <= stats["first_item_s"] <= g["first_s"]


def _setup_at(folder, device=None):
    (folder / f"setup-{os.getpid()}").write_text(repr(time.time()))
    return None


def test_a_slot_told_items_will_come_sets_up_while_the_first_is_made(tmp_path):
    """setup_early: the setup (a GPU's calibration) runs while the first item is still being made
    (class grading: the first builds), not after it comes; without it, after (none may come)."""
    import functools

    for early in (True, False):
        made = {}

        def feed():
            time.sleep(1.5)  # the first build
            made["at"] = time.time()
            yield 1

        folder = tmp_path / str(early)
        folder.mkdir()
        run_on_slots(["0"], feed(), slots.probe, lambda *a: None, lanes=2,
                     setup=functools.partial(_setup_at, folder), setup_early=early)
        (mark,) = folder.iterdir()
        assert (float(mark.read_text()) < made["at"]) == early


def _setup_with_device(folder, device=None):
    (folder / f"setup-{os.getpid()}-{device}").write_text(repr(time.time()))
    return {"device": device}


def test_each_gpus_setup_runs_here_at_once_not_after_the_sandbox_check(tmp_path):
    """A GPU's setup (its calibration: a process of its own, pinned to it) runs in a thread of the run's
    process, told its device, as the slot starts: not in the slot's process, whose start waits for the
    sandbox's GPU check (`sandbox_off` called: seconds the calibration would wait for)."""
    import functools

    marks = tmp_path / "marks"
    marks.mkdir()
    decided, seen = [], []

    def sandbox_off():  # the sandbox's GPU check, still under way as the slots start
        time.sleep(1.0)
        decided.append(time.time())
        return None

    stats = run_on_slots(["0", "1"], list(range(8)), slots.probe, lambda *a: None, lanes=2,
                         setup=functools.partial(_setup_with_device, marks), setup_early=True,
                         sandbox_off=sandbox_off, on_setup=lambda device, context: seen.append((device, context)))
    setups = {f.name: float(f.read_text()) for f in marks.iterdir()}
    assert set(setups) == {f"setup-{os.getpid()}-0", f"setup-{os.getpid()}-1"}  # here, each told its GPU
    assert len(decided) == 2 and max(setups.values()) < min(decided)
    assert sorted(seen) == [("0", {"device": "0"}), ("1", {"device": "1"})]
    for g in stats["per_gpu"].values():
        assert 0 <= g["setup_s"] and 0 <= g["setup_ready_s"] <= g["first_s"]


def test_lanes_below_one_are_refused_before_anything_starts(klass):
    subs, tmp_path = klass
    said = []
    assert grade_class(subs, tmp_path / "none", only=[EXERCISE], lanes=0, echo=said.append) == 2
    assert said == ["--lanes 0: at least 1"] and not (tmp_path / "none").exists()


def test_a_built_submission_travels_to_a_ray_task_whole(tmp_path):
    """The driver ships the built extension in the task: its library is named after the binding, not
    after the build, and must travel (else the node has nothing to load)."""
    from grader.jit import build_checked, compile_cubin
    from grader.check import Prepared, Result
    from grader.classroom.ray_backend import _module_on_node, _module_payload

    src = paths.SOLUTIONS / "day01" / "scale_add.cu"
    built = build_checked(src, compile_cubin(src, host_object=True).host_object, "day01_scale_add")
    prep = Prepared(Result(EXERCISE, "s/day01/scale_add.cu", "gpu"), module_dir=str(built.directory),
                    module_name=built.name)
    payload = _module_payload(prep)
    assert list(payload["files"]) == [built.library.name]
    (tmp_path / "node").mkdir()
    on_node = Path(_module_on_node(tmp_path / "node", payload))
    assert (on_node / built.library.name).read_bytes() == built.library.read_bytes()


def test_a_class_runs_binding_is_built_ahead_from_the_solution(tmp_path, monkeypatch):
    """As a class run starts, a thread of its process compiles each exercise's binding from its solution: the
    submissions' links use that object (built by the first of them, the others would wait for it under its lock)."""
    from grader import exercises
    from grader.jit import build_checked, compile_cubin
    from grader.classroom import grade

    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    ex = exercises.get(EXERCISE)
    monkeypatch.setattr(machine, "has_gpu", lambda: False)
    grade._prebuild_binding(ex.id, str(ex.solution_path))
    assert not (tmp_path / "cache" / "ext" / "bindings").exists()  # compile-only: nothing is linked there
    monkeypatch.setattr(machine, "has_gpu", lambda: True)
    monkeypatch.setattr(machine, "arch", lambda: machine.DEFAULT_ARCH)  # (no GPU to ask here)
    grade._prebuild_binding(ex.id, str(ex.solution_path))
    (obj,) = (tmp_path / "cache" / "ext" / "bindings").glob("*/main.o")
    made = obj.stat().st_mtime_ns
    # a student's file: the solution's entry points, a kernel of their own
    src = tmp_path / "scale_add.cu"
    src.write_text(ex.solution_path.read_text() + "\n// student00\n")
    built = build_checked(src, compile_cubin(src, host_object=True).host_object, ex.build_name)
    assert not built.cached and obj.stat().st_mtime_ns == made
    assert list((tmp_path / "cache" / "ext" / "bindings").glob("*/main.o")) == [obj]


def test_the_class_benchmark_gives_each_student_a_file_of_their_own(tmp_path):
    # Builds and compute-sanitizer runs are cached by content: copies of one file would share them, and a
    # benchmark of copies measures less than a class of 300 different submissions costs.
    from grader import exercises
    from grader.maintain.class_benchmark import _same_class, synthetic_class

    for ex_id in ("day02.silu_and_mul", "day13.act_and_mul_template", "day14.decoder"):
        ex = exercises.get(ex_id)
        roster = synthetic_class(ex, 5, tmp_path / ex_id)
        files = sorted((tmp_path / ex_id).glob(f"student*/{ex.day}/{ex.stub_path.name}"))
        assert len(files) == 5 and len({f.read_text() for f in files}) == 5
        assert roster["student00"] == "the solution" and roster["student01"] == "the stub"
        assert files[0].read_text().startswith(ex.solution_path.read_text())
        if ex_id == "day14.decoder":
            compile(files[0].read_text(), str(files[0]), "exec")  # the line is a comment there too
    # runs of copies, from before, are not the same class as runs of distinct files
    assert not _same_class({"students": 42, "exercise": "e"}, {"students": 42, "exercise": "e", "distinct_sources": True})


def test_the_preparation_counts_the_cpus_this_run_may_use():
    """A Slurm job's cpuset (or taskset) gives the run fewer CPUs than the host has: the preparation's
    processes are counted from those (os.cpu_count() counts the host's)."""
    import subprocess
    import sys

    code = "import os; os.sched_setaffinity(0, {0}); from grader import machine; print(machine.usable_cpus())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=paths.ROOT, check=True)
    assert out.stdout.strip() == "1"


def test_a_class_run_says_how_busy_its_cpus_were():
    """CpuMeter: the CPU seconds of the processes a run started and waited for, and how busy the CPUs
    it may use were (the run's pace may be its CPUs', not its GPUs')."""
    import subprocess
    import sys

    from grader.classroom.cpu import CpuMeter

    with CpuMeter(period_s=0.1) as meter:
        subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"],
                       check=True)
    r = meter.result()
    assert r["cpu_s"] >= 0.5 and r["cpus"] == machine.usable_cpus()
    assert r["busy_cpu_s"] >= 0.3  # (whatever ran: at least the spin, but for the sample it ended in)
    assert r["busy"] is not None and 0.0 < r["busy"] <= 1.0 and 0.0 <= r["saturated"] <= 1.0


def test_a_preparation_process_prepares_its_first_submission_at_normal_priority_then_nicer(tmp_path):
    """Nothing grades before the first submissions are prepared: each preparation process's first one
    runs at the priority it started with, the later ones config.PREPARE_NICE below the lanes."""
    import subprocess
    import sys

    code = ("import json, os\nfrom grader.classroom import grade\nseen = []\n"
            "grade.prepare = lambda ex, path, display=None: seen.append(os.nice(0))\n"
            "grade._preparation_process()\n"
            "for _ in range(3):\n"
            f"    grade._prepare_job(grade.PrepareJob('day02.silu_and_mul', {str(tmp_path)!r}, 'x'))\n"
            "print(json.dumps({'seen': seen, 'omp': os.environ.get('OMP_NUM_THREADS')}))\n")
    env = dict(pyenv.subprocess_env())
    env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    start = os.nice(0)
    assert got["seen"] == [start, start + config.PREPARE_NICE, start + config.PREPARE_NICE]
    assert got["omp"] == str(config.WORKER_CPU_THREADS)


def test_the_preparation_keeps_at_most_its_processes_count_ahead_of_the_lanes():
    """grade.prepared_ahead: the first `ahead` jobs start at once (before anything is taken); one more
    starts as each is handed on, never more than `ahead` started and not handed on; every job comes
    once, in the order they end, where a later one ends first too."""
    import concurrent.futures as cf
    import threading

    from grader.classroom.grade import prepared_ahead

    lock = threading.Lock()
    started, handed, most = [], [], [0]
    release = {j: threading.Event() for j in range(10)}

    def job(j):
        release[j].wait(10)
        return j * j

    with cf.ThreadPoolExecutor(max_workers=10) as pool:
        def submit(j):
            with lock:
                started.append(j)
            return pool.submit(job, j)

        ready = prepared_ahead(range(10), submit, 3)
        assert started == [0, 1, 2]  # at the call, not at the first item taken
        release[1].set()
        j, fut = next(ready)
        assert (j, fut.result()) == (1, 1) and started == [0, 1, 2, 3]  # one more as one is handed on
        handed.append(j)
        time.sleep(0.05)
        assert started == [0, 1, 2, 3]  # nothing more until the next is taken
        for e in release.values():
            e.set()
        for j, fut in ready:
            assert fut.result() == j * j
            handed.append(j)
            most[0] = max(most[0], len(started) - len(handed))  # (started, not yet taken)
    assert sorted(handed) == list(range(10)) and started == list(range(10)) and most[0] == 3


def test_the_class_report_shows_copies_of_one_submission_graded_unlike(tmp_path):
    """The synthetic class repeats a few submissions: each copy must get the same verdict and score in one
    run (its secret seed); one that does not was disturbed (e.g. by a hang's stop on its GPU)."""
    from grader.maintain.class_benchmark import class_report, copies_unlike

    run = _run(1, 300.0, graded=6)
    run["roster"] = {f"s{i}": ("the solution" if i % 2 == 0 else "mutant hangs") for i in range(6)}
    for row in run["rows"]:
        if run["roster"][row["student"]] == "mutant hangs":
            row.update(verdict="fail", score=20.0)
    assert copies_unlike(run) == []
    two = _run(2, 160.0, graded=6)
    two["roster"], two["rows"] = run["roster"], [dict(x) for x in run["rows"]]
    two["rows"][4].update(verdict="fail", score=21.2)
    assert copies_unlike(two) == ["s4: fail 21.2 (its copies: pass 100)"]
    # a score that follows a measured speed moves with the timing's noise, not by whole checks
    noisy = dict(run, rows=[dict(x) for x in run["rows"]])
    noisy["rows"][1]["score"], noisy["rows"][3]["score"] = 87.8, 87.9
    noisy["rows"][5]["score"] = 87.9
    assert copies_unlike(noisy) == []
    noisy["rows"][5]["score"] = 85.0
    assert copies_unlike(noisy) == ["s5: fail 85.0 (its copies: fail 87.8)"]
    (tmp_path / "class-grading.json").write_text(json.dumps(dict(two, runs=[run, two])))
    md = class_report(tmp_path)
    assert "| - ; copies of one submission graded alike |" not in md
    assert "-; copies of one submission graded alike |" in md  # the run on 1 GPU
    assert "1 differ: s4; **copies graded unlike**: s4: fail 21.2 (its copies: pass 100) |" in md


def test_a_preparation_that_fails_for_the_graders_own_reasons_is_tried_once_more(tmp_path):
    """_prepare_job: an exception out of prepare() is the grader's trouble, not the submission's (prepare
    makes rows of those): tried once more (an exec of nvcc can fail with EFAULT on a fresh host, and the
    run graded nothing); failing again, it is raised, and the run leaves that submission ungraded."""
    import subprocess
    import sys

    code = ("import json\nfrom grader.classroom import grade\ncalls = []\n"
            "def flaky(ex, path, display=None):\n"
            "    calls.append(display)\n"
            "    if display == 'never' or len(calls) == 1:\n"
            "        raise OSError(14, 'Bad address')\n"
            "    return 'prepared'\n"
            "grade.prepare = flaky\n"
            f"got = grade._prepare_job(grade.PrepareJob('day02.silu_and_mul', {str(tmp_path)!r}, 'once'))\n"
            "try:\n"
            f"    grade._prepare_job(grade.PrepareJob('day02.silu_and_mul', {str(tmp_path)!r}, 'never'))\n"
            "    raised = None\n"
            "except OSError as e:\n"
            "    raised = str(e)\n"
            "print(json.dumps({'got': got, 'calls': calls, 'raised': raised}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=pyenv.subprocess_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"got": "prepared", "calls": ["once", "once", "never", "never"], "raised": "[Errno 14] Bad address"}


def test_the_sandboxs_gpu_check_runs_beside_the_start_and_is_waited_for_once(monkeypatch):
    """grade._sandbox_gpu_check: the check starts at once in a thread; the call it returns waits for it,
    turns the sandbox off where CUDA fails inside it, says where the code will run once (the slots of
    every GPU ask), and raises where the check itself failed (no grading runs on a guess)."""
    from grader.check import sandbox
    from grader.classroom import grade

    monkeypatch.setattr(sandbox, "_disabled", [])
    monkeypatch.setattr(sandbox, "available", lambda: sandbox._disabled[0] if sandbox._disabled else None)
    monkeypatch.setattr(sandbox, "banner", lambda: f"sandbox: {sandbox.available() or 'on'}")
    began = []

    def slow_check(answer):
        def check():
            began.append(time.monotonic())
            time.sleep(0.3)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return check

    fails = "CUDA fails inside it: no device"
    for answer, said in ((None, "sandbox: on"), (fails, f"sandbox: {fails}")):
        monkeypatch.setattr(sandbox, "_disabled", [])
        monkeypatch.setattr(sandbox, "check_gpu", slow_check(answer))
        echoed = []
        t0 = time.monotonic()
        known = grade._sandbox_gpu_check(True, echoed.append)
        assert began and began[-1] - t0 < 0.25 and not echoed  # started at once, nothing waited for yet
        known()
        assert known() == answer  # (what each slot's processes are told: why not in the sandbox)
        assert echoed == [said] and time.monotonic() - t0 >= 0.3
    monkeypatch.setattr(sandbox, "_disabled", [])
    monkeypatch.setattr(sandbox, "check_gpu", slow_check(OSError("bwrap vanished")))
    known = grade._sandbox_gpu_check(True, lambda line: None)
    with pytest.raises(RuntimeError, match="the sandbox's GPU check failed: OSError: bwrap vanished"):
        known()
    count, echoed = len(began), []
    grade._sandbox_gpu_check(False, echoed.append)  # nothing to grade on a GPU: no check, said at once
    assert len(began) == count and echoed == ["sandbox: on"]


def test_a_slots_processes_start_before_the_sandbox_check_ends_and_again_where_it_fails(tmp_path):
    """`sandbox_off` called (the sandbox's GPU check under way): the slot's lane processes start (and
    prime) at once, not after it; where it answers that CUDA fails inside the sandbox, every item runs
    in a process started again with that answer (sandbox.disable), none in one started before it."""
    import functools

    for answer in (None, "CUDA fails inside the sandbox here (test)"):
        marks = tmp_path / str(bool(answer))
        marks.mkdir()
        decided = []

        def sandbox_off():
            time.sleep(1.5)
            decided.append(time.time())
            return answer

        done = []
        run_on_slots(["0"], list(range(4)), slots.probe, lambda *a: done.append(a[1]), lanes=2,
                     sandbox_off=sandbox_off, prime=functools.partial(_prime_at, marks), setup_early=True)
        primed = {int(f.name.split("-")[1]): float(f.read_text()) for f in marks.iterdir()}
        early = {pid for pid, at in primed.items() if at < decided[0]}
        assert len(early) == 2 and len(done) == 4  # both lanes started before the check's answer
        if answer is None:
            assert {d["pid"] for d in done} <= early
        else:
            assert not {d["pid"] for d in done} & early and {d["sandbox"] for d in done} == {answer}
            assert len(primed) == 4  # (the lanes started again, primed again)


def _prime_at(folder):
    (folder / f"prime-{os.getpid()}").write_text(repr(time.time()))
