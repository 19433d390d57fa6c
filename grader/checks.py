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
from dataclasses import dataclass, field
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
    (r"\b(fopen|freopen|syscall|open|openat|mmap)\s*\(|\b(i|o|)fstream\b|\bFILE\s*\*", "reads or writes files"),
    (r'#\s*include\s*"(?!course/)', "includes a file other than the course headers (\"course/...\")"),
    (r"#\s*include\s*[<\"](/|[^>\"]*\.\.)", "includes a file by path"),
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
        elif (got.returns, _shape(got)) != (want.returns, _shape(want)):
            problems.append(f"{source.path}:{got.line}: `{got.prototype()}` does not match the fixed entry point "
                            f"`{want.prototype()}`")
    if problems:
        result.add("source", "entry points", "fail", "; ".join(problems))
        return False
    result.add("source", "entry points", "pass", ", ".join(sorted(found)))
    return True


def _shape(export) -> list[tuple]:
    """What an entry point must keep: each parameter's kind and type, and whether a pointer is
    to const (so that swapping `out` and `inp` is caught before anything runs)."""
    return [(p.kind, p.base, p.kind == "pointer" and "const" in p.ctype.split("*")[0].split())
            for p in export.params]


def sass_checks(ex: Exercise, source: _build.Source, result: Result) -> _build.CompileReport | None:
    """Registers, spills and the exercise's required instructions in the compiled SASS;
    returns the compile report (None if it did not compile or holds no kernel)."""
    try:
        report = _build.compile_cubin(source)
    except _build.BuildError as e:
        result.add("build", "compiles (nvcc, sm_90)", "fail", e.summary())
        return None
    if not report.kernels:
        result.add("sass", "kernels", "fail", "the cubin holds no kernel: is the __global__ function ever launched?")
        return None
    worst = max(report.kernels, key=lambda k: k.registers)
    spills = [k for k in report.kernels if k.spill_stores or k.spill_loads or k.stack_bytes]
    regs_ok = worst.registers <= ex.max_registers
    result.add("sass", "registers, no spills", "pass" if regs_ok and not spills else "fail",
               f"{worst.registers} registers in {worst.name} (limit {ex.max_registers})" if not spills else
               "local memory used (stack/spills) in " + ", ".join(
                   f"{k.name}: {k.stack_bytes} B stack, {k.spill_stores + k.spill_loads} B spilled" for k in spills))
    for opcode, why in ex.required_sass.items():
        missing = [k.name for k in report.kernels if not k.has_opcode(opcode)]
        if missing:
            result.add("sass", opcode, "fail", f"no {opcode} ({why}) in " + ", ".join(missing))
        else:
            result.add("sass", opcode, "pass", f"{why}: present in every kernel")
    return report


@dataclass
class RunOptions:
    """How the grading subprocess runs: seeds, timing, limits and where its code comes from."""
    seeds: list = field(default_factory=lambda: [["0", 0], ["1", 1], ["2", 2]])
    perf: bool = True
    timeout: float | None = None
    memory_limit_gb: float | None = None    # host memory (RSS) of the grading process
    runtime_root: str | None = None         # a copy of the grader without solutions/ (class grading)
    copy_gbps: float | None = None          # copy bandwidth calibrated once per run (class grading)
    sanitize: str | None = None             # "memcheck" or "racecheck": run under compute-sanitizer


@dataclass
class Prepared:
    """What `prepare` hands to `run`: the result so far and, if it built, the module's location."""
    result: Result
    module_dir: str | None = None
    module_name: str | None = None
    kernels: list = field(default_factory=list)
    shared_access_bytes: tuple = (4, 4)  # widest shared load and store per thread (from the SASS)


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _run_worker(ex: Exercise, prep: Prepared, opts: RunOptions) -> None:
    result = prep.result
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        results = Path(tmp) / "results.jsonl"
        results.touch()
        config = {"exercise": ex.id, "module_dir": prep.module_dir, "module_name": prep.module_name,
                  "kernels": prep.kernels, "seeds": opts.seeds, "perf": opts.perf, "results": str(results),
                  "copy_gbps": opts.copy_gbps,
                  "max_case_bytes": SANITIZE_MAX_BYTES if opts.sanitize else None}
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps(config))
        log = Path(tmp) / "output.log"
        env = toolchain.subprocess_env(opts.runtime_root)
        if opts.sanitize:  # one cudaMalloc per tensor, so memcheck sees every overrun (the caching
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"  # allocator hides them inside its blocks)
        limit = opts.timeout or ex.timeout_s
        timed_out = over_memory = False
        with open(log, "wb") as logf:
            prefix = _sanitizer_prefix(opts.sanitize) if opts.sanitize else []
            proc = subprocess.Popen([*prefix, sys.executable, "-m", "grader.worker", str(cfg)], cwd=tmp, env=env,
                                    stdout=logf, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + limit
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    timed_out = True
                elif opts.memory_limit_gb and _rss_bytes(proc.pid) > opts.memory_limit_gb * 2**30:
                    over_memory = True
                if timed_out or over_memory:
                    proc.kill()
                    break
                time.sleep(0.05)
            rc = proc.wait()
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
        group = {c.label: "performance" for c in ex.perf_cases}.get(running, "correctness")
        group = "work" if running == "kernels launched" else group
        if timed_out:
            result.add(group, running or "run", "fail",
                       f"no result within {limit:.0f} s: the kernel hangs or is far too slow "
                       f"(the grading process was stopped)")
        elif over_memory:
            result.add(group, running or "run", "fail",
                       f"the grading process used more than {opts.memory_limit_gb:g} GB of host memory "
                       f"and was stopped")
        elif not done:
            tail = log.read_bytes()[-OUTPUT_TAIL:].decode("utf-8", errors="replace").strip()
            where = f" while running '{running}'" if running else ""
            why = fatal or f"the grading process died{where} (exit code {rc})"
            if not fatal or "crashed" not in fatal:
                result.add("correctness", running or "run", "fail", why + (f"\n{tail}" if tail else ""))
        if opts.sanitize and not timed_out:
            _sanitizer_report(opts.sanitize, log.read_text(errors="replace"), result)


SANITIZE_MAX_BYTES = 4 << 20  # compute-sanitizer is slow: only the small cases run under it


def _sanitizer_prefix(tool: str) -> list[str]:
    home = toolchain.cuda_home()
    exe = str(home / "bin" / "compute-sanitizer") if home else "compute-sanitizer"
    return [exe, "--tool", tool, "--print-limit", "5"]


def _sanitizer_report(tool: str, log: str, result: Result) -> None:
    """compute-sanitizer's verdict on the learner's kernels: its error summary and first error."""
    # memcheck ends with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: N hazards".
    summary = re.search(r"(?:ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: (\d+) hazard)", log)
    name = f"compute-sanitizer {tool}"
    if not summary:
        result.add("work", name, "skip", "skipped: compute-sanitizer did not run or reported nothing here "
                   "(it needs a GPU it supports)")
        return
    errors = int(summary.group(1) or summary.group(2))
    first = next((line.strip("= ").strip() for line in log.splitlines()
                  if line.startswith("=========") and ("Invalid" in line or "hazard" in line.lower()
                                                      or "Race" in line or "error" in line.lower())
                  and "ERROR SUMMARY" not in line), "")
    result.add("work", name, "pass" if errors == 0 else "fail",
               f"no errors on the small cases" if errors == 0 else f"{errors} errors; first: {first}")


def prepare(ex: Exercise, path: Path, quiet: bool = True, display: str | None = None) -> Prepared:
    """Everything before the kernel runs: read, static checks, SASS, build. Needs no GPU to
    compile; builds the extension only where a GPU will run it."""
    result = Result(ex.id, display or _build.display_path(path), toolchain.mode())
    prep = Prepared(result)
    try:
        src = _build.Source.read(path)
    except FileNotFoundError:
        result.add("source", "readable", "fail", f"no such file: {display or path}")
        return prep
    except _build.BuildError as e:
        result.add("source", "readable", "fail", e.first_error)
        return prep
    if display:
        src = _build.Source(display, src.text)
    if not static_checks(ex, src, result):
        return prep
    report = sass_checks(ex, src, result)
    if any(i.group == "build" for i in result.failures):
        return prep
    if report:
        prep.shared_access_bytes = tuple(max(k.shared_access_bytes(op) for k in report.kernels)
                                         for op in ("LDS", "STS"))
    if not toolchain.has_gpu():
        for group in ("correctness", "work", "performance"):
            result.add(group, "run on a GPU", "skip", "skipped: no CUDA GPU here (compile-only mode)")
        return prep
    try:
        built = _build.build([src], name=ex.id.replace(".", "_"), quiet=quiet)
    except _build.BuildError as e:
        result.add("build", "torch extension", "fail", e.summary())
        return prep
    result.build_seconds = built.seconds
    prep.module_dir, prep.module_name, prep.kernels = str(built.directory), built.name, built.kernels
    return prep


def run(ex: Exercise, prep: Prepared, opts: RunOptions) -> Result:
    """Run a prepared submission on the GPU in its own process (if it built)."""
    if prep.module_dir:
        _run_worker(ex, prep, opts)
        ran_clean = not any(i.group == "correctness" and i.status == "fail" for i in prep.result.items)
        if ex.max_bank_conflicts is not None and ran_clean:  # never profile a hanging kernel
            _bank_conflict_check(ex, prep, prep.result)
    return prep.result


def seed_list(seeds: int, secret_seed: int | None) -> list:
    out = [[str(s), s] for s in range(seeds)]
    secret = secret_seed if secret_seed is not None else secret_seed_from_env()
    if secret is not None:
        out.append(["secret", secret])
    return out


def check(exercise: str, source: str | Path | None = None, solutions: bool | None = None,
          seeds: int = 3, secret_seed: int | None = None, perf: bool = True,
          timeout: float | None = None, quiet: bool = False, sanitize: str | None = None) -> Result:
    """Grade one exercise. `source` defaults to the learner's file under kernels/.
    `sanitize` ("memcheck" or "racecheck") runs the small cases under compute-sanitizer instead."""
    t0 = time.perf_counter()
    ex = _exercises.get(exercise)
    path = Path(source) if source else default_source(ex, solutions)
    prep = prepare(ex, path, quiet=quiet)
    opts = RunOptions(seeds=seed_list(seeds, secret_seed), perf=perf and not sanitize, sanitize=sanitize,
                      timeout=timeout if timeout or not sanitize else 4 * ex.timeout_s)
    run(ex, prep, opts)
    return _finish(prep.result, t0)


def _bank_conflict_check(ex: Exercise, built: Prepared, result: Result) -> None:
    """Shared-memory bank conflicts of each of the learner's kernels over all untimed
    cases, counted per shared-memory instruction by Nsight Compute where it runs."""
    from . import ncu

    name = "bank conflicts (ncu)"
    if not ncu.available():
        result.add("work", name, "skip", "skipped: Nsight Compute (ncu) is not available here")
        return
    with tempfile.TemporaryDirectory(prefix="grader-ncu-") as tmp:
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps({"exercise": ex.id, "module_dir": built.module_dir,
                                   "module_name": built.module_name}))
        rows = ncu.profile_python(f"from grader.worker import call_once\ncall_once({str(cfg)!r})\n",
                                  ncu.BANK_CONFLICT_METRICS, kernels=built.kernels)
    counts = [(r["kernel"].split("(")[0], ncu.bank_conflicts(r, built.shared_access_bytes)) for r in rows or []]
    if not counts or any(c is None for _, c in counts):
        result.add("work", name, "skip", "skipped: ncu could not read the counters here")
        return
    per_kernel: dict[str, list[float]] = {}
    for kernel, (loads, stores) in counts:
        totals = per_kernel.setdefault(kernel, [0.0, 0.0])
        totals[0] += loads
        totals[1] += stores
    limit = ex.max_bank_conflicts
    worst = max(ld + st for ld, st in per_kernel.values())
    detail = "; ".join(f"{k}: {ld:,.0f} in shared loads, {st:,.0f} in shared stores" for k, (ld, st) in per_kernel.items())
    result.add("work", name, "pass" if worst <= limit else "fail",
               f"extra passes from bank conflicts over all untimed cases, at most {limit} allowed: {detail}")


def _finish(result: Result, t0: float) -> Result:
    result.seconds = time.perf_counter() - t0
    return result
