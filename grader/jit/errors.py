"""A failed build as its first error: the file and line it points at and the source around it."""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..paths import display_path


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


_NVCC_ERR = re.compile(r"^(?P<file>[^\s(][^(\n]*)\((?P<line>\d+)\): (?:catastrophic )?error\b:?\s*(?P<msg>.*)$", re.M)
_GCC_ERR = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?error:\s*(?P<msg>.*)$", re.M)
# ptxas on the PTX nvcc generated: "ptxas /tmp/x.ptx, line 107; error   : Instruction ... not supported ..."
_PTXAS_ERR = re.compile(r"^ptxas\b.*?(?:, line \d+)?;\s*error\s*:\s*(?P<msg>.*)$", re.M)
_OTHER_ERR = re.compile(r"^.*(?:ptxas fatal|ptxas error|undefined reference|nvlink error|error:).*$", re.M)


def _excerpt(sources: list, file: str, line: int, context: int = 2) -> str:
    text = next((s.text for s in sources if s.path == file or file.endswith(s.path)), None)
    if text is None and Path(file).exists():
        text = Path(file).read_text(errors="replace")
    if text is None:
        return ""
    lines = text.splitlines()
    lo, hi = max(1, line - context), min(len(lines), line + context)
    return "\n".join(f"{'>' if i == line else ' '} {i:4d} | {lines[i - 1]}" for i in range(lo, hi + 1))


def parse_first_error(log: str, sources: list, what: str) -> BuildError:
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
    m = _PTXAS_ERR.search(log)
    if m:
        return BuildError(what, f"ptxas (the assembler, on the PTX compiled from your file): {m.group('msg').strip()}",
                          log=log)
    m = _OTHER_ERR.search(log)
    first = m.group(0).strip() if m else (log.strip().splitlines() or ["(no compiler output)"])[-1]
    return BuildError(what, first, log=log)
