"""The Python processes the grader starts: their environment, the build cache folder, PyTorch's
location and features, precompiled bytecode.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from . import paths


class _NoCudaRuntimeNotice:
    """torch.utils.cpp_extension logs "No CUDA runtime is found, using CUDA_HOME=..." on every
    import on a machine without a GPU: compile-only mode, which the course states itself."""

    def filter(self, record) -> bool:
        return not str(record.msg).startswith("No CUDA runtime is found")


def import_file(name: str, path: str | Path):
    """The Python file at `path` imported as module `name`, entered in sys.modules while it runs, as an
    import does (dataclasses read string annotations from there)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def quiet_torch_notices() -> None:
    """Drop that one notice (only it) from the logger torch uses, before torch is imported."""
    import logging

    log = logging.getLogger("torch.utils.cpp_extension")
    if not any(isinstance(f, _NoCudaRuntimeNotice) for f in log.filters):
        log.addFilter(_NoCudaRuntimeNotice())


def cache_dir() -> Path:
    """Root of the course's build cache (one folder per content hash)."""
    env = os.environ.get("COURSE_CACHE_DIR")
    if env:
        base = Path(env)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cuda-course"
    base.mkdir(parents=True, exist_ok=True)
    return base


@functools.lru_cache(maxsize=None)
def torch_dir() -> str | None:
    """The folder of the installed torch package, found without importing it (an import costs
    seconds: a check needs the folder long before it needs torch)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


@functools.lru_cache(maxsize=None)
def load_inline_features() -> dict[str, bool]:
    """Which optional load_inline arguments the installed torch has.
    The GPU machine has torch 2.11, CI installs a newer one: never assume."""
    import inspect

    from torch.utils import cpp_extension

    params = inspect.signature(cpp_extension.load_inline).parameters
    return {name: name in params for name in ("no_implicit_headers", "use_pch")}


def subprocess_env(root: str | Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for a Python subprocess that imports the grader from `root`
    (the course root by default; class grading passes a copy without solutions/)."""
    path = str(root or paths.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=path, **extra)


def grading_env(root: str | Path | None = None, **extra: str) -> dict[str, str]:
    """subprocess_env() for a grading process (and the other short ones that import torch to run a
    kernel: calibration, ncu's): torch's CPU threads as a grading process uses them
    (config.WORKER_CPU_THREADS, unless set), and the bytecode cache where the install keeps none
    (bytecode_prefix())."""
    from . import config

    env = subprocess_env(root)
    env.setdefault("OMP_NUM_THREADS", str(config.WORKER_CPU_THREADS))
    prefix = bytecode_prefix()
    if prefix is not None and prefix.is_dir():
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
    env.update(extra)
    return env


def bytecode_prefix() -> Path | None:
    """Where Python subprocesses read their bytecode from, when the install keeps none next to
    torch's sources (a container with PYTHONDONTWRITEBYTECODE=1 and packages installed without
    it, as on the course's GPU hosts): each grading process then compiled torch's Python afresh,
    5.5 of its 6 CPU-seconds of `import torch` on an H100 host, and CUPTI's start 4-6 s more (1.3 s
    from bytecode). None where torch's bytecode is there (a usual pip or conda install); the
    caller's own PYTHONPYCACHEPREFIX where it set one. Filled by write_bytecode(). (Not cached: the
    build cache may move, as the self-test and the class benchmark move it.)"""
    if sys.pycache_prefix:
        return Path(sys.pycache_prefix)
    torch = torch_dir()
    if torch is None or (Path(torch) / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc").exists():
        return None
    return cache_dir() / "bytecode"


# What a grading process imports (compiled by write_bytecode(); what it misses is compiled as before).
BYTECODE_MODULES = ("torch", "torch.profiler", "torch.autograd.profiler_util", "torch.utils.cpp_extension",
                    "grader.check.worker", "grader.check.compare", "grader.check.stats", "grader.check.poison",
                    "grader.check.gate", "grader.bench", "grader.exercises", "jinja2")


def torch_bytecode_written() -> bool:
    """Whether a grading process finds torch's bytecode: in the install, or written under bytecode_prefix()
    (once per install, by write_bytecode). Where not, grading processes started now would each compile
    torch's Python afresh (seconds each)."""
    prefix = bytecode_prefix()
    if prefix is None:
        return True
    torch = torch_dir()
    return torch is not None and (prefix / os.path.abspath(torch).lstrip(os.sep) /
                                  f"__init__.{sys.implementation.cache_tag}.pyc").exists()


def write_bytecode(root: str | Path | None = None, modules=BYTECODE_MODULES, gpu: bool = True) -> float | None:
    """Compile what a grading process imports (`modules`, the grader from `root`, every exercise's
    module; with the worker among them and `gpu`, what the profiler's first session imports, where there is a
    GPU: most of CUPTI's start in a grading process was compiling those) into bytecode_prefix(), once per install
    (Python rewrites only what changed): seconds taken, or None where nothing is needed. One writer
    at a time; a failure leaves things as before."""
    import fcntl
    import time

    prefix = bytecode_prefix()
    if prefix is None:
        return None
    t0 = time.perf_counter()
    prefix.mkdir(parents=True, exist_ok=True)
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) + \
        "if 'grader.exercises' in sys.modules:\n    sys.modules['grader.exercises'].all_exercises()\n" + \
        ("if 'grader.check.worker' in sys.modules:\n    sys.modules['grader.check.worker'].warm_up(profiler=True)\n"
         if gpu else "")
    env = {k: v for k, v in grading_env(root).items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    with open(cache_dir() / "bytecode.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=600)
        except (OSError, subprocess.SubprocessError):
            pass
    return time.perf_counter() - t0


def python_info() -> str:
    return sys.version.split()[0]
