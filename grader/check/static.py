"""Checks that read a submission without running it: the source (a kernel, no forbidden calls,
the fixed entry points) and the compiled SASS (registers, spills, the day's instructions)."""
from __future__ import annotations

import re

from .. import jit as _build
from .. import config
from ..jit.exports import _strip_comments, parse_exports
from ..spec import Exercise
from .result import Result

# What a kernel file may not use, and what to do instead: the work has to be done by the learner's
# kernel, and the file may reach nothing but the GPU (docs/grading-method.md, "What a kernel file may do").
DENY = [
    (r"#\s*include\s*[<\"](torch|ATen|c10|pybind11)",
     "includes torch/pybind11 headers: remove the #include (the binding is generated for you from COURSE_EXPORT)"),
    (r"\b(at|torch|c10)::", "calls PyTorch from the kernel file: take raw pointers and compute in your kernel"),
    # (curand's device API from curand_kernel.h, e.g. Philox for samplers, is header-only: allowed)
    (r"\bcublas\w*|\bcublasLt\w*|\bcudnn\w*|\bcufft\w*|\bcurand(Create|Generate|Set|Destroy|Get)\w*|\bcusparse\w*",
     "calls a CUDA library instead of computing: write the kernel yourself"),
    (r"#\s*include\s*[<\"](thrust/|thread\b|future\b)", "uses thrust or host threads: do the work in your kernel"),
    (r"\bstd::(thread|async)\b|\bpthread_create\b", "starts host threads: do the work in your kernel"),
    (r"\bcudaStreamCreate\w*|\bcudaGraphLaunch\b",
     "creates its own streams or graphs: launch on the cudaStream_t the entry point is given"),
    # cudaMemcpyToSymbol(Async): a small table (__constant__) uploaded from the host is allowed; it can
    # hold only what the host knows (the scalar arguments), never the inputs or the output. (The names
    # of cudaMemcpyKind, which it takes, are not calls.)
    (r"\bcudaMemcpy(?!(ToSymbol(Async)?|HostToHost|HostToDevice|DeviceToHost|DeviceToDevice|Default|Kind)\b)\w*"
     r"|\bcudaMemset\w*",
     "copies or sets a buffer through the runtime (cudaMemcpy*/cudaMemset*) instead of a kernel: write (or zero) "
     "it in your kernel; only a small table may be uploaded, with cudaMemcpyToSymbolAsync to a __constant__ "
     "variable on the given stream"),
    (r"\btry\s*\{|\bcatch\s*\(", "has a try/catch fallback: return a cudaError_t instead"),
    (r"\b(system|popen|dlopen|fork|execv\w*)\s*\(", "runs other programs or loads libraries: remove that call"),
    (r"\b(fopen|freopen|syscall|open|openat|mmap)\s*\(|\b(i|o|)fstream\b|\bFILE\s*\*",
     "reads or writes files: remove that code (printing to stdout or stderr is fine)"),
    (r"#\s*include\s*[<\"](/|[^>\"]*\.\.)", "includes a file by path: include course headers as \"course/...\" and "
     "toolkit or standard headers by name"),
]

_QUOTED_INCLUDE = re.compile(r'#\s*include\s*"([^"]*)"')


def foreign_quoted_includes(text: str) -> list[str]:
    """The `#include "..."` of `text` that name neither a course header ("course/...") nor a
    CUDA toolkit or C/C++ standard header (one found by that name in the toolkit's or the compiler's
    own include folders, as `<...>` would find it: "cuda_fp16.h", "cub/cub.cuh", "cstdint").
    Paths (`/`, `..`) are DENY's."""
    names = [n for n in _QUOTED_INCLUDE.findall(text)
             if not n.startswith("course/") and not n.startswith("/") and ".." not in n]
    if not names:
        return []
    from ..jit.sass import system_header
    return [n for n in names if not system_header(n)]


def static_checks(ex: Exercise, source: _build.Source, result: Result) -> bool:
    text = _strip_comments(source.text)
    if not source.text.strip():
        result.add("source", "readable", "fail", "the file is empty")
        return False
    if "__global__" not in text:
        result.add("source", "has a kernel", "fail", "no __global__ function: the work must be done by your kernel")
        return False
    denied = [why for rx, why in (*DENY, *ex.source_deny) if re.search(rx, text)]
    foreign = foreign_quoted_includes(text)
    if foreign:
        denied.append("includes " + ", ".join(f'"{n}"' for n in foreign[:3]) + ", which is neither a course header "
                      "(\"course/...\") nor a CUDA toolkit or C/C++ standard header: keep your code in this one file")
    if denied:
        result.add("source", "does its own work", "fail", "; ".join(denied))
        return False
    result.add("source", "does its own work", "pass", "a __global__ kernel, no forbidden calls")
    try:
        found = {e.name: e for e in parse_exports(source.text, source.path)}
    except ValueError as e:
        result.add("source", "entry points", "fail", str(e))
        return False
    problems = []
    for proto in ex.entry_points:
        want = parse_exports("COURSE_EXPORT " + proto + ";")[0]
        got = found.get(want.name)
        if got is None:
            problems.append(f"missing `COURSE_EXPORT {proto}`")
        elif (got.returns, _shape(got)) != (want.returns, _shape(want)):
            problems.append(f"{source.path}:{got.line}: `{got.prototype()}` does not match the fixed entry point "
                            f"`{want.prototype()}`: {_difference(got, want)}")
        else:
            # The binding lets a tensor's rows lie apart only for a parameter named *stride (exports:
            # _binding_function): a row stride renamed would make it refuse q and k sliced from one qkv.
            renamed = [(g.name, w.name) for g, w in zip(got.params, want.params)
                       if g.name.endswith("stride") != w.name.endswith("stride")]
            if renamed:
                problems.append(f"{source.path}:{got.line}: " + "; ".join(
                    f"`{g}` is the entry point's `{w}`: " + ("name it `...stride`: a parameter named so tells the "
                                                             "binding that tensors may have rows apart"
                                                             if w.endswith("stride") else
                                                             "give it a name that does not end in `stride` (the "
                                                             "binding reads such a name as a row stride)")
                    for g, w in renamed))
    if problems:
        result.add("source", "entry points", "fail", "; ".join(problems))
        return False
    result.add("source", "entry points", "pass", ", ".join(sorted(found)))
    return True


def _shape(export) -> list[tuple]:
    """What an entry point must keep: each parameter's kind and type (the type itself, however it
    is spelled: `half` is `__half`, `int64_t` is `long`), and whether a pointer is to const (so that
    swapping `out` and `inp` is caught before anything runs). Names may differ."""
    return [(p.kind, p.type, p.const_pointee) for p in export.params]


def _difference(got, want) -> str:
    """What to change, for the first parameter that differs (or the return type, or the count)."""
    from ..jit.exports import _spelled_as

    if got.returns != want.returns:
        return f"it returns {got.returns}; return {want.returns}"
    if len(got.params) != len(want.params):
        return f"it takes {len(got.params)} parameters, the entry point {len(want.params)}"
    if sorted(_shape(got)) == sorted(_shape(want)):
        return ("the parameters are in another order: keep the entry point's, "
                + ", ".join(f"`{p.name}`" for p in want.params))
    for i, (g, w) in enumerate(zip(got.params, want.params), 1):
        if (g.kind, g.type) != (w.kind, w.type):
            what = {"pointer": f"a pointer to {_spelled_as(w.type)}", "scalar": _spelled_as(w.type),
                    "stream": "cudaStream_t"}[w.kind]
            has = {"pointer": f"a pointer to {g.base}", "scalar": g.base, "stream": "cudaStream_t"}[g.kind]
            return f"parameter {i} (`{g.name}`) is {has} where the entry point has {what}"
        if g.const_pointee != w.const_pointee:
            return (f"parameter {i} (`{g.name}`) must point to const (`const {g.base}*`): it is an input, and the const "
                    "tells inputs from outputs" if w.const_pointee else
                    f"parameter {i} (`{g.name}`) is written: drop the const (`{g.base}*`)")
    return "the types differ"


def sass_checks(ex: Exercise, source: _build.Source, result: Result) -> _build.CompileReport | None:
    """Registers, spills and the exercise's required instructions in the compiled SASS;
    returns the compile report (None if it did not compile or holds no kernel)."""
    try:
        report = _build.compile_cubin(source, host_object=True)  # the same nvcc call makes the host object
    except _build.BuildError as e:
        result.add("build", "compiles (nvcc, sm_90)", "fail", e.summary())
        return None
    if not report.kernels:
        result.add("sass", "kernels", "fail", "the cubin holds no kernel: is the __global__ function ever launched?")
        return None
    reserved = [k.name for k in report.kernels if any(s in k.mangled for s in config.SANITIZER_SKIP_KERNELS)]
    if reserved:
        result.add("sass", "kernel names", "fail",
                   f"{', '.join(reserved)}: a kernel's name (namespaces included) may not contain "
                   f"{' or '.join(repr(s) for s in config.SANITIZER_SKIP_KERNELS)}: those are PyTorch's kernels, "
                   "which the grader's compute-sanitizer stage does not check; rename it")
    worst = max(report.kernels, key=lambda k: k.registers)
    limit = ex.register_limit(report.arch)
    regs_ok = worst.registers <= limit
    detail = (f"{worst.registers} registers in {worst.name} (limit {limit})" if regs_ok else
              f"{worst.registers} registers in {worst.name}, over the limit of {limit}: keep fewer values "
              "live at once (fewer elements per thread, smaller unrolled arrays)")
    # Local memory is reported, not refused: where it is (a scalar fallback, a debug printf's registers,
    # sincosf's slow path for huge angles) it often costs nothing, and where it costs, the speed check
    # measures it. The references keep none (tests/test_archs.py).
    local = [k for k in report.kernels if k.local_memory]
    printing = [k for k in report.kernels if k.printf_frame_only]
    if local:
        detail += ("; local memory (not refused) in " + ", ".join(
            f"{k.name}: {k.spill_stores + k.spill_loads} B spilled, {k.stack_bytes} B stack" for k in local)
            + ": on the timed path it costs time (spilled registers, or an array indexed at run time); if the "
              "speed target is missed, look there first")
    if printing:
        detail += ("; " + ", ".join(f"{k.name}: {k.stack_bytes} B" for k in printing)
                   + " of stack only for printf's arguments (not refused): a printf in a kernel, even one never "
                     "taken, changes how the whole kernel is compiled and can cost a fifth of its speed; if the "
                     "speed target is missed, take it out first")
    result.add("sass", "registers", "pass" if regs_ok else "fail", detail)
    _device_globals_check(ex, report, result)
    for opcode, why in ex.required_sass.items():
        # The technique must show in the file, not in every kernel: a scalar kernel beside the
        # vectorized one (unaligned rows), or a template instantiated both ways, is what production code
        # does. The timed cases take the fast path, and the speed check is what catches a fake one.
        having = [k.name for k in report.kernels if k.has_opcode(opcode)]
        if not having:
            result.add("sass", opcode, "fail", f"no {opcode} in any kernel ({', '.join(k.name for k in report.kernels)}): "
                       f"the exercise asks for {why}")
        else:
            others = len(report.kernels) - len(having)
            result.add("sass", opcode, "pass", f"{why}: in {', '.join(having)}"
                       + (f" (not in the other {others} kernel{'s' * (others > 1)})" if others else ""))
    return report


def _device_globals_check(ex: Exercise, report: _build.CompileReport, result: Result) -> None:
    """A kernel file keeps no more device memory of its own than its exercise allows
    (config.DEVICE_GLOBALS_LIMIT): between calls a kernel may carry nothing that could hold results."""
    used, limit = report.globals_bytes, ex.device_globals_limit
    if used <= limit:
        result.add("sass", "device memory of its own", "pass",
                   f"{used} B of __device__ variables (limit {limit // 1024} KB)")
    else:
        result.add("sass", "device memory of its own", "fail",
                   f"{used} B of __device__ variables, over this exercise's {limit // 1024} KB: a kernel keeps "
                   "nothing between calls that could hold inputs or results; work in the buffers the entry point "
                   "is given (a counter, a flag or a small table is fine; read-only tables can be __constant__)")


# What a Python-module exercise may import: torch and a few of Python's own modules that hold no way
# to files, processes, the network or the interpreter's machinery (operator's attrgetter, string's
# Formatter, pydoc's locate and pkgutil's resolve_name each reach any attribute or module by name).
# The module runs in the grading process; the sandbox is the backstop, and its outputs and timings are
# judged in processes of the grader's own (judge.py, timed_apart.py).
PY_ALLOWED_IMPORTS = ("__future__", "abc", "collections", "contextlib", "dataclasses", "enum", "functools",
                      "itertools", "math", "numbers", "torch", "typing")
# Modules a module could still reach as an attribute of another (torch.sys, torch.os): refused by name.
PY_DENY_MODULES = {"os", "sys", "subprocess", "socket", "ctypes", "cffi", "importlib", "shutil", "pathlib",
                   "io", "builtins", "multiprocessing", "threading", "signal", "pickle", "marshal", "requests",
                   "urllib", "http", "ftplib", "glob", "tempfile", "mmap", "resource", "pty", "fcntl", "gc",
                   "inspect", "runpy", "code", "codeop", "grader", "operator", "pydoc", "pkgutil"}
# Ways to load native code of its own a module could take from inside torch (an extension it compiles,
# a shared library): refused as attributes and as module parts.
PY_DENY_NATIVE = {"cpp_extension", "load_library", "ctypeslib"}
# torch's ways to files and to code from elsewhere (torch.save, torch.from_file, torch.hub, torch.package),
# refused as attributes of what a module imported.
PY_DENY_FILES = {"save", "from_file", "hub", "package"}
PY_DENY_NAMES = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint",
                 "input", "getattr", "setattr", "delattr"}


LINK_CHECK = "host code (link check)"


def link_checks(ex: Exercise, source: _build.Source, result: Result, report: _build.CompileReport | None = None) -> bool:
    """What the host code links to and runs, read from its object file, so that no spelling hides
    a call (grader/jit/symbols.py): from libraries only launch, runtime and math functions; no
    code that runs when the module is loaded; no system-call instructions. False on any finding:
    then nothing is built or run. The extension is linked from this very object
    (jit.build_checked): what runs is what was checked."""
    from ..jit import symbols

    path = report.host_object if report else ""
    if not path:
        try:
            path = _build.compile_cubin(source, host_object=True).host_object
        except _build.BuildError as e:
            result.add("build", "compiles (nvcc, sm_90)", "fail", e.summary())
            return False
    try:
        found = symbols.inspect(path)
    except (symbols.LinkCheckError, OSError) as e:
        result.add("source", LINK_CHECK, "fail", f"cannot check what the host code links to: {e}")
        return False
    if found.ok:
        result.add("source", LINK_CHECK, "pass", f"links only to launch, runtime and math functions "
                   f"({len(found.undefined)} symbols); no code at load time; no system calls")
        return True
    if found.load_time:
        result.add("source", "no code at load time", "fail",
                   "runs code when the module is loaded: " + symbols.summary(found.load_time) +
                   ": give globals constant initialisers (constexpr, __constant__ tables) and compute the rest in "
                   "the launcher or the kernel")
    if found.syscalls:
        result.add("source", "no system calls", "fail",
                   "makes system calls directly: " + symbols.summary(found.syscalls) + ": remove the inline asm")
    if found.calls:
        remedies = sorted({symbols.REMEDIES[f.why] for f in found.calls if f.why in symbols.REMEDIES})
        result.add("source", "links only to allowed functions", "fail",
                   "host code uses what a kernel file may not: " + symbols.summary(found.calls) + ". "
                   + "; ".join(remedies + [LAUNCHER_MAY]))
    return False


# What the link check's refusal tells a learner a launcher may do (symbols.ALLOWED)
LAUNCHER_MAY = ("a launcher checks its arguments, computes a grid, launches kernels on the stream it is given and "
                "returns cudaGetLastError(); it may also query the device, set kernel attributes, print to stdout or "
                "stderr, assert, and upload a __constant__ table with cudaMemcpyToSymbolAsync")


# Dunder names a module may use: its own name and metadata. The rest (__builtins__, __loader__,
# __spec__, ...) reach the interpreter's machinery around the import checks.
PY_ALLOWED_DUNDERS = {"__name__", "__doc__", "__all__", "__version__", "__annotations__", "__file__", "__qualname__"}
# torch.library functions that register or replace an operator's implementation: only for the course's
# own ops ("course::..."), never aten's, whose replacement would change what the reference computes.
PY_LIBRARY_CALLS = {"Library", "impl", "define", "custom_op", "triton_op", "register_kernel", "register_fake",
                    "register_autograd", "register_torch_dispatch", "register_vmap", "fallthrough_kernel", "impl_abstract"}


def _chain_root(node):
    """The root of an attribute / subscript / call chain (`a` in a.b[0].c), and whether a call is on the way."""
    import ast

    called = False
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call, ast.Starred)):
        called = called or isinstance(node, ast.Call)
        node = node.func if isinstance(node, ast.Call) else node.value
    return node, called


def _module_names(tree) -> set[str]:
    """Names bound to an imported module or to something imported from one, and the names later made
    aliases of them (`t = torch`, `f = torch.nn.functional`, `with torch as t`, `for t in (torch,)`)."""
    import ast

    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name.split(".")[0]) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    while True:
        more = set()
        for node in ast.walk(tree):
            pairs = []
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                pairs = [(t, node.value) for t in targets]
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                pairs = [(node.optional_vars, node.context_expr)]
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                pairs = [(node.target, node.iter)]
            elif isinstance(node, ast.arguments):
                args = node.posonlyargs + node.args
                pairs = list(zip(args[len(args) - len(node.defaults):], node.defaults))
                pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
            for target, value in pairs:
                if _names_a_module(value, names):
                    more |= _bound_names(target)
        if more <= names:
            return names
        names |= more


def _names_a_module(value, names: set[str]) -> bool:
    """`value` is one of `names` or an attribute of one (torch, torch.nn.functional), or a tuple or list
    holding such: an alias of a module, not an object a call made."""
    import ast

    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_module(v, names) for v in value.elts)
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Name) and value.id in names


def _bound_names(target) -> set[str]:
    """The plain names an assignment target binds (a, or a and b in a, *b), not the roots of a.x or a[i]."""
    import ast

    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.arg):
        return {target.arg}
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound_names(t) for t in target.elts)) if target.elts else set()
    return set()


def _calls_parent_constructor(node) -> bool:
    """`super().__init__`: a class of the module (an nn.Module's subclass) starting its parent."""
    import ast

    return (node.attr == "__init__" and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "super")


def _python_reach(tree, path: str) -> list[str]:
    """The ways around the import checks a module's source takes: dunder names, attribute stores on
    what it imported (a patched torch function would judge it), operators registered outside `course::`."""
    import ast

    found = []
    modules = _module_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id.startswith("__") and node.id.endswith("__") \
                and node.id not in PY_ALLOWED_DUNDERS:
            found.append(f"{path}:{node.lineno}: uses {node.id}")
        if isinstance(node, ast.Attribute) and node.attr in PY_DENY_FILES \
                and isinstance(_chain_root(node.value)[0], ast.Name) and _chain_root(node.value)[0].id in modules:
            found.append(f"{path}:{node.lineno}: reaches files or code from elsewhere through {ast.unparse(node)}")
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            root, called = _chain_root(node.value)
            what = "assigns to" if isinstance(node.ctx, ast.Store) else "deletes"
            if not isinstance(root, ast.Name) or called:
                found.append(f"{path}:{node.lineno}: {what} {ast.unparse(node)}: set attributes only on your own "
                             f"objects (self.x = ...)")
            elif root.id in modules:
                found.append(f"{path}:{node.lineno}: {what} {ast.unparse(node)}, part of a module it imported: "
                             f"the grader compares and times with those modules; keep your changes in your own names")
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            owner = func.value if isinstance(func, ast.Attribute) else None  # torch.library.impl, library.impl
            via_library = "library" in (getattr(owner, "attr", None), getattr(owner, "id", None))
            if name in PY_LIBRARY_CALLS and (via_library or name in modules):
                first = node.args[0] if node.args else None
                ok = isinstance(first, ast.Constant) and isinstance(first.value, str) \
                    and (first.value == "course" or first.value.startswith("course::"))
                if not ok:
                    found.append(f"{path}:{node.lineno}: torch.library.{name} on "
                                 f"{ast.unparse(first) if first is not None else 'nothing'}: register only the "
                                 f"course's ops, \"course::<name>\"")
    return found


def python_checks(ex: Exercise, source, result: Result) -> bool:
    """A learner's Python module: it parses, imports nothing forbidden, calls no forbidden builtin,
    reaches no further (_python_reach), and defines the exercise's entry points (as functions)."""
    import ast

    try:
        tree = ast.parse(source.text, filename=source.path)
    except SyntaxError as e:
        result.add("source", "parses", "fail", f"{source.path}:{e.lineno}: {e.msg}")
        return False
    denied = []
    for node in ast.walk(tree):
        mods = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
        denied += [f"{source.path}:{node.lineno}: imports {m} (a module may import {', '.join(PY_ALLOWED_IMPORTS)})"
                   for m in mods if m.split(".")[0] not in PY_ALLOWED_IMPORTS
                   or (PY_DENY_NATIVE | PY_DENY_FILES) & set(m.split("."))]
        if isinstance(node, ast.ImportFrom):
            denied += [f"{source.path}:{node.lineno}: imports {a.name} from {node.module}" for a in node.names
                       if a.name in PY_DENY_NATIVE | PY_DENY_FILES]
        if isinstance(node, ast.Name) and node.id in PY_DENY_NAMES:
            denied.append(f"{source.path}:{node.lineno}: uses {node.id}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__") \
                and not _calls_parent_constructor(node):
            denied.append(f"{source.path}:{node.lineno}: reaches into {node.attr}")
        elif isinstance(node, ast.Attribute) and node.attr in PY_DENY_NATIVE:
            denied.append(f"{source.path}:{node.lineno}: reaches native code through {ast.unparse(node)}")
        elif isinstance(node, ast.Attribute) and (node.attr in PY_DENY_MODULES or node.attr == "modules"):
            # a denied module reached through one that imported it (torch.sys.modules, torch.os, ...)
            denied.append(f"{source.path}:{node.lineno}: reaches {node.attr} through another module")
    denied += _python_reach(tree, source.path)
    if denied:
        result.add("source", "does its own work", "fail", "; ".join(denied[:5]))
        return False
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    missing = [e for e in ex.entry_points if e not in defined]
    if missing:
        result.add("source", "entry points", "fail", "missing: " + ", ".join(missing))
        return False
    result.add("source", "does its own work", "pass", "imports and builtins within the allowed set")
    result.add("source", "entry points", "pass", ", ".join(ex.entry_points))
    return True
