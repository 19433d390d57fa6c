"""`check(exercise)`: every check of one exercise, ending in a Result, never an exception.

Order: the source (readable, a `__global__` kernel, no forbidden calls, the fixed entry
points), the compiled SASS (register limit, the day's required instructions; local memory reported),
then on a GPU the build and an isolated process that runs the correctness cases, profiles
a call and times the performance cases (supervise.py, worker.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from .. import jit as _build
from .. import config, machine, pyenv, toolkit
from .. import exercises as _exercises
from ..stubs import untouched_stub
from ..spec import Exercise
from .gate import GpuGate
from .result import UNTOUCHED_STUB, Result
from .static import link_checks, python_checks, sass_checks, static_checks
from .supervise import Prepared, RunOptions, WarmWorker, copy_module, isolate, run_worker, sanitize_max_bytes
from .worker_config import BuiltModule, DeviceVariable, Seed, WorkerConfig


def secret_seed_from_env() -> int | None:
    v = os.environ.get("GRADER_SECRET_SEED")
    return int(v) if v else None


def uses_solutions(solutions: bool | None = None) -> bool:
    """Whether the reference solutions stand for the learner's files: as asked, else COURSE_USE_SOLUTIONS=1
    (as the GPU verification and the executed notebooks do)."""
    return os.environ.get("COURSE_USE_SOLUTIONS") == "1" if solutions is None else solutions


def default_source(ex: Exercise, solutions: bool | None = None) -> Path:
    """The learner's file, or the reference solution (uses_solutions)."""
    return ex.solution_path if uses_solutions(solutions) else ex.stub_path


# The stages of a check's timing line that prepare() measures (class grading: its preparation processes)
CHECKS_STAGE, PROBE_STAGE = "source and SASS checks", "torch and the GPU probe (what the checks did not cover)"
LINKED_STAGE, CACHED_STAGE, TEMPLATE_STAGE = "extension linked", "extension (cached)", "template checks"
PREPARATION_STAGES = (CHECKS_STAGE, PROBE_STAGE, LINKED_STAGE, CACHED_STAGE, TEMPLATE_STAGE)


def prepare(ex: Exercise, path: Path, quiet: bool = True, display: str | None = None) -> Prepared:
    """Everything before the kernel runs: read, static checks, SASS, build. Needs no GPU to
    compile; builds the extension only where a GPU will run it. torch's import (has_gpu) runs
    beside the static and SASS checks, which need no torch: the mode is known at the end."""
    machine.start_gpu_probe()
    prep = _prepare(ex, path, quiet, display)
    prep.result.mode = machine.mode()
    return prep


def _prepare(ex: Exercise, path: Path, quiet: bool, display: str | None) -> Prepared:
    result = Result(ex.id, display or _build.display_path(path), "")  # (the mode: prepare())
    prep = Prepared(result)
    try:
        src = _build.Source.read(path)
    except FileNotFoundError:
        result.add("source", "readable", "fail", f"no such file: {display or path}")
        return prep
    except _build.BuildError as e:
        result.add("source", "readable", "fail", e.first_error)
        return prep
    except OSError as e:  # a directory, no permission, ...
        result.add("source", "readable", "fail", f"cannot read {display or path}: {e.strerror or e}")
        return prep
    if display:
        src = _build.Source(display, src.text)
    if untouched_stub(src.text, path):  # said first; the checks still run (the GPU verification's stubs)
        result.add("source", UNTOUCHED_STUB, "fail",
                   f"{src.path} is the exercise's stub as `grader release` generated it: nothing is written in it "
                   f"yet. Write your code where its TODO comments say, then check again")
    if ex.learner_file == "python":
        return _prepare_python(ex, src, prep, path)
    template = src
    if ex.learner_file == "template":
        src = _render(ex, template, result)
        if src is None:
            return prep
    src = ex.with_arch(src)  # an exercise's own target (sm_90a), or its oldest where this GPU is older
    t_checks = time.perf_counter()
    if not static_checks(ex, src, result):
        return prep
    report = sass_checks(ex, src, result)  # one nvcc call: the SASS and the host object that is linked
    result.add_time(CHECKS_STAGE, time.perf_counter() - t_checks)
    if any(i.group == "build" for i in result.failures):
        return prep
    if not link_checks(ex, src, result, report):  # what the host code links to and runs at load
        return prep
    if ex.learner_file == "template" and not _template_checks(ex, template, src, result):
        return prep
    if report:
        prep.shared_access_bytes = tuple(max(k.shared_access_bytes(op) for k in report.kernels)
                                         for op in ("LDS", "STS"))
        prep.uses_shared_memory = any(k.has_opcode(op) for k in report.kernels for op in SHARED_OPCODES)
    t_probe = time.perf_counter()
    gpu = machine.has_gpu()  # (torch's import and the CUDA probe, started beside the checks: what is left)
    waited = time.perf_counter() - t_probe
    if waited > 0.01:
        result.add_time(PROBE_STAGE, waited)
    if not gpu:
        if ex.learner_file == "template":
            result.add("build", CACHE_HIT, "skip", "skipped: no CUDA GPU here (compile-only mode): the extension "
                       "is built, and a repeat request timed, where a GPU runs it")
        for group in ("correctness", "work", "performance"):
            result.add(group, "run on a GPU", "skip", "skipped: no CUDA GPU here (compile-only mode)")
        return prep
    if not ex.runs_here(machine.arch()):
        why = (f"skipped: this exercise runs on a GPU of {ex.needs()}; this one is {machine.arch()}, so it was "
               f"compiled for sm_{ex.compile_arch(machine.arch()).replace('.', '')} and its SASS checked only")
        for group in ("correctness", "work", "performance"):
            result.add(group, "run on a GPU", "skip", why)
        return prep
    t_build = time.perf_counter()
    try:  # linked from the checked object (what runs is what was checked); never loaded here
        built = _build.build_checked(src, report.host_object if report else None, ex.build_name, quiet)
    except _build.BuildError as e:
        result.add("build", "torch extension", "fail", e.summary())
        return prep
    result.build_seconds = built.seconds
    result.add_time(LINKED_STAGE if not built.cached else CACHED_STAGE, time.perf_counter() - t_build)
    if ex.learner_file == "template":
        _cache_hit_check(ex, template, built, result)
    # The kernels the call may launch: those the compiled SASS holds (what was built, however it is
    # spelled), with the names read from the source where no demangler could read the SASS's.
    compiled = {k.name.split("<")[0].split("(")[0] for k in report.kernels} if report else set()
    prep.module_dir, prep.module_name = str(built.directory), built.name
    prep.kernels = sorted(compiled | set(built.kernels))
    prep.variables = [DeviceVariable(*v) for v in report.variables] if report else []
    return prep


def _render(ex: Exercise, template: _build.Source, result: Result) -> _build.Source | None:
    """A template exercise: the learner's Jinja2 template rendered by the exercise into the .cu
    source that is checked, built and run; a template error is a build failure with its line."""
    import jinja2

    try:
        text = ex.render(template.text)
    except jinja2.TemplateSyntaxError as e:
        result.add("build", "renders (Jinja2)", "fail", f"{template.path}:{e.lineno}: {e.message}")
        return None
    except Exception as e:  # any other Jinja2 error, a sandbox's refusal, the exercise's time limit
        result.add("build", "renders (Jinja2)", "fail", f"{template.path}: {type(e).__name__}: {e}")
        return None
    result.add("build", "renders (Jinja2)", "pass", f"{len(text.splitlines())} lines of CUDA rendered")
    return _build.Source(f"{template.path} (rendered)", text)


# A flag the build path must tell apart (FlashInfer compiles its kernels with it): the same source
# built with it is another module.
PROBE_FLAGS = ("--use_fast_math",)
CACHE_KEY, CACHE_HIT = "cache key", "cache hit"


def _template_checks(ex: Exercise, template: _build.Source, src: _build.Source, result: Result) -> bool:
    """A template exercise: the exercise's own checks of the template, then what the build cache
    needs of every template: a repeat request renders the very same source, fast, and finds the same
    module; a changed flag or an edited template finds another."""
    t0 = time.perf_counter()
    try:
        if ex.template_checks and not ex.template_checks(template.text, result):
            return False
        name = ex.build_name
        key = _build.module_name([src], name)
        t_again = time.perf_counter()
        again = _build.Source(src.path, ex.render(template.text))  # the same request once more
        key_again = _build.module_name([again], name)
        seconds = time.perf_counter() - t_again
        edited = _build.Source(src.path, ex.render(template.text + "\n// edited\n"))
    except Exception as e:  # rendering failed (a Jinja2 error, a sandbox's refusal, a time limit)
        result.add("build", CACHE_KEY, "fail", f"{template.path}: {type(e).__name__}: {e}")
        return False
    finally:
        result.add_time(TEMPLATE_STAGE, time.perf_counter() - t0)
    problems = []
    if again.text != src.text:
        line = next(i for i, (a, b) in enumerate(zip(again.text.splitlines() + [""], src.text.splitlines() + [""]), 1)
                    if a != b)
        problems.append(f"two renders of the same specialization differ (first at line {line} of the rendered "
                        "source): a cache keyed on the source would build it anew every time")
    elif key_again != key:
        problems.append("the same source got two keys: nothing would ever load from the cache")
    if _build.module_name([src], name, flags=PROBE_FLAGS) == key:
        problems.append(f"the key ignores the nvcc flags: a build with {' '.join(PROBE_FLAGS)} would load the "
                        "one made without")
    if _build.module_name([edited], name) == key:
        problems.append("the key ignores the source: an edited template would load the old build")
    if seconds >= ex.cache_hit_s:
        problems.append(f"rendering and hashing a repeat request took {seconds:.2f} s (at most {ex.cache_hit_s:g} s)")
    result.add("build", CACHE_KEY, "fail" if problems else "pass", "; ".join(problems) or
               f"a repeat request renders the same source and gets the same key, module {key} "
               f"({seconds * 1e3:.0f} ms); "
               f"{' '.join(PROBE_FLAGS)} and an edited template each get a module of their own")
    return True


def _cache_hit_check(ex: Exercise, template: _build.Source, built, result: Result) -> None:
    """On a GPU, after the build: the same request again (render, hash, find the built module)
    must load from the cache, within ex.cache_hit_s."""
    t0 = time.perf_counter()
    rendered = _build.Source(f"{template.path} (rendered)", ex.render(template.text))
    again = _build.build_checked(rendered, None, ex.build_name, quiet=True)  # (the compile: from its cache)
    seconds = time.perf_counter() - t0
    ok = again.cached and again.name == built.name and seconds < ex.cache_hit_s
    result.add("build", CACHE_HIT, "pass" if ok else "fail",
               f"a repeat request {'loaded from the cache' if again.cached else 'was built again'} in {seconds:.3f} s "
               f"(at most {ex.cache_hit_s:g} s)", {"seconds": seconds, "cached": again.cached})


def _prepare_python(ex: Exercise, src: _build.Source, prep: Prepared, path: Path) -> Prepared:
    """A Python-module exercise: its static checks and the kernels it builds on (ex.depends_on); the
    file is copied into the build cache under its content hash, where the isolated worker imports it
    (nothing runs here). Without a GPU the worker runs only the exercise's module_checks."""
    if not python_checks(ex, src, prep.result):
        return prep
    deps = _prepare_dependencies(ex, path, prep.result)
    if deps is None:
        return prep
    gpu = machine.has_gpu()
    if not gpu:
        for group in ("correctness", "work", "performance"):
            prep.result.add(group, "run on a GPU", "skip", "skipped: no CUDA GPU here (compile-only mode)")
        if ex.module_checks is None:
            return prep
        prep.cpu_only = True
    name = f"{ex.id.replace('.', '_')}_{hashlib.sha256(src.text.encode()).hexdigest()[:16]}"
    folder = pyenv.cache_dir() / "py" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(src.text, encoding="utf-8")
    prep.module_dir, prep.module_name, prep.deps = str(folder), name, deps
    return prep


def _prepare_dependencies(ex: Exercise, path: Path, result: Result) -> dict | None:
    """The learner files of the exercises a Python module builds on: the solutions when the module is
    the exercise's solution (or with COURSE_USE_SOLUTIONS=1), else the learner's own: the files beside the
    module in the same layout (a class submission's STUDENT/dayNN/, the course's kernels/dayNN/), or
    kernels/ where the submission has none. Each passes its source checks; on a GPU it is built (not loaded)
    and its objects link-checked. Returns {exercise id: its build} ({} without a GPU), or None on a failure."""
    solutions = uses_solutions(True if Path(path).resolve() == ex.solution_path.resolve() else None)
    built = {}
    for dep_id in ex.depends_on:
        dep = _exercises.get(dep_id)
        beside = Path(path).resolve().parent.parent / dep.day / dep.stub_path.name
        dep_path = beside if not solutions and beside.is_file() else default_source(dep, solutions)
        label = f"uses {dep_id} ({_build.display_path(dep_path)})"
        scratch = Result(dep.id, str(dep_path), result.mode)
        try:
            dep_src = dep.graded_source(dep_path)
        except (OSError, _build.BuildError) as e:
            result.add("source", label, "fail", f"cannot read it: {e}")
            return None
        if not static_checks(dep, dep_src, scratch):
            result.add("source", label, "fail", "; ".join(i.detail for i in scratch.failures)[:500])
            return None
        if machine.has_gpu():
            try:  # compiled once, its object checked, then linked from it (as an exercise's own file)
                report = _build.compile_cubin(dep_src, host_object=True)
                if not link_checks(dep, dep_src, scratch, report):
                    result.add("source", label, "fail", "; ".join(i.detail for i in scratch.failures)[:500])
                    return None
                b = _build.build_checked(dep_src, report.host_object, dep.build_name)
            except _build.BuildError as e:
                result.add("build", label, "fail", e.summary())
                return None
            built[dep_id] = BuiltModule(str(b.directory), b.name)
        result.add("source", label, "pass", "its source checks pass" + ("; built" if dep_id in built else ""))
    return built


def run(ex: Exercise, prep: Prepared, opts: RunOptions, warm: tuple[WarmWorker, WarmWorker] | None = None,
        ncu_run=None, warm_sanitizers: dict | None = None) -> Result:
    """Run a prepared submission on the GPU in its own process (if it built); then, if it ran
    clean, the small cases under opts.sanitizers, and ncu's bank-conflict count. `warm`: two
    processes started beforehand, one for everything but the "kernels launched" check, then one
    for that check, after the others (its profiler must not slow them); or one, for all of it. `ncu_run`: the bank-conflict count's
    process, started beforehand (_start_bank_conflict_run); the caller cancels it if it is not used.
    `warm_sanitizers`: {tool: WarmWorker(sanitize=tool)} started beforehand, taken if that tool runs
    (the caller discards what was used: WarmWorker.used)."""
    if prep.module_dir and prep.cpu_only:  # no GPU: a Python module's own checks, nothing else
        run_worker(ex, prep, opts)
    elif prep.module_dir:
        # ncu's Python starts now (if not already) and gets ready while the kernel runs; it profiles
        # after the cases and the timing.
        pending = ncu_run or (_start_bank_conflict_run(opts) if ex.max_bank_conflicts is not None else None)
        try:
            launches = None  # the "kernels launched" check's own process, where it has one: run last
            if warm is None or len(warm) == 1:  # one process: the "kernels launched" check last in it
                run_worker(ex, prep, opts, warm=warm[0] if warm else None)
            elif run_worker(ex, prep, opts, warm=warm[0], part="no launches"):
                launches = warm[1]
            ran_clean = not any(i.group == "correctness" and i.status == "fail" for i in prep.result.items)
            if ran_clean:  # never sanitize or profile a hanging or crashing kernel
                for tool in opts.sanitizers:
                    if tool == "memcheck" or prep.uses_shared_memory:
                        sanitizer_stage(ex, prep, opts, tool, (warm_sanitizers or {}).get(tool))
                if ex.max_bank_conflicts is not None:
                    t0 = time.perf_counter()
                    # ncu cannot pause between cases: no timing runs beside it (class grading's lanes)
                    with GpuGate(opts.gate).holding(pending.folder) if opts.gate and pending else nullcontext():
                        _bank_conflict_check(ex, prep, prep.result, pending)
                    pending = None
                    prep.result.add_time("bank conflicts (ncu)", time.perf_counter() - t0)
            if launches is not None:  # last: its process, CUPTI started, is the last one ready
                run_worker(ex, prep, opts, warm=launches, part="launches")
        finally:
            if pending is not None:
                pending.cancel()
    return prep.result


# Shared-memory loads and stores, and block barriers: where a race can hide (racecheck's job).
SHARED_OPCODES = ("LDS", "STS", "BAR", "ATOMS", "LDSM")


def sanitizer_stage(ex: Exercise, prep: Prepared, opts: RunOptions, tool: str, warm: WarmWorker | None = None) -> None:
    """The small cases once more under compute-sanitizer `tool`, one seed, and its verdict as a
    work check. Cached per build (a hash of the source, headers, flags and torch) and exercise
    spec, so a class of identical submissions pays once; the seconds it cost are in its metrics.
    `warm`: a process already started under that tool (not used where the verdict is cached)."""
    name = f"compute-sanitizer {tool}"
    spec_hash = hashlib.sha256(ex.spec_path.read_bytes()).hexdigest()[:12]
    cap = sanitize_max_bytes(replace(opts, sanitize=tool))
    cached = pyenv.cache_dir() / "sanitizer" / f"{prep.module_name}-{ex.id}-{spec_hash}-{tool}-{cap}.json"
    if cached.exists():
        item = json.loads(cached.read_text())
        prep.result.add("work", name, item["status"], item["detail"], dict(item["metrics"], cached=True))
        return
    t0 = time.perf_counter()
    scratch = Result(ex.id, prep.result.source, prep.result.mode)
    sub = replace(opts, seeds=opts.seeds[:1], perf=False, sanitize=tool, sanitizers=(), calibrated=None,
                  timeout=config.SANITIZER_TIMEOUT_FACTOR * (opts.timeout or ex.timeout_s))
    run_worker(ex, prep, sub, scratch, warm=warm)
    seconds = time.perf_counter() - t0
    verdict = next((i for i in scratch.items if i.name == name), None)
    if verdict is None:  # it hung or died under the sanitizer: say what the run said
        fail = next((i for i in scratch.failures), None)
        status, detail = "fail", f"under compute-sanitizer {tool}: " + (fail.detail if fail else "no verdict")
    else:
        status, detail = verdict.status, verdict.detail
    metrics = {"seconds": seconds, "cached": False}
    prep.result.add("work", name, status, detail, metrics)
    prep.result.add_time(name, seconds)
    if status != "skip":
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")  # whole or not at all: another GPU's slot may read it
        tmp.write_text(json.dumps({"status": status, "detail": detail, "metrics": metrics}))
        tmp.replace(cached)


def seed_list(seeds: int, secret_seed: int | None) -> list[Seed]:
    out = [Seed(str(s), s) for s in range(seeds)]
    secret = secret_seed if secret_seed is not None else secret_seed_from_env()
    if secret is not None:
        out.append(Seed("secret", secret))
    return out


def run_prepared(ex: Exercise, prep: Prepared, opts: RunOptions, warm=None, ncu_run=None,
                 warm_sanitizers=None) -> Prepared:
    """check()'s default `run_step`: run the prepared submission once (pipeline.run); the Prepared whose
    result is the verdict."""
    run(ex, prep, opts, warm, ncu_run, warm_sanitizers=warm_sanitizers)
    return prep


def check(exercise: str, source: str | Path | None = None, solutions: bool | None = None,
          seeds: int = config.PUBLIC_SEEDS, secret_seed: int | None = None, perf: bool = True,
          timeout: float | None = None, quiet: bool = False, sanitize: str | None = None,
          sanitizers: tuple[str, ...] | None = None, run_step=run_prepared) -> Result:
    """Grade one exercise. `source` defaults to the learner's file under kernels/.
    `sanitize` ("memcheck" or "racecheck") runs the small cases under compute-sanitizer instead;
    `sanitizers` runs them under these tools too, after a clean run (as class grading does; default
    config.CHECK_SANITIZERS where compute-sanitizer is installed and a GPU is present).
    `run_step(ex, prep, opts, warm, ncu_run, warm_sanitizers)` runs the prepared submission and returns
    the Prepared whose result is the verdict (default: once; shared_gpu.check_sharing_gpu passes its own)."""
    t0, t0_wall = time.perf_counter(), time.time()
    machine.start_gpu_probe()  # torch's import, beside the grading processes' start and the checks
    ex = _exercises.get(exercise)
    path = Path(source) if source else default_source(ex, solutions)
    learner_default = sanitizers is None
    if learner_default:
        sanitizers = config.CHECK_SANITIZERS if toolkit.compute_sanitizer() and machine.gpu_present() else ()
    opts = RunOptions(seeds=seed_list(seeds, secret_seed), perf=perf and not sanitize, sanitize=sanitize,
                      sanitizers=() if sanitize else tuple(sanitizers),
                      timeout=timeout if timeout or not sanitize else config.SANITIZER_TIMEOUT_FACTOR * ex.timeout_s,
                      sanitize_max_bytes=config.CHECK_SANITIZE_MAX_BYTES if learner_default else None)
    # The grading processes start now, beside the static checks and the build, so that their torch,
    # CUDA context and profiler are ready when the module is; not for a Python module (its dependencies
    # must be in view from the start) nor under compute-sanitizer. The launch check's process makes its
    # context after the first one's, and its check runs last: ahead of the timing it held the verdict
    # back by seconds (docs/decisions.md, "a learner's check: grading processes").
    warm, ncu_run, warm_sanitizers = None, None, {}
    t_warm = time.perf_counter()
    if ex.learner_file != "python" and not sanitize and machine.gpu_present():
        first = WarmWorker(opts)
        warm = (first, WarmWorker(opts, profiler=True, after=first))
        if ex.max_bank_conflicts is not None:
            ncu_run = _start_bank_conflict_run(opts)
        # the sanitizers' processes start now too (an interpreter and torch under the sanitizer take
        # seconds), making their CUDA contexts after the first one's; they run the small cases after a
        # clean run (racecheck's only where the SASS has shared memory: else it is discarded unused)
        warm_sanitizers = {tool: WarmWorker(opts, sanitize=tool, after=first) for tool in opts.sanitizers}
    t_warm = time.perf_counter() - t_warm
    try:
        prep = prepare(ex, path, quiet=quiet)
        prep = run_step(ex, prep, opts, warm, ncu_run, warm_sanitizers)
    finally:
        t_stop = time.perf_counter()
        for label, w in zip(("grading process", "launch check's process"), warm or ()):
            prep.result.background[label] = {stage: round(t - t0_wall, 2) for stage, t in w.stages().items()}
            w.discard()
        for w in warm_sanitizers.values():
            w.discard()  # (a no-op where it ran)
        if ncu_run is not None:
            ncu_run.cancel()  # (a no-op where it ran)
    if warm:
        prep.result.add_time("early processes stopped", time.perf_counter() - t_stop)
        prep.result.add_time("grading processes launched", t_warm)
    result = _finish(prep.result, t0)
    # what no stage above accounts for (reading the source, the checks' own bookkeeping, waits between)
    result.add_time("other", max(0.0, result.seconds - sum(result.timings.values())))
    return result


def _start_bank_conflict_run(opts: RunOptions):
    """The process that counts bank conflicts (ncu over each untimed case once), started and waiting
    for a module (ncu.Pending), or None where ncu cannot run. It can see only its own folder
    (the sandbox): the module and its config go there when its turn comes."""
    from .. import ncu

    # Called where a GPU is present. It loads and runs the submission: in the sandbox, as the worker does.
    return ncu.start_python(
        "from grader.check.worker import call_once\ncall_once('config.json')\n", ncu.BANK_CONFLICT_METRICS,
        isolate=lambda argv, env, scratch: isolate(argv, env, scratch, hide=opts.hide))


def _bank_conflict_check(ex: Exercise, built: Prepared, result: Result, started) -> None:
    """Shared-memory bank conflicts of each of the learner's kernels over all untimed cases,
    counted per shared-memory instruction by Nsight Compute where it runs (the run `started` by
    _start_bank_conflict_run)."""
    from .. import ncu

    name = "bank conflicts (ncu)"
    if started is None:
        result.add("work", name, "skip", "skipped: Nsight Compute (ncu) is not available here")
        return
    module = copy_module(built.module_dir, started.folder)
    (started.folder / "config.json").write_text(
        WorkerConfig(exercise=ex.id, module_dir=module, module_name=built.module_name).to_json())
    rows = started.go()
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
