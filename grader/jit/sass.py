"""Compile-only mode: nvcc to an sm_90 cubin with `-Xptxas -v`, then cuobjdump's SASS and
cu++filt's kernel names. Registers, shared memory, spills and opcodes, no GPU needed."""
from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import machine, paths, pyenv, toolkit
from .demangle import demangle
from .errors import BuildError, parse_first_error
from .source import HALF_OPERATORS_BACK, NVCC_FLAGS, TORCH_NVCC_FLAGS, _as_sources, content_hash, target_arch
from .symbols import LinkCheckError, read_object

REPORT_VERSION = "6"  # bump when what a cached report holds changes (6: the variables themselves)


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
    calls: list[str] = field(default_factory=list)  # functions outside the cubin it calls (its callgraph): vprintf

    @property
    def printf_frame_only(self) -> bool:
        """Whether the kernel's stack frame holds only printf's arguments: it calls vprintf (printf
        in device code), which takes its arguments in a buffer on the stack, and it spills nothing
        and reads nothing back from local memory (no LDL, in the kernel or the subroutines its SASS
        lists: a local array or a spill would be read back)."""
        return (self.stack_bytes > 0 and "vprintf" in self.calls and not (self.spill_stores or self.spill_loads)
                and not self.has_opcode("LDL"))

    @property
    def local_memory(self) -> bool:
        """Whether the kernel uses local memory the register checks count: spills, or a stack frame
        other than printf's argument buffer."""
        return bool(self.spill_stores or self.spill_loads or (self.stack_bytes and not self.printf_frame_only))

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

    def has_opcode(self, wanted: str) -> bool:
        """True if some instruction is `wanted` with any further modifiers: the same mnemonic, and
        `wanted`'s modifiers among its own in order. A cache hint does not hide a width:
        `LDG.E.EF.128` (__ldcs), `LDG.E.NA.128.CONSTANT` (ld.global.nc.L1::no_allocate) are `LDG.E.128`."""
        want = wanted.split(".")
        for op in self.opcodes():
            have = op.split(".")
            rest = iter(have[1:])
            if have[0] == want[0] and all(w in rest for w in want[1:]):
                return True
        return False


@dataclass
class CompileReport:
    path: str
    arch: str
    kernels: list[KernelInfo]
    ptxas_log: str = ""
    seconds: float = 0.0
    host_object: str = ""  # compile_cubin(host_object=True): the host code's object file (link checks)
    globals_bytes: int = 0  # the file's __device__ variables, as ptxas counts them ("N bytes gmem")
    # its __device__ and __constant__ variables: [name, section, offset, size] (device_variables)
    variables: list = field(default_factory=list)

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


def _external_calls(cubin: Path) -> dict[str, list[str]]:
    """For each function of a cubin (by mangled name), the functions outside the cubin it calls,
    directly or through its subroutines (vprintf, malloc, __assertfail): the cubin's call graph
    (.nv.callgraph: pairs of symbol indices, caller then callee; negative entries are markers)."""
    try:
        obj = read_object(cubin)
    except (LinkCheckError, OSError, struct.error, IndexError, ValueError):
        return {}
    graph = next((s for s in obj.sections if s.name == ".nv.callgraph"), None)
    if graph is None:
        return {}
    edges: dict[int, set[int]] = {}
    for off in range(graph.offset, graph.offset + graph.size - 7, 8):
        caller, callee = struct.unpack_from("<ii", obj.data, off)
        if 0 <= caller < len(obj.symbols) and 0 <= callee < len(obj.symbols):
            edges.setdefault(caller, set()).add(callee)
    out = {}
    for i, sym in enumerate(obj.symbols):
        if i not in edges or not sym.name:
            continue
        seen, todo, external = {i}, list(edges[i]), set()
        while todo:
            j = todo.pop()
            if j in seen:
                continue
            seen.add(j)
            if obj.symbols[j].shndx == 0:
                external.add(obj.symbols[j].name)
            todo += edges.get(j, ())
        out[sym.name] = sorted(external)
    return out


# The host code compiled as the torch extension compiles it (position-independent), in the same
# nvcc call as the cubin: `--keep` leaves the very cubin that `-cubin` makes.
HOST_OBJECT_FLAGS = ["-c", "-Xcompiler", "-fPIC", "--keep"]


# The sections a file's own variables live in: __device__ ones zeroed or initialised, __constant__ ones in a
# bank of their own (.nv.constant0.<kernel> holds a kernel's parameters; the compiler's banks have no objects).
_VARIABLE_SECTION = re.compile(r"\.nv\.(global|global\.init|constant\d+)\Z")
STT_OBJECT = 1


def device_variables(cubin: Path) -> list[tuple[str, str, int, int]]:
    """The `__device__` and `__constant__` variables of a cubin, a kernel's `static` locals included:
    (symbol, section, offset in it, size), from its symbol table."""
    obj = read_object(cubin, relocations=False)
    return [(s.name, obj.sections[s.shndx].name, s.value, s.size) for s in obj.symbols
            if s.type == STT_OBJECT and 0 < s.shndx < len(obj.sections)
            and _VARIABLE_SECTION.match(obj.sections[s.shndx].name)]


@functools.lru_cache(maxsize=None)
def _torch_include_dirs() -> list[str]:
    """torch's header folder (pyenv.torch_dir: no import of torch)."""
    folder = pyenv.torch_dir()
    return [os.path.join(folder, "include")] if folder else []


@functools.lru_cache(maxsize=None)
def _system_include_dirs() -> tuple[str, ...]:
    """The header folders of every host compiler a build may use (libstdc++, libc, builtins): the
    one nvcc picks by itself (`nvcc -E -Xcompiler -v`), and $CXX, $CC, c++ and g++ (torch's
    extension build passes its own to nvcc: /opt/gcc on the GPU machine, /usr/bin/gcc beside it)."""
    dirs = ["/usr/include"]
    nvcc = toolkit.nvcc_path()
    cmds = [[nvcc, "-E", "-x", "c++", "-Xcompiler", "-v", "/dev/null", "-o", "/dev/null"]] if nvcc else []
    compilers = {shutil.which(c) for c in (os.environ.get("CXX"), os.environ.get("CC"), "c++", "g++") if c}
    cmds += [[c, "-xc++", "-E", "-v", "/dev/null"] for c in sorted(compilers - {None})]
    for cmd in cmds:
        err = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL).stderr
        listed = re.search(r"#include <\.\.\.> search starts here:\n(.*?)\nEnd of search list", err, re.S)
        if listed:
            dirs += [os.path.normpath(line.strip().split(" (")[0]) for line in listed.group(1).splitlines()]
    return tuple(dict.fromkeys(dirs))


# The assembler lists the files it read too (`.incbin` and `.include` in host asm embed any file
# in the object): `as --MD FILE`, through nvcc and gcc. A relative FILE lands in the folder the
# compiler runs in (the torch extension's build folder).
def assembler_deps_flags(path: str) -> list[str]:
    return ["-Xcompiler", "-Xassembler", "-Xcompiler", "--MD", "-Xcompiler", "-Xassembler", "-Xcompiler", path]


def dependency_files(*deps: Path) -> list[str]:
    """The files make-style dependency files list (their targets left out)."""
    files = []
    for d in deps:
        if d.exists():
            text = d.read_text(errors="replace").replace("\\\n", " ")
            text = re.split(r"\s:\s|:\s", text, maxsplit=1)[-1]  # "target : deps" or "target: deps"
            files += [f.replace("\\ ", " ") for f in re.findall(r"(?:\\ |\S)+", text)]
    return files


def system_header(name: str) -> str | None:
    """Where `name` (as written in `#include "name"`) is found among the CUDA toolkit's and the host
    compiler's own include folders (cuda_fp16.h, cub/cub.cuh, cuda/barrier, cstdint, stdio.h), as
    `#include <name>` would find it; None if it is in none of them."""
    home = toolkit.cuda_home()
    roots = [*([str(home / "include")] if home else []), *toolkit.extra_include_dirs(), *_system_include_dirs()]
    for root in roots:
        path = os.path.join(root, name)
        if os.path.isfile(path):
            return path
    return None


def _foreign_includes(deps: Path, source: Path, line_name: str) -> list[str]:
    return foreign_files(dependency_files(deps, deps.with_name("asm.d")), source, line_name)


def without_foreign_text(err: BuildError, source: Path, line_names) -> BuildError:
    """A compile error in a file other than the submission and the course, toolkit and compiler
    headers says where, not what: its message and excerpt would quote that file."""
    if not err.file:
        return err
    path = err.file if os.path.isabs(err.file) else str(paths.ROOT / err.file)
    if not foreign_files([path], source, line_names):
        return err
    return BuildError(err.what, f"the compile failed in {err.file}, which is not your file nor a course or "
                      "system header (what it says there is not shown)")


def reads_message(files: list[str]) -> str:
    return ("reads files other than the course headers and the system headers at compile time (#include, .incbin): "
            + ", ".join(paths.display_path(f) for f in files[:3]))


def foreign_files(files: list[str], source: Path, line_name) -> list[str]:
    """Of the files a compile read, those other than the source, the course headers, the CUDA
    toolkit's and the compiler's: a computed `#include MACRO(...)` or an `.incbin` can name any
    file (a solution, another student's submission, a gradebook), which no pattern over the
    source sees. Paths are compared after normalising `..` away. `line_name`: the name (or names)
    the source's `#line` gives it, listed too."""
    names = {line_name} if isinstance(line_name, str) else set(line_name)
    # a source shown by a path relative to the course (`--source kernels/x.cu`) is that file too
    names |= {os.path.normpath(str(paths.ROOT / n)) for n in names if n and not os.path.isabs(n)}
    home = toolkit.cuda_home()
    roots = [paths.INCLUDE, *toolkit.extra_include_dirs(), *([home] if home else []), *_system_include_dirs()]
    roots += _torch_include_dirs()  # a torch without no_implicit_headers puts its headers in the .cu
    allowed = {os.path.normpath(str(r)) for r in roots} | {os.path.realpath(str(r)) for r in roots}
    for d in toolkit.extra_include_dirs():  # its headers are links into a wheel's include folder
        allowed |= {os.path.dirname(os.path.realpath(p)) for p in Path(d).iterdir()}

    def inside(path: str) -> bool:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in allowed)

    out = []
    for f in files:
        if f in names:
            continue
        p = os.path.normpath(f if os.path.isabs(f) else os.path.join(source.parent, f))
        if not os.path.exists(p):  # a name from a #line directive, not a file that was read
            continue
        if p != os.path.normpath(str(source)) and not (inside(p) and inside(os.path.realpath(p))) and p not in out:
            out.append(p)
    return out


def compile_cubin(file, arch: str | None = None, quiet: bool = True, host_object: bool = False) -> CompileReport:
    """nvcc -cubin + cuobjdump -sass, cached by content hash. Needs no GPU.
    `host_object=True`: the same nvcc call also compiles the host code, to `report.host_object`
    (what grader/jit/symbols.py inspects); the SASS and resources are the same."""
    source = _as_sources(file)[0]
    arch = arch or target_arch([source], machine.arch())  # '9.0a' for a file named *_sm90a.cu
    smv = machine.sm(arch)
    nvcc = toolkit.nvcc_path()
    if not nvcc:
        raise BuildError(source.path, "nvcc was not found: install the CUDA toolkit or set CUDA_HOME")
    cuobjdump = toolkit.binary_tool("cuobjdump")
    # -gencode for the one real architecture: `-arch=sm_90a` would also make and assemble compute_90 PTX,
    # where wgmma and setmaxnreg written in a learner's own asm do not exist.
    flags = NVCC_FLAGS + TORCH_NVCC_FLAGS + HALF_OPERATORS_BACK + [f"-gencode=arch=compute_{smv[3:]},code={smv}",
                                                                   "-cubin", "-Xptxas", "-v", "-I", str(paths.INCLUDE)]
    flags += [f"-I{d}" for d in toolkit.extra_include_dirs()]
    if host_object:
        flags = [f for f in flags if f != "-cubin"] + HOST_OBJECT_FLAGS
    checked = ["reads checked: preprocessor and assembler"] if host_object else []  # cached only once they were
    key = content_hash([source], flags + [toolkit.nvcc_version() or "", str(cuobjdump), REPORT_VERSION] + checked)
    out_dir = pyenv.cache_dir() / "cubin" / key
    report = _cached_report(out_dir, host_object)
    if report is not None:
        return report
    # One compile of a source at a time across processes (the self-test's tests and its builds of the
    # same mutants, identical submissions in a class): a second waits, then reads what the first made.
    lock_path = out_dir.parent / "locks" / f"{key}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        report = _cached_report(out_dir, host_object)
        if report is not None:
            return report
        return _compile(source, smv, flags, nvcc, cuobjdump, out_dir, host_object, quiet)


def _cached_report(out_dir: Path, host_object: bool) -> CompileReport | None:
    report_file, obj = out_dir / "report.json", out_dir / "kernel.o"
    if not (report_file.exists() and (obj.exists() or not host_object)):
        return None
    data = json.loads(report_file.read_text())
    data["kernels"] = [KernelInfo(**k) for k in data["kernels"]]
    data["host_object"] = str(obj) if host_object else ""
    return CompileReport(**data)


def _compile(source, smv: str, flags: list[str], nvcc: str, cuobjdump, out_dir: Path, host_object: bool,
             quiet: bool) -> CompileReport:
    """compile_cubin's work, under its lock: nvcc, then cuobjdump's SASS, into `out_dir`."""
    report_file, obj = out_dir / "report.json", out_dir / "kernel.o"
    out_dir.mkdir(parents=True, exist_ok=True)
    # Each compile works in a folder of its own and moves its outputs in whole: two processes that
    # compile the same file at once (parallel tests, say) never read each other's half-written files.
    work = Path(tempfile.mkdtemp(prefix="work-", dir=out_dir))
    src = work / "kernel.cu"
    src.write_text(f'#line 1 "{source.path}"\n{source.text}')
    keep, made = work / "keep", work / ("kernel.o" if host_object else "kernel.cubin")
    out = ["--keep-dir", str(keep), "-o", str(made)] if host_object else ["-o", str(made)]
    if host_object:
        out += assembler_deps_flags(str(work / "asm.d"))
    if host_object:
        keep.mkdir()
    t0 = time.perf_counter()
    deps = work / "deps.d"  # every file the preprocessor read, written even when the compile fails
    proc = subprocess.run([nvcc, *flags, "-MD", "-MF", str(deps), *out, str(src)], capture_output=True, text=True,
                          errors="replace", stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    log = proc.stdout + proc.stderr
    foreign = _foreign_includes(deps, src, source.path)
    if foreign:  # before any compile error, which would quote the file
        shutil.rmtree(work, ignore_errors=True)
        raise BuildError(source.path, reads_message(foreign))
    cubins = sorted(keep.glob("*.cubin")) if host_object else [made]  # --keep: the cubin among the intermediates
    if proc.returncode != 0 or len(cubins) != 1:
        shutil.rmtree(work, ignore_errors=True)
        try:
            out_dir.rmdir()  # nothing behind, unless another compile of it is under way
        except OSError:
            pass
        if proc.returncode != 0:
            raise without_foreign_text(parse_first_error(log, [source], source.path), src, source.path)
        raise BuildError(source.path, f"nvcc --keep left {len(cubins)} cubins, expected one")
    cubins[0].replace(out_dir / "kernel.cubin")
    if host_object:
        made.replace(obj)
    src.replace(out_dir / "kernel.cu")
    shutil.rmtree(work, ignore_errors=True)
    if not cuobjdump:
        raise BuildError(source.path, "cuobjdump was not found: pip install nvidia-cuda-cuobjdump "
                         "nvidia-cuda-nvdisasm, or install the CUDA toolkit")
    dump = subprocess.run([cuobjdump, "-sass", str(out_dir / "kernel.cubin")], capture_output=True,
                          text=True, env=toolkit.tool_env(), errors="replace")
    if dump.returncode != 0:
        raise BuildError(source.path, "cuobjdump failed: " + (dump.stderr.strip() or dump.stdout.strip()))
    parts = {part.split("\n", 1)[0].strip(): part for part in re.split(r"\n\s*Function : ", "\n" + dump.stdout)[1:]}
    names = demangle(list(parts))
    calls = _external_calls(out_dir / "kernel.cubin")
    kernels = {mangled: KernelInfo(mangled, names[mangled], sass=part, calls=calls.get(mangled, []))
               for mangled, part in parts.items()}
    _parse_ptxas(log, kernels)
    report = CompileReport(source.path, smv, list(kernels.values()), log, seconds, str(obj) if host_object else "",
                           max((int(n) for n in re.findall(r"(\d+) bytes gmem", log)), default=0),
                           device_variables(out_dir / "kernel.cubin"))
    data = asdict(report)
    report_file.write_text(json.dumps(data))
    if not quiet:
        print(report, file=sys.stdout)
    return report
