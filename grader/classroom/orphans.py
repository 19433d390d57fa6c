"""Grading processes that outlive a class run, stopped at its end. A grading process (the worker, the
compute-sanitizer or ncu over it, the bubblewrap around them) belongs to a lane process, which stops
it; one whose lane process died first is left to run on, and may go on growing on a GPU host after
its run (a compute-sanitizer memcheck process reached 241 GB of host memory: reports/ray-class-2gpu-oom-d2354f5.log). The run
makes its own process the subreaper of what it starts (prctl PR_SET_CHILD_SUBREAPER): an orphan
comes to it instead of init, and at the end every grading process among its children that it did
not have at the start is stopped with everything under it. Only processes the grader starts for a
grading count (by their command line): a caller's own children are not touched."""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

from ..check.supervise import children_by_parent, descendants, kill_all, process_state

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
# The processes the grader starts for a grading (supervise.py, ncu.py, sandbox.py): by the program's
# name, or the worker's module in their command line.
GRADING_PROGRAMS = ("bwrap", "compute-sanitizer", "ncu")
GRADING_MODULE = "grader.check.worker"


@dataclass
class Adopted:
    before: set[int]        # this process's children when the run began: never touched
    was_subreaper: int | None  # its subreaper flag before (None: unknown, not Linux)


def adopt_orphans() -> Adopted:
    """This process becomes the subreaper of its descendants (where Linux allows it) until
    stop_orphans(); what it had as children now is left alone."""
    was = None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        flag = ctypes.c_int(0)
        if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0:
            was = flag.value
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # (not Linux: orphans go to init, as before)
        pass
    return Adopted(set(children_by_parent().get(os.getpid(), [])), was)


def _grading_command(pid: int) -> str | None:
    """Its command line if it is a grading process (GRADING_PROGRAMS, GRADING_MODULE); else None
    (an ended one, a zombie, has none)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    command = " ".join(argv).strip()
    return command if Path(argv[0]).name in GRADING_PROGRAMS or GRADING_MODULE in command else None


def _reap(pid: int, wait: bool) -> None:
    try:
        os.waitpid(pid, 0 if wait else os.WNOHANG)
    except ChildProcessError:
        pass


def stop_orphans(adopted: Adopted) -> list[str]:
    """Every grading process that became this process's child since adopt_orphans() and still
    runs: stopped with all under it; those ended meanwhile reaped; and this process no longer their
    subreaper (as it was before). Returns the stopped ones' command lines."""
    children = children_by_parent()
    stopped = []
    for pid in children.get(os.getpid(), []):
        if pid in adopted.before:
            continue
        command = _grading_command(pid)
        if command is None:
            if process_state(pid) == "Z":  # (an orphan that ended here: not left a zombie in the caller's process)
                _reap(pid, wait=False)
            continue
        kill_all(descendants(pid, children))
        _reap(pid, wait=True)
        stopped.append(command[:300])
    if adopted.was_subreaper == 0:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    return stopped
