"""Grading processes that outlive a class run, stopped at its end. A grading process (the worker, the
compute-sanitizer or ncu over it, the bubblewrap around them) belongs to a lane process, which stops
it; one whose lane process died first is left to run on, and one left over so went on growing on a
GPU host after its run (a compute-sanitizer memcheck process at 241 GB of host memory on 2 x H100
at d2354f5, whatever its origin, until Ray's memory monitor killed the next run's workers). The run
makes its own process the subreaper of what it starts (prctl PR_SET_CHILD_SUBREAPER): an orphan
comes to it instead of init, and at the end every grading process among its children that it did
not have at the start is stopped with everything under it. Only processes the grader starts for a
grading count (by their command line): a caller's own children are not touched."""
from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
# The processes the grader starts for a grading (supervise.py, ncu.py, sandbox.py): by the program's
# name, or the worker's module in their command line.
GRADING_PROGRAMS = ("bwrap", "compute-sanitizer", "ncu")
GRADING_MODULE = "grader.check.worker"


def adopt_orphans() -> set[int]:
    """This process becomes the subreaper of its descendants (where Linux allows it); returns its
    children now, which stop_orphans() leaves alone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # (not Linux: orphans go to init, as before)
        pass
    return set(_children_of().get(os.getpid(), []))


def _children_of() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    return children


def _grading_command(pid: int) -> str | None:
    """Its command line if it is a grading process (GRADING_PROGRAMS, GRADING_MODULE); else None
    (an ended one, a zombie, has none)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    command = " ".join(argv).strip()
    return command if Path(argv[0]).name in GRADING_PROGRAMS or GRADING_MODULE in command else None


def stop_orphans(before: set[int]) -> list[str]:
    """Every grading process that became this process's child since adopt_orphans() returned
    `before` and still runs: stopped with all under it, and reaped. Returns their command lines."""
    children = _children_of()
    stopped = []
    for pid in children.get(os.getpid(), []):
        if pid in before:
            continue
        command = _grading_command(pid)
        if command is None:
            continue
        tree, todo = [], [pid]
        while todo:
            p = todo.pop()
            tree.append(p)
            todo += children.get(p, [])
        for p in tree:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        stopped.append(command[:300])
    return stopped
