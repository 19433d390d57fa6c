"""Timing that holds up (see grading-method.md).

Each timed call: flush L2 by writing a buffer of max(256 MB, 2 x L2) with an SM
kernel and reading it back (L2 left clean, holding nothing of the call's), record
CUDA events around the call, never count the first call, warm up for >= 25 ms or
10 calls, repeat until the standard error is under 0.5% of the mean (or a time cap),
report the median with p20/p80. Each batch of timed calls
is queued behind a GPU busy wait longer than the host takes to queue it, so that
no timed call waits for the host: on a busy host (class grading on 2 GPUs) such
waits made outliers that kept a 0.27 ms call's timing going up to its 300-call
limit while its p20-p80 spread was 1.5 us. Candidates and baselines
are timed interleaved, round by round, in the same process, so that a clock or a
neighbour on a shared GPU moves them all alike: grade the ratio, not the
absolute number.
"""
from __future__ import annotations

import ctypes
import functools
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    mean_ms: float
    rel_stderr: float
    reps: int

    def gbps(self, nbytes: int) -> float:
        return nbytes / (self.median_ms * 1e-3) / 1e9

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class L2Flusher:
    """Evicts L2 before a timed call, so that the call starts with a cold cache, as it would
    inside a real model. `mode` (benchmarks/l2_flush compares them):
    - "write+read" (the grader's): write a buffer bigger than L2 with an SM kernel (torch's
      fill_), then read all of it with the read-ceiling kernel (check/ptx.py). L2 is left full of
      clean lines of a buffer no one times: nothing the call needs is cached, and the call pays
      for no one else's writes. Fair to a kernel that only reads and to one that reads and writes
      alike; see docs/grading-method.md.
    - "write": the write alone. L2 is left full of the buffer's dirty lines, which the timed call
      writes back to DRAM as it evicts them: up to one L2 of writes charged to the call, a larger
      share of a read-only kernel's time than of a copy's.
    - "read": the read alone (L2 clean, but not evicted of lines that a write there left dirty)."""

    MODES = ("write+read", "write", "read")

    def __init__(self, mode: str = "write+read"):
        import torch

        from .check.ptx import StreamingRead

        if mode not in self.MODES:
            raise ValueError(f"L2Flusher mode {mode!r}: one of {self.MODES}")
        l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        self.mode = mode
        self.nbytes = max(256 << 20, 2 * l2)
        self.buf = torch.empty(self.nbytes // 4, dtype=torch.int32, device="cuda")
        self.read = StreamingRead(self.nbytes, buffer=self.buf) if mode != "write" else None
        self.count = 0
        _reset_persisting_l2()

    def __call__(self):
        self.count += 1
        if self.mode != "read":
            self.buf.fill_(self.count & 0xFF)
        if self.read is not None:
            self.read()


def _reset_persisting_l2():
    """cudaCtxResetPersistingL2Cache: drop any L2 lines someone set to persist."""
    try:
        lib = _cudart()
        if lib is not None:
            lib.cudaCtxResetPersistingL2Cache()
    except Exception:
        pass


@functools.lru_cache(maxsize=None)
def _cudart():
    import glob
    import os

    import torch

    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    roots = [os.path.join(os.path.dirname(torch.__file__), "lib")]
    try:
        import nvidia

        for base in nvidia.__path__:
            roots += glob.glob(os.path.join(base, "*", "lib"))
    except ImportError:
        pass
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "libcudart.so*"))):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=None)
def theoretical_bandwidth() -> float | None:
    """Peak DRAM bandwidth in bytes/s: memory clock x bus width x 2 (double data rate)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    if not (clock_khz and bus_bits):
        lib = _cudart()
        if lib is None:
            return None
        value = ctypes.c_int()
        dev = torch.cuda.current_device()
        if lib.cudaDeviceGetAttribute(ctypes.byref(value), 36, dev) != 0:  # cudaDevAttrMemoryClockRate
            return None
        clock_khz = value.value
        if lib.cudaDeviceGetAttribute(ctypes.byref(value), 37, dev) != 0:  # cudaDevAttrGlobalMemoryBusWidth
            return None
        bus_bits = value.value
    return clock_khz * 1e3 * 2 * bus_bits / 8


# Dense tensor-core FLOPs per SM per clock, by compute capability and input type (the
# datasheet peaks: H100/H200 SXM 989 TFLOP/s bf16 = 132 SMs x 1.83 GHz x 4096).
TENSOR_FLOPS_PER_SM_CLOCK = {
    (8, 0): {"fp16": 2048, "bf16": 2048, "tf32": 1024},
    (8, 9): {"fp16": 1024, "bf16": 1024, "fp8": 2048},
    (9, 0): {"fp16": 4096, "bf16": 4096, "tf32": 2048, "fp8": 8192},
    (10, 0): {"fp16": 8192, "bf16": 8192, "fp8": 16384},
}


@functools.lru_cache(maxsize=None)
def sm_clock_hz() -> float | None:
    """The SMs' highest clock (cudaDevAttrClockRate, else nvidia-smi's max SM clock)."""
    import subprocess

    import torch

    lib = _cudart()
    if lib is not None:
        value = ctypes.c_int()
        if lib.cudaDeviceGetAttribute(ctypes.byref(value), 13, torch.cuda.current_device()) == 0 and value.value:
            return value.value * 1e3  # kHz
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits",
                              "-i", str(torch.cuda.current_device())], capture_output=True, text=True, timeout=20)
        return float(out.stdout.strip().splitlines()[0]) * 1e6
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def tensor_core_peak_tflops(dtype: str) -> float | None:
    """This GPU's dense tensor-core peak for `dtype` inputs ("fp16", "bf16", "fp8", "tf32"), in
    TFLOP/s at its highest SM clock; None where the architecture or clock is unknown."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    per_clock = TENSOR_FLOPS_PER_SM_CLOCK.get((props.major, props.minor), {}).get(dtype)
    clock = sm_clock_hz()
    if not (per_clock and clock):
        return None
    return props.multi_processor_count * clock * per_clock / 1e12


def _summarize(samples: list[float]) -> Timing:
    s = sorted(samples)
    n = len(s)

    def pct(q):
        return s[min(n - 1, max(0, int(round(q * (n - 1)))))]

    mean = statistics.fmean(s)
    se = statistics.stdev(s) / math.sqrt(n) if n > 1 else float("inf")
    return Timing(statistics.median(s), pct(0.2), pct(0.8), mean, se / mean if mean else float("inf"), n)


# The busy wait queued before each batch of timed calls (bench_interleaved), in seconds: at least, at most.
SPIN_AHEAD_MIN_S, SPIN_AHEAD_MAX_S = 200e-6, 20e-3


def bench_interleaved(fns: dict[str, Callable[[], None]], flush: L2Flusher | None = None,
                      min_reps: int = 10, max_reps: int = 300, rel_stderr: float = 0.005,
                      time_cap_s: float = 3.0, prepare: dict[str, Callable[[], None]] | None = None,
                      verify: dict[str, Callable[[], None]] | None = None) -> dict[str, Timing]:
    """Time each callable with CUDA events, round-robin, cold L2 before every call. Around every call
    of fns[name] (warm-up included), untimed: prepare[name]() before its flush, verify[name]() after
    its end event (GPU work queued there runs between the timed calls)."""
    import torch

    from .check.ptx import spin

    flush = flush or L2Flusher()
    prepare, verify = prepare or {}, verify or {}
    nothing = lambda: None  # noqa: E731

    def around(name):
        return prepare.get(name, nothing), verify.get(name, nothing)

    hooks = {name: around(name) for name in fns}
    for name, fn in fns.items():  # first call: lazy loading, allocator warm-up; never counted
        hooks[name][0]()
        fn()
        hooks[name][1]()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    warm = 0
    queue_s = 0.0  # the host's time to queue one round, at most
    while warm < 10 or time.perf_counter() - t0 < 0.025:
        t_round = time.perf_counter()
        for name, fn in fns.items():
            hooks[name][0]()
            flush()
            fn()
            hooks[name][1]()
        queue_s = max(queue_s, time.perf_counter() - t_round)
        torch.cuda.synchronize()
        warm += 1
    samples: dict[str, list[float]] = {k: [] for k in fns}
    stream = torch.cuda.current_stream()
    rounds = 5  # a few rounds per synchronisation
    start = time.perf_counter()
    while True:
        events = []
        # The GPU kept busy while the host queues the batch (twice the longest it took so far, at most
        # SPIN_AHEAD_MAX_S): each timed call then starts as soon as the flush before it ends, never
        # waiting for a host thread that was descheduled between its events.
        spin(int(1e9 * min(SPIN_AHEAD_MAX_S, max(SPIN_AHEAD_MIN_S, 2 * rounds * queue_s))), stream)
        t_batch = time.perf_counter()
        for _ in range(rounds):
            for name, fn in fns.items():
                hooks[name][0]()
                flush()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                hooks[name][1]()
                events.append((name, a, b))
        queue_s = max(queue_s, (time.perf_counter() - t_batch) / rounds)
        torch.cuda.synchronize()
        for name, a, b in events:
            samples[name].append(a.elapsed_time(b))
        reps = min(len(v) for v in samples.values())
        settled = all(_summarize(v).rel_stderr < rel_stderr for v in samples.values())
        if reps >= max_reps or (reps >= min_reps and (settled or time.perf_counter() - start > time_cap_s)):
            break
    return {k: _summarize(v) for k, v in samples.items()}


def copy_baseline(nbytes: int):
    """A device-to-device copy moving `nbytes` in total (half read, half written):
    the memory-bound ceiling that kernels are graded against."""
    import torch

    half = max(1, nbytes // 2)
    src = torch.empty(half, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2 * half


def read_baseline(nbytes: int):
    """The read ceiling of a kernel that must read `nbytes` and write next to nothing (check/ptx.py
    StreamingRead): what memory-bound kernels that only read are graded against."""
    from .check.ptx import StreamingRead

    read = StreamingRead(nbytes)
    return read, read.nbytes


def ceiling_baseline(traffic: str, nbytes: int):
    """The speed of light of `nbytes` of `traffic` ("copy" or "read", spec.CEILINGS' keys):
    (callable, bytes it moves)."""
    return {"copy": copy_baseline, "read": read_baseline}[traffic](nbytes)
