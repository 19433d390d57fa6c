"""The grading subprocess: runs a learner's kernel where a crash cannot hurt.

Started by `grader.check` as `python -m grader.check.worker CONFIG.json`, or before the
submission is built as `... --wait CONFIG.json` (it gets ready, then waits for the file). It loads the
already built extension, runs every correctness case, profiles one call, and
times the performance cases, appending one JSON line per result to the results
file as it goes. If the kernel hangs or kills the process (an illegal address
corrupts the CUDA context), the parent still has every line written so far and
knows which case was running.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from .. import config
from .gate import WorkerGate, _write
from .judge import HandedRun, untimed_cases, waits_said
from .ptx import spin
from .verdict import compare_outputs, timed_baselines, timed_metrics, timed_verdict, tolerances
from .worker_config import WorkerConfig


class Emitter:
    def __init__(self, path: str):
        self.f = open(path, "a", encoding="utf-8")

    def __call__(self, **record):
        self.f.write(json.dumps(record) + "\n")
        self.f.flush()


def _cuda_alive() -> bool:
    import torch

    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda").fill_(0).item()
        return True
    except Exception:
        return False


def _short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = next((line for line in text if line.strip()), type(e).__name__)
    if "CUDA error" in str(e) or "cudaError" in str(e) or "returned cuda" in str(e):
        return first
    return f"{type(e).__name__}: {first}"


def load_submission(ex, cfg: WorkerConfig):
    """The submission as `call` gets it: the built extension, or a Python-module exercise's
    module imported from its copy in the build cache. Its code first runs here."""
    from .. import jit, pyenv

    if ex.learner_file == "python":
        from types import SimpleNamespace

        module = pyenv.import_file(cfg.module_name, Path(cfg.module_dir) / f"{cfg.module_name}.py")
        if not ex.depends_on:
            return module
        # The kernels it builds on, built by the parent: {exercise id: extension module}
        kernels = {dep: jit.load_built(m.folder, m.name) for dep, m in cfg.deps.items()}
        return SimpleNamespace(module=module, kernels=kernels)

    return jit.load_built(cfg.module_dir, cfg.module_name)


def run_case(ex, mod, case, seed, poison: bool = True, handover=None):
    """One correctness run (after `poison`ing shared memory: not before a timing). Returns (ok, message,
    outputs, inputs, expected, before). `handover`: a judge.HandedRun, where the outputs go for the
    separate judge (judge.py), right after the call."""
    import torch

    p = case.params
    gen = torch.Generator(device="cuda").manual_seed(seed)
    inputs = ex.make_inputs(p, gen)
    before = {k: v.clone() for k, v in inputs.items() if torch.is_tensor(v)}
    expected = ex.reference(p, inputs)  # computed before the kernel can touch the inputs
    outputs = _fresh_outputs(ex, p, inputs)
    _graded_call(ex, mod, p, inputs, outputs, poison)
    if handover is not None:
        from .judge import hand_over

        hand_over(handover.folder, handover.case_index, handover.seed_label,
                  {name: outputs[name] for name in expected})
    ok, msg = _judge(ex, p, inputs, before, outputs, expected)
    if ok and ex.repeatable:
        ok, msg = _repeatable(ex, mod, p, inputs, before, outputs, msg, poison)
    return ok, msg, outputs, inputs, expected, before


class OutOfMemory(RuntimeError):
    """A case out of GPU memory after every wait (_case_run)."""


def _case_run(ex, mod, case, seed, gate, handover=None) -> tuple[bool, str]:
    """run_case in a stretch of GPU work; again after each of config.OUT_OF_MEMORY_WAITS_S when CUDA ran out
    of memory, this process's cached blocks given back first: beside other gradings on its GPU (class
    grading's lanes, the self-test's checks: up to 20 processes on one GPU) theirs may hold the memory
    until their case ends, and what a case allocates is the grader's own (inputs, reference, comparison; a
    kernel allocates nothing). Out of memory every time fails the case, saying so."""
    import torch

    for wait in (*config.OUT_OF_MEMORY_WAITS_S, None):
        try:
            with gate.busy():
                return tuple(run_case(ex, mod, case, seed, handover=handover)[:2])
        except torch.cuda.OutOfMemoryError as e:
            if wait is None:
                raise OutOfMemory(f"CUDA out of memory, and again after waits of {waits_said()} s with this process's "
                                  f"cached memory given back (other processes on the GPU may hold it, or the code "
                                  f"under test allocated it): {_short_error(e)}") from None
        release_case_memory(0)
        time.sleep(wait)


_SHARED_POISON = None  # poison.SharedMemoryPoison, made once the CUDA context exists (main)
PAUSED_PHASE = "paused while another grading on this GPU timed"
WAITED_PHASE = "waiting for the GPU alone"  # (for its turn to time, and for the others to pause)
_KEPT_BYTES = 0  # GPU memory kept in torch's allocator between cases (main: RunOptions.case_memory_kept)
_STATE = None  # device_state.DeviceState of the kernel file's own variables (main), put back before each timed call
_GATE = None  # this process's gate.WorkerGate (main): a call of the learner's code is written down there
_NO_GATE = WorkerGate(".", False)  # (a timing outside main: busy() and exclusive() do nothing)


def _graded_call(ex, mod, p, inputs, outputs, poison: bool = False) -> None:
    """The learner's call on the current stream, until its kernels finish: shared memory filled with
    NaN first (`poison`: check/poison.py), and the call written down for the
    supervisor, which stops one that never returns (config.RUN_LIMIT_S)."""
    import torch

    if poison and _SHARED_POISON is not None:
        _SHARED_POISON.poison()
    with _GATE.calling() if _GATE is not None else contextlib.nullcontext():
        ex.call(mod, p, inputs, outputs)
        torch.cuda.synchronize()


def _repeatable(ex, mod, p, inputs, before, outputs, msg, poison=True):
    """The same inputs (a sampler's seed and offset among them) must give the same outputs."""
    from .compare import compare

    first = {k: v.clone() for k, v in outputs.items()}
    for name, b in before.items():
        inputs[name].copy_(b)
    again = _fresh_outputs(ex, p, inputs)
    _graded_call(ex, mod, p, inputs, again, poison)
    for name, t in first.items():
        c = compare(name, again[name], t, 0.0, 0.0)
        if not c.ok:
            return False, (f"not repeatable: a second call with the same inputs (same seed and offset) gave "
                           f"other outputs: {c.message()}")
    return True, msg + "; a second call gave the same outputs"


STREAM_CASE = "on a non-default CUDA stream"
POISON_ROW = "shared memory filled with NaN before each call"
STATE_ROW = "the file's own variables put back as loaded before each timed call"
STREAM_BUSY_NS = 100_000_000  # 0.1 s of the GPU's clock: the side stream is busy while the kernel is queued (ptx.spin)
TIMED_STREAM_BUSY_NS = 20_000_000  # the same before a timed case: its call is queued well within 20 ms


def run_on_side_stream(ex, mod, case, seed, busy_ns: int = STREAM_BUSY_NS):
    """The call on a busy non-default stream: the inputs are written on that stream after a
    `busy_ns` spin, so a kernel launched on another stream (the entry point ignoring its `stream`
    argument) runs before its inputs exist and its results differ. Returns (ok, message, outputs,
    inputs, expected, before) as run_case."""
    import torch

    p = case.params
    gen = torch.Generator(device="cuda").manual_seed(seed)
    inputs = ex.make_inputs(p, gen)
    before = {k: v.clone() for k, v in inputs.items() if torch.is_tensor(v)}
    expected = ex.reference(p, inputs)
    outputs = _fresh_outputs(ex, p, inputs)
    for name in before:
        inputs[name].zero_()  # what a kernel on the wrong stream reads
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    spin(busy_ns, side)
    with torch.cuda.stream(side):
        for name, b in before.items():
            inputs[name].copy_(b)
        _graded_call(ex, mod, p, inputs, outputs)
    ok, msg = _judge(ex, p, inputs, before, outputs, expected)
    if not ok:
        msg = ("the inputs were written on a busy non-default stream just before the call, and the results "
               "differ: does every launch use the entry point's `stream` argument "
               "(kernel<<<grid, block, smem, stream>>>)? " + msg)
    return ok, msg, outputs, inputs, expected, before


def _fresh_outputs(ex, p, inputs):
    """Outputs filled with NaN, so unwritten elements fail, each with guard bytes around it, so a store
    outside it fails (guard.py); in-place results are the inputs."""
    import torch

    from ..spec import poison
    from .guard import guard_outputs

    outputs = guard_outputs(ex.make_outputs(p, inputs), poison)
    outputs.update({name: inputs[name] for name in ex.inplace})
    torch.cuda.synchronize()
    return outputs


def _rerun(ex, mod, p, inputs, before, outputs, expected):
    """After timing: restore the inputs, poison the outputs, run once more and judge."""
    import torch

    from ..spec import poison

    for name, b in before.items():
        inputs[name].copy_(b)
    for name, t in outputs.items():
        if name not in ex.inplace:
            poison(t)
    torch.cuda.synchronize()
    ex.call(mod, p, inputs, outputs)
    torch.cuda.synchronize()
    return _judge(ex, p, inputs, before, outputs, expected)


def _judge(ex, p, inputs, before, outputs, expected):
    from .compare import unchanged
    from .guard import damage

    problems, notes = compare_outputs(ex, p, outputs, expected)
    for name, b in before.items():
        if name in ex.inplace:
            continue
        msg = unchanged(name, b, inputs[name])
        if msg:
            problems.append(msg)
    problems += damage(outputs)
    if problems:
        return False, " | ".join(problems)
    return True, "; ".join(notes)


def _cuda_session():
    """A profiler session of CUDA activity alone (kineto, CUPTI): torch.autograd.profiler.profile as
    torch.profiler.profile(activities=[CUDA]) runs it, without the latter's first session's
    `hasattr(torch, "_inductor")`, which imports torch._inductor with dynamo, sympy and triton (893
    modules, 1.8 s on this project's 2-CPU machine; on the H100 hosts a first session took 5-6 s with
    CPU activity alone, as with CUDA's: benchmarks/learner_loop/cupti_start.py), most of what the
    launch check's process spent in what was taken for CUPTI's start."""
    from torch.autograd import profiler

    return profiler.profile(use_cpu=False, use_device="cuda", use_kineto=True)


def _cuda_kernels(events) -> list[str]:
    return sorted({e.name for e in events if str(e.device_type).endswith("CUDA")})


def kernels_launched(run) -> list[str]:
    """The CUDA kernels (and copies, fills) that `run()` launched, by name, from a profiler session
    (_cuda_session). Where that session saw none, or could not run, `run()` goes once more under
    torch.profiler.profile itself before anything is concluded (an error of `run()` comes from there)."""
    import torch

    def synced():
        run()
        torch.cuda.synchronize()

    try:
        with _cuda_session() as prof:
            synced()
        launched = _cuda_kernels(prof.function_events)
    except Exception:  # (the call's own error, if it was one, comes again below)
        launched = []
    if not launched:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            synced()
        launched = _cuda_kernels(prof.events())
    return launched


def _profile_kernels(ex, mod, case, kernels, emit):
    """Every CUDA kernel the call launches must be one of the module's own."""
    import torch

    p = case.params
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = ex.make_inputs(p, gen)
    outputs = _fresh_outputs(ex, p, inputs)
    launched = kernels_launched(lambda: ex.call(mod, p, inputs, outputs))
    foreign = [n for n in launched if not any(k + "<" in n or k + "(" in n or n == k for k in kernels)]
    if not launched:
        emit(group="work", name="kernels launched", status="fail",
             detail="the call launched no CUDA kernel at all")
    elif foreign:
        emit(group="work", name="kernels launched", status="fail",
             detail="the call launched work that is not one of your kernels: " + ", ".join(foreign[:5]))
    else:
        emit(group="work", name="kernels launched", status="pass",
             detail="only your kernels ran: " + ", ".join(launched[:4]))


def _value(target, p, nbytes_or_none, timing) -> float:
    """A timing in the target's unit: GB/s (memory), TFLOP/s (compute) or us (latency)."""
    if target.kind == "memory":
        return timing.gbps(nbytes_or_none)
    if target.kind == "compute":
        return target.flops(p) / (timing.median_ms * 1e-3) / 1e12
    return timing.median_ms * 1e3


def _baseline_fns(ex, target, p, inputs, baselines):
    """name -> (callable, bytes it moves or None) for the baselines to time beside the kernel."""
    from ..bench import ceiling_baseline

    fns = {}
    for b in baselines:
        if b.run is None:  # a speed of light (spec.CEILINGS), as many bytes as the kernel must move
            fns[b.name] = ceiling_baseline(b.name, int(target.bytes(p)))
        else:
            scratch = ex.make_outputs(p, inputs)
            fns[b.name] = ((lambda b=b, scratch=scratch: b.run(p, inputs, scratch)), int(target.bytes(p)))
    return fns


def _ceiling(target, p, gbps: float, value: float):
    """None, or why a measurement is above what the device can physically do."""
    from ..bench import tensor_core_peak_tflops, theoretical_bandwidth

    peak = theoretical_bandwidth()
    if peak and gbps * 1e9 > peak * 1.01:
        return (f"{gbps:.0f} GB/s for the bytes it must move is above the theoretical peak {peak / 1e9:.0f} GB/s: "
                "the kernel cannot have done the work it had to")
    if target.kind == "compute":
        dtype = target.dtype(p)
        tc = tensor_core_peak_tflops(dtype)
        if tc and value > tc * 1.01:
            return (f"{value:.0f} TFLOP/s is above this GPU's dense {dtype} tensor-core peak ({tc:.0f} TFLOP/s): "
                    "the kernel cannot have done the work it had to")
    return None


def measure(ex, mod, case, flusher, calibrated=None, gate=None) -> tuple[str, str, dict]:
    """Time the kernel and its baselines on one performance case; (status, detail, metrics).
    The GPU's clocks, power and throttle reasons are recorded while it is timed (metrics["clocks"],
    a line of the detail). `calibrated`: the graded baseline of this case measured once for a class
    run, {"value": in the target's unit, "clocks": its ClockRecord as a dict}; a timing throttled for
    a reason the baseline's was not says so (the baseline timed beside, interleaved, shares its
    clocks). `gate`
    (class grading's lanes): only the timed calls run with the GPU to this process alone; the case's
    inputs, its correctness run before and its re-check after run beside the other gradings (they
    would be most of the window in which the others stand paused, the timed calls a fifth of it)."""
    import torch

    from ..bench import bench_interleaved, theoretical_bandwidth
    from .clocks import ClockRecord, ClockWatch, compare

    gate = gate or _NO_GATE
    t = ex.target
    p = case.params
    baselines = timed_baselines(t, calibrated)
    with gate.busy():  # (with the baselines' own inputs, where they need any)
        # at the timed size on a busy side stream: a launch that leaves the given stream only here fails
        ok, msg, outputs, inputs, expected, before = run_on_side_stream(ex, mod, case, config.PROFILE_SEED,
                                                                        TIMED_STREAM_BUSY_NS)
        theirs = _baseline_fns(ex, t, p, inputs, baselines) if ok else {}
        timed = _timed_calls(ex, mod, p, inputs, outputs, expected, before) if ok else None
    if not ok:
        return "fail", "not timed, results are wrong: " + msg, {"valid": False}
    nbytes = int(t.bytes(p))
    call = timed.call if timed else (lambda: ex.call(mod, p, inputs, outputs))
    fns = {"yours": (call, nbytes), **theirs}
    around = ({"prepare": {"yours": timed.prepare}, "verify": {"yours": timed.verify}} if timed else {})
    with gate.exclusive(), ClockWatch() as watch:
        timings = bench_interleaved({k: fn for k, (fn, _) in fns.items()}, flusher, **around)
        torch.cuda.synchronize()
    clocks = watch.record
    with gate.busy():
        skipped = timed.failure() if timed else None
        ok, msg = _rerun(ex, mod, p, inputs, before, outputs, expected)  # still correct after timing
    values = {k: _value(t, p, moved, timings[k]) for k, (_, moved) in fns.items()}
    yours = values["yours"]
    gbps = timings["yours"].gbps(nbytes)
    peak = theoretical_bandwidth()
    metrics = timed_metrics(t, yours, values, calibrated,
                            {"bytes": nbytes, "flops": t.flops(p) if t.flops else None, "gbps": gbps,
                             "peak_gbps": peak / 1e9 if peak else None},
                            {"timings": {k: tm.as_dict() for k, tm in timings.items()}, "clocks": clocks.as_dict()})
    above = _ceiling(t, p, gbps, yours)
    metrics["valid"] = ok and above is None and skipped is None
    metrics["timed_calls_checked"] = timed.k if timed else 0
    if skipped is not None:
        return "fail", "not the work it was judged on: " + skipped.message(), metrics
    if not ok:
        return "fail", "results went wrong during timing: " + msg, metrics
    if above:
        return "fail", above, metrics
    tm = timings["yours"]
    how = f"; median {tm.median_ms * 1e3:.1f} us [p20 {tm.p20_ms * 1e3:.1f}, p80 {tm.p80_ms * 1e3:.1f}]"
    if clocks.brief():
        how += f"; GPU while timed: {clocks.brief()}"
    unlike = compare(clocks, ClockRecord.from_dict(calibrated["clocks"])) if calibrated and calibrated.get("clocks") else None
    if unlike:
        how += f". {unlike}"
    status, detail = timed_verdict(ex, metrics, how)
    return status, detail, metrics


def _timed_calls(ex, mod, p, inputs, outputs, expected, before):
    """The learner's timed call, each one checked (check/timed.py), where the exercise allows it."""
    if not ex.check_timed_calls:
        return None
    from ..spec import poison
    from .timed import CONTENTS, TimedCalls, other_content

    contents = [(before, expected)]
    for _ in range(CONTENTS - 1):
        other = other_content(before)
        contents.append((other, ex.reference(p, {**inputs, **{k: v.clone() for k, v in other.items()}})))
    return TimedCalls(ex, mod, p, inputs, outputs, contents, tolerances(ex, p, expected), poison, _STATE)


def calibrate(exercise_id: str) -> dict[str, dict]:
    """The graded baseline of every performance case, timed once for a class grading run:
    {case label: {"value": in the target's unit, "clocks": the GPU's while it was timed (as_dict)}}."""
    import torch

    from .. import exercises
    from ..bench import L2Flusher, bench_interleaved
    from .clocks import ClockWatch

    ex = exercises.get(exercise_id)
    t = ex.target
    flusher = L2Flusher()
    out = {}
    for case in ex.perf_cases:
        p = case.params
        inputs = ex.make_inputs(p, torch.Generator(device="cuda").manual_seed(config.PROFILE_SEED))
        if ex.timed_apart is not None:  # (timed as the learner's steps are: timed_apart.py)
            from .timed_apart import time_steps

            step = ex.timed_apart.baseline(t.baseline, p, inputs)
            with ClockWatch() as watch:
                value = time_steps(ex.timed_apart, p, step) * 1e6
            out[case.label] = {"value": value, "clocks": watch.record.as_dict()}
            del step, inputs
            torch.cuda.empty_cache()
            continue
        (fn, moved), = _baseline_fns(ex, t, p, inputs, [t.baseline]).values()
        with ClockWatch() as watch:
            timing = bench_interleaved({"baseline": fn}, flusher)["baseline"]
            torch.cuda.synchronize()
        out[case.label] = {"value": _value(t, p, moved, timing), "clocks": watch.record.as_dict()}
        del inputs
        torch.cuda.empty_cache()
    return out


def call_once(config_path: str) -> None:
    """Run the untimed cases once each, unchecked: the process `ncu` profiles for counters."""
    import torch

    from .. import exercises

    from ..ncu import PROFILED_RANGE

    cfg = WorkerConfig.read(config_path)
    ex = exercises.get(cfg.exercise)
    mod = load_submission(ex, cfg)
    for case in ex.cases:
        if case.perf or case.gpu_gib:
            continue
        inputs = ex.make_inputs(case.params, torch.Generator(device="cuda").manual_seed(0))
        outputs = _fresh_outputs(ex, case.params, inputs)
        with torch.cuda.nvtx.range(PROFILED_RANGE):  # only the call's kernels are profiled
            ex.call(mod, case.params, inputs, outputs)
            torch.cuda.synchronize()


def _gpu_gib() -> float:
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2 ** 30


def fits_gpu(case) -> bool:
    """Whether this GPU has the memory the case needs (Case.gpu_gib)."""
    return not case.gpu_gib or _gpu_gib() >= case.gpu_gib


def stream_case(ex, mod, untimed, seed, emit) -> bool:
    """The largest untimed case once more (of those of no particular GPU memory), on a busy non-default
    stream; False if the CUDA context was lost."""
    case = max([c for c in untimed if not c.gpu_gib] or untimed, key=lambda c: ex.case_bytes(c.params))
    name = f"{STREAM_CASE} ({case.label})"
    emit(event="start", name=name)
    try:
        ok, msg = run_on_side_stream(ex, mod, case, seed)[:2]
    except Exception as e:
        ok, msg = False, _short_error(e)
        if not _cuda_alive():
            emit(group="correctness", name=name, status="fail", detail=msg + " (the CUDA context is lost)")
            emit(event="fatal", detail=f"crashed in case '{name}': {msg}")
            return False
    emit(group="correctness", name=name, status="pass" if ok else "fail", detail=msg)
    return True


def release_case_memory(kept: int | None = None):
    """Between cases: what a case left behind is freed now, not during a later case. A garbage
    collection first: objects in reference cycles (a model beside its torch.compile'd step) would
    otherwise be torn down at some later collection, and a CUDA graph's teardown then drops the cuBLAS
    workspace cached for its capture stream, which a graph captured since on that stream may be using
    (pytorch/pytorch#193402: day14.decoder's timed replay faulted on the H200). The allocator's blocks
    go back to the driver past `kept` bytes (class grading: config.CASE_MEMORY_KEPT_BYTES, as each cudaFree
    and cudaMalloc slows the gradings on the host's other GPUs: benchmarks/gpu_neighbours; a check: all)."""
    import torch

    # (a stretch of GPU work: blocks given back to the driver while another grading on this GPU times
    # slow its kernel: reports/class-benchmark-168-lanes4-2gpu-9fa02d3-one-timing-beside-a-free.log)
    with (_GATE or _NO_GATE).busy():
        gc.collect()
        if torch.cuda.memory_reserved() > (_KEPT_BYTES if kept is None else kept):
            torch.cuda.empty_cache()


def time_cases(ex, mod, calibrated: dict, emit, gate=None) -> bool:
    """Every performance case timed (measure: with `gate`, each case's timed calls with the GPU alone);
    False if the CUDA context was lost."""
    from ..bench import L2Flusher

    gate = gate or _NO_GATE
    with gate.busy():
        flusher = L2Flusher()
    for case in ex.perf_cases:
        emit(event="start", name=case.label)
        try:
            status, detail, metrics = measure(ex, mod, case, flusher, calibrated.get(case.label), gate)
            emit(group="performance", name=case.label, status=status, detail=detail, metrics=metrics)
        except Exception as e:
            emit(group="performance", name=case.label, status="fail", detail=_short_error(e))
            if not _cuda_alive():
                emit(event="fatal", detail=f"crashed while timing '{case.label}'")
                return False
        release_case_memory()
    return True


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def main(cfg: WorkerConfig) -> int:
    emit = Emitter(cfg.results)
    import torch

    torch.set_num_threads(min(config.WORKER_CPU_THREADS, torch.get_num_threads()))
    from .. import exercises

    ex = exercises.get(cfg.exercise)
    # Class grading's lanes share a GPU: each stretch of GPU work between pauses, the timing with the
    # GPU alone (gate.py). From here on this process answers pauses; before, it has not touched the GPU
    # (a timing does not wait for a process still importing torch: it pauses at its first busy()).
    global _GATE, _SHARED_POISON, _KEPT_BYTES, _STATE
    _KEPT_BYTES = cfg.case_memory_kept
    gate = _GATE = WorkerGate(os.path.dirname(os.path.abspath(cfg.results)), cfg.gate)
    try:
        with gate.busy():  # the CUDA context is made here (or was, in a process started early)
            mod = load_submission(ex, cfg)
            if torch.cuda.is_available():
                torch.cuda.init()
    except Exception as e:
        emit(event="fatal", detail=f"could not load the built module: {_short_error(e)}")
        return 1
    # (not under compute-sanitizer, which checks the learner's accesses itself and would instrument it)
    if torch.cuda.is_available() and not cfg.cpu_only and not cfg.max_case_bytes:
        from .poison import SharedMemoryPoison

        with gate.busy():
            _SHARED_POISON = SharedMemoryPoison()
        if _SHARED_POISON.why_not:
            emit(group="work", name=POISON_ROW, status="skip",
                 detail=f"skipped: could not fill shared memory with NaN before each call here ({_SHARED_POISON.why_not}): "
                        "a read of shared memory the kernel never wrote may go unseen")
    # (not under compute-sanitizer, which times nothing)
    if cfg.variables and torch.cuda.is_available() and not cfg.cpu_only and not cfg.max_case_bytes:
        from .device_state import DeviceState

        try:
            with gate.busy():
                _STATE = DeviceState(mod.__file__, cfg.variables)
        except Exception as e:  # (no submission can cause this: the lookup reads what the grader built)
            emit(group="work", name=STATE_ROW, status="skip",
                 detail=f"skipped: could not find the file's __device__ and __constant__ variables here "
                        f"({_short_error(e)}); between timed calls only the limit on their size holds")
    emit(event="ready", t=time.time())
    # What exists now (torch, the module) lives as long as the process: frozen, out of the collector's
    # way, so that the collection after each case looks at that case's objects alone (34 ms -> ~0).
    gc.collect()
    gc.freeze()
    if ex.module_checks is not None:
        emit(event="start", name="module checks")
        try:
            for group, name, status, detail in ex.module_checks(mod, torch.cuda.is_available()):
                emit(group=group, name=name, status=status, detail=detail)
        except Exception as e:
            emit(group="source", name="module checks", status="fail", detail=_short_error(e))
    if cfg.cpu_only:
        emit(event="done")
        return 0
    seeds = cfg.seeds
    small = cfg.max_case_bytes
    part = cfg.part  # "no launches" and "launches": two processes share the work
    untimed = untimed_cases(ex, small)
    if part == "launches":
        untimed = []
    handover = cfg.handover  # a Python module's outputs, for the judge apart (judge.py)
    profiling = part != "no launches" and not small and ex.learner_file != "python"
    # (a pause while the module loaded is part of the process's start, not of the first phase)
    t_phase, paused_before, waited_before = time.perf_counter(), gate.paused_s, gate.waited_s

    def phase(name):  # the seconds since the last phase ended, under `name`; paused and waiting ones apart
        nonlocal t_phase, paused_before, waited_before
        now, paused, waited = time.perf_counter(), gate.paused_s - paused_before, gate.waited_s - waited_before
        if waited > 0:
            emit(event="phase", name=WAITED_PHASE, seconds=waited)
        emit(event="phase", name=name, seconds=now - t_phase - paused - waited)
        if paused > 0:
            emit(event="phase", name=PAUSED_PHASE, seconds=paused)
        t_phase, paused_before, waited_before = now, gate.paused_s, gate.waited_s

    fitting = [u for u in untimed if fits_gpu(u.case)]
    for _, case in (u for u in untimed if u not in fitting):
        emit(group="correctness", name=case.label, status="skip",
             detail=f"skipped: this case needs a GPU with {case.gpu_gib:g} GiB of memory, and this one has "
                    f"{_gpu_gib():.1f} GiB; a larger GPU (class grading's) runs it")
    untimed = fitting
    for index, case in untimed:
        emit(event="start", name=case.label)
        result = None
        gate.slowest_call = 0.0  # this case's slowest call, against the limit on one (config.RUN_LIMIT_S)
        for label, seed in seeds:
            try:
                ok, msg = _case_run(ex, mod, case, seed, gate, handover and HandedRun(handover, index, label))
            except OutOfMemory as e:
                if not case.gpu_gib:
                    ok, msg = False, str(e)
                else:  # (a case of a large GPU's memory, which other processes hold now: not this code's fault)
                    result = ("skip", f"skipped: this GPU's memory is held by other processes ({e})")
                    break
            except Exception as e:
                ok, msg = False, _short_error(e)
                if not _cuda_alive():
                    emit(group="correctness", name=case.label, status="fail",
                         detail=f"seed {label}: {msg} (the CUDA context is lost; later checks cannot run)")
                    emit(event="fatal", detail=f"crashed in case '{case.label}': {msg}")
                    return 1
            if not ok:
                result = ("fail", f"seed {label}: {msg}")
                break
            result = ("pass", msg)
        emit(group="correctness", name=case.label, status=result[0], detail=result[1],
             metrics={"slowest_call_s": round(gate.slowest_call, 4)})
        release_case_memory()
    if untimed:
        phase(f"{_count(len(untimed), 'case')} x {_count(len(seeds), 'seed')}")
    if untimed and not small:
        with gate.busy():
            alive = stream_case(ex, mod, [u.case for u in untimed], seeds[0].value, emit)
        if not alive:
            return 1
        phase("side stream")
    if cfg.perf and ex.perf_cases and part != "launches":
        if cfg.timed_apart:  # a Python module's steps, timed by the check's own process
            from . import timed_apart

            if not timed_apart.serve(ex, mod, os.path.dirname(os.path.abspath(cfg.results)), emit, gate,
                                     _short_error, release_case_memory, _cuda_alive):
                emit(event="fatal", detail="crashed while its timed steps ran")
                return 1
        # each case's timed calls with every other grading on this GPU paused (class grading's lanes)
        elif not time_cases(ex, mod, cfg.calibrated or {}, emit, gate):
            return 1
        phase(f"timing ({_count(len(ex.perf_cases), 'case')})")
    # After the timing: CUPTI, once the profiler has started it, stays in the process and slows every
    # later launch (the cases ran 2-3x slower after it), and what is timed should not carry it.
    if profiling:
        small = [c for c in ex.cases if not c.perf and not c.gpu_gib]
        emit(event="start", name="kernels launched")
        if gate.enabled:  # CUPTI's start (seconds) outside the stretch of GPU work: no timing waits on it
            try:
                start_profiler()
            except Exception:  # (the profiled call below says what fails)
                pass
            phase(PROFILER_START_PHASE)
        try:
            with gate.busy():
                _profile_kernels(ex, mod, small[len(small) // 2], cfg.kernels, emit)
        except Exception as e:
            emit(group="work", name="kernels launched", status="fail", detail=_short_error(e))
        phase("kernels launched (torch.profiler)")
    emit(event="done", t=time.time())
    return 0


PROFILER_START_PHASE = "profiler started (CUPTI), beside the others"


def start_profiler() -> None:
    """The profiler's first session, empty: kineto and CUPTI load and start, no kernel runs."""
    with _cuda_session():
        pass


def warm_up(profiler: bool, not_before: Callable[[], None] | None = None) -> dict:
    """What a grading process pays before its first case, paid before the submission exists
    (`--wait`): torch and a CUDA context; with `profiler` (`--wait-profiler`, the process that only
    checks which kernels ran), the profiler's first session too (CUPTI's start, seconds). `not_before`:
    called after torch's import, returns when the GPU part may start (WARM_GO). Returns when each
    stage ended (stage -> wall-clock time), for the check's account of what ran beside it."""
    import torch

    when = {"torch imported": time.time()}
    if not_before is not None:
        not_before()
        when["told to go on"] = time.time()
    if not torch.cuda.is_available():
        return when
    torch.cuda.init()
    torch.ones(8, device="cuda").sum().item()
    when["CUDA context made"] = time.time()
    if profiler:
        kernels_launched(lambda: torch.ones(8, device="cuda").sum())
        when["profiler started (CUPTI)"] = time.time()
    return when


def wait_for(path: str) -> WorkerConfig:
    """The config, once the parent has written it (renamed into place whole). Its stdin is a pipe
    from the check that started it: at end of file that check is gone (a learner's Ctrl-C, a closed
    terminal), and nothing will come; nor after config.IDLE_WAIT_S: end."""
    _wait_for_any([path])
    return WorkerConfig.read(path)


def _wait_for_any(paths: list) -> None:
    """Until one of `paths` exists (as wait_for: ends the process when its check is gone)."""
    import select

    give_up = time.monotonic() + config.IDLE_WAIT_S
    while not any(os.path.exists(p) for p in paths):
        if time.monotonic() > give_up:
            os._exit(0)
        readable, _, _ = select.select([0], [], [], 0.01)
        if readable and not os.read(0, 1):
            os._exit(0)


# Files in a waiting process's folder: WARM_READY, written by a `--wait` process once its CUDA context
# is made (and CUPTI started), holding when each stage of its start ended (warm_up's JSON); WARM_GO,
# written by the parent into a `--wait-profiler --after` process's folder, after which it makes its
# CUDA context and starts CUPTI (supervise.WarmWorker `after`).
WARM_READY, WARM_GO = "warm-ready", "warm-go"


if __name__ == "__main__":
    try:
        if sys.argv[1] in ("--wait", "--wait-profiler"):  # started early (supervise.WarmWorker)
            folder = Path(sys.argv[2]).resolve().parent
            go = None
            if "--after" in sys.argv[3:]:  # its GPU part once the parent says (or the config is there)
                go = lambda: _wait_for_any([folder / WARM_GO, sys.argv[2]])  # noqa: E731
            stages = warm_up(profiler=sys.argv[1] == "--wait-profiler", not_before=go)
            _write(folder / WARM_READY, json.dumps(stages))
            cfg = wait_for(sys.argv[2])
        else:
            cfg = WorkerConfig.read(sys.argv[1])
        rc = main(cfg)
        if _GATE is not None:  # its exit (the CUDA context torn down, its memory given back) beside no timing
            _GATE.hold()
    except Exception:
        traceback.print_exc()
        sys.exit(3)
    if cfg.max_case_bytes:  # under compute-sanitizer, which reports at a normal exit
        sys.exit(rc)
    # Every result is on disk (one line each, flushed): end without tearing down torch and the CUDA
    # context, a second or more the check would otherwise wait for (the driver frees it all anyway).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
