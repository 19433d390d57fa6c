"""`python -m grader class-benchmark N`: a class graded as an instructor would, timed (class-grading.md/.json).

A synthetic class of N submissions (synthetic_class: the solution, the stub and the known-wrong
submissions of tests/mutants in turn, each student's file its own) is graded on the host's GPUs
(`--gpus`, `--lanes`) from a fresh build cache. class-grading.json keeps the latest run of each GPU
count, so that runs on 1 GPU and on N measure the scaling and compare verdicts; the report projects
a class of 300 over every exercise from them (projection()).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from .. import config, pyenv
from .runs import env_info, warm_up


def class_benchmark(out: str | Path, students: int = 30, exercise: str = "day02.silu_and_mul",
                    gpus: str | None = None, lanes: int = config.CLASS_LANES) -> int:
    """Grade a synthetic class (the solution, the stub and the known-wrong submissions of
    tests/mutants/ in turn, each student's file its own: synthetic_class) on `gpus` ("all", N or "0,1") with a fresh build cache, and
    report how long it took: class-grading.md/json. Each GPU count's latest run is kept in the
    JSON ("runs"), so that a run on 1 GPU and one on 2 measure the scaling (and compare verdicts);
    the report projects a 300-student class over every exercise from them (projection())."""
    from .. import exercises
    from ..classroom import grade_class
    from ..classroom.lane import GRADING_PROCESSES

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ex = exercises.get(exercise)
    subs = Path(tempfile.mkdtemp(prefix="class-"))
    roster = synthetic_class(ex, students, subs)
    # Every run builds cold (as an instructor's first run does), so runs on 1 and N GPUs compare.
    os.environ["COURSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="course-cache-")
    # The precompiled header is made once per torch install, not per class: made here first (this fresh
    # cache holds it), it is not charged to this class's preparation (it held up every build).
    first = warm_up()
    print(f"first build (the precompiled header): {first['wall_s']:.1f} s", flush=True)
    # So is torch's bytecode, where the install keeps none (a container's; a pip or conda install has it):
    # written here, as on an instructor's host after its first run, not charged to the class (10 s on an H100 host).
    took = pyenv.write_bytecode()
    if took is not None:
        print(f"torch's and the grader's Python bytecode (this install keeps none): {took:.1f} s", flush=True)
    graded = Path(tempfile.mkdtemp(prefix="class-out-"))
    t0 = time.perf_counter()
    rc = grade_class(subs, graded, only=[exercise], gpus=gpus, echo=lambda m: print(m, flush=True), lanes=lanes)
    total = time.perf_counter() - t0
    timing = json.loads((graded / "timing.json").read_text())
    rows = json.loads((graded / "gradebook.json").read_text())
    if rc != 0 or len(rows) != students:  # (its pace and verdicts would stand for a class it did not grade)
        print(f"this run graded {len(rows)} of {students} students: not recorded in {out / 'class-grading.json'} "
              f"(its results: {graded})", flush=True)
        return 1
    records = [json.loads(f.read_text()) for f in (graded / "results").glob("*/*.json")]
    sanitize_s = sum(i["metrics"].get("seconds", 0) for r in records for i in r["items"]
                     if i["name"].startswith("compute-sanitizer") and not i["metrics"].get("cached"))
    shutil.rmtree(out / "class", ignore_errors=True)
    shutil.copytree(graded, out / "class", ignore=shutil.ignore_patterns(".work"))
    shutil.copy(graded / "class-summary.png", out / "class-summary.png")
    run = {"students": students, "exercise": exercise, "distinct_sources": True, "gpus": timing.get("gpus", 1),
           "lanes": lanes, "processes": GRADING_PROCESSES, "seconds": total,
           "sanitize_s": sanitize_s, "stage_s": _stage_seconds(records), "stage_s_by_gpu": _stages_by_gpu(records),
           "timing": timing, "rows": rows,
           "roster": roster, "environment": env_info()}
    previous = _class_runs(out / "class-grading.json")
    # (runs of classes whose copies shared their builds, from before distinct_sources, measured less: dropped)
    runs = [r for r in previous if r.get("distinct_sources") and not (
        _same_class(r, run) and r["gpus"] == run["gpus"] and r.get("lanes", 1) == lanes
        and r.get("processes", 2) == run["processes"])] + [run]
    report = dict(run, runs=sorted(runs, key=lambda r: (r.get("lanes", 1), r["gpus"])))
    (out / "class-grading.json").write_text(json.dumps(report, indent=1))
    md = class_report(out)
    print(md)
    return 0 if total <= 600 and _sanitizer_share(report) <= 0.3 else 1


def _stage_seconds(records: list[dict]) -> dict[str, float]:
    """Each stage of the gradings (Result.timings: build, the grading processes' launch, the cases, the
    timing, compute-sanitizer, a re-run alone...) summed over a class's gradings, largest first: where
    the lanes' time went."""
    total: dict[str, float] = {}
    for r in records:
        for stage, sec in (r.get("timings") or {}).items():
            total[stage] = total.get(stage, 0.0) + sec
    return dict(sorted(total.items(), key=lambda kv: -kv[1]))


def _stages_by_gpu(records: list[dict]) -> dict[str, dict]:
    """_stage_seconds of the gradings of each GPU ({"0": {"graded": n, "stage_s": {...}}, ...}), where a run
    graded on more than one: which GPU's lanes lost time where (a hang holds its GPU's timings back for
    config.GATE_PAUSE_LIMIT_S, and which GPU gets the hangs is chance). Gradings that ran on no GPU (a
    build failure) are left out."""
    gpus: dict[str, list] = {}
    for r in records:
        gpu = (r.get("graded_on") or {}).get("gpu")
        if gpu is not None:
            gpus.setdefault(str(gpu), []).append(r)
    if len(gpus) < 2:
        return {}
    return {g: {"graded": len(rs), "stage_s": _stage_seconds(rs)} for g, rs in sorted(gpus.items())}


def _stage_rows(report: dict) -> list[str]:
    """The report's table of _stage_seconds, with each stage's share and seconds per grading, and each
    GPU's seconds where the run graded on several (_stages_by_gpu)."""
    stages, n = report.get("stage_s"), len(report.get("rows") or []) or 1
    if not stages:
        return []
    whole = sum(stages.values()) or 1.0
    by_gpu = report.get("stage_s_by_gpu") or {}
    heads = "".join(f" GPU {g} ({v['graded']} graded) |" for g, v in by_gpu.items())
    return (["## Where the gradings' time went", "",
             f"Each stage's seconds summed over the {n} gradings of the latest run (the lanes side by side: "
             "their seconds overlap on the clock), from each grading's timing line"
             + (", and over each GPU's gradings" if by_gpu else "") + ".", "",
             f"| stage | seconds | share | per grading |{heads}", "|---|---|---|---|" + "---|" * len(by_gpu)]
            + [f"| {stage} | {sec:.0f} | {100 * sec / whole:.0f}% | {sec / n:.1f} s |"
               + "".join(f" {v['stage_s'].get(stage, 0.0):.0f} |" for v in by_gpu.values())
               for stage, sec in stages.items()]
            + [""])


def _cpu_cell(run: dict) -> str:
    """How busy a run's CPUs were (classroom/cpu.py): '-' for runs from before it was measured."""
    cpu = run["timing"].get("cpu")
    if not cpu or cpu.get("busy") is None:
        return "-"
    per = max(1, run["students"])
    return (f"{cpu['cpus']} CPUs {cpu['busy']:.0%} busy ({cpu['saturated']:.0%} of seconds at 90% or more), "
            + (f"{cpu['busy_cpu_s'] / per:.0f} busy CPU-s per submission" if cpu.get("busy_cpu_s") is not None else
               f"{cpu['cpu_s'] / per:.1f} CPU-s per submission by the processes waited for (a floor)"))


def _start_note(timing: dict) -> str:
    """What the first grading on each GPU waited for: its calibration, its lanes' processes, the first
    submission built and the exercise's binding before it (seconds into the GPU phase; older runs'
    records may lack them); and the run's start before the GPU phase (the sandbox's check, the warm-up build)."""
    gpus = list(timing.get("per_gpu", {}).values())
    if not gpus or timing.get("first_prepared_s") is None:
        return ""
    ready = [g["ready_s"] for g in gpus if g.get("ready_s") is not None]
    binding, before = timing.get("bindings_built_s"), timing.get("before_gpu_phase_s")
    calibrated = max(g["setup_ready_s"] if g.get("setup_ready_s") is not None else g["setup_s"] for g in gpus)
    return (f"; waited for: calibration {calibrated:.0f} s"
            + (f", lanes started {max(ready):.0f} s" if ready else "")
            + (f", binding built {binding:.0f} s" if binding is not None else "")
            + f", first submission built {timing['first_prepared_s']:.0f} s"
            + (f"; {before:.0f} s before the GPU phase" if before is not None else ""))


def _sanitizer_share(report: dict) -> float:
    """The compute-sanitizer stage on top of the rest of the grading: against the run's total time
    where one submission was graded at a time, against the lanes' seconds added up where several were
    (the stage's seconds are each submission's own, side by side with the others')."""
    s = report.get("sanitize_s") or 0.0
    lanes = report["timing"].get("per_gpu", {}).values()
    base = sum(g.get("lane_s", 0.0) for g in lanes) if report.get("lanes", 1) > 1 else report["seconds"]
    return s / max(1e-9, base - s)


def _class_runs(path: Path) -> list[dict]:
    """The runs a class-grading.json holds (one written before "runs" existed is one run, on 1 GPU)."""
    if not path.exists():
        return []
    report = json.loads(path.read_text())
    if "runs" in report:
        return report["runs"]
    return [dict({k: v for k, v in report.items() if k != "runs"}, gpus=report.get("timing", {}).get("gpus", 1))]


# What the projection is for (issue 16): a class of 300 over every exercise, on one GPU, one host
# of 8 GPUs and four such hosts; at most 30 minutes on one 8-GPU host. The hosts' cores are those
# of the machines the course is measured on (1 GPU: 16 cores; 8 GPUs: 128 cores). Each GPU grades at the
# pace measured on the run's GPU, which the report names (an H200 or an H100, as the device tool lent).
PROJECTION_STUDENTS = 300
PROJECTION_TARGET_S = 30 * 60
PROJECTION_HOSTS = (("one GPU", 1, 1, 16), ("one 8-GPU host", 8, 1, 128), ("four 8-GPU hosts", 8, 4, 128))


def _rate(run: dict) -> float:
    """Seconds of GPU time per grading (submission x exercise) in a run: its slots' busy time
    over the submissions they graded (a report from before the slots: the GPU phase, one GPU)."""
    t = run["timing"]
    n = max(1, sum(g["graded"] for g in t.get("per_gpu", {}).values()) or t["graded"])
    busy = t.get("gpu_busy_s") or t["run_s"] * run.get("gpus", 1)
    return busy / n


def projection(report: dict, exercises: int, students: int = PROJECTION_STUDENTS) -> dict:
    """From the measured runs of class-grading.json: the time for `students` x `exercises`
    gradings on each of PROJECTION_HOSTS. Every figure comes from the runs: the GPU seconds per
    grading (its slots' busy time), the preparation's process-seconds per submission, the
    calibration's seconds per exercise, and the scaling from 1 to N GPUs where both were run
    (else ideal scaling, said so)."""
    runs = report.get("runs") or _class_runs_from(report)
    lanes = [r for r in runs if r.get("lanes", 1) == report.get("lanes", 1)]
    runs = [r for r in lanes if _same_class(r, report)] or lanes or runs  # scaling compares the same work
    one = next((r for r in runs if r["gpus"] == 1), None)
    many = max((r for r in runs if r["gpus"] > 1), key=lambda r: r["gpus"], default=None)
    base = one or runs[-1]
    rate = _rate(base)
    t = base["timing"]
    # Process-seconds of preparation per submission: its stages summed over the gradings (the preparation
    # goes at the lanes' pace, its processes idle between submissions); runs recorded without them: its
    # processes' count times its wall time (in such runs they were all at work from start to end).
    from ..check.pipeline import PREPARATION_STAGES

    prepared = sum((base.get("stage_s") or {}).get(k, 0.0) for k in PREPARATION_STAGES)
    prep_per = (prepared or t["prepare_s"] * t["jobs"]) / max(1, t["graded"])
    # one exercise's baseline, per GPU (the slots' setup: measured from the runs with slots on)
    calib_per = t.get("calibrate_s")
    n = students * exercises
    scaling = {"measured": False, "gpus": None, "speedup": None, "efficiency": 1.0, "start_s": 0.0,
               "how": "not measured (no run on more than one GPU, or none on one): ideal scaling assumed"}
    if one and many:
        speedup = one["timing"]["run_s"] / max(1e-9, many["timing"]["run_s"])
        # Each GPU's pace with the others at work beside it (the host's CPUs shared): its busy seconds per
        # grading, against one GPU's. The GPU phase of a small class also holds each GPU's start (its
        # calibration, its lanes' processes, the first build), which a class of thousands pays once.
        rate_many = _rate(many)
        eff = min(1.0, rate / max(1e-9, rate_many))
        start = max((g.get("first_s") or 0.0 for g in many["timing"].get("per_gpu", {}).values()), default=0.0)
        scaling = {"measured": True, "gpus": many["gpus"], "speedup": speedup, "efficiency": eff,
                   "start_s": start, "total_speedup": one["seconds"] / max(1e-9, many["seconds"]),
                   "how": f"measured on {many['gpus']} GPUs against 1: each GPU {rate_many:.2f} s of busy time per "
                          f"grading against {rate:.2f} s ({eff:.0%} of ideal), assumed to hold at 8 GPUs and across "
                          f"hosts with as many CPUs per GPU, plus its first grading's start ({start:.0f} s into the "
                          f"GPU phase); the GPU phase of these {many['students']} students was {speedup:.2f}x faster"}
    # Runs since the lanes prepare and grade side by side (timing "overlapped"): the longer of the two
    # counts; before, one followed the other.
    overlapped = bool(t.get("overlapped"))
    rows = []
    for name, per_host, hosts, cores in PROJECTION_HOSTS:
        g = per_host * hosts
        eff = 1.0 if g == 1 else scaling["efficiency"]
        gpu_s = scaling["start_s"] + n * rate / (g * eff)
        # Preparation runs on the driver host (half its cores).
        prep_s = n * prep_per / max(1, cores // 2)
        calib_s = exercises * (calib_per or 0.0)
        beside = max(prep_s, calib_s + gpu_s)
        rows.append({"setup": name, "gpus": g, "prepare_s": prep_s, "calibrate_s": calib_s, "gpu_s": gpu_s,
                     "total_s": beside if overlapped else prep_s + calib_s + gpu_s, "overlapped_s": beside,
                     "efficiency": eff})
    eight = rows[1]
    room = PROJECTION_TARGET_S - eight["calibrate_s"] - scaling["start_s"] - (0.0 if overlapped else eight["prepare_s"])
    needed = room * 8 * eight["efficiency"] / n if room > 0 and eight["prepare_s"] <= PROJECTION_TARGET_S else 0.0
    needed_overlapped = (PROJECTION_TARGET_S - eight["calibrate_s"] - scaling["start_s"]) * 8 * eight["efficiency"] / n
    return {"students": students, "exercises": exercises, "gradings": n, "rate_s": rate,
            "rate_from": f"{base['students']} x {base['exercise']} on {base['gpus']} GPU{'s' if base['gpus'] > 1 else ''}, "
                         f"{base['environment'].get('gpu', '?')} at {base['environment'].get('commit', '?')}",
            "prepare_per_submission_s": prep_per, "calibrate_per_exercise_s": calib_per,
            "scaling": scaling, "rows": rows, "target_s": PROJECTION_TARGET_S, "overlapped": overlapped,
            "lanes": t.get("lanes", 1),
            "meets_target": eight["total_s"] <= PROJECTION_TARGET_S, "rate_needed_s": needed,
            "rate_needed_overlapped_s": needed_overlapped}


def synthetic_class(ex, students: int, subs: Path) -> dict[str, str]:
    """A class of `students` under `subs` (STUDENT/DAY/<the exercise's file>): in turn the solution, the
    stub and each known-wrong submission of tests/mutants. Returns who submitted what."""
    from .corpus import mutants_for

    pool = [("the solution", ex.solution_path.read_text()), ("the stub", ex.stub_path.read_text())]
    pool += [(f"mutant {m.name}", m.source()) for m in mutants_for(ex.id)]
    roster = {}
    for i in range(students):
        what, text = pool[i % len(pool)]
        dest = subs / f"student{i:02d}" / ex.day / ex.stub_path.name
        dest.parent.mkdir(parents=True)
        # Each student's file its own, as in a real class: no build or compute-sanitizer run is shared
        # (they are cached by content), so what a grading costs is measured whole.
        dest.write_text(text + ("" if text.endswith("\n") else "\n") + _comment(dest.name, f"student{i:02d}: {what}") + "\n")
        roster[f"student{i:02d}"] = what
    return roster


# Points by which copies of one submission may differ in score: a score that follows a measured speed (a
# correct but slower kernel's partial performance credit) moves with the timing's noise, a tenth of a point
# or so (reports/class-benchmark-168-lanes4-1gpu-b14134c.log: 87.8 and 87.9); a check that failed in one
# copy and not in another moves it by whole checks, which this flags.
COPY_SCORE_NOISE = 1.0


def copies_unlike(run: dict) -> list[str]:
    """The students of a class-benchmark run whose verdict differs from that of most copies of the same
    submission (synthetic_class: each is one of a few submissions, in turn; the secret seed is the run's),
    or whose score differs from their median by more than COPY_SCORE_NOISE: "student50: fail 21.2 (its
    copies: fail 26.1)". A grading that a neighbour on its GPU disturbed (a hang's stop) shows here."""
    from collections import Counter
    from statistics import median

    roster = run.get("roster") or {}
    groups: dict = {}
    for row in run.get("rows", []):
        if row["student"] in roster:
            groups.setdefault(roster[row["student"]], []).append(row)
    out = []
    for rows in groups.values():
        verdict, _ = Counter(x["verdict"] for x in rows).most_common(1)[0]
        score = median(x["score"] for x in rows if x["verdict"] == verdict)
        out += [f"{x['student']}: {x['verdict']} {x['score']} (its copies: {verdict} {score:g})"
                for x in rows if x["verdict"] != verdict or abs(x["score"] - score) > COPY_SCORE_NOISE]
    return sorted(out)


def _same_class(a: dict, b: dict) -> bool:
    """Two class-benchmark runs of the same class: as many students, the same exercise, each
    student's file its own or copies sharing their builds alike."""
    return (a.get("students") == b.get("students") and a.get("exercise") == b.get("exercise")
            and bool(a.get("distinct_sources")) == bool(b.get("distinct_sources")))


def _comment(filename: str, text: str) -> str:
    """A line of comment in a learner's file of this kind (.cu, .py, a Jinja2 template)."""
    if filename.endswith(".py"):
        return f"# {text}"
    if filename.endswith(".j2"):
        return "{# " + text + " #}"
    return f"// {text}"


def _class_runs_from(report: dict) -> list[dict]:
    return [dict({k: v for k, v in report.items() if k != "runs"}, gpus=report.get("timing", {}).get("gpus", 1))]


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


def class_report(out: str | Path) -> str:
    """class-grading.md from class-grading.json (what class_benchmark measured): the latest run,
    the runs on other GPU counts beside it (times, verdicts compared), and the projection."""
    from .. import exercises

    out = Path(out)
    report = json.loads((out / "class-grading.json").read_text())
    runs = report.get("runs") or _class_runs_from(report)
    env, timing, students, exercise = report["environment"], report["timing"], report["students"], report["exercise"]
    total, sanitize_s = report["seconds"], report.get("sanitize_s")
    gpus = report.get("gpus", timing.get("gpus", 1))
    md = ["# Class grading benchmark", "",
          f"{env['date']}: {env['gpu']}, {env['cpus']} CPUs, torch {env['torch']}. Generated by "
          f"`python -m grader class-benchmark {students}"
          f"{f' --gpus {gpus}' if gpus > 1 else ''} --lanes {report.get('lanes', 1)}`; not edited by hand.", "",
          f"{students} students x `{exercise}` graded in **{total:.0f} s** (target: <= 600 s) on {gpus} "
          f"GPU{'s' if gpus > 1 else ''}: preparation (source and SASS checks, builds, {timing['jobs']} processes) "
          f"{timing['prepare_s']:.0f} s, GPU runs {timing['run_s']:.0f} s, one copy calibration per GPU for the run.", "",
          (f"The compute-sanitizer stage (memcheck, and racecheck where the SASS has shared memory or barriers, "
           f"on the small cases of every clean submission, cached per build): {sanitize_s:.0f} s, "
           f"{100 * _sanitizer_share(report):.0f}% on top of the rest"
           + (" of the lanes' grading time" if report.get("lanes", 1) > 1 else "") + " (target: <= 30%)."
           if sanitize_s is not None else "This run did not measure the compute-sanitizer stage apart."), ""]
    md += _stage_rows(report)
    if len(runs) > 1:
        md += ["## Runs on 1 and more GPUs", "",
               "| students | GPUs | lanes | when, commit | total | preparation | GPU phase | GPU s per grading | "
               "each GPU: graded in busy s (its first to last grading, s into the GPU phase) | CPUs: busy on average, "
               "CPU-s per submission | verdicts as on 1 GPU (1 lane where run) |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(runs, key=lambda r: (r["students"], r.get("lanes", 1), r["gpus"])):
            like = [x for x in runs if x["gpus"] == 1 and _same_class(x, r)]
            one = next((x for x in like if x.get("lanes", 1) == 1), None) or next(iter(like), None)
            same = "-"
            if one and r is not one:
                a = {x["student"]: x["verdict"] for x in one["rows"]}
                b = {x["student"]: x["verdict"] for x in r["rows"]}
                diff = sorted(s for s in a.keys() | b.keys() if a.get(s) != b.get(s))
                same = "all the same" if not diff else f"{len(diff)} differ: {', '.join(diff[:6])}"
            unlike = copies_unlike(r)
            if r.get("roster"):
                same += ("; copies of one submission graded alike" if not unlike else
                         f"; **copies graded unlike**: {', '.join(unlike[:4])}")
            procs = r.get("processes")  # (grading processes per submission; older runs' records lack it: they ran 2)
            md.append(f"| {r['students']} | {r['gpus']} | {r.get('lanes', 1)}"
                      + (f" x {procs} process{'es' if procs > 1 else ''}" if procs else "")
                      + f" | {r['environment']['date']}, "
                      f"{r['environment'].get('commit', '?')} | "
                      f"{r['seconds']:.0f} s | {r['timing']['prepare_s']:.0f} s | {r['timing']['run_s']:.0f} s | "
                      f"{_rate(r):.1f} s | "
                      + (", ".join(f"{g['graded']} in {g['busy_s']:.0f} s" + (
                          f" (from {g['first_s']:.0f} to {g['end_s']:.0f} s)" if g.get("end_s") is not None else "")
                                   for g in r["timing"].get("per_gpu", {}).values())
                         or "-") + _start_note(r["timing"]) + f" | {_cpu_cell(r)} | {same} |")
        md.append("")
    p = projection(report, len(exercises.all_exercises()))
    sc = p["scaling"]
    md += ["## Projection: a class of 300 over every exercise", "",
           f"{p['students']} students x {p['exercises']} exercises = {p['gradings']} gradings, computed from the "
           f"measured figures above (`class_benchmark.projection`): {p['rate_s']:.1f} s of GPU time per grading "
           f"({p['rate_from']}, {p['lanes']} submission{'s' if p['lanes'] > 1 else ''} at a time on each GPU; "
           f"other exercises' gradings take more or less), "
           f"{p['prepare_per_submission_s']:.1f} process-seconds of preparation per submission "
           f"(on half the driver host's cores), "
           + (f"{p['calibrate_per_exercise_s']:.0f} s of calibration per exercise and GPU"
              if p["calibrate_per_exercise_s"] is not None else "calibration not measured apart (left out)")
           + f". Scaling: {sc['how']}.", "",
           "| setup | GPUs | preparation | calibration | GPU phase | total | scaling used |", "|---|---|---|---|---|---|---|"]
    for r in p["rows"]:
        how = "one GPU" if r["gpus"] == 1 else (f"{r['efficiency']:.0%} of ideal (measured)" if sc["measured"]
                                              else "ideal (not measured)")
        calib = _minutes(r["calibrate_s"]) if p["calibrate_per_exercise_s"] is not None else "not measured"
        md.append(f"| {r['setup']} | {r['gpus']} | {_minutes(r['prepare_s'])} | {calib} | "
                  f"{_minutes(r['gpu_s'])} | **{_minutes(r['total_s'])}** | {how} |")
    md += ["", f"Target: at most {p['target_s'] / 60:.0f} minutes on one 8-GPU host: "
           + ("met." if p["meets_target"] else
              f"**not met**; it needs at most {p['rate_needed_s']:.1f} s of GPU time per grading at this "
              f"preparation rate and scaling (measured: {p['rate_s']:.1f} s)."), ""]
    md += ["The preparation runs beside the GPU phase (each submission graded as soon as it is prepared): "
           "the longer of the two counts." if p["overlapped"] else
           f"Were the preparation to run beside the GPU phase (it did not in this run: one followed the other), "
           f"one 8-GPU host would take {_minutes(p['rows'][1]['overlapped_s'])}, and the target would need at "
           f"most {p['rate_needed_overlapped_s']:.1f} s of GPU time per grading.", ""]
    md += ["## Submissions (latest run)", "",
           "| student | submitted | verdict | score | x baseline | first failure |", "|---|---|---|---|---|---|"]
    roster = report.get("roster", {})
    for r in report["rows"]:
        ratio = (f"{r['ratio']} {r['baseline']}" if "ratio" in r else  # rows written before the baseline column
                 f"{r['copy_ratio']} copy" if r.get("copy_ratio") != "" else "")
        md.append(f"| {r['student']} | {roster.get(r['student'], '?')} | {r['verdict']} | {r['score']} | "
                  f"{ratio} | {r['failure'][:120].replace('|', '/').replace(chr(10), ' ')} |")
    text = "\n".join(md) + "\n"
    (out / "class-grading.md").write_text(text)
    return text
