"""Build course kernels as a torch extension with `torch.utils.cpp_extension.load_inline`.

`build(files)` compiles `.cu` files plus a generated binding. The module name is a hash
of every input (sources, course headers, flags, torch, arch), so an edited kernel always
rebuilds, an unchanged one loads from the cache in well under a second, and a failed
build leaves nothing behind.

The binding (pybind11 over torch's headers) depends only on the entry points' prototypes, which an
edit of a kernel's body leaves alone. It is compiled once per prototype set into an object of its
own (ext/bindings/), by load_inline too, and each build of the kernels links that object in: an
edited kernel costs nvcc and a link. It includes only what it needs of torch (exports.BINDING_PRELUDE,
a header of its own), which g++ precompiles once per torch install (_precompile_prelude): ~3.5 s a
binding where torch/extension.h took ~9 s (precompiled too, and made in ~40 s against ~15 s).
Every build sharing a binding is a Python module of the binding's name (its PyInit symbol),
each in its own folder; they load side by side by path.

Grading compiles a submission once (sass.compile_cubin with its host object: the SASS, resources,
includes and symbols it checks) and `build_checked` links the extension from that very object: what
runs is what was checked, and nothing is compiled twice. The notebooks' builds (`build`, `build_day`)
compile their sources themselves.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .. import machine, paths, pyenv, toolkit
from .errors import BuildError, parse_first_error
from .exports import BINDING_PRELUDE, Export, generate_binding, global_kernel_names, parse_exports
from .sass import assembler_deps_flags, dependency_files, foreign_files, reads_message, without_foreign_text
from .source import HALF_OPERATORS_BACK, NVCC_FLAGS, TORCH_NVCC_FLAGS, Source, _as_sources, content_hash, target_arch

# A trivial kernel built first: it makes the shared precompiled header before parallel builds.
WARMUP_SOURCE = Path(__file__).with_name("warmup.cu")
BINDING_VERSION = "5"  # bump when generate_binding's output, or how it is built, changes


BUILDING = threading.Event()  # set while a build prints its progress (the CLI's ticker keeps quiet)


class _Progress:
    """Progress a person can see while a build runs: a line as it starts (saying when this build also
    makes torch's precompiled header, the slow first one), seconds ticking on a terminal or in a
    notebook, and the time it took at the end, once."""

    def __init__(self, what: str, quiet: bool, first_pch: bool = False):
        self.what, self.quiet, self.t0 = what, quiet, time.perf_counter()
        why = ("nvcc + g++; this first build also precompiles torch's headers, once per torch install: "
               "about 15-60 s" if first_pch else "nvcc + g++, cached afterwards")
        self.line = f"Building {what} ({why})..."
        self.tick_s = _tick_interval()
        self._done = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True) if self.tick_s else None

    def _tick(self):
        while not self._done.wait(self.tick_s):
            print(f"\r{self.line} {time.perf_counter() - self.t0:.0f} s", end="", flush=True)

    def __enter__(self):
        if not self.quiet:
            BUILDING.set()
            clear = "\r\033[K" if self.tick_s == 1.0 else ""  # a terminal: over the CLI's own ticker line
            print(clear + self.line, end="" if self._ticker else "\n", flush=True)
            if self._ticker:
                self._ticker.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        if self._ticker and self._ticker.is_alive():
            self._ticker.join()
        self.seconds = time.perf_counter() - self.t0
        if self.quiet:
            return
        BUILDING.clear()
        end = f"built in {self.seconds:.1f} s." if exc[0] is None else f"failed after {self.seconds:.1f} s."
        if self._ticker:
            print(f"\r{self.line} {end}", flush=True)
        else:
            print(f"{self.what}: {end}", flush=True)


def _tick_interval() -> float | None:
    """Seconds between elapsed-time updates: every second on a terminal, every 5 s in a notebook
    (ipykernel; Jupyter draws a carriage return as an overwrite), none in logs and pipes."""
    import sys

    out = sys.stdout
    if type(out).__module__.startswith("ipykernel"):
        return 5.0
    try:
        return 1.0 if out.isatty() else None
    except (AttributeError, ValueError):
        return None


# ------------------------------------------------------------ torch extension
@dataclass
class Built:
    """A built extension: the Python module, its exports, and what it cost."""
    module: object
    name: str          # the build's identity (and folder): a hash of everything it was built from
    directory: Path
    exports: list[Export]
    kernels: list[str]
    seconds: float
    cached: bool
    library: Path  # the shared object, named after the build's binding (see the top of this file)

    @property
    def binding_directory(self) -> Path:
        """The folder where the binding this build links in was compiled (main.cpp, main.o)."""
        return pyenv.cache_dir() / "ext" / "bindings" / self.library.stem

    def __getattr__(self, item):
        return getattr(self.module, item)


_loaded: dict[str, Built] = {}
# import name -> the folder it was imported from, in this process: Python keeps one module per
# extension name, so a second build sharing a binding (and so its name) needs a name of its own
_imported: dict[str, Path] = {}
_build_lock = threading.Lock()


HOST_ASM_DEPS = "host-asm.d"  # what the assembler read, written in the build folder (grading checks it)


def _cuda_cflags(arch: str) -> list[str]:
    num = arch.replace(".", "")
    # (load_inline puts these after torch's own flags: HALF_OPERATORS_BACK undoes four of them)
    return NVCC_FLAGS + HALF_OPERATORS_BACK + [f"-gencode=arch=compute_{num},code=sm_{num}"] \
        + assembler_deps_flags(HOST_ASM_DEPS)


def foreign_reads(directory: str | Path, line_names) -> list[str]:
    """Files the extension's compile of its .cu read other than the course, toolkit and compiler
    headers (sass.foreign_files): ninja's record of the preprocessor's dependencies (or, after a
    failed build, nvcc's dependency file) and the assembler's list. Grading checks them after the
    build, because the extension's nvcc command differs from the checked compile's (its own
    macros and include folders), and a submission could include other files only there."""
    import subprocess
    import sys

    directory = Path(directory)
    files = dependency_files(directory / "cuda.cuda.o.d", directory / HOST_ASM_DEPS)
    ninja = shutil.which("ninja") or str(Path(sys.executable).with_name("ninja"))
    try:
        out = subprocess.run([ninja, "-C", str(directory), "-t", "deps", "cuda.cuda.o"], capture_output=True,
                             text=True, stdin=subprocess.DEVNULL).stdout
    except OSError:
        out = ""
    recorded = [line.strip() for line in out.splitlines() if line.startswith(" ")]
    if not recorded and not (directory / "cuda.cuda.o.d").exists() and (directory / "cuda.cuda.o").exists():
        return [f"(no dependency list for {directory / 'cuda.cuda.o'}: ninja -t deps found none)"]
    return foreign_files(files + recorded, directory / "cuda.cu", line_names)


def cache_key(sources: list, binding: str, arch: str, features: dict, flags=()) -> str:
    """The hash a build is cached under: the sources, the course headers, the generated binding,
    every nvcc flag, torch and its CUDA, the nvcc that compiles, and the arch. Any of them that
    differs is a new build."""
    import torch

    # The include folder is part of the key: two checkouts of the course never share a build (what a
    # build read is checked against the checkout's own headers).
    return content_hash(sources, [binding, BINDING_VERSION, torch.__version__, str(torch.version.cuda),
                                  str(toolkit.nvcc_version()), str(paths.INCLUDE),
                                  arch, " ".join(_cuda_cflags(arch) + list(flags) + TORCH_NVCC_FLAGS), str(features)])


def _module_name(name: str, key: str) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_]', '_', name)}_{key}"


def module_name(files, name: str = "course", flags: tuple[str, ...] = ()) -> str:
    """The module (and cache folder) name that `build(files, name, flags=flags)` gives, computed
    without building: a request whose name is already built loads that build."""
    sources = _as_sources(files)
    exports = [e for s in sources for e in parse_exports(s.text, s.path)]
    arch = target_arch(sources, machine.arch())
    return _module_name(name, cache_key(sources, generate_binding(exports), arch, pyenv.load_inline_features(), flags))


def build(files, name: str = "course", quiet: bool = False, load: bool = True, flags: tuple[str, ...] = ()) -> Built:
    """Compile `.cu` files (paths or Sources) and the generated binding into one
    torch extension; return it with its entry points as attributes.

    `load=False` builds without importing the module (`Built.module` is None): none of its
    code, load-time constructors included, runs in this process. Grading builds that way;
    only the sandboxed worker loads a submission (`load_built`). `flags`: more nvcc options
    (part of the cache key), e.g. DAY_FLAGS."""
    sources = _as_sources(files)
    what = name if len(sources) > 1 else sources[0].path
    exports, kernels = _entry_points(sources, what)

    t_start = time.perf_counter()  # hashing + loading or building, what a cached "build" costs
    binding, arch, features, import_name = _binding_for(sources, exports, name)
    module_name = _module_name(name, cache_key(sources, binding, arch, features, flags))
    if module_name in _loaded:
        return _loaded[module_name]
    build_dir = pyenv.cache_dir() / "ext" / module_name
    own_binding = load and _imported.get(import_name, build_dir) != build_dir
    if own_binding:
        # This process has imported another build of this binding (a notebook rebuilding an edited
        # kernel): Python would hand back that module for the same name. Build one of its own name,
        # with the binding compiled in, in a folder of its own.
        build_dir, import_name = build_dir.with_name(module_name + "_own"), module_name
    with _module_lock(build_dir):
        if (build_dir / f"{import_name}.so").exists():
            # Same hash, same inputs: import the built module without asking ninja.
            module = load_built(build_dir, module_name) if load else None
            built = Built(module, module_name, build_dir, exports, kernels, time.perf_counter() - t_start, True,
                          build_dir / f"{import_name}.so")
        else:
            built = _build(sources, what, binding, arch, features, flags, module_name, import_name, build_dir, exports,
                           kernels, load, quiet, own_binding)
    if load:
        _loaded[module_name] = built
        _imported[import_name] = build_dir
    return built


def _entry_points(sources, what: str) -> tuple[list[Export], list[str]]:
    """The sources' COURSE_EXPORT entry points and __global__ kernels; BuildError if they have none."""
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
    return exports, kernels


def build_checked(source, host_object: str | Path | None, name: str, quiet: bool = True) -> Built:
    """The torch extension of one checked source, linked from `host_object`: the object that
    sass.compile_cubin(host_object=True) made in the nvcc call whose SASS, resources, includes and
    symbols grading checked (None: that compile, from its cache or made now). Nothing is compiled
    again (an edit costs that one nvcc call and a link), and what runs is exactly what was checked.
    Never imported here: only the sandboxed worker loads a submission. Cached under the object's hash
    and the binding's."""
    import hashlib

    from .sass import compile_cubin

    source = _as_sources([source])[0]
    exports, kernels = _entry_points([source], source.path)
    host_object = host_object or compile_cubin(source, host_object=True).host_object
    t_start = time.perf_counter()
    binding, arch, features, import_name = _binding_for([source], exports, name)
    digest = hashlib.sha256(Path(host_object).read_bytes()).hexdigest()
    key = content_hash([], ["linked from a checked object", digest, binding, BINDING_VERSION, arch, str(features),
                            str(paths.INCLUDE)])
    module_name = _module_name(name, key)
    build_dir = pyenv.cache_dir() / "ext" / module_name
    library = build_dir / f"{import_name}.so"
    with _module_lock(build_dir):
        if library.exists():
            return Built(None, module_name, build_dir, exports, kernels, time.perf_counter() - t_start, True, library)
        return _build([source], source.path, binding, arch, features, (), module_name, import_name, build_dir, exports,
                      kernels, False, quiet, checked_object=Path(host_object))


def prebuild_binding(source, name: str) -> Path:
    """The binding object that build_checked(a source with these entry points, ..., `name`) links in,
    compiled now. Class grading has each exercise's made from its solution as the run starts, beside the
    first submissions' checks: every submission with the solution's entry points links it in, and the
    first ones of a run would otherwise wait for it under its lock (seconds, where a later link takes 0.7 s)."""
    source = _as_sources([source])[0]
    exports, _ = _entry_points([source], source.path)
    binding, arch, features, import_name = _binding_for([source], exports, name)
    torch_include, use_pch = _torch_pch(features)
    _precompile_prelude(arch, features)
    return _binding_object(binding, import_name, arch, features, torch_include, use_pch, source.path, [source])


def _binding_for(sources, exports, name: str) -> tuple[str, str, dict, str]:
    """What build, build_checked and prebuild_binding start from: the binding generated for `exports`, the
    target arch ('9.0a' when a file is named *_sm90a.cu), load_inline's features, and the import name the
    binding's object is cached under (binding_key)."""
    toolkit.cuda_home()
    arch = target_arch(sources, machine.arch())
    features = pyenv.load_inline_features()
    binding = generate_binding(exports)
    return binding, arch, features, _module_name(name, "b" + binding_key(binding, arch, features))


def _torch_pch(features: dict) -> tuple[Path, bool]:
    """torch's include folder, and whether builds use its precompiled extension.h: only where load_inline
    puts torch/extension.h first in every binding (a torch without no_implicit_headers), can precompile
    it, and the folder is writable (the header is made there once per torch install). Elsewhere the
    binding's own prelude is precompiled instead (_precompile_prelude)."""
    import torch

    torch_include = Path(torch.__file__).parent / "include" / "torch"
    return torch_include, bool(features["use_pch"] and not features["no_implicit_headers"]
                               and os.access(torch_include, os.W_OK))


PRELUDE_FILE = "course_binding_prelude.h"  # exports.BINDING_PRELUDE, which every binding includes first


def _prelude_dir() -> Path:
    """The folder of the binding's prelude header (on every build's include path), written once: its
    name is a hash of the header, torch, CUDA and the compiler (not of the course's headers, which it
    does not read), so its precompiled form beside it is made anew for another torch install only."""
    import hashlib

    import torch
    from torch.utils import cpp_extension

    key = hashlib.sha256("\0".join([BINDING_PRELUDE, torch.__version__, str(torch.version.cuda),
                                    cpp_extension.get_cxx_compiler()]).encode()).hexdigest()[:16]
    folder = pyenv.cache_dir() / "prelude" / key
    header = folder / PRELUDE_FILE
    if not header.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = header.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")  # builds run in threads too
        tmp.write_text(BINDING_PRELUDE)
        tmp.replace(header)
    return folder


def _prelude_gch() -> Path:
    """The prelude's precompiled form, beside it (g++ reads it in place of the header)."""
    return _prelude_dir() / f"{PRELUDE_FILE}.gch"


def precompiled_header() -> Path:
    """The precompiled header builds use here, made by the first build: the prelude's, or
    torch/extension.h's where load_inline puts that first (_torch_pch)."""
    torch_include, use_pch = _torch_pch(pyenv.load_inline_features())
    return torch_include / "extension.h.gch" if use_pch else _prelude_gch()


def compile_command(build_dir: Path) -> tuple[list[str], list[str]]:
    """The C++ compiler and the flags load_inline compiles a build's main.cpp with, from the build
    file it wrote in `build_dir` (torch's flags differ between versions, e.g. -std)."""
    import shlex

    ninja = dict(line.split(" = ", 1) for line in (build_dir / "build.ninja").read_text().splitlines()
                 if line.startswith(("cxx = ", "cflags = ")))
    return shlex.split(ninja["cxx"]), shlex.split(ninja["cflags"])


def _prelude_to_make(features: dict) -> bool:
    """Whether the prelude's precompiled form is still to be made (_precompile_prelude): not where
    load_inline puts torch/extension.h first or the compiler is not g++, nor after a failure."""
    from torch.utils import cpp_extension

    gch = _prelude_gch()
    is_gcc = getattr(cpp_extension, "check_compiler_is_gcc", None)
    return (features["no_implicit_headers"] and not gch.exists() and not gch.with_name(PRELUDE_FAILED).exists()
            and bool(is_gcc and is_gcc(cpp_extension.get_cxx_compiler())))


PRELUDE_FAILED = "precompile-failed.txt"  # beside the prelude: why g++ could not precompile it


def _precompile_prelude(arch: str, features: dict) -> None:
    """The prelude precompiled by g++, once per torch install (~15 s, ~315 MB), with exactly the flags
    load_inline compiles a binding with (g++ ignores a precompiled header made with others): those of
    the build file load_inline writes for an empty module (compile_command). A failure leaves the
    header as it is, compiled from its text (slower), and is not tried again (PRELUDE_FAILED says why)."""
    import subprocess

    from torch.utils import cpp_extension

    if not _prelude_to_make(features):
        return
    gch = _prelude_gch()
    failed = gch.with_name(PRELUDE_FAILED)
    with _module_lock(gch.parent / "gch"):
        if gch.exists() or failed.exists():
            return
        probe = gch.parent / "flags"
        try:
            probe.mkdir(exist_ok=True)
            _load_inline(cpp_extension, dict(_inline_kwargs("course_prelude_flags", probe, arch, features),
                                             cpp_sources=[""]), False)
            cxx, cflags = compile_command(probe)
            tmp = gch.with_name(f"{gch.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            flags = [f for f in cflags if not f.startswith("-DTORCH_EXTENSION_NAME=")]
            subprocess.run([*cxx, "-x", "c++-header", str(gch.with_suffix("")), "-o", str(tmp), *flags],
                           check=True, capture_output=True, text=True)
            tmp.replace(gch)
        except (OSError, KeyError, ValueError, RuntimeError, subprocess.CalledProcessError) as e:
            failed.write_text(f"{type(e).__name__}: {getattr(e, 'stderr', None) or e}"[-4000:])
        finally:
            shutil.rmtree(probe, ignore_errors=True)


def binding_key(binding: str, arch: str, features: dict) -> str:
    """The hash the binding's object is cached under: its text, torch, CUDA, the arch and the
    include folders (the course's headers are not read by it, but a checkout keeps its own)."""
    import torch

    return content_hash([], [binding, BINDING_VERSION, torch.__version__, str(torch.version.cuda), str(paths.INCLUDE),
                             *map(str, toolkit.extra_include_dirs()), arch, str(features)])


def _inline_kwargs(name: str, build_dir: Path, arch: str, features: dict, flags=()) -> dict:
    """load_inline's arguments shared by the binding's build and the kernels' builds."""
    kwargs = dict(name=name, extra_cuda_cflags=_cuda_cflags(arch) + list(flags),
                  extra_include_paths=[str(paths.INCLUDE), *toolkit.extra_include_dirs(), str(_prelude_dir())],
                  build_directory=str(build_dir), verbose=False, with_cuda=True)
    if features["no_implicit_headers"]:
        kwargs["no_implicit_headers"] = True  # keeps torch out of the .cu: nvcc stays fast
    return kwargs


def _binding_object(binding: str, import_name: str, arch: str, features: dict, torch_include: Path, use_pch: bool,
                    what: str, sources) -> Path:
    """The binding compiled once for every build that shares it (load_inline of the binding alone:
    its own folder, its main.o kept): the object those builds link in."""
    from torch.utils import cpp_extension

    bdir = pyenv.cache_dir() / "ext" / "bindings" / import_name
    obj = bdir / "main.o"
    with _module_lock(bdir):
        if (bdir / f"{import_name}.so").exists() and obj.exists():
            return obj
        bdir.mkdir(parents=True, exist_ok=True)
        kwargs = dict(_inline_kwargs(import_name, bdir, arch, features), cpp_sources=[binding])
        if use_pch:
            kwargs["use_pch"] = True  # precompiled torch/extension.h (written next to it)
        try:  # linked too, with the kernels' symbols left undefined: a shared library may
            with _pch_lock(torch_include, use_pch):
                _load_inline(cpp_extension, kwargs, False)
        except RuntimeError as e:
            shutil.rmtree(bdir, ignore_errors=True)
            raise without_foreign_text(parse_first_error(str(e), sources, what), bdir / "main.cpp",
                                       [s.path for s in sources] + [str((bdir / "main.cpp").resolve())]) from None
        except Exception:
            shutil.rmtree(bdir, ignore_errors=True)
            raise
    return obj


def _build(sources, what, binding, arch, features, flags, module_name, import_name, build_dir, exports, kernels, load,
           quiet, own_binding=False, checked_object: Path | None = None) -> Built:
    """The build itself (the caller holds the module's lock and found no built module).
    `checked_object`: the sources compiled already (build_checked): that object is linked, kept in
    the build folder, and nothing is compiled but the empty main.cpp."""
    import torch
    from torch.utils import cpp_extension

    build_dir.mkdir(parents=True, exist_ok=True)

    torch_include, use_pch = _torch_pch(features)
    first_pch = not (torch_include / "extension.h.gch").exists() if use_pch else _prelude_to_make(features)
    # main.cpp is empty: the binding comes in as its cached object. use_pch stays on where it
    # was (load_inline deletes the shared precompiled header when told use_pch=False).
    kwargs = dict(_inline_kwargs(import_name, build_dir, arch, features, flags),
                  cpp_sources=[binding if own_binding else ""])
    linked = []
    if checked_object is not None:
        linked = [build_dir / "kernels.o"]
        shutil.copyfile(checked_object, linked[0])
    else:  # #line makes nvcc report errors against the real file and line.
        kwargs["cuda_sources"] = ["\n".join(f'#line 1 "{s.path}"\n{s.text}' for s in sources)]
    if use_pch:
        kwargs["use_pch"] = True
    with _build_lock, _Progress(what, quiet, first_pch) as progress:
        _precompile_prelude(arch, features)
        if not own_binding:
            obj = _binding_object(binding, import_name, arch, features, torch_include, use_pch, what, sources)
            kwargs["extra_ldflags"] = [str(obj), *map(str, linked)]
        try:
            with _pch_lock(torch_include, use_pch):
                module = _load_inline(cpp_extension, kwargs, load)
        except RuntimeError as e:
            foreign = foreign_reads(build_dir, [s.path for s in sources])  # before the error quotes such a file
            shutil.rmtree(build_dir, ignore_errors=True)  # a failed build never sticks
            if foreign:
                raise BuildError(what, reads_message(foreign)) from None
            raise without_foreign_text(parse_first_error(str(e), sources, what), build_dir / "cuda.cu",  # the binding's
                                       [s.path for s in sources] + [str((build_dir / "main.cpp").resolve())]) from None
        except Exception:
            shutil.rmtree(build_dir, ignore_errors=True)
            raise
    return Built(module, module_name, build_dir, exports, kernels, progress.seconds, False,
                 build_dir / f"{import_name}.so")


class _module_lock:
    """One build of a module at a time across processes (class grading, a notebook beside the
    grader): a second builder of the same content waits, then loads what the first built, or builds
    it itself if the first failed (a failed build is removed: torch's own lock in the build folder
    would leave the second importing a module that is not there, seen on the H200)."""

    def __init__(self, build_dir: Path):
        self.path = build_dir.parent / "locks" / f"{build_dir.name}.lock"  # kept: deleting one races

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.f.close()  # releases the lock


def _load_inline(cpp_extension, kwargs: dict, load: bool):
    """load_inline; with load=False the same build, but the module is not imported (torch's
    `_import_module_from_library`, the step that imports it, does nothing for the while)."""
    # torch renames a module built twice in one process from other sources (name_v1, name_v2, ...):
    # every build of a binding keeps the binding's name (its PyInit symbol is in the shared object),
    # and each has a folder of its own, so forget the earlier ones.
    versioner = getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None)
    if versioner is not None and hasattr(versioner, "entries"):
        versioner.entries.pop(kwargs["name"], None)
    if load:
        return cpp_extension.load_inline(**kwargs)
    importer = getattr(cpp_extension, "_import_module_from_library", None)
    if importer is None:  # a torch without that step: build in a child process (sandboxed where possible)
        return _build_in_child(kwargs)
    cpp_extension._import_module_from_library = lambda *args, **kw: None
    try:
        cpp_extension.load_inline(**kwargs)
    finally:
        cpp_extension._import_module_from_library = importer
    return None


_CHILD_BUILD = """import json, sys
from torch.utils import cpp_extension
# without the precompiled header, and leaving the shared one alone (use_pch=False would delete it)
cpp_extension.remove_extension_h_precompiler_headers = lambda: None
try:
    cpp_extension.load_inline(**json.loads(sys.argv[1]))
except RuntimeError as e:
    sys.stderr.write(str(e))
    sys.exit(1)
"""


def _build_in_child(kwargs: dict) -> None:
    """load_inline in a child process, which imports the module there, not here: in the sandbox
    when it works (only the build folder writable), without the shared precompiled header."""
    import subprocess
    import sys

    from ..check import sandbox

    kwargs = dict(kwargs, use_pch=False)
    argv = [sys.executable, "-c", _CHILD_BUILD, json.dumps(kwargs)]
    env = pyenv.subprocess_env()
    if sandbox.available() is None:
        argv, env = sandbox.wrap(argv, kwargs["build_directory"]), sandbox.environment(env)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr or proc.stdout)
    return None


class _pch_lock:
    """The precompiled header is one file shared by every build of this torch install. A build
    that finds it missing makes it under an exclusive lock; every other build holds a shared one,
    so it waits while the header is being written instead of reading it half-written (seen on the
    H200: two processes building at once on a fresh machine, one failed with "cannot read PCH
    file: Invalid argument")."""

    def __init__(self, torch_include: Path, use_pch: bool | None):
        self.gch = torch_include / "extension.h.gch"
        self.use_pch = bool(use_pch)
        self.f = None

    def __enter__(self):
        if self.use_pch:
            import fcntl

            self.f = open(pyenv.cache_dir() / "pch.lock", "w")
            fcntl.flock(self.f, fcntl.LOCK_SH)  # waits while another build holds it exclusively
            if not self.gch.exists():  # (not atomic: the lock is dropped, then taken exclusively)
                fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.f:
            self.f.close()  # releases the lock


def day_files(day: str) -> list[Path]:
    """A day's kernel versions: kernels/dayNN/*.cu except the exercise files."""
    exercises = {p.name for p in (paths.SOLUTIONS / day).glob("*.cu")}
    return sorted(p for p in (paths.KERNELS / day).glob("*.cu") if p.name not in exercises)


# A day's kernel versions are one translation unit of several files, and nvcc compiles a unit on
# one core: --split-compile runs its optimizer (cicc) and ptxas on parts of it in parallel. On the
# H200 machine (16 cores) Day 8's versions took 20.1 s in nvcc, 13.6 s split. nvcc says the option has
# "minimal (if any) impact on performance"; still, only the versions use it, and an exercise (one
# small file) is built as it always was and as it is graded.
DAY_FLAGS = ("--split-compile=0",)


def build_day(day: str, quiet: bool = False) -> Built:
    """All of a day's kernel versions in one extension, as its notebook uses them: for this GPU, or for
    the oldest GPU the day's kernels run on where this one is older (built and inspected, not run)."""
    from .. import exercises
    from ..spec import arch_key

    files = day_files(day)
    oldest = exercises.day_min_arch(day)
    if arch_key(machine.arch()) < arch_key(oldest):
        files = [replace(Source.read(f), arch=oldest) for f in files]
    return build(files, name=day, quiet=quiet, flags=DAY_FLAGS)


def load_built(directory: str | Path, module_name: str):
    """Import an already built extension by path (used in grading subprocesses)."""
    import importlib.machinery
    import importlib.util

    import torch  # noqa: F401  (the extension links against libtorch)

    path = Path(directory) / f"{module_name}.so"
    if not path.exists():  # a build of kernels: its module has the name of its binding (build())
        found = sorted(Path(directory).glob("*.so"))
        if len(found) != 1:
            raise ImportError(f"no single built module in {directory}: {[p.name for p in found]}")
        path = found[0]
        module_name = path.stem
    earlier = _imported.get(module_name)
    if earlier is not None and Path(earlier) != Path(directory):
        raise ImportError(f"{path}: this process has imported a module of the same name from {earlier}, and Python "
                          "would return that one; import it in a process of its own")
    _imported[module_name] = Path(directory)
    loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
