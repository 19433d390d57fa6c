"""Where the course's tools are and what this machine can do.

Everything here is cheap and cached: the notebooks and the grader ask these
questions many times.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from . import paths

# The architecture compiled for when there is no GPU to ask (the reference H200).
DEFAULT_ARCH = "9.0"


class _NoCudaRuntimeNotice:
    """torch.utils.cpp_extension logs "No CUDA runtime is found, using CUDA_HOME=..." on every
    import on a machine without a GPU: compile-only mode, which the course states itself."""

    def filter(self, record) -> bool:
        return not str(record.msg).startswith("No CUDA runtime is found")


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
def cuda_home() -> Path | None:
    """The CUDA toolkit root. Set CUDA_HOME for torch too: its own guess takes the
    parent of whatever `nvcc` is first on PATH, which is wrong for wrapper scripts."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    for c in candidates:
        if c and (Path(c) / "bin" / "nvcc").exists() and (Path(c) / "include" / "cuda_runtime.h").exists():
            os.environ["CUDA_HOME"] = c
            return Path(c)
    return None


@functools.lru_cache(maxsize=None)
def compute_sanitizer() -> str | None:
    """compute-sanitizer's path (the CUDA toolkit's, else the first on PATH), or None."""
    home = cuda_home()
    if home and (home / "bin" / "compute-sanitizer").exists():
        return str(home / "bin" / "compute-sanitizer")
    return shutil.which("compute-sanitizer")


def nvcc_path() -> str | None:
    home = cuda_home()
    return str(home / "bin" / "nvcc") if home else shutil.which("nvcc")


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str | None:
    nvcc = nvcc_path()
    if not nvcc:
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "release" in line:
            return line.split("release")[1].split(",")[0].strip()
    return None


@functools.lru_cache(maxsize=None)
def binary_tool(name: str) -> str | None:
    """cuobjdump / nvdisasm: the toolkit's, else PyPI's nvidia-cuda-cuobjdump
    (which CPU-only machines get from this project's dependencies)."""
    home = cuda_home()
    places = [home / "bin" / name] if home else []
    try:
        import nvidia  # namespace package of NVIDIA's PyPI wheels

        for base in nvidia.__path__:
            places += sorted(Path(base).glob(f"cu*/bin/{name}"))
            places += sorted(Path(base).glob(f"*/bin/{name}"))
    except ImportError:
        pass
    for p in places:
        if p.exists():
            return str(p)
    return shutil.which(name)


@functools.lru_cache(maxsize=None)
def extra_include_dirs() -> list[str]:
    """Headers the course uses that a minimal CUDA toolkit (nvcc alone, as on CI) lacks: curand's
    device API (curand_kernel.h: Philox for the samplers), taken from PyPI's nvidia-curand that
    torch installs. Only the curand*.h files are linked into a folder of their own, so no other
    header of another CUDA version can shadow the toolkit's."""
    home = cuda_home()
    if home is None or (home / "include" / "curand_kernel.h").exists():
        return []
    try:
        import nvidia

        found = [h for base in nvidia.__path__ for h in sorted(Path(base).glob("*/include/curand_kernel.h"))]
    except ImportError:
        found = []
    if not found:
        return []
    folder = cache_dir() / "include-extra"
    folder.mkdir(parents=True, exist_ok=True)
    for header in found[0].parent.glob("curand*.h"):
        link = folder / header.name
        if link.is_symlink() and os.readlink(link) == str(header):
            continue
        # A link left by another environment (a .venv made again elsewhere) dangles or points at other
        # headers: replace it, atomically, since several builds may get here at once.
        tmp = folder / f".{header.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(header)
        os.replace(tmp, link)
    return [str(folder)]


def tool_env() -> dict[str, str]:
    """Environment for running cuobjdump: it finds nvdisasm on PATH."""
    env = dict(os.environ)
    nvdisasm = binary_tool("nvdisasm")
    if nvdisasm:
        env["PATH"] = str(Path(nvdisasm).parent) + os.pathsep + env.get("PATH", "")
    return env


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity (a Slurm job's or a container's cpuset, taskset),
    which os.cpu_count() ignores (it counts the whole host's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # (no affinity on this platform)
        return os.cpu_count() or 1


def gpu_present() -> bool:
    """A guess without importing torch: an NVIDIA device node (Linux) or WSL's GPU device exists.
    For starting work early only; has_gpu() decides."""
    if os.environ.get("COURSE_FORCE_CPU") == "1":
        return False
    return any(Path("/dev").glob("nvidia[0-9]*")) or Path("/dev/dxg").exists()


@functools.lru_cache(maxsize=None)
def torch_dir() -> str | None:
    """The folder of the installed torch package, found without importing it (an import costs
    seconds: a check needs the folder long before it needs torch)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


_probe: threading.Thread | None = None


def start_gpu_probe() -> None:
    """Start has_gpu() (torch's import and the CUDA probe: seconds) in a thread, so that the caller
    goes on meanwhile with work that needs neither (a check's static and SASS checks; arch() asks
    the driver); its own has_gpu() later waits only for what is left. Once per process."""
    global _probe
    if _probe is None and has_gpu.cache_info().currsize == 0:
        _probe = threading.Thread(target=has_gpu, name="gpu probe", daemon=True)
        _probe.start()


@functools.lru_cache(maxsize=None)
def has_gpu() -> bool:
    """True when torch sees a CUDA device. COURSE_FORCE_CPU=1 pretends there is none."""
    if os.environ.get("COURSE_FORCE_CPU") == "1":
        return False
    try:
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)
    except Exception:
        return False


def _driver_capability() -> str | None:
    """Device 0's compute capability from the CUDA driver (libcuda, through ctypes): no torch import,
    which costs seconds. None where there is no driver or it has no device."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if lib.cuInit(0) != 0 or lib.cuDeviceGet(ctypes.byref(dev), 0) != 0:
        return None
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76
    if lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) or lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev):
        return None
    return f"{major.value}.{minor.value}"


@functools.lru_cache(maxsize=None)
def arch() -> str:
    """Compute capability to build for, e.g. '9.0': the GPU's (asked of the driver, so that a
    compile need not wait for torch's import), else sm_90."""
    if gpu_present():
        cap = _driver_capability()
        if cap:
            return cap
    if has_gpu():
        import torch

        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}"
    return DEFAULT_ARCH


def sm(arch_str: str | None = None) -> str:
    """'9.0' -> 'sm_90'."""
    return "sm_" + (arch_str or arch()).replace(".", "")


@functools.lru_cache(maxsize=None)
def load_inline_features() -> dict[str, bool]:
    """Which optional load_inline arguments the installed torch has.
    The GPU machine has torch 2.11, CI installs a newer one: never assume."""
    import inspect

    from torch.utils import cpp_extension

    params = inspect.signature(cpp_extension.load_inline).parameters
    return {name: name in params for name in ("no_implicit_headers", "use_pch")}


def mode() -> str:
    """'gpu' when kernels run, 'compile-only' when they are only compiled and inspected."""
    return "gpu" if has_gpu() else "compile-only"


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
