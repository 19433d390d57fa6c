"""The GPU verification runs, three of them, each meant to fit one 10-minute command (the whole
self-test does on a host with four GPUs, `--gpus all`; on one GPU it runs in parts, `--only`).

Run on the GPU machine every session that touches kernels, the grader or a
notebook, and commit what they write under reports/.

`python -m grader verify --out DIR` (gpu-verification.md/.json/.log):
  1. measures build times: each day's kernels built cold (fresh cache, days in
     parallel) and then loaded from the cache in a fresh process;
  2. grades every solution (must pass, meeting its target) and every stub (must
     fail correctness, cleanly), timing alone on the GPU;
  3. executes every notebook with the solutions through nbval.
  From Day 8 on the whole no longer fits one 10-minute command: `--no-notebooks`
  runs 1-2, `--notebooks-only` runs 3 into gpu-notebooks.md/.json/.log.
`python -m grader verify --self-test --out DIR` (gpu-self-test.md/.json): the
  grader tests itself: every known-wrong submission of tests/mutants and the grader's
  other GPU tests (crash, hang, sanitizer), side by side (pytest-xdist) on the GPU,
  sharing its gate so that each timing has it alone, with the mutants built beside
  them; and every solution's correctness over 20 seeds (no false failure allowed).
  `--only` runs a part of it (days, exercises, `grader`).
`python -m grader verify --class-benchmark N --out DIR` (class-grading.md/.json):
  a synthetic class of N submissions graded as an instructor would, timed.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import jit, config, paths, toolchain

TARGET_COLD_S = 20.0
SELF_TEST_BUDGET_S = 550.0  # a self-test ends its tests by then, so that its report is written within 10 min
# The notebooks' nbval run ends by then, its report written within a 10-minute command: alone, or after
# the builds and the grading of a part of the course (all 14 days took 335 s for 353 of 358 cells on 4 H100s).
NOTEBOOKS_ONLY_S = 540
NOTEBOOKS_AFTER_GRADING_S = 330
PYTEST_GRACE_S = 30.0  # a test run stopped at its limit gets this long to write its results (junit, durations)
SELF_TEST_WORKERS_PER_GPU = 6  # the self-test's tests side by side on each GPU (pytest-xdist workers)
TARGET_CACHED_S = 1.0
GRADER_TESTS = "grader"  # in --only: the grader's own GPU tests (crash, hang, sanitizer, hostile, kinds)


class Scope:
    """What one run covers: everything, or the days and exercises of `--only` (day07,
    day07-day09, day09.mma_tile; `grader` for the self-test's own GPU tests). A run whose
    scope is part of the course writes its reports under a name that says so."""

    def __init__(self, only: list[str] | None = None):
        self.only = list(only or [])
        self.days: set[str] = set()
        self.ids: set[str] = set()
        for o in self.only:
            m = re.fullmatch(r"day(\d\d)-day(\d\d)", o)
            if m:
                self.days |= {f"day{d:02d}" for d in range(int(m[1]), int(m[2]) + 1)}
            elif re.fullmatch(r"day\d\d", o):
                self.days.add(o)
            elif o != GRADER_TESTS:
                self.ids.add(o)

    @property
    def everything(self) -> bool:
        return not self.only

    @property
    def grader_tests(self) -> bool:
        return self.everything or GRADER_TESTS in self.only

    def has_day(self, day: str) -> bool:
        return self.everything or day in self.days or any(i.startswith(day + ".") for i in self.ids)

    def has(self, exercise_id: str) -> bool:
        return self.everything or exercise_id in self.ids or exercise_id.split(".")[0] in self.days

    def exercises(self) -> list:
        from .. import exercises

        return [ex for ex in exercises.all_exercises().values() if self.has(ex.id)]

    def stem(self, name: str) -> str:
        return name if self.everything else f"{name}-{'-'.join(self.only)}"

    def check(self) -> str:
        """An empty message, or why this scope selects nothing."""
        if self.only and not self.exercises() and not (self.grader_tests and not self.days and not self.ids):
            return f"--only {' '.join(self.only)} selects no exercise; `python -m grader list` shows them"
        return ""


_BUILD_SNIPPET = """
import json, sys
from grader import jit
job = json.loads(sys.argv[1])
if "day" in job:
    b = jit.build_day(job["day"], quiet=True)
else:
    from grader import exercises
    src = exercises.get(job["exercise"]).graded_source(job["file"]) if "exercise" in job else jit.Source.read(job["file"])
    b = jit.build([src], name=job["name"], quiet=True)  # (a template exercise's file is built as rendered)
print(json.dumps({"seconds": b.seconds, "cached": b.cached, "module": b.name}))
"""


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


def _build_in_subprocess(job: dict) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _BUILD_SNIPPET, json.dumps(job)], capture_output=True,
                          text=True, cwd=paths.ROOT, env=_env())
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"label": job["label"], "ok": False, "error": (proc.stderr or proc.stdout)[-1500:], "wall_s": wall}
    return {"label": job["label"], "ok": True, "wall_s": wall, **json.loads(proc.stdout.strip().splitlines()[-1])}


def _warm_up() -> dict:
    """The first build after a torch install also makes the precompiled header: do it
    with a build of its own, before the builds that are measured or run side by side."""
    return _build_in_subprocess({"label": "warm-up", "file": str(jit.WARMUP_SOURCE),
                                 "name": "warmup"})


def _env(**extra) -> dict:
    return toolchain.subprocess_env(**extra)


def measure_builds(log, scope: Scope) -> dict:
    """Everything the run needs, built cold into the run's fresh cache (in parallel: a
    day is one extension, so days and exercises build side by side), then each day's
    extension loaded again from the cache in a fresh process."""
    jobs = _build_jobs(scope)
    pch_existed = jit.precompiled_header().exists()
    # The precompiled header is made once per torch install, by the first build:
    # make it with a build of its own, so that the figures below are what a learner
    # waits for each day.
    first = _warm_up()
    log(f"first build ({'precompiled header already there' if pch_existed else 'making the precompiled header'}): "
        f"{first['wall_s']:.1f} s")
    with cf.ThreadPoolExecutor(max_workers=max(1, min(8, len(jobs)))) as pool:  # (none: day14.decoder alone)
        cold = list(pool.map(_build_in_subprocess, jobs))
    for c in cold:
        log(f"cold build {c['label']}: {c.get('seconds', float('nan')):.1f} s"
            + ("" if c["ok"] else " FAILED: " + c["error"]))
    cached = [_build_in_subprocess(j) for j in jobs if "day" in j]
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


def many_seeds(log, scope: Scope, deadline: float | None = None, end: float | None = None) -> list[dict]:
    """Every solution's correctness over 20 seeds, and its small cases under compute-sanitizer
    as class grading runs them: a grader that fails a right answer is worse than none. An exercise
    not started by `deadline` (time.monotonic()) is not run, one still running at `end` is stopped
    there, and its row says so. Beside the self-test's tests: each check shares its GPU (shared_gpu)."""
    from ..check import shared_gpu

    def not_run(ex, why):
        log(f"{ex.id} solution over {config.FALSE_FAILURE_SEEDS} seeds: not run ({why})")
        return {"exercise": ex.id, "cases": 0, "seeds": 0, "ok": False, "not_run": True, "sanitizers": "-",
                "first_failure": f"not run: {why}"}

    def one(ex):
        if deadline is not None and time.monotonic() > deadline:
            return not_run(ex, "the self-test's time was up before it started")
        # the time limit of a check is for its PUBLIC_SEEDS seeds: this one runs 20 (day08's took over
        # 180 s on a host running 24 checks at once)
        limit = ex.timeout_s * config.FALSE_FAILURE_SEEDS / config.PUBLIC_SEEDS
        capped = end is not None and end - time.monotonic() < limit
        t_check = time.perf_counter()
        res = shared_gpu.check_sharing_gpu(
            ex.id, solutions=True, perf=False, seeds=config.FALSE_FAILURE_SEEDS, quiet=True, sanitizers=config.CLASS_SANITIZERS, timeout=max(1.0, end - time.monotonic()) if capped else limit)
        if not res.ok and capped and time.monotonic() >= end - 1.0:
            return not_run(ex, "stopped unfinished: the self-test's time was up")
        cases = [i for i in res.items if i.group == "correctness"]
        sanitizers = [f"{i.name.split()[-1]} {i.status} ({i.metrics.get('seconds', 0):.0f} s)" for i in res.items
                      if i.name.startswith("compute-sanitizer")]
        # (the failure in the log too: a self-test cut off before its report still says why)
        log(f"{ex.id} solution over {config.FALSE_FAILURE_SEEDS} seeds: "
            + ("no false failure" if res.ok else f"FAILED: {res.first_failure()[:300]}"))
        return {"exercise": ex.id, "cases": len(cases), "seeds": config.FALSE_FAILURE_SEEDS, "ok": res.ok,
                "sanitizers": ", ".join(sanitizers) or "-", "first_failure": res.first_failure()[:300],
                # its slowest call, against the limit that stops a hang (config.RUN_LIMIT_S)
                "slowest_call_s": max((i.metrics.get("slowest_call_s", 0.0) for i in cases), default=0.0),
                "run_limit_s": ex.run_limit_s, "seconds": time.perf_counter() - t_check}

    # Each check runs in processes of its own: four exercises at a time (nothing here is timed), the one
    # given the longest time limit first (day14.decoder's torch.compile), so that a deadline cannot find it
    # not yet started behind shorter ones; the rows in the exercises' order.
    order = list(scope.exercises())
    longest_first = sorted(order, key=lambda e: -e.timeout_s)
    with cf.ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip((e.id for e in longest_first), pool.map(one, longest_first)))
    return [done[e.id] for e in order]


def _missed_why(message: str) -> str:
    """A missed mutant's assertion and what the grader said of it instead: the first line, then each
    FAIL row of the result it printed with its detail line."""
    lines = message.splitlines()
    out = lines[:1]
    for i, line in enumerate(lines[1:], 1):
        if re.match(r"\s*FAIL\s", line):
            out += [line.strip(), *(lines[i + 1].strip() for _ in [0] if i + 1 < len(lines))]
    return " / ".join(out)[:800]


def _mutant_tally(junit: Path, expected: list[str] = ()) -> dict:
    """Known-wrong submissions (tests/test_mutants.py) that got their expected verdict; those of
    `expected` with no test in the junit file (the run stopped before them) are not run. With the
    slowest tests of the run."""
    import xml.etree.ElementTree as ET

    cases = list(ET.parse(junit).getroot().iter("testcase")) if junit.exists() else []
    rows = []
    for c in cases:
        name = c.get("name", "")
        if "test_mutants" not in c.get("classname", "") or "[" not in name:
            continue
        skipped, failed = c.find("skipped"), c.find("failure") if c.find("failure") is not None else c.find("error")
        blind = skipped is not None and skipped.get("type") == "pytest.xfail"  # tests/mutants `undetected`
        outcome = ((skipped.get("message") or "")[:300] if blind else
                   "skipped: " + (skipped.get("message") or "")[:200] if skipped is not None else
                   "MISSED: " + _missed_why(failed.get("message") or "") if failed is not None else "caught")
        rows.append({"mutant": name[name.index("[") + 1:-1], "outcome": outcome})
    seen = {r["mutant"] for r in rows}
    not_run = [k for k in expected if k not in seen]
    rows += [{"mutant": k, "outcome": NOT_RUN} for k in not_run]
    rows.sort(key=lambda r: r["mutant"])
    blind = [r["mutant"] for r in rows if r["outcome"].startswith("blind spot")]
    ran = [r for r in rows if not r["outcome"].startswith(("skipped", "blind spot", NOT_RUN))]
    missed = [r["mutant"] for r in ran if r["outcome"] != "caught"]
    slowest = sorted(((f"{c.get('classname', '').rsplit('.', 1)[-1]}::{c.get('name', '')}", float(c.get("time") or 0))
                      for c in cases), key=lambda t: -t[1])[:SLOWEST_TESTS]
    return {"caught": len(ran) - len(missed), "total": len(ran), "missed": missed, "blind_spots": blind,
            "skipped": [r["mutant"] for r in rows if r["outcome"].startswith("skipped")], "not_run": not_run,
            "rows": rows, "slowest_tests": [{"test": t, "seconds": round(sec, 1)} for t, sec in slowest]}


def _correct_tally(junit: Path) -> dict:
    """Known-right submissions (tests/test_correct.py's GPU test) that passed the whole check, and those
    that did not."""
    import xml.etree.ElementTree as ET

    test = "test_a_correct_submission_passes_on_the_gpu["
    cases = [c for c in (ET.parse(junit).getroot().iter("testcase") if junit.exists() else [])
             if "test_correct" in c.get("classname", "") and c.get("name", "").startswith(test)]
    ran = [c for c in cases if c.find("skipped") is None]
    refused = [c.get("name")[c.get("name").index("[") + 1:-1] for c in ran
               if c.find("failure") is not None or c.find("error") is not None]
    return {"passed": len(ran) - len(refused), "total": len(ran), "refused": refused}


NOT_RUN = "not run: the run's time was up before its test"
SLOWEST_TESTS = 12


_PREPARE_SNIPPET = """
import sys
from pathlib import Path
from grader import exercises
from grader.check import prepare
for exercise, path in zip(sys.argv[1::2], sys.argv[2::2]):
    prepare(exercises.get(exercise), Path(path), quiet=True)
"""


def _prepare_in_subprocess(jobs: list[tuple[str, str]]) -> float:
    """Mutants checked and built (prepare) in one process, one after another: its torch import
    (seconds of a core) paid once for them all. Returns when it finished (time.perf_counter())."""
    subprocess.run([sys.executable, "-c", _PREPARE_SNIPPET, *(x for job in jobs for x in job)], capture_output=True,
                   cwd=paths.ROOT, env=_env())
    return time.perf_counter()


def _self_test_pytest_args(scope: Scope) -> list[str]:
    """The GPU tests a self-test of this scope runs: the mutants of its exercises, and the
    grader's own GPU tests where the scope has them."""
    if scope.everything:
        return ["tests"]
    # a day's known-wrong submissions (tests/mutants) and its known-right ones (tests/correct) run in its part
    chosen = " or ".join(sorted(scope.days | scope.ids))
    if not scope.grader_tests:
        return ["tests/test_mutants.py", "tests/test_correct.py", "-k", chosen]
    by_day = "not test_mutants and not test_correct"
    return ["tests", "-k", f"{by_day} or {chosen}" if chosen else by_day]



def self_test_markdown(report: dict) -> str:
    """gpu-self-test(-part).md from its JSON report (what `verify --self-test` writes beside it)."""
    from .selftest import all_mutants

    scope = Scope(report.get("only"))
    mutants = all_mutants()
    name = next(iter(report["pytest"]))
    mt, ms = report["mutants"], report["many_seeds"]
    e = report["environment"]
    bad = [r for r in ms if not r["ok"]]
    false = [f"{r['exercise']}: {r['first_failure']}" for r in bad if not r.get("not_run")]
    not_run = [r["exercise"] for r in bad if r.get("not_run")]
    part = "" if scope.everything else (
        f" (part: {' '.join(scope.only)}" + ("" if scope.grader_tests else "; the grader's other GPU tests are in "
                                             "the part with `--only grader`") + ")")
    md = ["# Grader self-test on the GPU" + part, "",
          f"{e['date']}, commit {e['commit']}: {e['gpu']}, driver {e['driver']}, torch {e['torch']} "
          f"(CUDA {e['torch_cuda']}), {e['cpus']} CPUs. Generated by `python -m grader verify --self-test`; "
          "not edited by hand.", "",
          f"Known-wrong submissions (tests/mutants): **caught {mt['caught']} / {mt['total']}**"
          + (f"; MISSED: {', '.join(mt['missed'])}" if mt["missed"] else "")
          + (f"; known blind spots (no check or tool sees them, see the table): {', '.join(mt['blind_spots'])}"
             if mt.get("blind_spots") else "")
          + (f"; not run here: {', '.join(mt['skipped'])}" if mt["skipped"] else "")
          + (f"; NOT RUN (the run's time was up before their tests): {len(mt['not_run'])}" if mt.get("not_run") else "")
          + ".", "",
          *([f"Known-right submissions (tests/correct): **passed {report['correct']['passed']} / "
             f"{report['correct']['total']}**" + (f"; REFUSED: {', '.join(report['correct']['refused'])}"
                                                 if report['correct']['refused'] else "") + ".", ""]
            if report.get("correct", {}).get("total") else []),
          f"Solutions over {config.FALSE_FAILURE_SEEDS} seeds (correctness only): "
          + (f"no false failure in any of the {len(ms)} exercises." if not bad else
             "; ".join([f"FALSE FAILURES: {'; '.join(false)}"] * bool(false)
                       + [f"NOT RUN (the run's time was up): {', '.join(not_run)}"] * bool(not_run)) + "."), "",
          (f"Mutants built beside the tests, in {report['prepare_s']:.0f} s. " if report.get("prepare_s") is not None
           else "Mutants built beside the tests: not all by the end. ") +
          f"{name} ({_workers(report)}): exit {report['pytest'][name]['rc']} in {report['pytest'][name]['seconds']:.0f} s: "
          f"`{report['pytest'][name]['summary']}`. Total {report['seconds']:.0f} s.", "",
          "| mutant | expected failure | outcome |", "|---|---|---|"]
    for r in mt["rows"]:
        m = mutants.get(r["mutant"])
        want = f"{m.group}: {m.reason}" if m else "-"
        md.append(f"| {r['mutant']} | {want} | {r['outcome'].replace('|', '/').replace(chr(10), ' ')} |")
    if mt.get("slowest_tests"):
        md += ["", "The slowest tests of the run (seconds, beside the others):", "",
               "| test | seconds |", "|---|---|"] + [f"| {t['test']} | {t['seconds']:.0f} |" for t in mt["slowest_tests"]]
    md += ["", "The slowest call: the longest any one call of the solution took (until its kernels finished), beside "
           "the other checks of this run; a call that takes longer than the limit is stopped as a hang.", "",
           "| exercise | correctness cases | seeds | slowest call (limit) | compute-sanitizer | seconds | no false failure |",
           "|---|---|---|---|---|---|---|"]
    md += [f"| {r['exercise']} | {r['cases']} | {r['seeds']} | {_slowest(r)} | {r['sanitizers']} | "
           f"{_took(r)} | "
           f"{'yes' if r['ok'] else 'NO: ' + r['first_failure']} |" for r in ms]
    return "\n".join(md) + "\n"

def _workers(report: dict) -> str:
    n, gpus = report.get("workers", 1), report.get("gpus", 1)
    where = f" on {gpus} GPUs" if gpus > 1 else ""
    return ("one at a time" if n == 1 else
            f"{n} side by side{where}, pytest-xdist, each timing with its GPU to itself") + ", the 20 seeds beside them"


def _took(row: dict) -> str:
    """How long a solution's 20 seeds took, beside the tests ('-' in a report from before it was kept)."""
    return f"{row['seconds']:.0f} s" if "seconds" in row else "-"


def _slowest(row: dict) -> str:
    if "slowest_call_s" not in row:  # (a report from before the limit)
        return "-"
    limit = f"{row['run_limit_s']:.0f} s" if row.get("run_limit_s") else "none"
    return f"{row['slowest_call_s']:.3f} s ({limit})"


def _spread(gpus: str | None, per_gpu: int, cpus: int) -> tuple[list[str], int, list[str], dict]:
    """The GPUs a run spreads its pytest workers over (`gpus`: "all", a count or indices, as class
    grading's --gpus), how many workers, their pytest options and environment (spread.py): `per_gpu`
    workers on each GPU, as many as half the cores allow, at least 2 on one GPU."""
    from ..classroom.slots import resolve_gpus
    from . import spread

    devices = [d for d in resolve_gpus(gpus or "1") if d is not None] or ["0"]
    if not _has_module("xdist"):
        return devices[:1], 1, [], {}
    workers = max(len(devices), min(per_gpu * len(devices), cpus // 2 - 2))
    env = {spread.GPUS_ENV: ",".join(devices)} if len(devices) > 1 else {}
    return devices, workers, ["-n", str(workers), "-p", "grader.maintain.spread"], env


def self_test(out: str | Path, only: list[str] | None = None, gpus: str | None = None) -> int:
    """The grader tests itself on the GPU: every mutant must get its expected verdict, the
    other GPU tests must pass, no solution may fail over 20 seeds. gpu-self-test.md/.json;
    with `only` (days, exercises, `grader`) a part of it, into gpu-self-test-<only>.md/.json.
    `gpus`: the tests spread over these GPUs of the host (default: one)."""
    from . import spread
    from .selftest import all_mutants, written_dir

    scope = Scope(only)
    if scope.check():
        print(scope.check())
        return 2

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not toolchain.has_gpu():
        print("verify --self-test needs a CUDA GPU; on a CPU machine run `make test`.")
        return 2
    t0 = time.perf_counter()
    os.environ["COURSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="course-cache-")
    lines: list[str] = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    report: dict = {"environment": _env_info(), "pytest": {}, "only": scope.only}
    log(json.dumps(report["environment"]))
    first = _warm_up()
    log(f"first build (precompiled header): {first['wall_s']:.0f} s")
    took = toolchain.write_bytecode()  # (where the install keeps none: the grading processes' start)
    if took is not None:
        log(f"grading processes' bytecode (the install has none): {took:.0f} s")
    mutants = {k: m for k, m in all_mutants().items() if scope.has(m.exercise)}
    name = ("grader GPU tests (mutants, crash, hang, sanitizer)" if scope.grader_tests else
            "GPU tests of the mutants")
    # The tests run side by side (pytest-xdist), and the solutions' 20 seeds beside them: the checks
    # on a GPU share its gate (check/gate.py), so that each timing has the GPU to itself.
    cpus = toolchain.usable_cpus()
    devices, report["workers"], xdist, spread_env = _spread(gpus, SELF_TEST_WORKERS_PER_GPU, cpus)
    report["gpus"] = len(devices)
    gates = tempfile.mkdtemp(prefix="gpu-gates-")
    os.environ[config.GATE_ENV] = spread.gate_of(gates, devices[0])  # this process's checks: the first GPU
    spread_env[spread.GATES_ENV] = gates
    # (--dist loadgroup: the hostile submissions' tests share a canary folder and a port: one worker)
    xdist += ["--dist", "loadgroup"] if xdist else []
    junit = Path(tempfile.mkdtemp(prefix="junit-")) / "gpu-tests.xml"
    # Every mutant is built beside the tests, in their order, on the cores the tests leave: the tests write
    # each mutant to the same place (selftest.written_dir()) and find its build in the cache (a test
    # that gets there first builds it, and the builder waits for that build: one compile per source).
    jobs = [(m.exercise, str(m.write(written_dir()))) for _, m in sorted(mutants.items())]
    t_build = time.perf_counter()
    builders = max(2, cpus - 2 - report["workers"])
    builder = cf.ThreadPoolExecutor(max_workers=builders)
    built = [builder.submit(_prepare_in_subprocess, jobs[i:i + 4]) for i in range(0, len(jobs), 4)]
    builder.shutdown(wait=False)

    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        # the tests and the 20 seeds end by the budget (the tests get their grace to write what they found
        # within it), so that the report is written in any case
        left = max(60.0, SELF_TEST_BUDGET_S - (time.perf_counter() - t0))
        end = time.monotonic() + left
        seeds = pool.submit(many_seeds, log, scope, end - 60, end)
        report["pytest"][name] = _pytest([*_self_test_pytest_args(scope), "-m", "gpu", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                                          f"--junitxml={junit}", "--durations=30", *xdist], _env(**spread_env),
                                         out / f"{scope.stem('pytest-gpu-tests')}.log", left - PYTEST_GRACE_S)
        report["many_seeds"] = seeds.result()
        # (a build still running at the end is left to finish in the background: nothing waits on it)
        cf.wait(built, timeout=max(0.0, end - time.monotonic()))
        report["prepare_s"] = (max(f.result() for f in built) - t_build
                               if all(f.done() for f in built) and built else None)
    log(f"{len(jobs)} mutants checked statically and built" + (f" in {report['prepare_s']:.0f} s, beside the tests"
                                                               if report["prepare_s"] is not None else ": not all by the end"))
    report["mutants"] = _mutant_tally(junit, sorted(mutants))
    report["correct"] = _correct_tally(junit)
    report["seconds"] = time.perf_counter() - t0
    mt = report["mutants"]
    log(f"{name}: {report['pytest'][name]['summary']}; mutants caught {mt['caught']} / {mt['total']}")
    md = self_test_markdown(report)
    stem = scope.stem("gpu-self-test")
    (out / f"{stem}.md").write_text(md)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1))
    (out / f"{stem}.log").write_text("\n".join(lines) + "\n")
    print(md)
    false_failures = [r for r in report["many_seeds"] if not r["ok"]]
    ok = not mt["missed"] and not mt.get("not_run") and not false_failures and report["pytest"][name]["rc"] == 0
    return 0 if ok else 1


# pytest, with Ctrl-C's handler even where this process was started with SIGINT ignored (a child inherits
# that, and Python then installs no handler: a test run under pytest-xdist's workers is one)
_PYTEST_MAIN = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                "import pytest\nsys.exit(pytest.main(sys.argv[1:]))")


def _pytest(args: list[str], env: dict, log_path: Path, timeout: int) -> dict:
    t0 = time.perf_counter()
    with open(log_path, "w") as f:
        # a session of its own: at the time limit the whole of it goes (xdist's workers and their
        # grading processes too), not only pytest's first process
        proc = subprocess.Popen([sys.executable, "-c", _PYTEST_MAIN, *args], cwd=paths.ROOT, env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # as Ctrl-C: pytest stops, writes its junit file (what ran) and its durations; then whatever is
            # left of the session (workers, their grading processes) goes
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=PYTEST_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
            rc = "timeout"
    tail = log_path.read_text(errors="replace").strip().splitlines()
    return {"rc": rc, "seconds": time.perf_counter() - t0, "summary": tail[-1] if tail else ""}


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _version(dist: str) -> str | None:
    """An installed distribution's version (e.g. the optional flashinfer-python), or None."""
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _commit() -> str:
    """The commit under test: COURSE_COMMIT (set it where the copy has no .git), or git's answer."""
    if os.environ.get("COURSE_COMMIT"):
        return os.environ["COURSE_COMMIT"]
    try:
        proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=paths.ROOT, capture_output=True,
                              text=True, timeout=10)
        return proc.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _env_info() -> dict:
    import torch

    p = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip().split("\n")[0]  # (a line per GPU)
    except OSError:
        driver = "unknown"
    from ..bench import theoretical_bandwidth

    peak = theoretical_bandwidth()
    return {"commit": _commit(), "gpu": p.name, "sm": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
            "l2_mb": p.L2_cache_size / 2**20, "driver": driver, "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "nvcc": toolchain.nvcc_version(), "python": platform.python_version(),
            "cpus": toolchain.usable_cpus(), "peak_gbps": peak / 1e9 if peak else None, "flashinfer": _version("flashinfer-python"),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


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
    first = _warm_up()
    print(f"first build (the precompiled header): {first['wall_s']:.1f} s", flush=True)
    # So is torch's bytecode, where the install keeps none (a container's; a pip or conda install has it):
    # written here, as on an instructor's host after its first run, not charged to the class (10 s on an H100 host).
    took = toolchain.write_bytecode()
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
           "roster": roster, "environment": _env_info()}
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
    from .selftest import mutants_for

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
          f"`python -m grader verify --class-benchmark {students}"
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
           f"measured figures above (`verify.projection`): {p['rate_s']:.1f} s of GPU time per grading "
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



def verify(out: str | Path, notebooks: bool = True, grading: bool = True, only: list[str] | None = None,
           notebook_timeout: int | None = None, gpus: str | None = None) -> int:
    """Builds, every solution and stub graded, then the notebooks: gpu-verification.md/.json.
    With the course's days no longer fitting one 10-minute command, the two halves also run
    apart: `grading=False` runs only the notebooks, into gpu-notebooks.md/.json. `only` (days
    or exercises) verifies a part of the course, into gpu-verification-<only>.md/.json. `gpus`: the
    gradings and the notebooks spread over these GPUs of the host, one check or notebook on each at a
    time (default: one)."""
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

    if not toolchain.has_gpu():
        print("verify needs a CUDA GPU; on a CPU machine run `make test`.")
        return 2
    t0 = time.perf_counter()
    # One fresh build cache for the whole run: cold builds are measured into it, and the
    # grading and the notebooks then load from it.
    os.environ["COURSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="course-cache-")
    report: dict = {"environment": _env_info(), "grading": [], "pytest": {}, "seconds": 0.0, "only": scope.only}

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
        name = "notebooks with the solutions (nbval)"
        # Said in the report until the run ends: a report cut off here says so.
        report["pytest"][name] = {"rc": "not finished", "seconds": 0.0,
                                  "summary": "started; the run was stopped before it finished"}
        save()
        books = ["notebooks"] if scope.everything else [
            str(p.relative_to(paths.ROOT)) for p in sorted((paths.ROOT / "notebooks").glob("day*.ipynb"))
            if scope.has_day(p.name[:5])]
        # one notebook per GPU at a time (its cells in order in one kernel: --dist loadfile), so that what
        # it measures has its GPU to itself
        devices, workers, xdist, spread_env = _spread(gpus, 1, toolchain.usable_cpus())
        report["notebook_gpus"] = len(devices)
        xdist = [*xdist, "--dist", "loadfile"] if workers > 1 else []
        report["pytest"][name] = _pytest([*books, "--nbval-lax", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *xdist],
                                         _env(COURSE_USE_SOLUTIONS="1", COURSE_MEASUREMENTS=str(measurements),
                                              **spread_env),
                                         out / f"{scope.stem('pytest-notebooks')}.log",
                                         notebook_timeout or (NOTEBOOKS_AFTER_GRADING_S if grading else NOTEBOOKS_ONLY_S))
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
