"""How much CPU a class run used: whether its CPUs, not its GPUs, set its pace.

Every grading costs CPU as well as GPU time: the builds, and the grading processes' start (Python,
torch, the CUDA context, CUPTI, compute-sanitizer). A run whose CPUs are busy all the time grades no
faster on more GPUs. `CpuMeter` measures a stretch of a run: how busy the CPUs it may use were, from
their lines of /proc/stat sampled each second (Linux), in CPU-seconds and as a share; and the CPU
seconds of this process and of the processes it waited for (getrusage), which leave out every grading
process stopped rather than ended (its bubblewrap is killed: what ran under it is nobody's waited-for
child), so that figure is a floor, below what /proc/stat counts.
"""
from __future__ import annotations

import os
import resource
import threading

from .. import machine


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _cpu_times(cpus: set[int] | None) -> dict[int, tuple[int, int]] | None:
    """{cpu: (busy, total)} in clock ticks since boot, for `cpus` (None: every CPU); None without /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        cpu = int(name[3:])
        if cpus is not None and cpu not in cpus:
            continue
        ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
        out[cpu] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))
    return out


class CpuMeter:
    """`with CpuMeter() as m: ...`, then `m.result()`: {"cpus": usable CPUs, "busy_cpu_s": the seconds
    they were busy (whatever ran on them), "busy": their mean busy share, "saturated": the share of
    samples in which they were at least 90% busy (these three None where /proc/stat is not), "cpu_s":
    CPU seconds of this process and the processes it waited for (a floor: see above)}."""

    def __init__(self, period_s: float = 1.0):
        self.period_s = period_s
        try:
            self.cpus: set[int] | None = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cpus = None
        self.samples: list[float] = []
        self.busy_ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        last = _cpu_times(self.cpus)
        while last is not None and not self._stop.wait(self.period_s):
            now = _cpu_times(self.cpus)
            if now is None:
                return
            busy = sum(now[c][0] - last[c][0] for c in now if c in last)
            total = sum(now[c][1] - last[c][1] for c in now if c in last)
            if total > 0:
                self.samples.append(busy / total)
                self.busy_ticks += busy
            last = now

    def __enter__(self) -> CpuMeter:
        self._cpu0 = _cpu_seconds()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu_s = _cpu_seconds() - self._cpu0

    def result(self) -> dict:
        n = len(self.samples)
        return {"cpus": machine.usable_cpus(), "cpu_s": self.cpu_s,
                "busy_cpu_s": self.busy_ticks / os.sysconf("SC_CLK_TCK") if n else None,
                "busy": sum(self.samples) / n if n else None,
                "saturated": sum(s >= 0.9 for s in self.samples) / n if n else None}
