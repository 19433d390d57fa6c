"""This machine's GPU and CPUs: whether there is a GPU (guessed from its device nodes, then asked of
torch), its compute capability (the arch to build for, asked of the driver), the mode a check runs in
(GPU or compile-only), and the CPUs this process may run on.

Everything here is cheap and cached: the notebooks and the grader ask these questions many times.
"""
from __future__ import annotations

import functools
import os
import threading
from pathlib import Path


# The architecture compiled for when there is no GPU to ask (the reference H200).
DEFAULT_ARCH = "9.0"


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


def mode() -> str:
    """'gpu' when kernels run, 'compile-only' when they are only compiled and inspected."""
    return "gpu" if has_gpu() else "compile-only"
