"""Checks that read a submission without running it: the source (a kernel, no forbidden calls,
the fixed entry points) and the compiled SASS (registers, spills, the day's instructions)."""
from __future__ import annotations

import re

from .. import build as _build
from .. import config
from ..build.exports import _strip_comments, parse_exports
from ..spec import Exercise
from .result import Result

# What a kernel file may not use: the work has to be done by the learner's kernel.
DENY = [
    (r"#\s*include\s*[<\"](torch|ATen|c10|pybind11)", "includes torch/pybind11 headers (the binding is generated for you)"),
    (r"\b(at|torch|c10)::", "calls PyTorch from the kernel file"),
    # (curand's device API from curand_kernel.h, e.g. Philox for samplers, is header-only: allowed)
    (r"\bcublas\w*|\bcublasLt\w*|\bcudnn\w*|\bcufft\w*|\bcurand(Create|Generate|Set|Destroy|Get)\w*|\bcusparse\w*",
     "calls a CUDA library instead of computing"),
    (r"#\s*include\s*[<\"](thrust/|thread\b|future\b)", "uses thrust or host threads"),
    (r"\bstd::(thread|async)\b|\bpthread_create\b", "starts host threads"),
    (r"\bcudaStreamCreate\w*|\bcudaGraphLaunch\b", "creates its own streams or graphs"),
    (r"\bcudaMemcpy\w*|\bcudaMemset\w*", "copies or sets memory through the runtime instead of a kernel"),
    (r"\btry\s*\{|\bcatch\s*\(", "has a try/catch fallback"),
    (r"\b(system|popen|dlopen|fork|execv\w*)\s*\(", "runs other programs or loads libraries"),
    (r"\b(fopen|freopen|syscall|open|openat|mmap)\s*\(|\b(i|o|)fstream\b|\bFILE\s*\*", "reads or writes files"),
    (r'#\s*include\s*"(?!course/)', "includes a file other than the course headers (\"course/...\")"),
    (r"#\s*include\s*[<\"](/|[^>\"]*\.\.)", "includes a file by path"),
]

def static_checks(ex: Exercise, source: _build.Source, result: Result) -> bool:
    text = _strip_comments(source.text)
    if not source.text.strip():
        result.add("source", "readable", "fail", "the file is empty")
        return False
    if "__global__" not in text:
        result.add("source", "has a kernel", "fail", "no __global__ function: the work must be done by your kernel")
        return False
    denied = [why for rx, why in DENY if re.search(rx, text)]
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
                            f"`{want.prototype()}`")
    if problems:
        result.add("source", "entry points", "fail", "; ".join(problems))
        return False
    result.add("source", "entry points", "pass", ", ".join(sorted(found)))
    return True


def _shape(export) -> list[tuple]:
    """What an entry point must keep: each parameter's kind and type, and whether a pointer is
    to const (so that swapping `out` and `inp` is caught before anything runs)."""
    return [(p.kind, p.base, p.kind == "pointer" and "const" in p.ctype.split("*")[0].split())
            for p in export.params]


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
    spills = [k for k in report.kernels if k.spill_stores or k.spill_loads or k.stack_bytes]
    regs_ok = worst.registers <= ex.max_registers
    result.add("sass", "registers, no spills", "pass" if regs_ok and not spills else "fail",
               f"{worst.registers} registers in {worst.name} (limit {ex.max_registers})" if not spills else
               "local memory used (stack/spills) in " + ", ".join(
                   f"{k.name}: {k.stack_bytes} B stack, {k.spill_stores + k.spill_loads} B spilled" for k in spills))
    for opcode, why in ex.required_sass.items():
        missing = [k.name for k in report.kernels if not k.has_opcode(opcode)]
        if missing:
            result.add("sass", opcode, "fail", f"no {opcode} ({why}) in " + ", ".join(missing))
        else:
            result.add("sass", opcode, "pass", f"{why}: present in every kernel")
    return report


# A Python-module exercise may use torch and the course's own modules; nothing that reaches
# files, processes, the network or the interpreter's machinery (the sandbox is the backstop).
# "grader": the module runs in the grading process, where importing the grader would let it replace
# the reference, the comparison or the timing that judge it.
PY_DENY_MODULES = {"os", "sys", "subprocess", "socket", "ctypes", "cffi", "importlib", "shutil", "pathlib",
                   "io", "builtins", "multiprocessing", "threading", "signal", "pickle", "marshal", "requests",
                   "urllib", "http", "ftplib", "glob", "tempfile", "mmap", "resource", "pty", "fcntl", "gc",
                   "inspect", "runpy", "code", "codeop", "grader"}
PY_DENY_NAMES = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint",
                 "input", "getattr", "setattr", "delattr"}


LINK_CHECK = "host code (link check)"


def link_checks(ex: Exercise, source: _build.Source, result: Result, report: _build.CompileReport | None = None) -> bool:
    """What the host code links to and runs, read from its object file, so that no spelling hides
    a call (grader/build/symbols.py): from libraries only launch, runtime and math functions; no
    code that runs when the module is loaded; no system-call instructions. False on any finding:
    then nothing is built or run. The extension is linked from this very object
    (build.build_checked): what runs is what was checked."""
    from ..build import symbols

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
                   "runs code when the module is loaded: " + symbols.summary(found.load_time))
    if found.syscalls:
        result.add("source", "no system calls", "fail",
                   "makes system calls directly: " + symbols.summary(found.syscalls))
    if found.calls:
        result.add("source", "links only to allowed functions", "fail",
                   "host code uses what a kernel file may not: " + symbols.summary(found.calls))
    return False


def python_checks(ex: Exercise, source, result: Result) -> bool:
    """A learner's Python module: it parses, imports nothing forbidden, calls no forbidden
    builtin, and defines the exercise's entry points (as functions)."""
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
        denied += [f"{source.path}:{node.lineno}: imports {m}" for m in mods if m.split(".")[0] in PY_DENY_MODULES]
        if isinstance(node, ast.Name) and node.id in PY_DENY_NAMES:
            denied.append(f"{source.path}:{node.lineno}: uses {node.id}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__"):
            denied.append(f"{source.path}:{node.lineno}: reaches into {node.attr}")
        elif isinstance(node, ast.Attribute) and (node.attr in PY_DENY_MODULES or node.attr == "modules"):
            # a denied module reached through one that imported it (torch.sys.modules, torch.os, ...)
            denied.append(f"{source.path}:{node.lineno}: reaches {node.attr} through another module")
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
