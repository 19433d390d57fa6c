"""Readable C++ names of kernels and host functions: demangled by the toolkit's cu++filt (GNU
c++filt where it has none), written the same whichever tool read them."""
from __future__ import annotations

import re
import shutil
import subprocess

from .. import toolkit


def demangle(mangled: list[str]) -> dict[str, str]:
    """Readable kernel names, e.g. `silu_and_mul_kernel<__half, 8>`: cu++filt from the CUDA
    toolkit (GNU c++filt where the toolkit has none; both read the Itanium C++ ABI), without
    the return type and parameter list. A name no tool can read stays mangled."""
    tool = toolkit.binary_tool("cu++filt") or shutil.which("c++filt")
    if not tool or not mangled:
        return {m: m for m in mangled}
    proc = subprocess.run([tool], input="\n".join(mangled) + "\n", capture_output=True, text=True)
    lines = proc.stdout.splitlines() if proc.returncode == 0 else []
    if len(lines) != len(mangled):
        return {m: m for m in mangled}
    return {m: without_signature(d) for m, d in zip(mangled, lines)}


def without_signature(name: str) -> str:
    """'void (anonymous namespace)::k<(int)4, (bool)1>(float*, int)' -> 'k<4, true>': no return
    type, parameters or namespaces, and template numbers written the same by cu++filt and GNU
    c++filt (the toolkit's prints `(int)4` and `<unnamed>::` where binutils' prints `4` and
    `(anonymous namespace)::`)."""
    name = name.removeprefix("void ")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    base, args = (name.split("<", 1) + [""])[:2]
    base = base.rsplit("::", 1)[-1]
    args = re.sub(r"\(bool\)1\b", "true", re.sub(r"\(bool\)0\b", "false", args))
    args = re.sub(r"\((?:unsigned |signed )?(?:int|long|long long|short|char)\)(-?\d+)", r"\1", args)
    return f"{base}<{args}" if args else base
