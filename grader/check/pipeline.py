"""`check(exercise)`: every check of one exercise, ending in a Result, never an exception.

Order: the source (readable, a `__global__` kernel, no forbidden calls, the fixed entry
points), the compiled SASS (no spills, register limit, the day's required instructions),
then on a GPU the build and an isolated process that runs the correctness cases, profiles
a call and times the performance cases (supervise.py, worker.py).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from .. import build as _build
from .. import config, toolchain
from .. import exercises as _exercises
from ..spec import Exercise
from .result import Result
from .static import sass_checks, static_checks
from .supervise import Prepared, RunOptions, run_worker


def secret_seed_from_env() -> int | None:
    v = os.environ.get("GRADER_SECRET_SEED")
    return int(v) if v else None


def default_source(ex: Exercise, solutions: bool | None = None) -> Path:
    """The learner's file, or the reference solution when asked
    (or when COURSE_USE_SOLUTIONS=1, as the GPU verification does)."""
    if solutions is None:
        solutions = os.environ.get("COURSE_USE_SOLUTIONS") == "1"
    return ex.solution_path if solutions else ex.stub_path


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
        run_worker(ex, prep, opts)
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
          seeds: int = config.PUBLIC_SEEDS, secret_seed: int | None = None, perf: bool = True,
          timeout: float | None = None, quiet: bool = False, sanitize: str | None = None) -> Result:
    """Grade one exercise. `source` defaults to the learner's file under kernels/.
    `sanitize` ("memcheck" or "racecheck") runs the small cases under compute-sanitizer instead."""
    t0 = time.perf_counter()
    ex = _exercises.get(exercise)
    path = Path(source) if source else default_source(ex, solutions)
    prep = prepare(ex, path, quiet=quiet)
    opts = RunOptions(seeds=seed_list(seeds, secret_seed), perf=perf and not sanitize, sanitize=sanitize,
                      timeout=timeout if timeout or not sanitize else config.SANITIZER_TIMEOUT_FACTOR * ex.timeout_s)
    run(ex, prep, opts)
    return _finish(prep.result, t0)


def _bank_conflict_check(ex: Exercise, built: Prepared, result: Result) -> None:
    """Shared-memory bank conflicts of each of the learner's kernels over all untimed
    cases, counted per shared-memory instruction by Nsight Compute where it runs."""
    from .. import ncu

    name = "bank conflicts (ncu)"
    if not ncu.available():
        result.add("work", name, "skip", "skipped: Nsight Compute (ncu) is not available here")
        return
    with tempfile.TemporaryDirectory(prefix="grader-ncu-") as tmp:
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps({"exercise": ex.id, "module_dir": built.module_dir,
                                   "module_name": built.module_name}))
        rows = ncu.profile_python(f"from grader.check.worker import call_once\ncall_once({str(cfg)!r})\n",
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
