"""Build course kernels: as a torch extension (load_inline), or compile-only to SASS.

* `build(files)` compiles `.cu` files plus a generated binding with
  `torch.utils.cpp_extension.load_inline`. The module name is a hash of every
  input (sources, course headers, flags, torch, arch), so an edited kernel always
  rebuilds, an unchanged one loads from the cache in well under a second, and a
  failed build leaves nothing behind.
* `compile_cubin(file)` runs nvcc to an sm_90 cubin with `-Xptxas -v` and
  disassembles it with cuobjdump: registers, shared memory, spills and SASS,
  no GPU needed.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import toolchain
from .exports import Export, generate_binding, global_kernel_names, parse_exports

BINDING_VERSION = "3"  # bump when generate_binding's output changes
NVCC_FLAGS = ["-O3", "-std=c++17", "-lineinfo"]
# torch's own nvcc flags (half operators off, relaxed constexpr): kept identical in
# compile-only mode so that what CI compiles is what a learner's GPU compiles.
TORCH_NVCC_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
]
SLOW_BUILD_NOTICE_S = 2.0


class BuildError(RuntimeError):
    """A build failed. `first_error` is the compiler's first error, `file`/`line`
    where it points, `excerpt` the source around it, `log` the full output."""

    def __init__(self, what: str, first_error: str, file: str | None = None, line: int | None = None,
                 excerpt: str = "", log: str = ""):
        self.what, self.first_error, self.file, self.line = what, first_error, file, line
        self.excerpt, self.log = excerpt, log
        super().__init__(self.summary())

    def summary(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else ""
        text = f"{self.what} failed to build.\n{where}{self.first_error}"
        if self.excerpt:
            text += "\n" + self.excerpt
        return text

    def _render_traceback_(self):  # IPython shows this instead of a long traceback
        return ["BuildError: " + self.summary()]


# --------------------------------------------------------------------- sources
@dataclass(frozen=True)
class Source:
    """One .cu file: where it shows in error messages, and its text."""
    path: str
    text: str

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


def display_path(p: str | Path) -> str:
    """A path relative to the course root when it is inside it."""
    p = Path(p).resolve()
    try:
        return str(p.relative_to(toolchain.ROOT))
    except ValueError:
        return str(p)


def _as_sources(files) -> list[Source]:
    if isinstance(files, (str, Path, Source)):
        files = [files]
    return [f if isinstance(f, Source) else Source.read(f) for f in files]


def _header_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(toolchain.INCLUDE.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(toolchain.INCLUDE)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def content_hash(sources: list[Source], extra: list[str]) -> str:
    h = hashlib.sha256()
    for s in sources:
        h.update(s.path.encode() + b"\0" + s.text.encode() + b"\0")
    h.update(_header_digest().encode())
    h.update("\0".join(extra).encode())
    return h.hexdigest()[:16]


# ----------------------------------------------------------- errors, progress
_NVCC_ERR = re.compile(r"^(?P<file>[^\s(][^(\n]*)\((?P<line>\d+)\): (?:catastrophic )?error\b:?\s*(?P<msg>.*)$", re.M)
_GCC_ERR = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?error:\s*(?P<msg>.*)$", re.M)
_OTHER_ERR = re.compile(r"^.*(?:ptxas fatal|ptxas error|undefined reference|nvlink error|error:).*$", re.M)


def _excerpt(sources: list[Source], file: str, line: int, context: int = 2) -> str:
    text = next((s.text for s in sources if s.path == file or file.endswith(s.path)), None)
    if text is None and Path(file).exists():
        text = Path(file).read_text(errors="replace")
    if text is None:
        return ""
    lines = text.splitlines()
    lo, hi = max(1, line - context), min(len(lines), line + context)
    return "\n".join(f"{'>' if i == line else ' '} {i:4d} | {lines[i - 1]}" for i in range(lo, hi + 1))


def parse_first_error(log: str, sources: list[Source], what: str) -> BuildError:
    """Turn a wall of ninja/nvcc/g++ output into its first error, with file and line."""
    hits = []
    for rx in (_NVCC_ERR, _GCC_ERR):
        m = rx.search(log)
        if m:
            hits.append(m)
    if hits:
        m = min(hits, key=lambda m: m.start())
        file, line = m.group("file").strip(), int(m.group("line"))
        return BuildError(what, m.group("msg").strip(), display_path(file) if os.path.isabs(file) else file,
                          line, _excerpt(sources, file, line), log)
    m = _OTHER_ERR.search(log)
    first = m.group(0).strip() if m else (log.strip().splitlines() or ["(no compiler output)"])[-1]
    return BuildError(what, first, log=log)


class _Progress:
    """Prints a line when a build runs longer than a couple of seconds, and its time at the end."""

    def __init__(self, what: str, quiet: bool):
        self.what, self.quiet, self.t0 = what, quiet, time.perf_counter()
        self._done = threading.Event()
        self._announced = False
        self._timer = threading.Timer(SLOW_BUILD_NOTICE_S, self._announce)
        self._timer.daemon = True

    def _announce(self):
        if not self._done.is_set() and not self.quiet:
            self._announced = True
            print(f"Building {self.what} (nvcc + g++, cached afterwards)...", flush=True)

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._timer.cancel()
        self.seconds = time.perf_counter() - self.t0
        if self._announced and exc[0] is None:
            print(f"Built {self.what} in {self.seconds:.1f} s.", flush=True)


# ------------------------------------------------------------ torch extension
@dataclass
class Built:
    """A built extension: the Python module, its exports, and what it cost."""
    module: object
    name: str
    directory: Path
    exports: list[Export]
    kernels: list[str]
    seconds: float
    cached: bool

    def __getattr__(self, item):
        return getattr(self.module, item)


_loaded: dict[str, Built] = {}
_build_lock = threading.Lock()


def _cuda_cflags(arch: str) -> list[str]:
    num = arch.replace(".", "")
    return NVCC_FLAGS + [f"-gencode=arch=compute_{num},code=sm_{num}"]


def build(files, name: str = "course", quiet: bool = False) -> Built:
    """Compile `.cu` files (paths or Sources) and the generated binding into one
    torch extension; return it with its entry points as attributes."""
    sources = _as_sources(files)
    what = name if len(sources) > 1 else sources[0].path
    exports: list[Export] = []
    kernels: list[str] = []
    for s in sources:
        try:
            exports += parse_exports(s.text, s.path)
        except ValueError as e:
            raise BuildError(what, str(e)) from None
        kernels += global_kernel_names(s.text)
    if not exports:
        raise BuildError(what, "no entry point: mark the host function Python calls with COURSE_EXPORT")

    import torch
    from torch.utils import cpp_extension

    t_start = time.perf_counter()  # hashing + loading or building, what a cached "build" costs
    toolchain.cuda_home()
    arch = toolchain.arch()
    features = toolchain.load_inline_features()
    binding = generate_binding(exports)
    key = content_hash(sources, [binding, BINDING_VERSION, torch.__version__, str(torch.version.cuda),
                                 arch, " ".join(_cuda_cflags(arch) + TORCH_NVCC_FLAGS), str(features)])
    module_name = f"{re.sub(r'[^A-Za-z0-9_]', '_', name)}_{key}"
    if module_name in _loaded:
        return _loaded[module_name]
    build_dir = toolchain.cache_dir() / "ext" / module_name
    if (build_dir / f"{module_name}.so").exists():
        # Same hash, same inputs: import the built module without asking ninja.
        module = load_built(build_dir, module_name)
        built = Built(module, module_name, build_dir, exports, kernels, time.perf_counter() - t_start, True)
        _loaded[module_name] = built
        return built
    build_dir.mkdir(parents=True, exist_ok=True)

    # #line makes nvcc report errors against the real file and line.
    cuda_text = "\n".join(f'#line 1 "{s.path}"\n{s.text}' for s in sources)
    kwargs = dict(
        name=module_name, cpp_sources=[binding], cuda_sources=[cuda_text],
        extra_cuda_cflags=_cuda_cflags(arch), extra_include_paths=[str(toolchain.INCLUDE)],
        build_directory=str(build_dir), verbose=False,
    )
    if features["no_implicit_headers"]:
        kwargs["no_implicit_headers"] = True  # keeps torch out of the .cu: nvcc stays fast
    torch_include = Path(torch.__file__).parent / "include" / "torch"
    if features["use_pch"] and os.access(torch_include, os.W_OK):
        kwargs["use_pch"] = True  # precompiled torch/extension.h (written next to it) for the binding
    with _build_lock, _Progress(what, quiet) as progress, _pch_lock(torch_include, kwargs.get("use_pch")):
        try:
            module = cpp_extension.load_inline(**kwargs)
        except RuntimeError as e:
            shutil.rmtree(build_dir, ignore_errors=True)  # a failed build never sticks
            raise parse_first_error(str(e), sources, what) from None
        except Exception:
            shutil.rmtree(build_dir, ignore_errors=True)
            raise
    built = Built(module, module_name, build_dir, exports, kernels, progress.seconds, False)
    _loaded[module_name] = built
    return built


class _pch_lock:
    """The precompiled header is one file shared by every build of this torch install: while
    it does not exist yet, builds in other processes (a parallel class grading, say) wait for
    the one that makes it, instead of all writing it at once."""

    def __init__(self, torch_include: Path, use_pch: bool | None):
        self.needed = bool(use_pch) and not (torch_include / "extension.h.gch").exists()
        self.f = None

    def __enter__(self):
        if self.needed:
            import fcntl

            self.f = open(toolchain.cache_dir() / "pch.lock", "w")
            fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.f:
            self.f.close()  # releases the lock


def day_files(day: str) -> list[Path]:
    """A day's kernel versions: kernels/dayNN/*.cu except the exercise files."""
    exercises = {p.name for p in (toolchain.SOLUTIONS / day).glob("*.cu")}
    return sorted(p for p in (toolchain.KERNELS / day).glob("*.cu") if p.name not in exercises)


def build_day(day: str, quiet: bool = False) -> Built:
    """All of a day's kernel versions in one extension, as its notebook uses them."""
    return build(day_files(day), name=day, quiet=quiet)


def load_built(directory: str | Path, module_name: str):
    """Import an already built extension by path (used in grading subprocesses)."""
    import importlib.machinery
    import importlib.util

    import torch  # noqa: F401  (the extension links against libtorch)

    path = Path(directory) / f"{module_name}.so"
    loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# ---------------------------------------------------------- compile-only mode
@dataclass
class KernelInfo:
    """One `__global__` function of a cubin."""
    mangled: str
    name: str
    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    sass: str = field(default="", repr=False)

    def opcodes(self) -> dict[str, int]:
        """Count of each SASS opcode (with modifiers, e.g. 'LDG.E.128.CONSTANT')."""
        counts: dict[str, int] = {}
        for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", self.sass):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        return counts

    def shared_access_bytes(self, op: str) -> int:
        """Bytes per thread of the widest shared-memory access `op` ("LDS" or "STS") in this
        kernel: 4 for a plain LDS, 2 for LDS.U16, 16 for LDS.128; 0 if there is none."""
        widths = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}
        found = [max((widths[m] for m in code.split(".")[1:] if m in widths), default=4)
                 for code in self.opcodes() if code.split(".")[0] == op]
        return max(found, default=0)

    def has_opcode(self, prefix: str) -> bool:
        """True if some instruction's opcode is `prefix` or starts with `prefix.`."""
        return any(op == prefix or op.startswith(prefix + ".") for op in self.opcodes())


@dataclass
class CompileReport:
    path: str
    arch: str
    kernels: list[KernelInfo]
    ptxas_log: str = ""
    seconds: float = 0.0

    def kernel(self, name: str) -> KernelInfo:
        for k in self.kernels:
            if k.name == name or k.name.startswith(name + "<") or k.mangled == name:
                return k
        raise KeyError(f"{self.path} has no kernel '{name}'; it has {[k.name for k in self.kernels]}")

    def table(self) -> str:
        rows = [f"{'kernel':<44} {'regs':>5} {'smem B':>7} {'stack B':>7} {'spills':>7}"]
        for k in self.kernels:
            rows.append(f"{k.name[:44]:<44} {k.registers:>5} {k.shared_bytes:>7} {k.stack_bytes:>7} "
                        f"{k.spill_stores + k.spill_loads:>7}")
        return "\n".join(rows)

    def _repr_html_(self):
        head = "".join(f"<th>{h}</th>" for h in ("kernel", "registers", "shared B", "stack B", "spill B"))
        body = "".join(f"<tr><td><code>{k.name}</code></td><td>{k.registers}</td><td>{k.shared_bytes}</td>"
                       f"<td>{k.stack_bytes}</td><td>{k.spill_stores + k.spill_loads}</td></tr>" for k in self.kernels)
        return f"<p><code>{self.path}</code> for {self.arch}</p><table><tr>{head}</tr>{body}</table>"

    def __str__(self):
        return f"{self.path} for {self.arch}\n{self.table()}"


def demangle(mangled: str, known: list[str]) -> str:
    """Readable kernel name: the source's name for it, plus simple template arguments."""
    builtin = {"f": "float", "d": "double", "i": "int", "j": "unsigned", "l": "long", "m": "unsigned long",
               "b": "bool", "c": "char", "h": "unsigned char", "s": "short", "t": "unsigned short"}
    for name in sorted(known, key=len, reverse=True):
        token = f"{len(name)}{name}"
        pos = mangled.find(token)
        if pos < 0:
            continue
        rest = mangled[pos + len(token):]
        if not rest.startswith("I"):
            return name
        args, i = [], 1
        while i < len(rest) and rest[i] != "E":
            m = re.match(r"(\d+)([A-Za-z_]\w*)", rest[i:])
            lit = re.match(r"L([a-z])(n?\d+)E", rest[i:])
            if lit:
                args.append(lit.group(2).replace("n", "-"))
                i += lit.end()
            elif m:
                ident = m.group(2)[:int(m.group(1))]
                args.append(ident)
                i += len(m.group(1)) + len(ident)
            elif rest[i] in builtin:
                args.append(builtin[rest[i]])
                i += 1
            else:
                return f"{name}<...>"
        return f"{name}<{', '.join(args)}>"
    return mangled


def _parse_ptxas(log: str, kernels: dict[str, KernelInfo]) -> None:
    current = None
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?", line)
        if m:
            current = kernels.get(m.group(1))
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current.stack_bytes, current.spill_stores, current.spill_loads = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current.registers = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            current.shared_bytes = int(s.group(1)) if s else 0


def compile_cubin(file, arch: str | None = None, quiet: bool = True) -> CompileReport:
    """nvcc -cubin + cuobjdump -sass, cached by content hash. Needs no GPU."""
    source = _as_sources(file)[0]
    arch = arch or toolchain.arch()
    smv = toolchain.sm(arch)
    nvcc = toolchain.nvcc_path()
    if not nvcc:
        raise BuildError(source.path, "nvcc was not found: install the CUDA toolkit or set CUDA_HOME")
    cuobjdump = toolchain.binary_tool("cuobjdump")
    flags = NVCC_FLAGS + TORCH_NVCC_FLAGS + [f"-arch={smv}", "-cubin", "-Xptxas", "-v", "-I", str(toolchain.INCLUDE)]
    key = content_hash([source], flags + [toolchain.nvcc_version() or "", str(cuobjdump)])
    out_dir = toolchain.cache_dir() / "cubin" / key
    report_file = out_dir / "report.json"
    if report_file.exists():
        data = json.loads(report_file.read_text())
        data["kernels"] = [KernelInfo(**k) for k in data["kernels"]]
        return CompileReport(**data)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "kernel.cu"
    src.write_text(f'#line 1 "{source.path}"\n{source.text}')
    t0 = time.perf_counter()
    proc = subprocess.run([nvcc, *flags, "-o", str(out_dir / "kernel.cubin"), str(src)],
                          capture_output=True, text=True, errors="replace")
    seconds = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise parse_first_error(log, [source], source.path)
    if not cuobjdump:
        raise BuildError(source.path, "cuobjdump was not found: pip install nvidia-cuda-cuobjdump "
                         "nvidia-cuda-nvdisasm, or install the CUDA toolkit")
    dump = subprocess.run([cuobjdump, "-sass", str(out_dir / "kernel.cubin")], capture_output=True,
                          text=True, env=toolchain.tool_env(), errors="replace")
    if dump.returncode != 0:
        raise BuildError(source.path, "cuobjdump failed: " + (dump.stderr.strip() or dump.stdout.strip()))
    names = global_kernel_names(source.text)
    kernels: dict[str, KernelInfo] = {}
    for part in re.split(r"\n\s*Function : ", "\n" + dump.stdout)[1:]:
        mangled = part.split("\n", 1)[0].strip()
        kernels[mangled] = KernelInfo(mangled, demangle(mangled, names), sass=part)
    _parse_ptxas(log, kernels)
    report = CompileReport(source.path, smv, list(kernels.values()), log, seconds)
    data = asdict(report)
    report_file.write_text(json.dumps(data))
    if not quiet:
        print(report, file=sys.stdout)
    return report
