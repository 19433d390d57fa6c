"""The GPU verification run: `python -m grader verify --out DIR`.

Run on the GPU machine every session that touches kernels, the grader or a
notebook. In one command it:
  1. measures build times: each day's kernels built cold (fresh cache, days in
     parallel) and then loaded from the cache in a fresh process;
  2. grades every solution (must pass, meeting its target) and every stub (must
     fail correctness, cleanly), timing alone on the GPU;
  3. runs the grader's GPU tests (crash, hang and wrong-answer submissions);
  4. executes every notebook with the solutions through nbval;
and writes gpu-verification.md and .json (commit them under reports/).
"""
from __future__ import annotations

import concurrent.futures as cf
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import toolchain
from .build import display_path

TARGET_COLD_S = 20.0
TARGET_CACHED_S = 1.0


_BUILD_SNIPPET = """
import json, sys
from grader import build
job = json.loads(sys.argv[1])
if "day" in job:
    b = build.build_day(job["day"], quiet=True)
else:
    b = build.build([build.Source.read(job["file"])], name=job["name"], quiet=True)
print(json.dumps({"seconds": b.seconds, "cached": b.cached, "module": b.name}))
"""


def _build_jobs() -> list[dict]:
    """What the notebooks and the grading build: each day's versions, each solution and stub."""
    from . import exercises

    jobs = [{"label": f"{d.name} kernel versions", "day": d.name}
            for d in sorted(toolchain.KERNELS.glob("day*")) if d.is_dir()]
    for ex in exercises.all_exercises().values():
        for kind, path in (("solution", ex.solution_path), ("stub", ex.stub_path)):
            jobs.append({"label": f"{ex.id} {kind}", "file": str(path), "name": ex.id.replace(".", "_")})
    return jobs


def _build_in_subprocess(job: dict) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _BUILD_SNIPPET, json.dumps(job)], capture_output=True,
                          text=True, cwd=toolchain.ROOT, env=_env())
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"label": job["label"], "ok": False, "error": (proc.stderr or proc.stdout)[-1500:], "wall_s": wall}
    return {"label": job["label"], "ok": True, "wall_s": wall, **json.loads(proc.stdout.strip().splitlines()[-1])}


def _env(**extra) -> dict:
    return toolchain.subprocess_env(**extra)


def measure_builds(log) -> dict:
    """Everything the run needs, built cold into the run's fresh cache (in parallel: a
    day is one extension, so days and exercises build side by side), then each day's
    extension loaded again from the cache in a fresh process."""
    import torch

    jobs = _build_jobs()
    pch_existed = (Path(torch.__file__).parent / "include" / "torch" / "extension.h.gch").exists()
    # The precompiled torch header is made once per torch install, by the first build:
    # make it with a build of its own, so that the figures below are what a learner
    # waits for each day.
    first = _build_in_subprocess({"label": "warm-up", "file": str(Path(__file__).parent / "warmup.cu"),
                                  "name": "warmup"})
    log(f"first build ({'precompiled header already there' if pch_existed else 'making the precompiled header'}): "
        f"{first['wall_s']:.1f} s")
    with cf.ThreadPoolExecutor(max_workers=min(8, len(jobs))) as pool:
        cold = list(pool.map(_build_in_subprocess, jobs))
    for c in cold:
        log(f"cold build {c['label']}: {c.get('seconds', float('nan')):.1f} s"
            + ("" if c["ok"] else " FAILED: " + c["error"]))
    cached = [_build_in_subprocess(j) for j in jobs if "day" in j]
    for c in cached:
        log(f"cached load {c['label']}: {c.get('seconds', float('nan')):.2f} s (cached={c.get('cached')})")
    return {"first_build_with_pch_s": first["wall_s"], "pch_existed": pch_existed, "cold": cold, "cached": cached,
            "target_cold_s": TARGET_COLD_S, "target_cached_s": TARGET_CACHED_S}


def grade(kind: str, log) -> list[dict]:
    """Grade every solution (timed: run alone on the GPU) or every stub (correctness only)."""
    from . import exercises
    from .checks import check

    rows = []
    for ex in exercises.all_exercises().values():
        res = check(ex.id, solutions=(kind == "solution"), perf=(kind == "solution"),
                    seeds=3 if kind == "solution" else 1, secret_seed=int(time.time()) % 100000, quiet=True)
        ok = res.passed if kind == "solution" else (
            any(i.group == "correctness" and i.status == "fail" for i in res.items)
            and not any(i.group == "build" for i in res.failures))
        perf = [{"case": i.name, **{k: i.metrics.get(k) for k in
                                     ("gbps", "copy_gbps", "torch_gbps", "copy_ratio", "torch_ratio", "target")}}
                for i in res.performance()]
        rows.append({"exercise": ex.id, "kind": kind, "expected": "pass" if kind == "solution" else "fail",
                     "verdict": res.verdict, "as_expected": ok, "build_s": res.build_seconds,
                     "seconds": res.seconds, "first_failure": res.first_failure()[:400], "perf": perf,
                     "items": [i.__dict__ for i in res.items if i.status != "pass" or i.group in ("performance", "work")]})
        log(f"{ex.id} {kind}: {res.verdict} ({'as expected' if ok else 'NOT AS EXPECTED'}) in {res.seconds:.0f} s")
        if not ok:
            log(str(res))
    return rows


SEEDS_FOR_FALSE_FAILURES = 20


def many_seeds(log) -> list[dict]:
    """Every solution's correctness over 20 seeds: a grader that fails a right answer is worse
    than none."""
    from . import exercises
    from .checks import check

    rows = []
    for ex in exercises.all_exercises().values():
        res = check(ex.id, solutions=True, perf=False, seeds=SEEDS_FOR_FALSE_FAILURES, quiet=True)
        cases = [i for i in res.items if i.group == "correctness"]
        rows.append({"exercise": ex.id, "cases": len(cases), "seeds": SEEDS_FOR_FALSE_FAILURES, "ok": res.ok,
                     "first_failure": res.first_failure()[:300]})
        log(f"{ex.id} solution over {SEEDS_FOR_FALSE_FAILURES} seeds: {'no false failure' if res.ok else 'FAILED'}")
    return rows


def _mutant_tally(junit: Path) -> dict:
    """Known-wrong submissions (tests/test_mutants.py) that got their expected verdict."""
    import xml.etree.ElementTree as ET

    if not junit.exists():
        return {"caught": 0, "total": 0, "missed": []}
    cases = [c for c in ET.parse(junit).getroot().iter("testcase") if "test_mutants" in c.get("classname", "")
             and "[" in c.get("name", "")]
    ran = [c for c in cases if c.find("skipped") is None]
    missed = [c.get("name") for c in ran if c.find("failure") is not None or c.find("error") is not None]
    return {"caught": len(ran) - len(missed), "total": len(ran), "missed": missed}


def _pytest(args: list[str], env: dict, log_path: Path, timeout: int) -> dict:
    t0 = time.perf_counter()
    with open(log_path, "w") as f:
        try:
            rc = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=toolchain.ROOT, env=env, stdout=f,
                                stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    tail = log_path.read_text(errors="replace").strip().splitlines()
    return {"rc": rc, "seconds": time.perf_counter() - t0, "summary": tail[-1] if tail else ""}


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _env_info() -> dict:
    import torch

    p = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = "unknown"
    from .bench import theoretical_bandwidth

    peak = theoretical_bandwidth()
    return {"gpu": p.name, "sm": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
            "l2_mb": p.L2_cache_size / 2**20, "driver": driver, "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "nvcc": toolchain.nvcc_version(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "peak_gbps": peak / 1e9 if peak else None,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def _markdown(report: dict) -> str:
    e = report["environment"]
    out = [f"# GPU verification report", "",
           f"{e['date']}: {e['gpu']} (sm_{e['sm'].replace('.', '')}, {e['sms']} SMs, {e['l2_mb']:.0f} MB L2, "
           f"theoretical {e['peak_gbps']:.0f} GB/s), driver {e['driver']}, torch {e['torch']} (CUDA {e['torch_cuda']}), "
           f"nvcc {e['nvcc']}, Python {e['python']}, {e['cpus']} CPUs.", "",
           "Generated by `python -m grader verify`; not edited by hand.", "", "## Exercises", "",
           "| exercise | file | expected | verdict | as expected | cold build s | case | GB/s | x copy | target | x eager torch |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    cold = {c["label"]: c for c in report.get("builds", {}).get("cold", [])}
    for r in report["grading"]:
        c = cold.get(f"{r['exercise']} {r['kind']}", {})
        build = f"{c['seconds']:.1f}" if c.get("ok") else "-"
        first = (f"| {r['exercise']} | {r['kind']} | {r['expected']} | {r['verdict']} | "
                 f"{'yes' if r['as_expected'] else '**NO**'} | {build} |")
        for i, c in enumerate(r["perf"] or [None]):
            perf = (f" {c['case']} | {c['gbps']:.0f} | {c['copy_ratio']:.3f} | {c['target']:.2f} | "
                    f"{c['torch_ratio']:.2f} |" if c else " - | - | - | - | - |")
            out.append((first if i == 0 else "| | | | | | |") + perf)
    work = [(r["exercise"], i) for r in report["grading"] if r["kind"] == "solution"
            for i in r.get("items", []) if i["group"] == "work"]
    if work:
        out += ["", "Did the solutions do the work (torch.profiler; ncu where it runs):", ""]
        out += [f"- {ex}: {i['name']}: {i['status']}: {i['detail'][:300]}" for ex, i in work]
    stubs = [r for r in report["grading"] if r["kind"] == "stub"]
    out += ["", "Stub failures (what a learner sees first):", ""]
    out += [f"- {r['exercise']}: {r['first_failure'][:200]}" for r in stubs]
    b = report.get("builds")
    if b:
        cached = {c["label"]: c for c in b["cached"]}
        out += ["", "## Build times", "",
                f"First extension: {b['first_build_with_pch_s']:.1f} s "
                + ("(the precompiled torch header was already there). " if b.get("pch_existed") else
                   "(including the precompiled torch header, made once per torch install). ")
                + f"Then all extensions built cold, up to 8 at a time "
                f"(a day's kernel versions are one extension; targets: cold <= {b['target_cold_s']:.0f} s, "
                f"cached <= {b['target_cached_s']:.0f} s).", "",
                "| extension | cold build s | cached load s (fresh process) |", "|---|---|---|"]
        for c in b["cold"]:
            w = cached.get(c["label"], {})
            cold_s = f"{c['seconds']:.1f}" if c["ok"] else "FAILED"
            out.append(f"| {c['label']} | {cold_s} | {w['seconds']:.2f} |" if w else f"| {c['label']} | {cold_s} | - |")
    m = report.get("notebook_measurements") or []
    bw = [r for r in m if "gbps" in r]
    if bw:
        out += ["", "## Measured in the notebooks", "", "| notebook measurement | kernel | GB/s | x copy |", "|---|---|---|---|"]
        for r in bw:
            ratio = f"{r['copy_ratio']:.3f}" if r.get("copy_ratio") is not None else "-"
            out.append(f"| {r.get('label', '')} | {r['name']} | {r['gbps']:.0f} | {ratio} |")
    other = [r for r in m if "gbps" not in r]
    if other:
        out += ["", "## Other notebook measurements", "", "| measurement | what | values |", "|---|---|---|"]
        for r in other:
            values = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()
                               if k not in ("label", "name"))
            out.append(f"| {r.get('label', '')} | {r['name']} | {values} |")
    mt = report.get("mutants")
    if mt:
        out += ["", f"Known-wrong submissions (tests/mutants): **caught {mt['caught']} / {mt['total']}**"
                + (f"; missed: {', '.join(mt['missed'])}" if mt["missed"] else "") + "."]
    ms = report.get("many_seeds")
    if ms:
        bad = [r for r in ms if not r["ok"]]
        out += ["", f"Solutions over {ms[0]['seeds']} seeds (correctness only): "
                + ("no false failure in any of the " + str(len(ms)) + " exercises." if not bad else
                   "FALSE FAILURES: " + "; ".join(f"{r['exercise']}: {r['first_failure']}" for r in bad))]
    out += ["", "## Test runs", ""]
    for name, t in report.get("pytest", {}).items():
        out.append(f"- {name}: exit {t['rc']} in {t['seconds']:.0f} s: `{t['summary']}`")
    out += ["", f"Total: {report['seconds']:.0f} s.", ""]
    return "\n".join(out)


def class_benchmark(out: str | Path, students: int = 30, exercise: str = "day02.silu_and_mul") -> int:
    """Grade a synthetic class (copies of the solution, the stub and the known-wrong
    submissions of tests/mutants/) and report how long it took: class-grading.md/json."""
    from . import exercises
    from .classroom import grade_class

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ex = exercises.get(exercise)
    pool = [ex.solution_path, ex.stub_path] + sorted((toolchain.ROOT / "tests" / "mutants" / ex.id).glob("*.cu"))
    subs = Path(tempfile.mkdtemp(prefix="class-"))
    roster = {}
    for i in range(students):
        src = pool[i % len(pool)]
        dest = subs / f"student{i:02d}" / ex.day / f"{ex.name}.cu"
        dest.parent.mkdir(parents=True)
        dest.write_bytes(src.read_bytes())
        roster[f"student{i:02d}"] = display_path(src)
    t0 = time.perf_counter()
    lines: list[str] = []
    grade_class(subs, out / "class", only=[exercise], echo=lambda m: (print(m, flush=True), lines.append(m)))
    total = time.perf_counter() - t0
    timing = json.loads((out / "class" / "timing.json").read_text())
    rows = json.loads((out / "class" / "gradebook.json").read_text())
    env = _env_info()
    md = [f"# Class grading benchmark", "",
          f"{env['date']}: {env['gpu']}, {env['cpus']} CPUs, torch {env['torch']}. Generated by "
          f"`python -m grader verify --class-benchmark {students}`; not edited by hand.", "",
          f"{students} students x `{exercise}` graded in **{total:.0f} s** (target: <= 600 s): preparation "
          f"(source and SASS checks, builds, {timing['jobs']} processes) {timing['prepare_s']:.0f} s, GPU runs "
          f"{timing['run_s']:.0f} s, one copy calibration for the run.", "",
          "| student | submitted | verdict | score | x copy | first failure |", "|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['student']} | {roster.get(r['student'], '?')} | {r['verdict']} | {r['score']} | "
                  f"{r['copy_ratio']} | {r['failure'][:120].replace('|', '/').replace(chr(10), ' ')} |")
    (out / "class-grading.md").write_text("\n".join(md) + "\n")
    (out / "class-grading.json").write_text(json.dumps({"students": students, "exercise": exercise,
                                                       "seconds": total, "timing": timing, "rows": rows,
                                                       "roster": roster, "environment": env}, indent=1))
    print("\n".join(md))
    return 0 if total <= 600 else 1



def verify(out: str | Path, notebooks: bool = True) -> int:
    out = Path(out)
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
    report: dict = {"environment": _env_info(), "grading": [], "pytest": {}, "seconds": 0.0}

    def save():
        report["seconds"] = time.perf_counter() - t0
        (out / "gpu-verification.json").write_text(json.dumps(report, indent=1))
        (out / "gpu-verification.md").write_text(_markdown(report))
        (out / "verify.log").write_text("\n".join(lines) + "\n")

    log(json.dumps(report["environment"]))
    report["builds"] = measure_builds(log)
    save()
    # Timed work runs alone on the GPU: the solutions first, the notebooks last. In between,
    # the untimed work side by side: the stubs' correctness runs and the grader's GPU tests
    # (crashing, hanging and wrong submissions, several at a time through pytest-xdist).
    report["grading"] = grade("solution", log)
    save()
    name = "grader GPU tests (mutants, crash, hang, sanitizer, stubs)"
    xdist = ["-n", "4"] if _has_module("xdist") else []
    junit = Path(tempfile.mkdtemp(prefix="junit-")) / "gpu-tests.xml"
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        stubs = pool.submit(grade, "stub", log)
        seeds = pool.submit(many_seeds, log)
        report["pytest"][name] = _pytest(["tests", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                                          f"--junitxml={junit}", *xdist], _env(), out / "pytest-gpu-tests.log", 330)
        report["grading"] += stubs.result()
        report["many_seeds"] = seeds.result()
    report["mutants"] = _mutant_tally(junit)
    log(f"{name}: {report['pytest'][name]['summary']}; mutants caught {report['mutants']['caught']} / "
        f"{report['mutants']['total']}")
    save()
    if notebooks:
        measurements = Path(tempfile.mkdtemp(prefix="nb-measure-")) / "measurements.jsonl"
        name = "notebooks with the solutions (nbval)"
        report["pytest"][name] = _pytest(["notebooks", "--nbval-lax", "-q", "-p", "no:cacheprovider", "-o", "addopts="],
                                         _env(COURSE_USE_SOLUTIONS="1", COURSE_MEASUREMENTS=str(measurements)),
                                         out / "pytest-notebooks.log", 330)
        log(f"notebooks: {report['pytest'][name]['summary']}")
        if measurements.exists():
            report["notebook_measurements"] = [json.loads(x) for x in measurements.read_text().splitlines() if x]
    save()
    days = [c for c in report["builds"]["cold"] if c["label"].endswith("kernel versions")]
    ok = (all(r["as_expected"] for r in report["grading"])
          and all(r["ok"] for r in report.get("many_seeds", []))
          and report.get("mutants", {}).get("caught") == report.get("mutants", {}).get("total")
          and all(t["rc"] == 0 for t in report["pytest"].values())
          and all(c["ok"] for c in report["builds"]["cold"])
          and all(c["seconds"] <= TARGET_COLD_S for c in days)
          and all(c["ok"] and c["seconds"] <= TARGET_CACHED_S for c in report["builds"]["cached"]))
    print(_markdown(report))
    return 0 if ok else 1
