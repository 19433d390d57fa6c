"""The GPU's clocks, power, temperature and clock-event ("throttle") reasons while something is
timed on it, read through NVML (libnvidia-ml.so.1, installed with every NVIDIA driver) by ctypes.

    with ClockWatch() as watch:               # the current CUDA device
        watch.mark("case 3")
        timings = bench_interleaved(...)
    watch.record.throttled()                  # ["SW power cap"] where the clock was held down
    watch.records()["case 3"].summary()       # "SM 1755-1980 MHz (max 1980), ...; throttled: ..."

A daemon thread reads the device every SAMPLE_INTERVAL_S; each sample is tagged with the label of
the last mark(). Where NVML cannot be loaded or a call fails, the records say why (`unavailable`)
and nothing raises. Marks are host time and the GPU runs queued work later, so a label names what
the host was queueing, not what the GPU ran at that moment: candidate and baseline interleaved
round by round in one bench call share one record.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import statistics
import threading
import time
from array import array
from dataclasses import dataclass, field
from typing import Callable

SAMPLE_INTERVAL_S = 0.002

# A reason counts as throttling where it was set in more than this fraction of samples: one stray
# sample at a phase's edge is not a throttled timing.
THROTTLE_MIN_FRACTION = 0.05

# The key of the whole watch in ClockWatch.records(), beside the labels given to mark().
OVERALL = "all"

# nvml.h: nvmlClockType_t, nvmlTemperatureSensors_t, nvmlReturn_t.
NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
NVML_TEMPERATURE_GPU = 0
NVML_SUCCESS = 0

# nvml.h's nvmlClocksEventReason* bits (the older nvmlClocksThrottleReason* are the same bits).
REASONS: dict[int, str] = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
    0x200: "board limit",
    0x400: "reliability",
}
# The bits that mean the work was slowed: idle, a clock someone set, the display's clock and a
# sync-boost group are states of the machine, not a slowdown of the timed work.
SLOWDOWN_BITS = frozenset({0x4, 0x8, 0x20, 0x40, 0x80, 0x200, 0x400})

# Where the driver's library is looked for: the loader's path first, then where containers mount it.
LIBRARY_PATHS = ("libnvidia-ml.so.1", "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
                 "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1",
                 "/usr/lib/wsl/lib/libnvidia-ml.so.1")

# One sample: (label index, SM MHz, memory MHz, power mW, temperature C, reasons bitmask); -1 where
# that read failed, -1 as label where no mark was current.
ROW = 6
Reading = tuple[int, int, int, int, int]


def reason_name(bit: int) -> str:
    return REASONS.get(bit, f"reason {bit:#x}")


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in a reasons bitmask, lowest bit first."""
    return [reason_name(1 << i) for i in range(mask.bit_length()) if mask >> i & 1]


@dataclass
class ClockRecord:
    """What the device did during a watch (or one label of it). Numbers are None where not read."""
    samples: int = 0
    unavailable: str | None = None  # why there are no readings; None where there are
    seconds: float = 0.0
    sm_mhz_min: int | None = None
    sm_mhz_median: float | None = None
    sm_mhz_max: int | None = None
    sm_mhz_device_max: int | None = None
    mem_mhz_median: float | None = None
    power_w_min: float | None = None
    power_w_median: float | None = None
    power_w_max: float | None = None
    power_limit_w: float | None = None
    temp_c_max: int | None = None
    reasons_mask: int = 0  # the OR of every sample's reasons
    reason_fractions: dict[str, float] = field(default_factory=dict)  # name: fraction of samples with it set

    def throttled(self) -> list[str]:
        """The slowdown reasons set in more than THROTTLE_MIN_FRACTION of the samples."""
        return [reason_name(bit) for bit in sorted(SLOWDOWN_BITS)
                if self.reason_fractions.get(reason_name(bit), 0.0) > THROTTLE_MIN_FRACTION]

    def summary(self) -> str:
        """One line, e.g. "SM 1755-1980 MHz (max 1980), 612-668 W of 700 W, 61 C; throttled: SW
        power cap 84% of samples"."""
        if self.unavailable:
            return f"clocks not recorded: {self.unavailable}"
        parts = [p for p in (self._sm_text(), self._power_text(),
                             None if self.temp_c_max is None else f"{self.temp_c_max} C") if p]
        throttled = self.throttled()
        tail = ("throttled: " + ", ".join(f"{n} {self._percent(n)} of samples" for n in throttled)
                if throttled else "not throttled")
        return ", ".join(parts) + "; " + tail if parts else tail

    def brief(self) -> str | None:
        """The clock and power in a few words for a result's line, e.g. "SM 1980 MHz (max 1980), 545 W
        of 700 W, not throttled"; None where nothing was read."""
        if self.unavailable or self.sm_mhz_median is None:
            return None
        text = f"SM {self.sm_mhz_median:.0f} MHz" + (f" (max {self.sm_mhz_device_max})" if self.sm_mhz_device_max else "")
        if self.power_w_median is not None:
            text += f", {self.power_w_median:.0f} W" + (f" of {self.power_limit_w:.0f} W" if self.power_limit_w else "")
        throttled = self.throttled()
        return text + (", throttled: " + ", ".join(f"{n} {self._percent(n)} of samples" for n in throttled)
                       if throttled else ", not throttled")

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "throttled": self.throttled()}

    @classmethod
    def from_dict(cls, d: dict) -> ClockRecord:
        """The record as_dict() wrote (its derived keys left out)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def _percent(self, name: str) -> str:
        return f"{100 * self.reason_fractions.get(name, 0.0):.0f}%"

    def _sm_text(self) -> str | None:
        if self.sm_mhz_min is None:
            return None
        text = f"SM {self.sm_mhz_min}-{self.sm_mhz_max} MHz"
        return text + (f" (max {self.sm_mhz_device_max})" if self.sm_mhz_device_max else "")

    def _power_text(self) -> str | None:
        if self.power_w_min is None:
            return None
        text = f"{self.power_w_min:.0f}-{self.power_w_max:.0f} W"
        return text + (f" of {self.power_limit_w:.0f} W" if self.power_limit_w else "")


def compare(yours: ClockRecord | None, baseline: ClockRecord | None) -> str | None:
    """One sentence where one timing was throttled for a reason the other's was not; else None."""
    if yours is None or baseline is None or yours.unavailable or baseline.unavailable:
        return None
    only_yours = [n for n in yours.throttled() if n not in baseline.throttled()]
    only_base = [n for n in baseline.throttled() if n not in yours.throttled()]
    if not (only_yours or only_base):
        return None
    clauses = []
    if only_yours:
        clauses.append(f"your timing ran with the GPU throttled ({_fractions(yours, only_yours)}) and the "
                       f"baseline's did not")
    if only_base:
        clauses.append(f"the baseline's timing ran with the GPU throttled ({_fractions(baseline, only_base)}) "
                       f"and yours did not")
    sentence = "; ".join(clauses) + ", so the ratio compares different clocks" + _medians(yours, baseline) + "."
    return sentence[0].upper() + sentence[1:]


def _fractions(record: ClockRecord, names: list[str]) -> str:
    return ", ".join(f"{n} in {record._percent(n)} of samples" for n in names)


def _medians(yours: ClockRecord, baseline: ClockRecord) -> str:
    if yours.sm_mhz_median is None or baseline.sm_mhz_median is None:
        return ""
    return f" (median SM clock {yours.sm_mhz_median:.0f} vs {baseline.sm_mhz_median:.0f} MHz)"


class Nvml:
    """The few NVML calls used here, over `lib`: the ctypes library, or a fake with the same
    function names in tests. Each function returns an nvmlReturn_t and writes through pointers."""

    def __init__(self, lib):
        self.lib = lib
        # nvmlDeviceGetCurrentClocksThrottleReasons: the same bitmask under its name before driver 535
        self.reasons_fn = (getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
                           or getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None))

    def error(self, code: int) -> str:
        try:
            text = self.lib.nvmlErrorString(code)
        except Exception:
            text = None
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        return f"{text} ({code})" if isinstance(text, str) else f"NVML error {code}"

    def init(self) -> str | None:
        """nvmlInit_v2: None where it worked, else why not."""
        init = getattr(self.lib, "nvmlInit_v2", None) or getattr(self.lib, "nvmlInit", None)
        if init is None:
            return "NVML has no nvmlInit_v2"
        rc = init()
        return None if rc == NVML_SUCCESS else f"nvmlInit_v2: {self.error(rc)}"

    def open(self, keys: list[tuple[str, str]]) -> tuple[ctypes.c_void_p | None, str | None]:
        """The device handle of the first key that NVML knows: ("pci", "00000000:3B:00.0") or
        ("uuid", "GPU-..."); else (None, why)."""
        tried = []
        for kind, key in keys:
            handle = ctypes.c_void_p()
            fn = (self.lib.nvmlDeviceGetHandleByPciBusId_v2 if kind == "pci"
                  else self.lib.nvmlDeviceGetHandleByUUID)
            rc = fn(key.encode(), ctypes.pointer(handle))
            if rc == NVML_SUCCESS:
                return handle, None
            tried.append(f"{kind} {key}: {self.error(rc)}")
        return None, "no NVML device for " + ("; ".join(tried) or "no PCI bus id or UUID")

    def uint(self, name: str, handle, *args: int) -> int | None:
        """One unsigned-int read, e.g. uint("nvmlDeviceGetMaxClockInfo", h, NVML_CLOCK_SM); None on failure."""
        value = ctypes.c_uint()
        fn = getattr(self.lib, name, None)
        return value.value if fn is not None and fn(handle, *args, ctypes.pointer(value)) == NVML_SUCCESS else None

    def reader(self, handle) -> Callable[[], Reading]:
        """A function reading (SM MHz, memory MHz, power mW, temperature C, reasons) from the device,
        -1 for each read that failed. Its buffers are its own (one reader per thread) and made once:
        the sampling loop allocates nothing but the tuple."""
        lib, reasons_fn = self.lib, self.reasons_fn
        clock, power, temp = lib.nvmlDeviceGetClockInfo, lib.nvmlDeviceGetPowerUsage, lib.nvmlDeviceGetTemperature
        sm, mem, mw, deg, bits = (ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint(),
                                  ctypes.c_ulonglong())
        p_sm, p_mem, p_mw, p_deg, p_bits = map(ctypes.pointer, (sm, mem, mw, deg, bits))

        def read() -> Reading:
            return (sm.value if clock(handle, NVML_CLOCK_SM, p_sm) == NVML_SUCCESS else -1,
                    mem.value if clock(handle, NVML_CLOCK_MEM, p_mem) == NVML_SUCCESS else -1,
                    mw.value if power(handle, p_mw) == NVML_SUCCESS else -1,
                    deg.value if temp(handle, NVML_TEMPERATURE_GPU, p_deg) == NVML_SUCCESS else -1,
                    bits.value if reasons_fn is not None and reasons_fn(handle, p_bits) == NVML_SUCCESS else -1)
        return read


def _load_library():
    """(the ctypes library, None), or (None, why not)."""
    errors = []
    for path in LIBRARY_PATHS:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        lib.nvmlErrorString.restype = ctypes.c_char_p
        return lib, None
    return None, "NVML not loaded: " + (errors[0] if errors else "no library path")


@functools.lru_cache(maxsize=None)
def shared_nvml() -> tuple[Nvml | None, str | None]:
    """The process's NVML, initialised once (nvmlInit can take a while) and never shut down; or
    (None, why not)."""
    try:
        lib, why = _load_library()
        if lib is None:
            return None, why
        nvml = Nvml(lib)
        why = nvml.init()
        return (None, why) if why else (nvml, None)
    except Exception as e:  # a broken library must not stop a grading
        return None, f"NVML: {type(e).__name__}: {e}"


def device_keys(device: int | str | None) -> tuple[list[tuple[str, str]], str | None]:
    """How NVML can find a CUDA device: a PCI bus id or UUID string as given, else torch's device
    index (the current one for None) turned into its PCI bus id and UUID. NVML numbers devices
    its own way, ignoring CUDA_VISIBLE_DEVICES, so the index itself is never used."""
    if isinstance(device, str):
        return [("uuid" if device.startswith(("GPU-", "MIG-")) else "pci", device)], None
    try:
        import torch

        if not torch.cuda.is_available():
            return [], "torch sees no CUDA device"
        index = torch.cuda.current_device() if device is None else device
        props = torch.cuda.get_device_properties(index)
    except Exception as e:
        return [], f"CUDA device {device}: {type(e).__name__}: {e}"
    keys = _props_keys(props) or _cudart_keys(index)
    return keys, None if keys else f"no PCI bus id or UUID for CUDA device {index}"


def _props_keys(props) -> list[tuple[str, str]]:
    keys = []
    if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        keys.append(("pci", f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"))
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        keys.append(("uuid", uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid))
    return keys


def _cudart_keys(index: int) -> list[tuple[str, str]]:
    """cudaDeviceGetPCIBusId, for a torch whose device properties lack the PCI location."""
    try:
        from ..bench import _cudart

        lib = _cudart()
        buf = ctypes.create_string_buffer(32)
        if lib is not None and lib.cudaDeviceGetPCIBusId(buf, len(buf), index) == 0 and buf.value:
            return [("pci", buf.value.decode())]
    except Exception:
        pass
    return []


class ClockWatch:
    """Samples one GPU's clocks while inside `with`; then `record` (a ClockRecord) and records().

    device: torch's CUDA device index (None: the current one), or an NVML PCI bus id / UUID string.
    interval_s: between samples; None takes no samples but those asked for with sample().
    label: the label of samples before the first mark(). nvml: an Nvml to use instead of the
    process's own (tests)."""

    def __init__(self, device: int | str | None = None, interval_s: float | None = SAMPLE_INTERVAL_S,
                 label: str | None = None, nvml: Nvml | None = None):
        self.device = device
        self.interval_s = interval_s
        self.record: ClockRecord | None = None
        self._nvml = nvml
        self._why: str | None = "not entered"
        self._error: str | None = None  # why the sampling thread stopped early
        self._read: Callable[[], Reading] | None = None
        self._device_max: int | None = None
        self._limit_mw: int | None = None
        self._lock = threading.Lock()
        self._data = array("q")  # ROW numbers a sample
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._seconds: dict[int, float] = {}
        self._label = -1
        self._since = self._t0 = self._t1 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first_label = label

    def __enter__(self) -> ClockWatch:
        self._t0 = self._since = time.perf_counter()
        if self._first_label is not None:
            self.mark(self._first_label)
        self._why = self._open()
        if self._why is None and self.interval_s is not None:
            self._thread = threading.Thread(target=self._run, name="clockwatch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        with self._lock:
            self._t1 = time.perf_counter()
            self._close_label(self._t1)
        self.record = self.records()[OVERALL]
        return False

    def mark(self, name: str | None) -> None:
        """Tag the samples from now on with `name` (None: with no label). Cheap, any thread."""
        with self._lock:
            now = time.perf_counter()
            self._close_label(now)
            if name is None:
                self._label = -1
                return
            if name not in self._index:
                self._index[name] = len(self._names)
                self._names.append(name)
            self._label = self._index[name]

    def sample(self) -> bool:
        """Take one sample now (the thread calls this); False where the watch has no device."""
        read = self._read
        if read is None:
            return False
        label = self._label
        row = read()
        with self._lock:
            self._data.extend((label, *row))
        return True

    def records(self) -> dict[str, ClockRecord]:
        """A record for each label given to mark(), and OVERALL for every sample."""
        with self._lock:
            data, names, seconds = self._data[:], list(self._names), dict(self._seconds)
            total = (self._t1 or time.perf_counter()) - self._t0
        rows: dict[int, list[tuple[int, ...]]] = {i: [] for i in range(len(names))}
        everything = [tuple(data[i:i + ROW]) for i in range(0, len(data), ROW)]
        for row in everything:
            rows.setdefault(row[0], []).append(row)
        out = {name: self._summarize(rows[i], seconds.get(i, 0.0)) for i, name in enumerate(names)}
        out[OVERALL] = self._summarize(everything, total)
        return out

    def _open(self) -> str | None:
        """Find the device and read what does not change; None where it worked, else why not."""
        try:
            nvml, why = (self._nvml, None) if self._nvml is not None else shared_nvml()
            if nvml is None:
                return why
            keys, why = device_keys(self.device)
            handle, why = nvml.open(keys) if why is None else (None, why)
            if handle is None:
                return why
            self._device_max = nvml.uint("nvmlDeviceGetMaxClockInfo", handle, NVML_CLOCK_SM)
            self._limit_mw = nvml.uint("nvmlDeviceGetEnforcedPowerLimit", handle)
            self._read = nvml.reader(handle)
            return None
        except Exception as e:  # never into the grader
            return f"NVML: {type(e).__name__}: {e}"

    def _run(self) -> None:
        # Each NVML call releases the GIL (ctypes), so the timing thread waits on this one for no more
        # than a few bytecodes between calls.
        try:
            while True:
                self.sample()
                if self._stop.wait(self.interval_s):
                    return
        except Exception as e:
            self._error = f"sampling stopped: {type(e).__name__}: {e}"

    def _close_label(self, now: float) -> None:
        """Add the time since the last mark to the current label's seconds (under the lock)."""
        if self._label >= 0:
            self._seconds[self._label] = self._seconds.get(self._label, 0.0) + now - self._since
        self._since = now

    def _summarize(self, rows: list[tuple[int, ...]], seconds: float) -> ClockRecord:
        limit = None if self._limit_mw is None else self._limit_mw / 1000
        if self._why is not None:
            return ClockRecord(unavailable=self._why, seconds=seconds)
        if not rows:
            return ClockRecord(unavailable=self._error or "no sample taken", seconds=seconds,
                               sm_mhz_device_max=self._device_max, power_limit_w=limit)
        return summarize(rows, seconds, self._device_max, limit)


def summarize(rows: list[tuple[int, ...]], seconds: float, device_max: int | None,
              limit_w: float | None) -> ClockRecord:
    """A record of sample rows (ROW numbers each, -1 where a read failed)."""
    sm, mem, mw, deg, bits = (_column(rows, k) for k in range(1, ROW))
    return ClockRecord(
        samples=len(rows), seconds=seconds,
        sm_mhz_min=min(sm, default=None), sm_mhz_median=_median(sm), sm_mhz_max=max(sm, default=None),
        sm_mhz_device_max=device_max, mem_mhz_median=_median(mem),
        power_w_min=_watts(min(mw, default=None)), power_w_median=_watts(_median(mw)),
        power_w_max=_watts(max(mw, default=None)), power_limit_w=limit_w,
        temp_c_max=max(deg, default=None), reasons_mask=functools.reduce(int.__or__, bits, 0),
        reason_fractions=_fractions_of(bits))


def _column(rows: list[tuple[int, ...]], k: int) -> list[int]:
    return [r[k] for r in rows if r[k] >= 0]


def _median(values: list[int]) -> float | None:
    return statistics.median(values) if values else None


def _watts(mw: float | None) -> float | None:
    return None if mw is None else mw / 1000


def _fractions_of(masks: list[int]) -> dict[str, float]:
    """{reason name: fraction of the samples (those whose reasons were read) with its bit set}."""
    union = functools.reduce(int.__or__, masks, 0)
    return {reason_name(1 << i): sum(1 for m in masks if m >> i & 1) / len(masks)
            for i in range(union.bit_length()) if union >> i & 1}
