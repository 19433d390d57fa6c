"""A kernel source as the grader reads it, and the content hash its builds are cached by."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..paths import display_path
from .errors import BuildError

# Compiler flags, the same for the torch extension and compile-only mode (part of every cache key).
NVCC_FLAGS = ["-O3", "-std=c++17", "-lineinfo"]
# torch's own nvcc flags (half operators off, relaxed constexpr): kept identical in
# compile-only mode so that what CI compiles is what a learner's GPU compiles.
TORCH_NVCC_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
]
# ... of which the course takes back, after them, the four that hide cuda_fp16.h's and cuda_bf16.h's
# operators and conversions: a course .cu includes no torch header, and `a * b` on two __half is right
# CUDA that plain nvcc compiles (vLLM's builds take them back too).
HALF_OPERATORS_BACK = ["-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                       "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"]

# A kernel file whose name ends in `_sm90a.cu` uses instructions that only the arch-specific
# target of compute capability 9.0 has (Hopper's wgmma and setmaxnreg: Day 10's v5). On a 9.0 GPU
# (H100, H200), and in compile-only mode (which compiles for the H200), such a file, and the one
# extension that holds it, compile for sm_90a instead of sm_90; for any other GPU, as usual.
ARCH_SPECIFIC = {"9.0": ("_sm90a.cu", "9.0a")}  # arch -> (file name suffix, its arch-specific target)


def target_arch(sources, arch: str) -> str:
    """The arch to compile `sources` (Sources or paths) for: the arch a Source carries (an exercise
    written for one arch-specific target, whatever its file is called: Exercise.arch_specific), else
    `arch`, or its arch-specific target ('9.0a') when one of the files asks for it by name."""
    fixed = {s.arch for s in sources if isinstance(s, Source) and s.arch}
    if fixed:
        return fixed.pop()
    suffix, specific = ARCH_SPECIFIC.get(arch, (None, arch))
    names = [s.path if isinstance(s, Source) else str(s) for s in sources]
    return specific if suffix and any(name.endswith(suffix) for name in names) else arch


@dataclass(frozen=True)
class Source:
    """One .cu file: where it shows in error messages, its text, and the arch it must be compiled for
    when that is fixed ('9.0a'; None: the GPU's, target_arch)."""
    path: str
    text: str
    arch: str | None = None

    @classmethod
    def read(cls, path: str | Path) -> "Source":
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"no such kernel file: {p}")
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise BuildError(display_path(p), f"the file is not UTF-8 text ({e.reason} at byte {e.start})") from None
        return cls(display_path(p), text)


def _as_sources(files) -> list[Source]:
    if isinstance(files, (str, Path, Source)):
        files = [files]
    return [f if isinstance(f, Source) else Source.read(f) for f in files]


def _header_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(paths.INCLUDE.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(paths.INCLUDE)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def content_hash(sources: list[Source], extra: list[str]) -> str:
    h = hashlib.sha256()
    for s in sources:
        h.update(s.path.encode() + b"\0" + s.text.encode() + b"\0")
    h.update(_header_digest().encode())
    h.update("\0".join(extra).encode())
    return h.hexdigest()[:16]
