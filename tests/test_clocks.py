"""The clock watch (grader/check/clocks.py): what it says without NVML, and its logic over a fake
NVML library: reason bits, the throttling threshold, labels, the summary line and compare()."""
import json
import threading
import time

from conftest import gpu
from grader.check import clocks
from grader.check.clocks import OVERALL, ClockRecord, ClockWatch, Nvml, compare

OK, NOT_FOUND, NOT_SUPPORTED = 0, 6, 3


class FakeLib:
    """The NVML functions ClockWatch calls, answering from `state`, which a test changes between
    samples; a value of None makes that call fail."""

    def __init__(self, **state):
        self.state = dict(sm=1980, mem=2619, mw=400_000, temp=50, reasons=0, max_sm=1980, limit_mw=700_000)
        self.state.update(state)
        self.bus_ids = {"00000000:3b:00.0"}
        self.calls = 0

    def _put(self, ptr, key):
        self.calls += 1
        value = self.state[key]
        if value is None:
            return NOT_SUPPORTED
        ptr.contents.value = value
        return OK

    def nvmlInit_v2(self):
        return OK

    def nvmlErrorString(self, code):
        return {NOT_FOUND: b"Not Found", NOT_SUPPORTED: b"Not Supported"}.get(code, b"Unknown Error")

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, ptr):
        if bus_id.decode().lower() not in self.bus_ids:
            return NOT_FOUND
        ptr.contents.value = 0x1234
        return OK

    def nvmlDeviceGetHandleByUUID(self, uuid, ptr):
        return NOT_FOUND

    def nvmlDeviceGetClockInfo(self, handle, kind, ptr):
        return self._put(ptr, {clocks.NVML_CLOCK_SM: "sm", clocks.NVML_CLOCK_MEM: "mem"}[kind])

    def nvmlDeviceGetMaxClockInfo(self, handle, kind, ptr):
        return self._put(ptr, "max_sm")

    def nvmlDeviceGetPowerUsage(self, handle, ptr):
        return self._put(ptr, "mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle, ptr):
        return self._put(ptr, "limit_mw")

    def nvmlDeviceGetTemperature(self, handle, sensor, ptr):
        assert sensor == clocks.NVML_TEMPERATURE_GPU
        return self._put(ptr, "temp")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, ptr):
        return self._put(ptr, "reasons")


class OldDriverLib(FakeLib):
    """A driver before the 'event' names: only nvmlDeviceGetCurrentClocksThrottleReasons."""
    nvmlDeviceGetCurrentClocksEventReasons = None

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle, ptr):
        return self._put(ptr, "reasons")


def watch(lib, **kw):
    return ClockWatch(device="00000000:3B:00.0", interval_s=None, nvml=Nvml(lib), **kw)


def sample(w, lib, n, **state):
    lib.state.update(state)
    for _ in range(n):
        assert w.sample()


def test_without_nvml_the_record_says_why_and_nothing_raises(monkeypatch):
    monkeypatch.setattr(clocks, "LIBRARY_PATHS", ("libnvidia-ml-absent.so.1",))
    clocks.shared_nvml.cache_clear()
    try:
        with ClockWatch() as w:
            w.mark("case 1")
            assert not w.sample()
    finally:
        clocks.shared_nvml.cache_clear()
    records = w.records()
    assert set(records) == {"case 1", OVERALL} and w.record == records[OVERALL]
    for r in records.values():
        assert r.samples == 0 and "NVML not loaded" in r.unavailable and "libnvidia-ml-absent" in r.unavailable
        assert r.throttled() == [] and r.summary().startswith("clocks not recorded: NVML not loaded")
    assert compare(w.record, w.record) is None
    json.dumps(w.record.as_dict())


def test_this_machines_nvml_gives_a_record_either_way():
    """Whatever this machine has (NVML or not, a GPU or not): a record, never an exception."""
    with ClockWatch(interval_s=0.001) as w:
        time.sleep(0.02)
    assert isinstance(w.record, ClockRecord)
    assert (w.record.unavailable is not None) == (w.record.samples == 0), w.record


def test_a_failing_init_or_an_unknown_device_is_a_reason():
    class NoInit(FakeLib):
        def nvmlInit_v2(self):
            return 9

    assert Nvml(NoInit()).init() == "nvmlInit_v2: Unknown Error (9)"
    with ClockWatch(device="00000000:99:00.0", interval_s=None, nvml=Nvml(FakeLib())) as w:
        pass
    assert w.record.unavailable == "no NVML device for pci 00000000:99:00.0: Not Found (6)"
    with ClockWatch(device="GPU-abc", interval_s=None, nvml=Nvml(FakeLib())) as w:
        pass
    assert w.record.unavailable == "no NVML device for uuid GPU-abc: Not Found (6)"


def test_torch_device_properties_give_the_pci_bus_id_and_uuid():
    class Props:
        pci_domain_id, pci_bus_id, pci_device_id = 0, 0x3B, 0
        uuid = "6b1c0b0e-1c3a-4b5e-9d2f-0123456789ab"

    assert clocks._props_keys(Props()) == [("pci", "00000000:3b:00.0"),
                                           ("uuid", "GPU-6b1c0b0e-1c3a-4b5e-9d2f-0123456789ab")]
    assert clocks.device_keys("MIG-1") == ([("uuid", "MIG-1")], None)


def test_reason_bits_decode_to_names():
    assert clocks.reason_names(0x4 | 0x40 | 0x1) == ["GPU idle", "SW power cap", "HW thermal slowdown"]
    assert clocks.reason_names(0x8 | 0x80 | 0x100) == ["HW slowdown", "HW power brake slowdown",
                                                       "display clock setting"]
    assert clocks.reason_names(0x20 | 0x2 | 0x10) == ["applications clocks setting", "sync boost",
                                                      "SW thermal slowdown"]
    assert clocks.reason_names(0x800) == ["reason 0x800"] and clocks.reason_names(0) == []


def test_a_watch_summarizes_its_samples():
    lib = FakeLib()
    with watch(lib) as w:
        sample(w, lib, 3, sm=1980, mw=612_000, temp=58, reasons=0)
        sample(w, lib, 1, sm=1755, mw=668_000, temp=61, reasons=0x4 | 0x1)
    r = w.record
    assert (r.samples, r.sm_mhz_min, r.sm_mhz_max, r.sm_mhz_median, r.sm_mhz_device_max) == (4, 1755, 1980, 1980, 1980)
    assert (r.power_w_min, r.power_w_max, r.power_w_median, r.power_limit_w) == (612, 668, 612, 700)
    assert (r.mem_mhz_median, r.temp_c_max, r.reasons_mask) == (2619, 61, 0x5)
    assert r.reason_fractions == {"GPU idle": 0.25, "SW power cap": 0.25}
    assert r.throttled() == ["SW power cap"]  # GPU idle is no slowdown of the work
    assert r.summary() == ("SM 1755-1980 MHz (max 1980), 612-668 W of 700 W, 61 C; "
                           "throttled: SW power cap 25% of samples")
    d = json.loads(json.dumps(r.as_dict()))
    assert d["throttled"] == ["SW power cap"] and d["samples"] == 4 and d["unavailable"] is None


def test_throttled_needs_more_than_the_minimum_fraction():
    def record(fraction):
        return ClockRecord(samples=100, reason_fractions={"SW power cap": fraction, "HW slowdown": 1.0,
                                                          "sync boost": 1.0, "applications clocks setting": 1.0,
                                                          "display clock setting": 1.0, "GPU idle": 1.0,
                                                          "reason 0x800": 1.0})

    assert clocks.THROTTLE_MIN_FRACTION == 0.05
    assert record(0.05).throttled() == ["HW slowdown"]
    assert record(0.06).throttled() == ["SW power cap", "HW slowdown"]
    assert record(0.0).summary() == "throttled: HW slowdown 100% of samples"
    assert ClockRecord(samples=3, sm_mhz_min=1980, sm_mhz_max=1980).summary() == "SM 1980-1980 MHz; not throttled"


def test_marks_label_the_samples_after_them():
    lib = FakeLib()
    with watch(lib, label="warm-up") as w:
        sample(w, lib, 2, sm=1400, reasons=0x1)
        w.mark("yours")
        sample(w, lib, 4, sm=1600, reasons=0x4)
        w.mark(None)
        sample(w, lib, 1, sm=1000, reasons=0)
        w.mark("baseline")
        sample(w, lib, 3, sm=1980, reasons=0)
        w.mark("yours")
        sample(w, lib, 1, sm=1500, reasons=0x20)
        w.mark("empty")
    records = w.records()
    assert list(records) == ["warm-up", "yours", "baseline", "empty", OVERALL]
    assert [records[k].samples for k in records] == [2, 5, 3, 0, 11]
    yours = records["yours"]
    assert (yours.sm_mhz_min, yours.sm_mhz_max, yours.reasons_mask) == (1500, 1600, 0x24)
    assert yours.reason_fractions == {"SW power cap": 0.8, "SW thermal slowdown": 0.2}
    assert records["warm-up"].throttled() == [] and records["baseline"].throttled() == []
    assert records["empty"].unavailable == "no sample taken" and records["empty"].power_limit_w == 700
    assert records[OVERALL].sm_mhz_min == 1000 and records[OVERALL].reasons_mask == 0x25
    assert compare(records["yours"], records["baseline"]) == (
        "Your timing ran with the GPU throttled (SW power cap in 80% of samples, SW thermal slowdown in 20% of "
        "samples) and the baseline's did not, so the ratio compares different clocks (median SM clock 1600 vs "
        "1980 MHz).")
    assert compare(records["baseline"], records["yours"]).startswith(
        "The baseline's timing ran with the GPU throttled (SW power cap in 80% of samples")
    assert compare(records["yours"], records["yours"]) is None
    assert compare(records["yours"], None) is None and compare(records["yours"], records["empty"]) is None


def test_compare_names_both_sides_where_each_had_its_own_reason():
    a = ClockRecord(samples=10, reason_fractions={"SW power cap": 0.5})
    b = ClockRecord(samples=10, reason_fractions={"HW thermal slowdown": 0.3, "SW power cap": 0.9})
    assert compare(a, b) == ("The baseline's timing ran with the GPU throttled (HW thermal slowdown in 30% of "
                             "samples) and yours did not, so the ratio compares different clocks.")
    c = ClockRecord(samples=10, reason_fractions={"HW slowdown": 0.5})
    assert compare(a, c) == ("Your timing ran with the GPU throttled (SW power cap in 50% of samples) and the "
                             "baseline's did not; the baseline's timing ran with the GPU throttled (HW slowdown "
                             "in 50% of samples) and yours did not, so the ratio compares different clocks.")


def test_a_failing_read_leaves_that_number_out():
    lib = FakeLib(mw=None, reasons=None, limit_mw=None)
    with watch(lib) as w:
        sample(w, lib, 2)
        sample(w, lib, 2, reasons=0x8)
    r = w.record
    assert r.samples == 4 and r.power_w_median is None and r.power_limit_w is None and r.sm_mhz_median == 1980
    assert r.reason_fractions == {"HW slowdown": 1.0}  # of the samples whose reasons were read
    assert r.summary() == "SM 1980-1980 MHz (max 1980), 50 C; throttled: HW slowdown 100% of samples"


def test_an_older_driver_reads_the_throttle_reasons():
    lib = OldDriverLib(reasons=0x40)
    with watch(lib) as w:
        sample(w, lib, 1)
    assert w.record.throttled() == ["HW thermal slowdown"]


def test_the_thread_samples_until_the_watch_ends():
    lib = FakeLib(reasons=0x4)
    w = ClockWatch(device="00000000:3b:00.0", interval_s=0.001, nvml=Nvml(lib))
    with w:
        deadline = time.perf_counter() + 5
        while w.records()[OVERALL].samples < 10 and time.perf_counter() < deadline:
            time.sleep(0.005)
        marker = threading.Thread(target=w.mark, args=("from another thread",))
        marker.start()
        marker.join()
        while w.records().get("from another thread", ClockRecord()).samples < 3 and time.perf_counter() < deadline:
            time.sleep(0.005)
    calls = lib.calls
    time.sleep(0.02)
    assert lib.calls == calls, "sampling went on after the watch ended"
    records = w.records()
    assert records[OVERALL].samples >= 13 and records["from another thread"].samples >= 3
    assert records[OVERALL].throttled() == ["SW power cap"] and not w._thread.is_alive()
    assert 0 < records["from another thread"].seconds <= records[OVERALL].seconds


@gpu
def test_a_busy_gpu_is_watched():
    """On a GPU: NVML found through torch's device, the SM clock up while a matrix product runs."""
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with ClockWatch() as w:
        w.mark("matmul")
        t = time.perf_counter()
        while time.perf_counter() - t < 0.3:
            a @ a
        torch.cuda.synchronize()
    r = w.records()["matmul"]
    print(r.summary())
    assert r.unavailable is None and r.samples >= 20, r
    assert 0 < r.sm_mhz_max <= r.sm_mhz_device_max and r.power_limit_w > 0 and r.temp_c_max > 0


def test_brief_and_a_record_back_from_its_dict():
    r = ClockRecord(samples=10, sm_mhz_median=1755, sm_mhz_device_max=1980, power_w_median=690.4,
                    power_limit_w=700, reason_fractions={"SW power cap": 0.84})
    assert r.brief() == "SM 1755 MHz (max 1980), 690 W of 700 W, throttled: SW power cap 84% of samples"
    assert ClockRecord(samples=3, sm_mhz_median=1980).brief() == "SM 1980 MHz, not throttled"
    assert ClockRecord(unavailable="NVML not loaded").brief() is None
    assert ClockRecord.from_dict(json.loads(json.dumps(r.as_dict()))) == r


def _measured(monkeypatch, lib, calibrated=None):
    """worker.measure on day02.silu_and_mul's first timed case, its kernel, checks and timing faked,
    with the clock watch reading `lib` while it times."""
    import torch

    from grader import bench, exercises
    from grader.check import worker

    ex = exercises.get("day02.silu_and_mul")
    monkeypatch.setattr(clocks, "ClockWatch", lambda: ClockWatch(device="00000000:3b:00.0", interval_s=0.001,
                                                                 nvml=Nvml(lib)))
    monkeypatch.setattr(worker, "run_on_side_stream", lambda *a, **k: (True, "ok", {}, {}, {}, {}))
    monkeypatch.setattr(worker, "_timed_calls", lambda *a: None)
    monkeypatch.setattr(worker, "_rerun", lambda *a, **k: (True, "ok"))
    monkeypatch.setattr(worker, "_baseline_fns", lambda ex, t, p, inputs, baselines: {
        b.name: ((lambda: None), int(t.bytes(p))) for b in baselines})
    timing = bench.Timing(0.3, 0.29, 0.31, 0.3, 0.001, 10)

    def timed(fns, flush, **around):
        time.sleep(0.05)  # samples taken meanwhile
        return {k: timing for k in fns}

    monkeypatch.setattr(bench, "bench_interleaved", timed)
    monkeypatch.setattr(bench, "theoretical_bandwidth", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return worker.measure(ex, None, ex.perf_cases[0], None, calibrated=calibrated)


def test_every_timed_case_carries_the_clocks_it_ran_at(monkeypatch):
    """worker.measure: the GPU's clock, power and reasons while it timed, in the metrics and the
    detail's line; the same GPU throttled says so."""
    status, detail, metrics = _measured(monkeypatch, FakeLib(sm=1980, mw=545_000))
    assert metrics["clocks"]["samples"] > 0 and metrics["clocks"]["sm_mhz_median"] == 1980
    assert "; GPU while timed: SM 1980 MHz (max 1980), 545 W of 700 W, not throttled" in detail
    status, detail, metrics = _measured(monkeypatch, FakeLib(sm=1600, mw=699_000, reasons=0x4))
    assert metrics["clocks"]["throttled"] == ["SW power cap"]
    assert "GPU while timed: SM 1600 MHz (max 1980), 699 W of 700 W, throttled: SW power cap 100% of samples" in detail


def test_a_class_timing_throttled_unlike_its_calibrated_baseline_says_so(monkeypatch):
    """Class grading times the baseline once per run: where the learner's timing ran throttled for a
    reason the baseline's did not, the detail says the ratio compares different clocks."""
    cool = ClockRecord(samples=50, sm_mhz_median=1980, reason_fractions={}).as_dict()
    calibrated = {"value": 3000.0, "clocks": cool}
    _, detail, metrics = _measured(monkeypatch, FakeLib(sm=1500, reasons=0x4), calibrated)
    assert metrics["calibrated"] and metrics["baseline_value"] == 3000.0
    assert ("Your timing ran with the GPU throttled (SW power cap in 100% of samples) and the baseline's did "
            "not, so the ratio compares different clocks (median SM clock 1500 vs 1980 MHz).") in detail
    _, detail, _ = _measured(monkeypatch, FakeLib(sm=1980), calibrated)
    assert "different clocks" not in detail
