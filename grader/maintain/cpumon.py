"""Where a host's CPU time goes while something runs beside it (a maintainer's tool for the class
benchmark): every 0.2 s each process's user+system time from /proc, summed per kind of process (nvcc's
tools, the host compiler, a grading process and which, compute-sanitizer, the preparation pool, ...),
with a timeline in 5 s bins, and what the grading processes' main threads were doing at each look (running,
or asleep and where in the kernel: /proc/PID/wchan), counted per kind, and for a grading process also per
stage of its grading (from its results file: starting, waiting for its submission, each phase; "stages"),
so that a wait in the GPU driver's lock shows where in a grading it falls. It ends when the file STOP
exists, then writes OUT.json and prints a table.

    python -m grader.maintain.cpumon reports/raw/cpumon.json STOP &
    python -m grader class-benchmark 84 --gpus 2 ...; touch STOP

The record is a raw run output (git ignores reports/raw/). Where a finding rests on it, commit the
table it prints, as the class benchmarks' tables are (reports/README.md), and cite that.

A process's time counts from its start if it started after the monitor, else from when it was first
seen; what it used in its last 0.2 s, and processes shorter than that, are missed (the "accounted"
figure against the host's busy CPU-seconds from /proc/stat says how much).
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict

from ..check.supervise import RESULTS_FILE
from ..check.worker import PAUSED_PHASE, WARM_READY

TICK_S = 0.2
BIN_S = 5
TOOLS = {"cicc": "nvcc", "ptxas": "nvcc", "nvcc": "nvcc", "cudafe++": "nvcc", "fatbinary": "nvcc", "nvlink": "nvcc",
         "cuobjdump": "cuobjdump/nvdisasm", "nvdisasm": "cuobjdump/nvdisasm", "cu++filt": "cuobjdump/nvdisasm",
         "cc1plus": "host compiler (cc1plus)", "cc1": "host compiler (cc1plus)", "gcc": "host compiler driver",
         "g++": "host compiler driver", "c++": "host compiler driver", "x86_64-linux-gnu-g++": "host compiler driver",
         "ld": "linker", "collect2": "linker", "as": "assembler", "ninja": "ninja", "bwrap": "bwrap",
         "compute-sanitiz": "compute-sanitizer", "TargetProcess": "compute-sanitizer"}


def _busy_ticks() -> int:
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:]))
    return sum(v) - v[3] - v[4]  # all but idle and iowait


def _stat(pid: str) -> tuple[str, list[str]]:
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    return s[s.index("(") + 1:s.rindex(")")], s[s.rindex(")") + 2:].split()


def _ancestors(ppid: int, depth: int = 6) -> list[str]:
    names = []
    for _ in range(depth):
        try:
            comm, rest = _stat(str(ppid))
        except OSError:
            break
        names.append(comm)
        ppid = int(rest[1])
    return names


def category(comm: str, cmd: str, nice: int, ppid: int) -> str:
    """What a process is, from its name, its command line, its nice value and its ancestors."""
    if comm in TOOLS:
        return TOOLS[comm]
    if "python" not in comm and "grader" not in cmd:
        return "other: " + comm
    if "calibrate" in cmd:
        return "calibration"
    if "grader.check.worker" in cmd:
        kind = "profiler" if "--wait-profiler" in cmd else ("warm" if "--wait" in cmd else "cold")
        sanitized = any(a.startswith("compute-sanit") for a in _ancestors(ppid))
        return f"worker {kind}" + (" under compute-sanitizer" if sanitized else "")
    if "spawn_main" in cmd:  # a process pool's: the preparation's run niced (config.PREPARE_NICE)
        return "prep pool process (nice)" if nice > 0 else "slot process"
    if "-m grader" in cmd:
        return "driver"
    return "python other: " + cmd[:60]


def watch(stop: str) -> dict:
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as f:
        start_ticks = float(f.read().split()[0]) * hz
    t0, busy0 = time.time(), _busy_ticks()
    seen: dict = {}  # (pid, start time) -> [category, last cpu ticks, cpu ticks counted from, grading folder or None]
    timeline: dict = defaultdict(lambda: defaultdict(float))
    waits: dict = defaultdict(lambda: defaultdict(int))  # kind -> "state wchan" -> looks
    stages: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))  # kind -> stage -> R/lock/... -> looks
    while not os.path.exists(stop):
        at = int((time.time() - t0) // BIN_S) * BIN_S
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                comm, rest = _stat(pid)
            except OSError:
                continue
            ppid, cpu, nice, started = int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[16]), rest[19]
            rec = seen.get((pid, started))
            if rec is None:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    cmd = ""
                first = 0 if int(started) > start_ticks else cpu
                kind = category(comm, cmd, nice, ppid)
                folder = _worker_folder(cmd) if kind.startswith("worker") else None
                rec = seen[(pid, started)] = [kind, first, first, folder]
            elif rec[0] == "slot process" and nice > 0:  # (a pool process niced after it was seen)
                rec[0] = "prep pool process (nice)"
            timeline[at][rec[0]] += (cpu - rec[1]) / hz
            rec[1] = cpu
            if rec[0].startswith(("worker", "slot process")):
                doing = _doing(pid, rest[0])
                waits[rec[0]][doing] += 1
                if rec[3]:
                    stages[rec[0]][grading_stage(rec[3])][_wait_kind(doing)] += 1
        time.sleep(TICK_S)
    totals: dict = defaultdict(float)
    counts: dict = defaultdict(int)
    for cat, cpu, first, _ in seen.values():
        totals[cat] += (cpu - first) / hz
        counts[cat] += 1
    order = sorted(totals, key=lambda c: -totals[c])
    return {"seconds": time.time() - t0, "busy_cpu_s": (_busy_ticks() - busy0) / hz,
            "accounted_cpu_s": sum(totals.values()), "cpus": os.cpu_count(),
            "by_category": {c: round(totals[c], 1) for c in order}, "processes": {c: counts[c] for c in order},
            "timeline": {str(k): {c: round(v, 2) for c, v in row.items()} for k, row in sorted(timeline.items())},
            "waits": {c: dict(sorted(w.items(), key=lambda kv: -kv[1])) for c, w in waits.items()},
            "stages": {c: {st: dict(k) for st, k in by.items()} for c, by in stages.items()}}


def _worker_folder(cmd: str) -> str | None:
    """A grading process's folder (its config's, results' and marker files'), from its command line
    (`... grader.check.worker --wait FOLDER/config.json` or `grader.check.worker FOLDER/config.json`)."""
    args = cmd.split()
    for i, a in enumerate(args):
        if a == "grader.check.worker" and i + 1 < len(args):
            path = args[i + 2] if args[i + 1].startswith("--") and i + 2 < len(args) else args[i + 1]
            return os.path.dirname(path)
    return None


def grading_stage(folder: str) -> str:
    """Where a grading process is, from what it has written: 'starting' (torch, its CUDA context),
    'waiting for its submission' (worker.WARM_READY written, no results yet), 'module loading' (its
    results file begun), 'cases' (ready: the correctness cases), 'after PHASE' (the phase that ended
    last: the next one runs), 'exiting' (done)."""
    try:
        with open(os.path.join(folder, RESULTS_FILE), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        lines = []
    stage = None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        event = rec.get("event") if isinstance(rec, dict) else None
        if event == "ready":
            stage = "cases"
        elif event == "phase" and rec.get("name") != PAUSED_PHASE:
            stage = f"after {rec.get('name')}"
        elif event == "done":
            stage = "exiting"
    if stage is not None:
        return stage
    if lines:
        return "module loading"
    return "waiting for its submission" if os.path.exists(os.path.join(folder, WARM_READY)) else "starting"


def _wait_kind(doing: str) -> str:
    """running, in the GPU driver's lock (an ioctl in os_acquire_rwlock/mutex), in the driver otherwise
    (uninterruptible), or asleep."""
    if doing == "R":
        return "running"
    if doing.startswith("D") and "os_acquire" in doing:
        return "driver lock"
    return "driver, other" if doing.startswith("D") else "asleep"


_SYSCALLS = {"0": "read", "1": "write", "3": "close", "7": "poll", "9": "mmap", "10": "mprotect", "11": "munmap",
             "16": "ioctl", "23": "select", "35": "nanosleep", "61": "wait4", "202": "futex", "230": "clock_nanosleep",
             "232": "epoll_wait", "257": "openat", "271": "ppoll", "281": "epoll_pwait"}


def _doing(pid: str, state: str) -> str:
    """A process's main thread at this moment: 'R' running, else its state, the system call it waits in
    (/proc/PID/syscall: an ioctl is the GPU driver) and the kernel function it sleeps in (/proc/PID/wchan,
    where the kernel says)."""
    if state == "R":
        return "R"
    out = [state]
    for name, read in (("syscall", lambda t: _SYSCALLS.get(t.split()[0], "syscall " + t.split()[0]) if t[:1].isdigit()
                        else t.split()[0] if t else "?"),
                       ("wchan", lambda t: t if t and t != "0" else "")):
        try:
            with open(f"/proc/{pid}/{name}") as f:
                text = read(f.read().strip())
        except (OSError, IndexError):
            text = ""
        if text:
            out.append(text)
    return " ".join(out)


def table(report: dict, rows: int = 20) -> str:
    lines = [f"watched {report['seconds']:.0f} s: {report['busy_cpu_s']:.0f} busy CPU-s on {report['cpus']} CPUs, "
             f"{report['accounted_cpu_s']:.0f} of them accounted to processes", "CPU-s  processes  kind"]
    for c, v in list(report["by_category"].items())[:rows]:
        lines.append(f"{v:7.1f} {report['processes'][c]:6d}  {c}")
    for c, w in report.get("waits", {}).items():
        looks = sum(w.values()) or 1
        lines.append(f"{c}: " + ", ".join(f"{k} {100 * n / looks:.0f}%" for k, n in list(w.items())[:8]))
    for c, by in report.get("stages", {}).items():
        lines.append(f"{c}, looks by stage: running / in the driver's lock / in the driver otherwise / asleep")
        for st, k in sorted(by.items(), key=lambda kv: -sum(kv[1].values())):
            lines.append(f"  {st:<48} {k.get('running', 0):5d} {k.get('driver lock', 0):5d} "
                         f"{k.get('driver, other', 0):5d} {k.get('asleep', 0):5d}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    result = watch(sys.argv[2])
    os.makedirs(os.path.dirname(sys.argv[1]) or ".", exist_ok=True)
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, indent=1)
    print(table(result))
