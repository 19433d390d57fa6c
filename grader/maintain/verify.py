"""`python -m grader verify --out DIR`: the course on the GPU (gpu-verification.md/.json/.log).
  1. measures build times: each day's kernels built cold (fresh cache, days in
     parallel) and then loaded from the cache in a fresh process;
  2. grades every solution (must pass, meeting its target) and every stub (must
     fail correctness, cleanly), timing alone on the GPU;
  3. executes every notebook with the solutions through nbval.
From Day 8 on the whole no longer fits one 10-minute command: `--no-notebooks`
runs 1-2, `--notebooks-only` runs 3 into gpu-notebooks.md/.json/.log; `--only`
verifies a part of the course (days, exercises), into reports named after it.

Run on the GPU machine every session that touches kernels, the grader or a
notebook, and commit what it writes under reports/. The other GPU runs are
self_test.py, class_benchmark.py and ncu_jupyter.py; what they share is runs.py.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .. import jit, config, paths, machine
from . import runs
from .runs import Scope

TARGET_COLD_S = 20.0
# The notebooks' nbval run ends by then, its report written within a 10-minute command: alone, or after
# the builds and the grading of a part of the course (all 14 days took 335 s for 353 of 358 cells on 4 H100s).
NOTEBOOKS_ONLY_S = 540
NOTEBOOKS_AFTER_GRADING_S = 330
TARGET_CACHED_S = 1.0


def _build_jobs(scope: Scope) -> list[dict]:
    """What the notebooks and the grading build: each day's versions, each solution and stub."""
    jobs = [{"label": f"{d.name} kernel versions", "day": d.name}
            for d in sorted(paths.KERNELS.glob("day*"))
            if d.is_dir() and scope.has_day(d.name) and jit.day_files(d.name)]
    for ex in scope.exercises():
        if ex.learner_file == "python":  # a Python module builds nothing itself: its kernels are other exercises'
            continue
        for kind, path in (("solution", ex.solution_path), ("stub", ex.stub_path)):
            jobs.append({"label": f"{ex.id} {kind}", "file": str(path), "name": ex.build_name,
                         "exercise": ex.id})
    return jobs


def measure_builds(log, scope: Scope) -> dict:
    """Everything the run needs, built cold into the run's fresh cache (in parallel: a
    day is one extension, so days and exercises build side by side), then each day's
    extension loaded again from the cache in a fresh process."""
    jobs = _build_jobs(scope)
    pch_existed = jit.precompiled_header().exists()
    # The precompiled header is made once per torch install, by the first build:
    # make it with a build of its own, so that the figures below are what a learner
    # waits for each day.
    first = runs.warm_up()
    log(f"first build ({'precompiled header already there' if pch_existed else 'making the precompiled header'}): "
        f"{first['wall_s']:.1f} s")
    with cf.ThreadPoolExecutor(max_workers=max(1, min(8, len(jobs)))) as pool:  # (none: day14.decoder alone)
        cold = list(pool.map(runs.build_in_subprocess, jobs))
    for c in cold:
        log(f"cold build {c['label']}: {c.get('seconds', float('nan')):.1f} s"
            + ("" if c["ok"] else " FAILED: " + c["error"]))
    cached = [runs.build_in_subprocess(j) for j in jobs if "day" in j]
    for c in cached:
        log(f"cached load {c['label']}: {c.get('seconds', float('nan')):.2f} s (cached={c.get('cached')})")
    return {"first_build_with_pch_s": first["wall_s"], "pch_existed": pch_existed, "cold": cold, "cached": cached,
            "target_cold_s": TARGET_COLD_S, "target_cached_s": TARGET_CACHED_S}


def _perf_row(item) -> dict:
    """One timed case for the report: the figure, its unit, the graded ratio, the target, and
    one `<baseline>_ratio` field per baseline timed beside it (copy_ratio, torch_ratio, ...)."""
    m = item.metrics
    row = {"case": item.name, **{k: m.get(k) for k in ("kind", "unit", "value", "baseline", "ratio", "target", "gbps")}}
    row.update({k: v for k, v in m.items() if k.endswith("_ratio")})
    if row["value"] is None:  # not timed (wrong results, a crash): the reason, as the check gave it
        row["not_timed"] = item.detail[:200]
    return row


def _perf_cells(c: dict | None) -> str:
    """The report's columns case | yours | x graded baseline | target | other baselines."""
    if c is None:
        return " - | - | - | - | - |"
    if c["value"] is None:
        return f" {c['case']} | not timed: {c.get('not_timed', '')} | - | {c['target'] or '-'} | - |"
    others = ", ".join(f"{c[k]:.2f}x {k[:-6]}" for k in c
                       if k.endswith("_ratio") and k[:-6] != c["baseline"] and c[k] is not None)
    return (f" {c['case']} | {c['value']:.{0 if c['unit'] == 'GB/s' else 1}f} {c['unit']} | "
            f"{c['ratio']:.3f}x {c['baseline']} | {c['target']:g} | {others} |")


def stub_as_expected(ex, res) -> bool:
    """A stub fails as expected when it built and ran and its outputs were wrong (a correctness case
    failed: it got that far), or, for a template, when the exercise's own template checks refused it
    (Day 13's TODO renders no act_expr: two activations render alike, a build-group row that stops it
    before it runs); not when it failed to render or compile."""
    not_own = ("renders (Jinja2)", "compiles (nvcc, sm_90)", "torch extension")
    return any(i.status == "fail" and (i.group == "correctness" or ex.learner_file == "template"
                                       and i.group == "build" and i.name not in not_own) for i in res.items)


def grade(kind: str, log, scope: Scope, gpus: str | None = None) -> list[dict]:
    """Grade every solution (timed: alone on its GPU) or every stub (correctness only). `gpus`
    ("all", a count or indices): the exercises spread over these GPUs of the host, one check on each
    at a time, each in a process pinned to its GPU (class grading's slots); default: one GPU, here."""
    from ..classroom.slots import resolve_gpus, run_on_slots

    devices = [d for d in resolve_gpus(gpus or "1") if d is not None]
    items = [(kind, ex.id) for ex in scope.exercises()]
    done: dict = {}

    def finished(item, r):  # said as each ends, so that a run cut off still shows what it did
        done[item] = {k: v for k, v in r.items() if k != "log"}
        log(f"{r['exercise']} {kind}: {r['verdict']} ({'as expected' if r['as_expected'] else 'NOT AS EXPECTED'}) "
            f"in {r['seconds']:.0f} s" + (f" on GPU {r['gpu']}" if len(devices) > 1 else ""))
        if not r["as_expected"] and r["log"]:
            log(r["log"])

    if len(devices) <= 1:
        for item in items:
            finished(item, grade_row(item))
    else:
        def on_done(item, row, device, seconds, error):
            finished(item, row or {"exercise": item[1], "kind": kind, "expected": "pass" if kind == "solution" else "fail",
                                   "verdict": "not graded", "as_expected": False, "build_s": None, "seconds": seconds,
                                   "first_failure": f"the grading on GPU {device} did not finish: {error}", "perf": [],
                                   "items": [], "gpu": device, "log": ""})

        run_on_slots(devices, items, grade_row, on_done)
    return [done[item] for item in items]


def grade_row(item: tuple[str, str], context=None) -> dict:
    """One (kind, exercise) of grade(), graded in this process (in a slot process of
    classroom.slots.run_on_slots, pinned to its GPU, where `context` is its setup's: none): its report row."""
    from .. import exercises
    from ..check import check

    kind, ex_id = item
    ex = exercises.get(ex_id)
    res = check(ex.id, solutions=(kind == "solution"), perf=(kind == "solution"),
                seeds=config.PUBLIC_SEEDS if kind == "solution" else 1, secret_seed=int(time.time()) % 100000, quiet=True)
    ok = res.passed if kind == "solution" else stub_as_expected(ex, res)
    return {"exercise": ex.id, "kind": kind, "expected": "pass" if kind == "solution" else "fail",
            "verdict": res.verdict, "as_expected": ok, "build_s": res.build_seconds,
            "seconds": res.seconds, "first_failure": res.first_failure()[:400], "perf": [_perf_row(i) for i in res.performance()],
            "items": [i.__dict__ for i in res.items if i.status != "pass" or i.group in ("performance", "work")],
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "log": "" if ok else str(res)}


def _beside_rows(measurements: list[dict]) -> list[str]:
    """The markdown rows of the FlashInfer-beside table, from the notebooks' recorded measurements."""
    from ..beside import LABEL_SEP

    by_label: dict[str, dict] = {}
    for r in measurements:
        if LABEL_SEP in r.get("label", ""):
            by_label.setdefault(r["label"], {})[r["name"]] = r
    rows = []
    for lbl, named in by_label.items():
        exercise, case = lbl.split(LABEL_SEP, 1)
        sol, fi = named.get("solution", {}), named.get("flashinfer", {})
        unit, key = next(((u, k) for u, k in (("x copy", "copy_ratio"), ("x read", "read_ratio"), ("TFLOP/s", "tflops"),
                                               ("us", "us"))
                          if k in sol or k in fi), ("-", None))
        s, f = sol.get(key), fi.get(key)
        ratio = (f / s if key == "us" else s / f) if s and f else None
        diff = named.get("flashinfer function", {}).get("max_rel_diff")
        rows.append(f"| {exercise} | {case} | {unit} | {'-' if s is None else f'{s:.3g}'} | "
                    f"{'-' if f is None else f'{f:.3g}'} | {'-' if ratio is None else f'{ratio:.2f}'} | "
                    f"{'-' if diff is None else f'{diff:.2g}'} |")
    return rows


def _markdown(report: dict) -> str:
    e = report["environment"]
    title = "GPU verification report" if report["grading"] or report.get("builds") else "GPU notebook run"
    if report.get("only"):
        title += f" (part: {' '.join(report['only'])})"
    out = [f"# {title}", "",
           f"{e['date']}, commit {e.get('commit', 'unknown')}: {e['gpu']} (sm_{e['sm'].replace('.', '')}, {e['sms']} SMs, {e['l2_mb']:.0f} MB L2, "
           f"theoretical {e['peak_gbps']:.0f} GB/s), driver {e['driver']}, torch {e['torch']} (CUDA {e['torch_cuda']}), "
           f"nvcc {e['nvcc']}, Python {e['python']}, {e['cpus']} CPUs.", "",
           "Generated by `python -m grader verify`; not edited by hand.", ""]
    if report["grading"]:
        out += ["## Exercises", "",
                "| exercise | file | expected | verdict | as expected | cold build s | case | yours | x graded baseline "
                "| target | other baselines |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
    cold = {c["label"]: c for c in report.get("builds", {}).get("cold", [])}
    for r in report["grading"]:
        c = cold.get(f"{r['exercise']} {r['kind']}", {})
        build = f"{c['seconds']:.1f}" if c.get("ok") else "-"
        first = (f"| {r['exercise']} | {r['kind']} | {r['expected']} | {r['verdict']} | "
                 f"{'yes' if r['as_expected'] else '**NO**'} | {build} |")
        for i, c in enumerate(r["perf"] or [None]):
            out.append((first if i == 0 else "| | | | | | |") + _perf_cells(c))
    work = [(r["exercise"], i) for r in report["grading"] if r["kind"] == "solution"
            for i in r.get("items", []) if i["group"] == "work"]
    if work:
        out += ["", "Did the solutions do the work (torch.profiler; ncu where it runs):", ""]
        out += [f"- {ex}: {i['name']}: {i['status']}: {i['detail'][:300]}" for ex, i in work]
    stubs = [r for r in report["grading"] if r["kind"] == "stub"]
    if stubs:
        out += ["", "Stub failures (what a learner sees first):", ""]
    out += [f"- {r['exercise']}: {r['first_failure'][:200]}" for r in stubs]
    b = report.get("builds")
    if b:
        cached = {c["label"]: c for c in b["cached"]}
        out += ["", "## Build times", "",
                f"First extension: {b['first_build_with_pch_s']:.1f} s "
                + ("(the precompiled header was already there). " if b.get("pch_existed") else
                   "(including the precompiled header of the binding's torch headers, made once per torch install). ")
                + f"Then all extensions built cold, up to 8 at a time "
                f"(a day's kernel versions are one extension; targets: cold <= {b['target_cold_s']:.0f} s, "
                f"cached <= {b['target_cached_s']:.0f} s).", "",
                "| extension | cold build s | cached load s (fresh process) |", "|---|---|---|"]
        for c in b["cold"]:
            w = cached.get(c["label"]) if cached.get(c["label"], {}).get("ok") else None
            cold_s = f"{c['seconds']:.1f}" if c["ok"] else "FAILED"
            out.append(f"| {c['label']} | {cold_s} | {w['seconds']:.2f} |" if w else f"| {c['label']} | {cold_s} | - |")
    m = report.get("notebook_measurements") or []
    bw = [r for r in m if "gbps" in r]
    if bw:
        out += ["", "## Measured in the notebooks", "",
                "| notebook measurement | kernel | GB/s | x its speed of light |", "|---|---|---|---|"]
        for r in bw:
            ratio = next((f"{r[k]:.3f} {k[:-6]}" for k in ("copy_ratio", "read_ratio") if r.get(k) is not None), "-")
            out.append(f"| {r.get('label', '')} | {r['name']} | {r['gbps']:.0f} | {ratio} |")
    beside_rows = _beside_rows(m)
    if beside_rows:
        out += ["", "## FlashInfer beside the solutions", "",
                f"FlashInfer {e.get('flashinfer') or '(version not recorded)'}, its own function on each exercise's timed "
                "cases, timed interleaved with the solution (grader/beside.py, the notebooks' \"FlashInfer beside "
                "yours\" cells). Bandwidth as a fraction of a device copy, compute in TFLOP/s, latency in us; "
                "max rel diff: FlashInfer's output against the solution's.", "",
                "| exercise | case | unit | solution | FlashInfer | solution / FlashInfer | max rel diff |",
                "|---|---|---|---|---|---|---|"]
        out += beside_rows
    other = [r for r in m if "gbps" not in r]
    if other:
        out += ["", "## Other notebook measurements", "", "| measurement | what | values |", "|---|---|---|"]
        for r in other:
            values = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()
                               if k not in ("label", "name"))
            out.append(f"| {r.get('label', '')} | {r['name']} | {values} |")
    out += ["", "## Test runs", ""]
    for name, t in report.get("pytest", {}).items():
        out.append(f"- {name}: exit {t['rc']} in {t['seconds']:.0f} s: `{t['summary']}`")
    out += ["", f"Total: {report['seconds']:.0f} s.", ""]
    return "\n".join(out)


EXECUTED_RUN = "notebooks with the solutions (nbclient), each executed copy written to site/executed/"


def site_command(scope: Scope) -> list[str]:
    """The notebooks of `scope` executed with the solutions into site/executed/ (grader.maintain.site)."""
    days = sorted({p.name[:5] for p in paths.NOTEBOOKS.glob("day*.ipynb") if scope.has_day(p.name[:5])})
    return [sys.executable, "-m", "grader.maintain.site", "execute",
            *([] if scope.everything else [a for d in days for a in ("--only", d)])]


def verify(out: str | Path, notebooks: bool = True, grading: bool = True, only: list[str] | None = None,
           notebook_timeout: int | None = None, gpus: str | None = None, executed: bool = False) -> int:
    """Builds, every solution and stub graded, then the notebooks: gpu-verification.md/.json.
    With the course's days no longer fitting one 10-minute command, the two halves also run
    apart: `grading=False` runs only the notebooks, into gpu-notebooks.md/.json. `only` (days
    or exercises) verifies a part of the course, into gpu-verification-<only>.md/.json. `gpus`: the
    gradings and the notebooks spread over these GPUs of the host, one check or notebook on each at a
    time (default: one). `executed`: the notebooks run one at a time through nbclient instead of nbval, and
    each executed copy is written to site/executed/: the site's GPU outputs from the run that writes the report."""
    out = Path(out)
    scope = Scope(only)
    if scope.check():
        print(scope.check())
        return 2
    stem = scope.stem("gpu-verification" if grading else "gpu-notebooks")
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    if not machine.has_gpu():
        print("verify needs a CUDA GPU; on a CPU machine run `make test`.")
        return 2
    t0 = time.perf_counter()
    # One fresh build cache for the whole run: cold builds are measured into it, and the
    # grading and the notebooks then load from it.
    os.environ["COURSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="course-cache-")
    report: dict = {"environment": runs.env_info(), "grading": [], "pytest": {}, "seconds": 0.0, "only": scope.only}

    def save():
        report["seconds"] = time.perf_counter() - t0
        (out / f"{stem}.json").write_text(json.dumps(report, indent=1))
        (out / f"{stem}.md").write_text(_markdown(report))
        (out / f"{stem}.log").write_text("\n".join(lines) + "\n")

    log(json.dumps(report["environment"]))
    if grading:
        report["builds"] = measure_builds(log, scope)
        save()
        # Timed work runs alone on the GPU: the solutions first, then the stubs (correctness only),
        # then the notebooks.
        report["grading"] = grade("solution", log, scope, gpus)
        save()
        report["grading"] += grade("stub", log, scope, gpus)
        save()
    if notebooks:
        measurements = Path(tempfile.mkdtemp(prefix="nb-measure-")) / "measurements.jsonl"
        name = EXECUTED_RUN if executed else "notebooks with the solutions (nbval)"
        # Said in the report until the run ends: a report cut off here says so.
        report["pytest"][name] = {"rc": "not finished", "seconds": 0.0,
                                  "summary": "started; the run was stopped before it finished"}
        save()
        limit = notebook_timeout or (NOTEBOOKS_AFTER_GRADING_S if grading else NOTEBOOKS_ONLY_S)
        if executed:  # one at a time on one GPU, each executed copy kept (grader.maintain.site)
            if gpus not in (None, "1"):
                log(f"--executed runs the notebooks one at a time on the first GPU (--gpus {gpus} is for the grading)")
            report["pytest"][name] = runs.command(site_command(scope), runs.env(COURSE_MEASUREMENTS=str(measurements)),
                                                  out / f"{scope.stem('notebooks-executed')}.log", limit)
        else:
            books = ["notebooks"] if scope.everything else [
                str(p.relative_to(paths.ROOT)) for p in sorted(paths.NOTEBOOKS.glob("day*.ipynb"))
                if scope.has_day(p.name[:5])]
            # one notebook per GPU at a time (its cells in order in one kernel: --dist loadfile), so that what
            # it measures has its GPU to itself
            devices, workers, xdist, spread_env = runs.spread(gpus, 1, machine.usable_cpus())
            report["notebook_gpus"] = len(devices)
            xdist = [*xdist, "--dist", "loadfile"] if workers > 1 else []
            report["pytest"][name] = runs.pytest([*books, "--nbval-lax", "-q", "-p", "no:cacheprovider", "-o",
                                                  "addopts=", *xdist],
                                                 runs.env(COURSE_USE_SOLUTIONS="1", COURSE_MEASUREMENTS=str(measurements),
                                                          **spread_env),
                                                 out / f"{scope.stem('pytest-notebooks')}.log", limit)
        log(f"notebooks: {report['pytest'][name]['summary']}")
        if measurements.exists():
            report["notebook_measurements"] = [json.loads(x) for x in measurements.read_text().splitlines() if x]
    save()
    builds = report.get("builds", {"cold": [], "cached": []})
    days = [c for c in builds["cold"] if c["label"].endswith("kernel versions")]
    ok = (all(r["as_expected"] for r in report["grading"])
          and all(t["rc"] == 0 for t in report["pytest"].values())
          and all(c["ok"] for c in builds["cold"])
          and all(c["seconds"] <= TARGET_COLD_S for c in days)
          and all(c["ok"] and c["seconds"] <= TARGET_CACHED_S for c in builds["cached"]))
    print(_markdown(report))
    return 0 if ok else 1
