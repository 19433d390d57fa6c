"""Grade a whole class: `python -m grader grade SUBMISSIONS --out OUT [--only day02 ...]`.

SUBMISSIONS holds one folder per student mirroring kernels/ (STUDENT/day02/silu_and_mul.cu,
or STUDENT/kernels/day02/...), or one archive per student (STUDENT.zip, .tar, .tar.gz, .tgz).

1. Every (student, exercise) is prepared in parallel across the cores: source and SASS
   checks, then the extension build (a process pool; nvcc and g++ run side by side).
2. The copy bandwidth is measured once for the run; then each submission runs on the GPU,
   one after another (timing needs the GPU to itself), each in its own process with a time
   limit and a host-memory limit, in a scratch directory, with the run's secret seed, from a
   copy of the grader that has no solutions/ in it.
3. Each result is written as soon as it exists (OUT/results/STUDENT/EXERCISE.json): an
   interrupted run resumes where it stopped; --force grades everything again.
4. OUT/gradebook.csv and .json, OUT/STUDENT/results.json (Gradescope's format),
   OUT/STUDENT/feedback.md and .html (failures explained, hidden inputs not shown), and
   OUT/class-summary.png.

Grading runs the students' code: see the README for running it in a container.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import csv
import html
import json
import os
import random
import shutil
import tarfile
import time
import zipfile
from pathlib import Path

from . import exercises as _exercises
from . import toolchain
from .checks import Prepared, RunOptions, prepare, run
from .result import Result

ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz")
# Points per part of an exercise (100 in all); see score().
POINTS = {"static": 10, "sass": 10, "correctness": 50, "work": 5, "performance": 25}
HIDDEN = ("Your kernel fails on a hidden input that the public seeds do not cover "
          "(its values are not shown). Check tails, alignment, bounds and races.")


# ------------------------------------------------------------------ submissions
def _safe_extract(archive: Path, dest: Path) -> str | None:
    """Unpack a student's archive; refuse members that would land outside `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as z:
                names = z.namelist()
                if any(n.startswith("/") or ".." in Path(n).parts for n in names):
                    return "the archive has members outside its folder"
                z.extractall(dest)
        else:
            with tarfile.open(archive) as t:
                members = t.getmembers()
                if any(m.name.startswith("/") or ".." in Path(m.name).parts or m.issym() or m.islnk()
                       for m in members):
                    return "the archive has links or members outside its folder"
                t.extractall(dest, members=[m for m in members if m.isfile() or m.isdir()])
    except (zipfile.BadZipFile, tarfile.TarError, OSError, EOFError) as e:
        return f"the archive cannot be read: {e}"
    return None


def discover(submissions: Path, work: Path) -> dict[str, tuple[Path | None, str | None]]:
    """student -> (root folder holding dayNN/..., or None with the reason)."""
    found = {}
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith("."):
            continue
        name = entry.name
        for ext in ARCHIVES:
            if name.endswith(ext):
                name = name[: -len(ext)]
                break
        if entry.is_dir():
            found[name] = (entry, None)
        elif entry.name.endswith(ARCHIVES):
            dest = work / "unpacked" / name
            shutil.rmtree(dest, ignore_errors=True)
            err = _safe_extract(entry, dest)
            found[name] = (None, err) if err else (dest, None)
    return found


def locate(root: Path, day: str, name: str) -> Path | None:
    """The student's file for an exercise, in the layouts students actually hand in."""
    for base in (root, root / "kernels"):
        if (base / day / f"{name}.cu").is_file():
            return base / day / f"{name}.cu"
    subdirs = [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    if len(subdirs) == 1 and not (root / day).exists():  # an archive with one top folder
        return locate(subdirs[0], day, name)
    return None


# ---------------------------------------------------------------------- scoring
def score(result: Result, ex) -> float:
    """Points out of 100: static 10, SASS 10, correctness 50 (share of cases), work 5,
    performance 25 (share of the target reached, per timed case). Nothing if it does not build."""
    items = result.items
    if any(i.status == "fail" and i.group in ("source", "build") for i in items):
        return 0.0
    total = POINTS["static"]
    sass = [i for i in items if i.group == "sass"]
    total += POINTS["sass"] * (sum(i.status == "pass" for i in sass) / len(sass) if sass else 1)
    correct = [i for i in items if i.group == "correctness"]
    share = sum(i.status == "pass" for i in correct) / len(correct) if correct else 0
    total += POINTS["correctness"] * share
    work = [i for i in items if i.group == "work" and i.status != "skip"]
    total += POINTS["work"] * (sum(i.status == "pass" for i in work) / len(work) if work else share)
    perf = [i for i in items if i.group == "performance"]
    if perf:
        timed = [i.metrics and not i.detail.startswith(("results went wrong", "not timed"))
                 and "above the theoretical peak" not in i.detail for i in perf]
        parts = [min(1.0, i.metrics["copy_ratio"] / ex.target_copy_ratio) if ok else 0.0
                 for i, ok in zip(perf, timed)]
        total += POINTS["performance"] * sum(parts) / len(parts)
    return round(total, 1)


def _public(item: dict) -> dict:
    """An item as the student may see it: results on the secret seed keep no values."""
    if "seed secret" in item.get("detail", ""):
        return dict(item, detail=HIDDEN)
    return item


# ------------------------------------------------------------------------ grade
def _prepare_job(args):
    ex_id, path, display = args
    ex = _exercises.get(ex_id)
    if path is None:
        return Prepared(Result(ex_id, display, toolchain.mode()))
    return prepare(ex, Path(path), display=display)


def _runtime_copy(work: Path) -> str:
    """The grader package without solutions/: what the grading processes import."""
    rt = work / "runtime"
    shutil.rmtree(rt, ignore_errors=True)
    shutil.copytree(toolchain.ROOT / "grader", rt / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    return str(rt)


def _calibrate(runtime: str) -> float | None:
    import subprocess
    import sys

    code = "from grader.worker import calibrate; print(calibrate())"
    env = toolchain.subprocess_env(runtime)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    try:
        return float(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def grade_class(submissions: str | Path, out: str | Path, only: list[str] | None = None, force: bool = False,
                jobs: int | None = None, timeout: float | None = None, memory_gb: float = 16.0,
                secret_seed: int | None = None, seeds: int = 3, echo=print) -> int:
    submissions, out = Path(submissions), Path(out)
    if not submissions.is_dir():
        echo(f"no such folder: {submissions}")
        return 2
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    exs = list(_exercises.all_exercises().values())
    if only:
        exs = [e for e in exs if any(e.id == o or e.day == o for o in only)]
        if not exs:
            echo(f"no exercise matches {only}; `python -m grader list` shows them")
            return 2
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
            display = f"{student}/{ex.day}/{ex.name}.cu"
            path = locate(root, ex.day, ex.name) if root else None
            if path is None:
                problems[(student, ex.id)] = err or (f"no {ex.day}/{ex.name}.cu in the submission (expected "
                                                     f"STUDENT/{ex.day}/{ex.name}.cu, mirroring kernels/)")
            todo.append((student, ex, path, display))
    echo(f"{len(students)} students, {len(exs)} exercises: {len(todo)} to grade "
         f"({len(students) * len(exs) - len(todo)} already graded)")
    t_build = time.perf_counter()
    if toolchain.has_gpu():  # make the shared precompiled header once, before the parallel builds
        from .build import build

        build([Path(__file__).parent / "warmup.cu"], name="warmup", quiet=True)
    jobs = jobs or max(1, (os.cpu_count() or 2) // 2)
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        prepared = list(pool.map(_prepare_job, [(ex.id, str(p) if p else None, d) for _, ex, p, d in todo]))
    build_s = time.perf_counter() - t_build
    echo(f"prepared (static checks, SASS, builds) in {build_s:.0f} s with {jobs} processes")
    runtime = _runtime_copy(out / ".work")
    copy_gbps = _calibrate(runtime) if toolchain.has_gpu() else None
    if copy_gbps:
        echo(f"copy bandwidth, measured once for this run: {copy_gbps:.0f} GB/s")
    run_file.write_text(json.dumps({"secret_seed": secret, "copy_gbps": copy_gbps,
                                    "exercises": [e.id for e in exs]}, indent=1))
    # A submission that runs right takes 5-20 s on an H200; a hang must not cost the class 3 minutes.
    opts = RunOptions(seeds=[[str(s), s] for s in range(seeds)] + [["secret", secret]], timeout=timeout or 60,
                      memory_limit_gb=memory_gb, runtime_root=runtime, copy_gbps=copy_gbps)
    t_run = time.perf_counter()
    for (student, ex, path, display), prep in zip(todo, prepared):
        t1 = time.perf_counter()
        if (student, ex.id) in problems:
            prep.result.add("source", "readable", "fail", problems[(student, ex.id)])
        else:
            run(ex, prep, opts)
        res = prep.result
        res.seconds = time.perf_counter() - t1 + (res.build_seconds or 0)
        record = dict(res.as_dict(), student=student, score=score(res, ex))
        dest = out / "results" / student / f"{ex.id}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(dest)  # written whole or not at all: a resumed run never reads half a result
        echo(f"{student:<20} {ex.id:<26} {record['verdict']:<6} {record['score']:5.1f}  "
             f"{res.first_failure()[:70]}")
    run_s = time.perf_counter() - t_run
    rows = write_reports(out, exs)
    total = time.perf_counter() - t0
    (out / "timing.json").write_text(json.dumps({"graded": len(todo), "prepare_s": build_s, "run_s": run_s,
                                                 "total_s": total, "jobs": jobs}, indent=1))
    echo(f"graded {len(todo)} submissions in {total:.0f} s (prepare {build_s:.0f} s, GPU {run_s:.0f} s); "
         f"gradebook: {out / 'gradebook.csv'} ({len(rows)} rows)")
    return 0


# --------------------------------------------------------------------- reports
def _load(out: Path, exs) -> dict[str, dict[str, dict]]:
    data: dict[str, dict[str, dict]] = {}
    for f in sorted((out / "results").glob("*/*.json")):
        rec = json.loads(f.read_text())
        if rec["exercise"] in {e.id for e in exs}:
            data.setdefault(f.parent.name, {})[rec["exercise"]] = rec
    return data


def write_reports(out: Path, exs) -> list[dict]:
    data = _load(out, exs)
    rows = []
    for student, recs in data.items():
        for ex_id, rec in recs.items():
            # A figure above the GPU's peak bandwidth is no measurement (a stale or cached result):
            # the performance check fails it and says so; the gradebook and the plot leave it out.
            perf = [i for i in rec["items"] if i["group"] == "performance" and i.get("metrics")
                    and not (i["metrics"].get("peak_gbps") and i["metrics"]["gbps"] > 1.01 * i["metrics"]["peak_gbps"])]
            best = max((i["metrics"].get("copy_ratio", 0) for i in perf), default=None)
            gbps = max((i["metrics"].get("gbps", 0) for i in perf), default=None)
            failure = next((f"{i['group']} / {i['name']}: {_public(i)['detail']}" for i in rec["items"]
                            if i["status"] == "fail"), "")
            target = _exercises.get(ex_id).target_copy_ratio
            rows.append({"student": student, "exercise": ex_id, "verdict": rec["verdict"], "score": rec["score"],
                         "gbps": round(gbps, 1) if gbps else "", "copy_ratio": round(best, 3) if best else "",
                         "ratio_to_target": round(best / target, 3) if best else "",
                         "build_s": round(rec["build_seconds"], 1) if rec.get("build_seconds") else "",
                         "failure": failure[:300]})
        _student_files(out / student, student, recs)
    with open(out / "gradebook.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["student", "exercise", "verdict", "score", "gbps", "copy_ratio",
                                          "ratio_to_target", "build_s", "failure"])
        w.writeheader()
        w.writerows(rows)
    (out / "gradebook.json").write_text(json.dumps(rows, indent=1))
    _summary_plot(out, rows, exs)
    return rows


def _student_files(folder: Path, student: str, recs: dict[str, dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tests, lines = [], [f"# Feedback for {student}", ""]
    for ex_id, rec in recs.items():
        items = [_public(i) for i in rec["items"]]
        failures = [i for i in items if i["status"] == "fail"]
        output = "\n".join(f"{i['group']} / {i['name']}: {i['detail']}" for i in failures) or "All checks pass."
        tests.append({"name": ex_id, "score": rec["score"], "max_score": 100,
                      "status": "passed" if rec["verdict"] == "pass" else "failed", "output": output})
        lines += [f"## {ex_id}: {rec['verdict']} ({rec['score']:g} / 100)", ""]
        lines += [f"- **{i['status'].upper()}** {i['group']} / {i['name']}: {i['detail']}" for i in items
                  if i["status"] != "pass" or i["group"] == "performance"] or ["- every check passes"]
        lines.append("")
    (folder / "results.json").write_text(json.dumps(
        {"score": round(sum(t["score"] for t in tests), 1), "tests": tests}, indent=1))
    md = "\n".join(lines) + "\n"
    (folder / "feedback.md").write_text(md)
    body = "".join(f"<p>{html.escape(line)}</p>" for line in lines if line)
    (folder / "feedback.html").write_text(f"<html><body><h1>Feedback for {html.escape(student)}</h1>{body}"
                                          f"</body></html>")


def _summary_plot(out: Path, rows: list[dict], exs) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for ex in exs:
        scores = [r["score"] for r in rows if r["exercise"] == ex.id]
        a.hist(scores, bins=range(0, 105, 5), alpha=0.6, label=ex.id)
        ratios = [r["copy_ratio"] for r in rows if r["exercise"] == ex.id and r["copy_ratio"] != ""]
        b.scatter(range(len(ratios)), sorted(ratios), s=12, label=ex.id)
        b.axhline(ex.target_copy_ratio, ls="--", lw=1, color="k")
    a.set(xlabel="score", ylabel="students", title="scores")
    b.set(xlabel="submissions (sorted)", ylabel="fraction of copy bandwidth", title="achieved vs target (dashed)")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "class-summary.png", dpi=100)
    plt.close(fig)
