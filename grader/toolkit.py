"""The CUDA toolkit's tools: its root (CUDA_HOME), nvcc and its version, compute-sanitizer,
cuobjdump / nvdisasm / cu++filt, the headers a minimal toolkit lacks (linked into the build cache,
pyenv.cache_dir()), and the environment to run them in.

Everything here is cheap and cached: the notebooks and the grader ask these questions many times.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import threading
from pathlib import Path

from . import pyenv


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
    folder = pyenv.cache_dir() / "include-extra"
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
