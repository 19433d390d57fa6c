"""The GPU verification run: `python -m grader verify --out DIR`.

Run on the GPU machine every session that touches kernels, the grader or a
notebook. In one command it:
  1. measures build times: each day's kernels built cold (fresh cache, days in
     parallel) and then loaded from the cache in a fresh process;
  2. grades every solution (must pass, meeting its target) and every stub (must
     fail correctness, cleanly), timing alone on the GPU;
  3. runs the grader's GPU tests (crash, hang and wrong-answer submissions);
  4. executes every notebook with the solutions through nbval;
and writes report.md and report.json (commit them under reports/).
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

TARGET_COLD_S = 20.0
TARGET_CACHED_S = 1.0


def _day_sources() -> dict[str, list[str]]:
    """Per day: its kernel version files and its solutions, as one extension (as a notebook builds them)."""
    days: dict[str, list[str]] = {}
    stubs = {p.resolve() for p in toolchain.SOLUTIONS.glob("day*/*.cu")}
    for p in sorted(toolchain.KERNELS.glob("day*/*.cu")):
        if (toolchain.SOLUTIONS / p.parent.name / p.name).resolve() in stubs:
            continue  # exercise stubs: their solutions stand in for them
        days.setdefault(p.parent.name, []).append(str(p))
    for p in sorted(toolchain.SOLUTIONS.glob("day*/*.cu")):
        days.setdefault(p.parent.name, []).append(str(p))
    return days


_BUILD_SNIPPET = """
import json, sys, time
t0 = time.perf_counter()
from grader import build
t1 = time.perf_counter()
b = build.build(sys.argv[2:], name="verify_" + sys.argv[1], quiet=True)
print(json.dumps({"seconds": b.seconds, "cached": b.cached, "import_s": t1 - t0, "name": b.name}))
"""


def _build_in_subprocess(day: str, files: list[str], env: dict) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _BUILD_SNIPPET, day, *files], capture_output=True, text=True,
                          env=env, cwd=toolchain.ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"day": day, "ok": False, "error": (proc.stderr or proc.stdout)[-1500:], "wall_s": wall}
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"day": day, "ok": True, "files": len(files), "wall_s": wall, **data}


def measure_builds(log) -> dict:
    """Cold builds in a fresh cache (days in parallel), then cached loads in fresh processes."""
    cache = Path(tempfile.mkdtemp(prefix="course-cache-"))
    env = dict(os.environ, COURSE_CACHE_DIR=str(cache),
               PYTHONPATH=str(toolchain.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    days = _day_sources()
    # The precompiled torch header is built once per torch install, before any day:
    # time it on its own so the per-day figures are the cost a learner pays each day.
    t0 = time.perf_counter()
    warm = _build_in_subprocess("pch", [str(toolchain.SOLUTIONS / "day01" / "scale_add.cu")], env)
    pch_s = time.perf_counter() - t0
    log(f"precompiled header + first build: {pch_s:.1f} s")
    with cf.ThreadPoolExecutor(max_workers=len(days)) as pool:
        cold = list(pool.map(lambda d: _build_in_subprocess(d, days[d], env), days))
    for c in cold:
        log(f"cold build {c['day']}: {c.get('seconds', float('nan')):.1f} s ({c.get('files', 0)} files)"
            + ("" if c["ok"] else " FAILED: " + c["error"]))
    cached = [_build_in_subprocess(d, days[d], env) for d in days]
    for c in cached:
        log(f"cached load {c['day']}: {c.get('seconds', float('nan')):.2f} s (cached={c.get('cached')})")
    return {"first_build_with_pch_s": pch_s, "first_build": warm, "cold": cold, "cached": cached,
            "target_cold_s": TARGET_COLD_S, "target_cached_s": TARGET_CACHED_S}


def grade_all(log) -> list[dict]:
    from . import exercises
    from .checks import check

    rows = []
    for ex in exercises.all_exercises().values():
        for kind in ("solution", "stub"):
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
                         "seconds": res.seconds, "first_failure": res.first_failure()[:400], "perf": perf})
            log(f"{ex.id} {kind}: {res.verdict} ({'as expected' if ok else 'NOT AS EXPECTED'})")
            if not ok:
                log(str(res))
    return rows


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
           "| exercise | file | expected | verdict | as expected | build s | case | GB/s | x copy | target | x eager torch |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["grading"]:
        build = f"{r['build_s']:.1f}" if r["build_s"] is not None else "-"
        first = (f"| {r['exercise']} | {r['kind']} | {r['expected']} | {r['verdict']} | "
                 f"{'yes' if r['as_expected'] else '**NO**'} | {build} |")
        for i, c in enumerate(r["perf"] or [None]):
            perf = (f" {c['case']} | {c['gbps']:.0f} | {c['copy_ratio']:.3f} | {c['target']:.2f} | "
                    f"{c['torch_ratio']:.2f} |" if c else " - | - | - | - | - |")
            out.append((first if i == 0 else "| | | | | | |") + perf)
    stubs = [r for r in report["grading"] if r["kind"] == "stub"]
    out += ["", "Stub failures (what a learner sees first):", ""]
    out += [f"- {r['exercise']}: {r['first_failure'][:200]}" for r in stubs]
    b = report.get("builds")
    if b:
        out += ["", "## Build times", "",
                f"Precompiled torch header plus the first extension (once per torch install): "
                f"{b['first_build_with_pch_s']:.1f} s.", "",
                f"| day | files | cold build s (target <= {b['target_cold_s']:.0f}) | cached load s "
                f"(target <= {b['target_cached_s']:.0f}) |", "|---|---|---|---|"]
        for c, w in zip(b["cold"], b["cached"]):
            out.append(f"| {c['day']} | {c.get('files', '-')} | {c.get('seconds', float('nan')):.1f} | "
                       f"{w.get('seconds', float('nan')):.2f} |")
    m = report.get("notebook_measurements") or []
    if m:
        out += ["", "## Measured in the notebooks", "", "| notebook measurement | kernel | GB/s | x copy |", "|---|---|---|---|"]
        for r in m:
            ratio = f"{r['copy_ratio']:.3f}" if r.get("copy_ratio") is not None else "-"
            out.append(f"| {r.get('label', '')} | {r['name']} | {r['gbps']:.0f} | {ratio} |")
    out += ["", "## Test runs", ""]
    for name, t in report.get("pytest", {}).items():
        out.append(f"- {name}: exit {t['rc']} in {t['seconds']:.0f} s: `{t['summary']}`")
    out += ["", f"Total: {report['seconds']:.0f} s.", ""]
    return "\n".join(out)


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
    report: dict = {"environment": _env_info()}
    log(json.dumps(report["environment"]))
    report["builds"] = measure_builds(log)
    report["grading"] = grade_all(log)
    env = dict(os.environ, PYTHONPATH=str(toolchain.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    report["pytest"] = {"grader tests on the GPU": _pytest(["tests", "-q", "-p", "no:cacheprovider", "-o",
                                                            "addopts="], env, out / "pytest-tests.log", 300)}
    log(f"grader tests: {report['pytest']['grader tests on the GPU']['summary']}")
    if notebooks:
        measurements = Path(tempfile.mkdtemp(prefix="nb-measure-")) / "measurements.jsonl"
        nb_env = dict(env, COURSE_USE_SOLUTIONS="1", COURSE_MEASUREMENTS=str(measurements))
        report["pytest"]["notebooks with the solutions (nbval)"] = _pytest(
            ["notebooks", "--nbval-lax", "-q", "-p", "no:cacheprovider", "-o", "addopts="], nb_env,
            out / "pytest-notebooks.log", 400)
        log(f"notebooks: {report['pytest']['notebooks with the solutions (nbval)']['summary']}")
        if measurements.exists():
            report["notebook_measurements"] = [json.loads(x) for x in measurements.read_text().splitlines() if x]
    report["seconds"] = time.perf_counter() - t0
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(_markdown(report))
    (out / "verify.log").write_text("\n".join(lines) + "\n")
    ok = (all(r["as_expected"] for r in report["grading"])
          and all(t["rc"] == 0 for t in report["pytest"].values())
          and all(c["ok"] and c["seconds"] <= TARGET_COLD_S for c in report["builds"]["cold"])
          and all(c["ok"] and c["seconds"] <= TARGET_CACHED_S for c in report["builds"]["cached"]))
    print(_markdown(report))
    return 0 if ok else 1
