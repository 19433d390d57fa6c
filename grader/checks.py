"""`check(exercise)`: every check of one exercise, ending in a Result, never an exception.

Order: the source (readable, a `__global__` kernel, no forbidden calls, the
fixed entry points), the compiled SASS (no spills, register limit, the day's
required instructions), then on a GPU the build and a subprocess that runs the
correctness cases, profiles a call and times the performance cases.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import build as _build
from . import exercises as _exercises
from . import toolchain
from .exports import _strip_comments, parse_exports
from .result import Result
from .spec import Exercise

# What a kernel file may not use: the work has to be done by the learner's kernel.
DENY = [
    (r"#\s*include\s*[<\"](torch|ATen|c10|pybind11)", "includes torch/pybind11 headers (the binding is generated for you)"),
    (r"\b(at|torch|c10)::", "calls PyTorch from the kernel file"),
    (r"\bcublas\w*|\bcublasLt\w*|\bcudnn\w*|\bcufft\w*|\bcurand\w*|\bcusparse\w*", "calls a CUDA library instead of computing"),
    (r"#\s*include\s*[<\"](thrust/|thread\b|future\b)", "uses thrust or host threads"),
    (r"\bstd::(thread|async)\b|\bpthread_create\b", "starts host threads"),
    (r"\bcudaStreamCreate\w*|\bcudaGraphLaunch\b", "creates its own streams or graphs"),
    (r"\bcudaMemcpy\w*|\bcudaMemset\w*", "copies or sets memory through the runtime instead of a kernel"),
    (r"\btry\s*\{|\bcatch\s*\(", "has a try/catch fallback"),
    (r"\b(system|popen|dlopen|fork|execv\w*)\s*\(", "runs other programs or loads libraries"),
]
OUTPUT_TAIL = 2000


def secret_seed_from_env() -> int | None:
    v = os.environ.get("GRADER_SECRET_SEED")
    return int(v) if v else None


def default_source(ex: Exercise, solutions: bool | None = None) -> Path:
    """The learner's file, or the reference solution when asked
    (or when COURSE_USE_SOLUTIONS=1, as the GPU verification does)."""
    if solutions is None:
        solutions = os.environ.get("COURSE_USE_SOLUTIONS") == "1"
    return ex.solution_path if solutions else ex.stub_path


def static_checks(ex: Exercise, source: _build.Source, result: Result) -> bool:
    text = _strip_comments(source.text)
    if not source.text.strip():
        result.add("source", "readable", "fail", "the file is empty")
        return False
    if "__global__" not in text:
        result.add("source", "has a kernel", "fail", "no __global__ function: the work must be done by your kernel")
        return False
    denied = [why for rx, why in DENY if re.search(rx, text)]
    if denied:
        result.add("source", "does its own work", "fail", "; ".join(denied))
        return False
    result.add("source", "does its own work", "pass", "a __global__ kernel, no forbidden calls")
    try:
        found = {e.name: e for e in parse_exports(source.text, source.path)}
    except ValueError as e:
        result.add("source", "entry points", "fail", str(e))
        return False
    problems = []
    for proto in ex.entry_points:
        want = parse_exports("COURSE_EXPORT " + proto + ";")[0]
        got = found.get(want.name)
        if got is None:
            problems.append(f"missing `COURSE_EXPORT {proto}`")
        elif (got.returns, [(p.kind, p.base) for p in got.params]) != (want.returns, [(p.kind, p.base) for p in want.params]):
            problems.append(f"{source.path}:{got.line}: `{got.prototype()}` does not match the fixed entry point "
                            f"`{want.prototype()}`")
    if problems:
        result.add("source", "entry points", "fail", "; ".join(problems))
        return False
    result.add("source", "entry points", "pass", ", ".join(sorted(found)))
    return True


def sass_checks(ex: Exercise, source: _build.Source, result: Result) -> bool:
    try:
        report = _build.compile_cubin(source)
    except _build.BuildError as e:
        result.add("build", "compiles (nvcc, sm_90)", "fail", e.summary())
        return False
    if not report.kernels:
        result.add("sass", "kernels", "fail", "the cubin holds no kernel: is the __global__ function ever launched?")
        return False
    worst = max(report.kernels, key=lambda k: k.registers)
    spills = [k for k in report.kernels if k.spill_stores or k.spill_loads or k.stack_bytes]
    regs_ok = worst.registers <= ex.max_registers
    result.add("sass", "registers, no spills", "pass" if regs_ok and not spills else "fail",
               f"{worst.registers} registers in {worst.name} (limit {ex.max_registers})" if not spills else
               "local memory used (stack/spills) in " + ", ".join(
                   f"{k.name}: {k.stack_bytes} B stack, {k.spill_stores + k.spill_loads} B spilled" for k in spills))
    ok = regs_ok and not spills
    for opcode, why in ex.required_sass.items():
        missing = [k.name for k in report.kernels if not k.has_opcode(opcode)]
        if missing:
            ok = False
            result.add("sass", opcode, "fail", f"no {opcode} ({why}) in " + ", ".join(missing))
        else:
            result.add("sass", opcode, "pass", f"{why}: present in every kernel")
    return ok


def _run_worker(ex: Exercise, built, seeds, perf: bool, result: Result, timeout: float | None) -> None:
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        results = Path(tmp) / "results.jsonl"
        results.touch()
        config = {"exercise": ex.id, "module_dir": str(built.directory), "module_name": built.name,
                  "kernels": built.kernels, "seeds": seeds, "perf": perf, "results": str(results)}
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps(config))
        log = Path(tmp) / "output.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(toolchain.ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        limit = timeout or ex.timeout_s
        with open(log, "wb") as logf:
            proc = subprocess.Popen([sys.executable, "-m", "grader.worker", str(cfg)], cwd=tmp, env=env,
                                    stdout=logf, stderr=subprocess.STDOUT)
            try:
                rc = proc.wait(timeout=limit)
                timed_out = False
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc, timed_out = None, True
        running, done, fatal = None, False, None
        for line in results.read_text(encoding="utf-8", errors="replace").splitlines():
            rec = json.loads(line)
            if rec.get("event") == "start":
                running = rec["name"]
            elif rec.get("event") == "done":
                done = True
            elif rec.get("event") == "fatal":
                fatal = rec["detail"]
            elif "group" in rec:
                result.add(rec["group"], rec["name"], rec["status"], rec.get("detail", ""), rec.get("metrics"))
                running = None
        if timed_out:
            group = {c.label: "performance" for c in ex.perf_cases}.get(running, "correctness")
            group = "work" if running == "kernels launched" else group
            result.add(group, running or "run", "fail",
                       f"no result within {limit:.0f} s: the kernel hangs or is far too slow "
                       f"(the grading process was stopped)")
        elif not done:
            tail = log.read_bytes()[-OUTPUT_TAIL:].decode("utf-8", errors="replace").strip()
            where = f" while running '{running}'" if running else ""
            why = fatal or f"the grading process died{where} (exit code {rc})"
            if not fatal or "crashed" not in fatal:
                result.add("correctness", running or "run", "fail", why + (f"\n{tail}" if tail else ""))


def check(exercise: str, source: str | Path | None = None, solutions: bool | None = None,
          seeds: int = 3, secret_seed: int | None = None, perf: bool = True,
          timeout: float | None = None, quiet: bool = False) -> Result:
    """Grade one exercise. `source` defaults to the learner's file under kernels/."""
    t0 = time.perf_counter()
    ex = _exercises.get(exercise)
    path = Path(source) if source else default_source(ex, solutions)
    result = Result(ex.id, _build.display_path(path), toolchain.mode())
    try:
        src = _build.Source.read(path)
    except FileNotFoundError:
        result.add("source", "readable", "fail", f"no such file: {path}")
        return _finish(result, t0)
    except _build.BuildError as e:
        result.add("source", "readable", "fail", e.first_error)
        return _finish(result, t0)
    if not static_checks(ex, src, result):
        return _finish(result, t0)
    sass_checks(ex, src, result)
    if any(i.group == "build" for i in result.failures):
        return _finish(result, t0)
    if not toolchain.has_gpu():
        for group in ("correctness", "work", "performance"):
            result.add(group, "run on a GPU", "skip", "skipped: no CUDA GPU here (compile-only mode)")
        return _finish(result, t0)
    try:
        built = _build.build([src], name=ex.id.replace(".", "_"), quiet=quiet)
    except _build.BuildError as e:
        result.add("build", "torch extension", "fail", e.summary())
        return _finish(result, t0)
    result.build_seconds = built.seconds
    seed_list = [[str(s), s] for s in range(seeds)]
    secret = secret_seed if secret_seed is not None else secret_seed_from_env()
    if secret is not None:
        seed_list.append(["secret", secret])
    _run_worker(ex, built, seed_list, perf, result, timeout)
    if ex.max_bank_conflicts_per_access is not None:
        _bank_conflict_check(ex, built, result)
    return _finish(result, t0)


def _bank_conflict_check(ex: Exercise, built, result: Result) -> None:
    """Shared-memory bank conflicts per shared-memory instruction, for each of the
    learner's kernels over all untimed cases, read by Nsight Compute where it runs."""
    from . import ncu

    name = "bank conflicts (ncu)"
    if not ncu.available():
        result.add("work", name, "skip", "skipped: Nsight Compute (ncu) is not available here")
        return
    with tempfile.TemporaryDirectory(prefix="grader-ncu-") as tmp:
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps({"exercise": ex.id, "module_dir": str(built.directory),
                                   "module_name": built.name}))
        rows = ncu.profile_python(f"from grader.worker import call_once\ncall_once({str(cfg)!r})\n",
                                  ncu.BANK_CONFLICTS + ncu.SHARED_INSTRUCTIONS, kernels=built.kernels)
    if not rows:
        result.add("work", name, "skip", "skipped: ncu could not read the counters here")
        return
    per_kernel: dict[str, list[float]] = {}
    for r in rows:
        totals = per_kernel.setdefault(r["kernel"].split("(")[0], [0.0, 0.0])
        totals[0] += sum(r.get(m, 0.0) for m in ncu.BANK_CONFLICTS if isinstance(r.get(m), float))
        totals[1] += sum(r.get(m, 0.0) for m in ncu.SHARED_INSTRUCTIONS if isinstance(r.get(m), float))
    limit = ex.max_bank_conflicts_per_access
    worst = max(c / i if i else 0.0 for c, i in per_kernel.values())
    detail = "; ".join(f"{k}: {c:,.0f} conflicts / {i:,.0f} shared accesses = {c / i if i else 0:.3f}"
                       for k, (c, i) in per_kernel.items())
    result.add("work", name, "pass" if worst <= limit else "fail",
               f"at most {limit} extra passes per shared access allowed (a 2-way conflict on every access "
               f"is 1.0): {detail}")


def _finish(result: Result, t0: float) -> Result:
    result.seconds = time.perf_counter() - t0
    return result
