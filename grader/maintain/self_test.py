"""`python -m grader self-test`: the grader tests itself on the GPU (gpu-self-test.md/.json/.log).

Every known-wrong submission of tests/mutants must get its expected verdict and every known-right one
of tests/correct must pass (the corpus: corpus.py), and the grader's other GPU tests (crash, hang,
sanitizer) must pass: they run side by side (pytest-xdist) on the GPU, sharing its gate so that each
timing has it alone, with the mutants built beside them; and every solution's correctness over 20
seeds (no false failure allowed). The whole of it fits one 10-minute command on a host with four
GPUs (`--gpus all`); on one GPU it runs in parts (`--only`: days, exercises, `grader`), each into
gpu-self-test-<part>.md/.json.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import config, machine, paths, pyenv
from . import runs
from .runs import Scope

SELF_TEST_BUDGET_S = 550.0  # a self-test ends its tests by then, so that its report is written within 10 min
SELF_TEST_WORKERS_PER_GPU = 6  # the self-test's tests side by side on each GPU (pytest-xdist workers)


def many_seeds(log, scope: Scope, deadline: float | None = None, end: float | None = None) -> list[dict]:
    """Every solution's correctness over 20 seeds, and its small cases under compute-sanitizer
    as class grading runs them: a grader that fails a right answer is worse than none. An exercise
    not started by `deadline` (time.monotonic()) is not run, one still running at `end` is stopped
    there, and its row says so. Beside the self-test's tests: each check shares its GPU (shared_gpu)."""
    from ..check import shared_gpu

    if scope.correct_only:  # (that part grades the known-right submissions only)
        return []

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
                   cwd=paths.ROOT, env=runs.env())
    return time.perf_counter()


def _self_test_pytest_args(scope: Scope) -> list[str]:
    """The GPU tests a self-test of this scope runs: the mutants of its exercises, and the
    grader's own GPU tests where the scope has them."""
    if scope.everything:
        return ["tests"]
    # a day's known-wrong submissions (tests/mutants) and its known-right ones (tests/correct) run in its part
    chosen = " or ".join(sorted(scope.days | scope.ids))
    if scope.correct_only and not scope.grader_tests:
        return ["tests/test_correct.py", *(["-k", chosen] if chosen else [])]
    if not scope.grader_tests:
        return ["tests/test_mutants.py", "tests/test_correct.py", "-k", chosen]
    by_day = "not test_mutants and not test_correct"
    return ["tests", "-k", f"{by_day} or {chosen}" if chosen else by_day]



def self_test_markdown(report: dict) -> str:
    """gpu-self-test(-part).md from its JSON report (what `self-test` writes beside it)."""
    from .corpus import all_mutants

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
          f"(CUDA {e['torch_cuda']}), {e['cpus']} CPUs. Generated by `python -m grader self-test`; "
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


def self_test(out: str | Path, only: list[str] | None = None, gpus: str | None = None) -> int:
    """The grader tests itself on the GPU: every mutant must get its expected verdict, the
    other GPU tests must pass, no solution may fail over 20 seeds. gpu-self-test.md/.json;
    with `only` (days, exercises, `grader`) a part of it, into gpu-self-test-<only>.md/.json.
    `gpus`: the tests spread over these GPUs of the host (default: one)."""
    from . import spread
    from .corpus import all_mutants, written_dir

    scope = Scope(only)
    if scope.check():
        print(scope.check())
        return 2

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not machine.has_gpu():
        print("self-test needs a CUDA GPU; on a CPU machine run `make test`.")
        return 2
    t0 = time.perf_counter()
    os.environ["COURSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="course-cache-")
    lines: list[str] = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    report: dict = {"environment": runs.env_info(), "pytest": {}, "only": scope.only}
    log(json.dumps(report["environment"]))
    first = runs.warm_up()
    log(f"first build (precompiled header): {first['wall_s']:.0f} s")
    took = pyenv.write_bytecode()  # (where the install keeps none: the grading processes' start)
    if took is not None:
        log(f"grading processes' bytecode (the install has none): {took:.0f} s")
    # (`--only correct`: the known-right submissions alone, no mutant to build)
    mutants = {k: m for k, m in all_mutants().items() if scope.has(m.exercise) and not scope.correct_only}
    name = ("grader GPU tests (mutants, crash, hang, sanitizer)" if scope.grader_tests else
            "GPU tests of the known-right submissions" if scope.correct_only else "GPU tests of the mutants")
    # The tests run side by side (pytest-xdist), and the solutions' 20 seeds beside them: the checks
    # on a GPU share its gate (check/gate.py), so that each timing has the GPU to itself.
    cpus = machine.usable_cpus()
    devices, report["workers"], xdist, spread_env = runs.spread(gpus, SELF_TEST_WORKERS_PER_GPU, cpus)
    report["gpus"] = len(devices)
    gates = tempfile.mkdtemp(prefix="gpu-gates-")
    os.environ[config.GATE_ENV] = spread.gate_of(gates, devices[0])  # this process's checks: the first GPU
    spread_env[spread.GATES_ENV] = gates
    # (--dist loadgroup: the hostile submissions' tests share a canary folder and a port: one worker)
    xdist += ["--dist", "loadgroup"] if xdist else []
    junit = Path(tempfile.mkdtemp(prefix="junit-")) / "gpu-tests.xml"
    # Every mutant is built beside the tests, in their order, on the cores the tests leave: the tests write
    # each mutant to the same place (corpus.written_dir()) and find its build in the cache (a test
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
        report["pytest"][name] = runs.pytest([*_self_test_pytest_args(scope), "-m", "gpu", "-q", "-p", "no:cacheprovider",
                                              "-o", "addopts=", f"--junitxml={junit}", "--durations=30", *xdist],
                                             runs.env(**spread_env), out / f"{scope.stem('pytest-gpu-tests')}.log",
                                             left - runs.PYTEST_GRACE_S)
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
