"""Small helpers the notebooks share: the setup banner, GPU-or-skip, device printf capture,
bandwidth and TFLOP/s measurement of in-notebook kernels with the grader's timing protocol,
reading kernels: a function of a source file, a kernel's SASS, the shared-memory bank model, and
timelines of what the GPU ran under torch.profiler and where it waited."""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path

from . import machine, paths, pyenv, toolkit


# The oldest compute capability whose GPUs run this notebook's kernels (setup(day)); None: any.
_day_min_arch: str | None = None


def arch_at_least(arch: str) -> bool:
    """Whether this machine's GPU (in compile-only mode: the one compiled for, sm_90) has compute
    capability `arch` or newer: for the cells of a version that needs a newer GPU than its day."""
    from .spec import arch_key

    return arch_key(machine.arch()) >= arch_key(arch)


def setup(day: str | None = None) -> str:
    """Print what this session can do; return the mode ('gpu' or 'compile-only'). With `day`
    ('day09'), a GPU older than the day's kernels need makes its GPU steps skip, saying why (gpu())."""
    import torch

    from . import exercises

    global _day_min_arch
    _day_min_arch = exercises.day_min_arch(day) if day else None
    mode = machine.mode()
    feats = pyenv.load_inline_features()
    print(f"course root   {paths.ROOT}")
    print(f"torch         {torch.__version__} (CUDA {torch.version.cuda}), nvcc {toolkit.nvcc_version()}")
    if mode == "gpu":
        p = torch.cuda.get_device_properties(0)
        print(f"GPU           {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs")
        if _day_min_arch and not arch_at_least(_day_min_arch):
            print(f"              this day's kernels need compute capability {_day_min_arch} or newer: they are "
                  f"compiled for sm_{_day_min_arch.replace('.', '')} and inspected, and running them is skipped")
    else:
        print("GPU           none: kernels are compiled for sm_90 and inspected; running them is skipped")
    print(f"build cache   {pyenv.cache_dir()}")
    print(f"load_inline   no_implicit_headers={feats['no_implicit_headers']}, use_pch={feats['use_pch']}")
    print(f"mode          {mode}")
    return mode


def gpu(what: str) -> bool:
    """True if a GPU is here that runs this day's kernels (setup(day)); otherwise say plainly that
    `what` is skipped and why."""
    if not machine.has_gpu():
        print(f"Skipped: {what} needs a CUDA GPU, and this machine has none (compile-only mode).")
        return False
    if _day_min_arch and not arch_at_least(_day_min_arch):
        print(f"Skipped: {what} needs a GPU of compute capability {_day_min_arch} or newer; this one is "
              f"{machine.arch()}.")
        return False
    return True


@contextlib.contextmanager
def device_output():
    """Capture what kernels print with printf (it goes to the process's file
    descriptor 1, not to Python) and show it in the notebook, in order."""
    import torch

    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
            if machine.has_gpu():
                torch.cuda.synchronize()  # device printf is flushed at synchronisation
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", errors="replace")
    if text:
        print(text, end="" if text.endswith("\n") else "\n")


def measure_bandwidth(fns: dict, nbytes: dict | int, include_copy: bool = True, label: str = "",
                      ceiling: str = "copy") -> dict[str, dict]:
    """Time callables interleaved (cold L2, CUDA events, median) and return, for each,
    GB/s and the fraction of the speed of light of the same bytes timed alongside: a device copy
    (`ceiling` "copy": `copy_ratio`) or, for kernels that only read, the read ceiling ("read":
    `read_ratio`). `label` names the measurement in the GPU verification report."""
    from .bench import bench_interleaved, ceiling_baseline

    sizes = nbytes if isinstance(nbytes, dict) else {k: nbytes for k in fns}
    fns = dict(fns)
    base_bytes = None
    if include_copy:
        fn, base_bytes = ceiling_baseline(ceiling, max(sizes.values()))
        fns[ceiling] = fn
        sizes[ceiling] = base_bytes
    timings = bench_interleaved(fns, max_reps=100, time_cap_s=1.0)
    base_gbps = timings[ceiling].gbps(base_bytes) if include_copy else None
    out = {}
    for k, t in timings.items():
        g = t.gbps(sizes[k])
        out[k] = {"gbps": g, "us": t.median_ms * 1e3, f"{ceiling}_ratio": g / base_gbps if base_gbps else None}
    _record(label, out)
    return out


def measure_tflops(fns: dict, flops: float, baseline: str | None = None, label: str = "") -> dict[str, dict]:
    """Time callables interleaved (cold L2, CUDA events, median) and return, for each, TFLOP/s
    for `flops` and, with `baseline` (the key of one of them, e.g. torch.matmul), the fraction
    of the baseline's TFLOP/s timed alongside. `label` names it in the GPU verification report."""
    from .bench import bench_interleaved

    timings = bench_interleaved(dict(fns), max_reps=50, time_cap_s=2.0)
    base_ms = timings[baseline].median_ms if baseline else None
    out = {}
    for k, t in timings.items():
        out[k] = {"tflops": flops / (t.median_ms * 1e-3) / 1e12, "us": t.median_ms * 1e3,
                  "ratio": base_ms / t.median_ms if base_ms else None}
    _record(label, out)
    return out


def measure_latency(fns: dict, baseline: str, label: str = "") -> dict[str, dict]:
    """Time callables interleaved (cold L2, CUDA events, median) and return, for each, its time
    in us and `speedup`: how many times faster than `baseline` (the key of one of them) it ran.
    `label` names it in the GPU verification report."""
    from .bench import bench_interleaved

    timings = bench_interleaved(dict(fns), max_reps=100, time_cap_s=1.0)
    base_ms = timings[baseline].median_ms
    out = {k: {"us": t.median_ms * 1e3, "speedup": base_ms / t.median_ms} for k, t in timings.items()}
    _record(label, out)
    return out


def print_bandwidth(results: dict[str, dict], width: int = 16, us_width: int = 8) -> None:
    """Print measure_bandwidth's results, a line each: the name (padded to `width`), GB/s, the
    median time in us (`us_width` wide) and the fraction of the copy ceiling timed alongside."""
    for name, r in results.items():
        print(f"{name:<{width}} {r['gbps']:7.0f} GB/s  {r['us']:{us_width}.1f} us  {r['copy_ratio']:5.2f}x copy")


def gemm_inputs(m: int, n: int, k: int, dtype=None):
    """A GEMM's inputs on the GPU, for C = A B^T: A (m x k) and B (n x k), row-major, standard normal
    entries drawn in fp32 and cast to `dtype` (default torch.bfloat16)."""
    import torch

    dtype = torch.bfloat16 if dtype is None else dtype
    return torch.randn(m, k, device="cuda").to(dtype), torch.randn(n, k, device="cuda").to(dtype)


def _record(label: str, measured: dict) -> None:
    for name, m in measured.items():
        record(label, name, **m)


def record(label: str, name: str, **metrics) -> None:
    """Keep a measurement for the GPU verification report (when COURSE_MEASUREMENTS is set):
    e.g. record("day04 bank conflicts", "transpose_v2_shared", loads=..., stores=...).
    Bandwidth measurements (gbps, copy_ratio) are recorded by measure_bandwidth itself."""
    import json

    path = os.environ.get("COURSE_MEASUREMENTS")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"label": label, "name": name, **metrics}) + "\n")


# ------------------------------------------------------- reading kernels: sources, SASS, shared-memory banks
def file_header(path) -> str:
    """A source file's opening comment: its lines up to the first that does not start with //
    (each kernel file opens with what it adds and what it should reach)."""
    lines = []
    for line in Path(path).read_text().splitlines():
        if not line.startswith("//"):
            break
        lines.append(line)
    return "\n".join(lines)


def kernel_lines(path, kernel: str, lines_before: int = 0) -> list[str]:
    """The lines of one __global__ function of a source file: from the first line that holds
    "__global__" and `kernel` (and the `lines_before` lines above it: 1 for a `template <...>` line)
    to its closing brace, the first line after it that is just "}"."""
    lines = Path(path).read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if "__global__" in l and kernel in l)
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return lines[start - lines_before:end + 1]


def show_kernel(path, kernel: str, lines_before: int = 0) -> None:
    """Print one __global__ function of a source file (kernel_lines: from its signature, or
    `lines_before` lines above it, to its closing brace)."""
    print("\n".join(kernel_lines(path, kernel, lines_before)))


def show_with_comment(path, name: str, stop_at: tuple[str, ...] = ("}",)) -> None:
    """Print one function of a source file with the comment and template line above it: from its
    signature (the first line with `name(` that is not a // comment) up over the lines above it to a
    blank line or to a line that starts with one of `stop_at` (the end of what comes before), and
    down to its closing brace, the first line after the signature that is just "}"."""
    lines = Path(path).read_text().splitlines()
    at = next(i for i, l in enumerate(lines) if f"{name}(" in l and not l.lstrip().startswith("//"))
    start = at
    while start > 0 and lines[start - 1].strip() and not lines[start - 1].startswith(stop_at):
        start -= 1
    end = next(i for i in range(at, len(lines)) if lines[i] == "}")
    print("\n".join(lines[start:end + 1]))


def kernel_of(path) -> str:
    """A kernel file's text from its first __global__ to the end of its anonymous namespace (the line
    "}  // namespace"): the kernel and what follows it there, without the file's opening comment and
    the exported launch functions."""
    text = Path(path).read_text()
    return text[text.index("__global__"):text.index("}  // namespace")]


# One SASS instruction line of cuobjdump: "/*0040*/  @P0 LDC R5, c[0x0][RZ] ;  /* 0x...encoding... */"
# (address, the instruction with its predicate, the opcode).
SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+((?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)[^;]*?)\s*;")


def sass_lines(kernel, keep: tuple[str, ...] = (), addresses: bool = True) -> list[str]:
    """A compiled kernel's SASS (a kernel of grader.jit.compile_cubin's report), an instruction a line
    in program order, without the encodings and the NOP padding: "0040  LDC R5, c[0x0][RZ]", or with
    addresses=False "LDC R5, c[0x0][RZ]". With `keep` (opcode prefixes, e.g. ("LDG", "STG")), only
    the instructions whose opcode starts with one of them."""
    found = (SASS_LINE.search(line) for line in kernel.sass.splitlines())
    return [f"{m.group(1)}  {m.group(2)}" if addresses else m.group(2) for m in found
            if m and m.group(3) != "NOP" and (not keep or m.group(3).startswith(keep))]


def memory_ops(kernel, prefixes: tuple[str, ...] = ("LDG", "STG"), counts: bool = True):
    """A compiled kernel's SASS opcodes that start with one of `prefixes` (by default global loads and
    stores; add "LDS", "STS", "BAR" for shared memory and barriers), in opcode order: {opcode: how many
    times it appears}, or with counts=False the list of opcodes."""
    ops = [(op, n) for op, n in sorted(kernel.opcodes().items()) if op.startswith(prefixes)]
    return dict(ops) if counts else [op for op, _ in ops]


def passes(addresses, width: int = 4) -> int:
    """Shared-memory passes (Nsight Compute's wavefronts) that one access of a warp needs, in the model
    of 32 banks 4 bytes wide. `addresses`: the byte address each lane reads or writes (for 16-byte
    accesses, the 8 lanes of one phase, e.g. the 8 row addresses of one ldmatrix 8 x 8 tile), each
    access `width` bytes (4, also for 1- and 2-byte elements, which share the word that holds them;
    16 for 16-byte vectors and ldmatrix rows), aligned to `width`. A bank delivers one word per pass;
    lanes that ask for the same `width`-byte piece share one read (a broadcast). So: the most distinct
    pieces any one bank is asked for."""
    if width % 4:
        raise ValueError(f"width {width}: a multiple of the 4-byte bank word")
    per_bank: dict[int, set] = {}
    for a in addresses:
        piece = a // width
        for word in range(piece * width // 4, (piece + 1) * width // 4):
            per_bank.setdefault(word % 32, set()).add(piece)
    return max(len(s) for s in per_bank.values())


# ----------------------------------------------------- the committed GPU report, where there is no GPU
REPORT = paths.ROOT / "reports" / "gpu-verification.json"
# `verify --notebooks-only` runs: of the whole course (gpu-notebooks.json) or of some days (gpu-notebooks-day05-day06.json)
NOTEBOOK_REPORTS = "gpu-notebooks*.json"


def _load(path):
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def gpu_report() -> dict | None:
    """The committed GPU verification run (reports/gpu-verification.json), or None. Its notebook
    measurements are joined by those of the notebook runs made apart (reports/gpu-notebooks*.json):
    for each label, the newest run that measured it wins, and each row keeps that run's environment
    under "_environment" (runs on different days may be on different GPUs)."""
    report = _load(REPORT)
    runs = [r for r in [report, *(_load(f) for f in sorted(REPORT.parent.glob(NOTEBOOK_REPORTS)))] if r]
    runs.sort(key=lambda r: r.get("environment", {}).get("date", ""))  # oldest first: a newer run wins
    newest: dict[str, list] = {}
    for run in runs:
        by_label: dict[str, list] = {}
        for m in run.get("notebook_measurements") or []:
            by_label.setdefault(m.get("label"), []).append({**m, "_environment": run.get("environment", {})})
        newest.update(by_label)
    if not newest:
        return report
    report = dict(report or {"environment": runs[-1].get("environment", {})})
    report["notebook_measurements"] = [m for rows in newest.values() for m in rows]
    return report


def report_caption(env: dict | None = None) -> str:
    """'measured on NVIDIA H200 on 2026-11-23 (committed GPU report)': how a fallback plot is labelled."""
    env = env if env is not None else (gpu_report() or {}).get("environment", {})
    return f"measured on {env.get('gpu', 'a GPU')} on {env.get('date', '?').split()[0]} (committed GPU report)"


def report_gpu() -> dict:
    """The report's GPU: gpu (name), sms, l2_mb, peak_gbps, date, ... ({} without a report)."""
    return dict((gpu_report() or {}).get("environment", {}))


def reported(label: str, what: str = "") -> dict[str, dict] | None:
    """The measurements a notebook recorded under `label` (nb.measure_bandwidth(label=...) or nb.record)
    in the committed GPU report, as {name: metrics} like measure_bandwidth returns; None if the report
    has none. With `what`, first says plainly that this machine cannot measure it and whose numbers follow."""
    report = gpu_report() or {}
    rows = [m for m in report.get("notebook_measurements", []) if m.get("label") == label]
    if what:
        if rows:
            print(f"No GPU here: {what} shows the numbers {label_caption(label)}, not this machine's.")
        else:
            print(f"Skipped: {what} needs a CUDA GPU, and the committed GPU report has no '{label}' to show instead.")
    if not rows:
        return None
    return {m["name"]: {k: v for k, v in m.items() if k not in ("label", "name", "_environment")} for m in rows}


def measured_or_reported(here: dict | None, label: str, what: str) -> tuple[dict | None, str]:
    """(numbers, caption) for a plot: this run's measurement on a GPU (caption ''), else the committed
    GPU report's (caption 'measured on <GPU> on <date> (committed GPU report)'), else (None, '')."""
    if machine.has_gpu() and here is not None:
        return here, ""
    found = reported(label, what)
    return found, (label_caption(label) if found else "")


def label_environment(label: str) -> dict:
    """The GPU (gpu, peak_gbps, l2_mb, date, ...) of the committed run whose `label` rows a plot shows."""
    report = gpu_report() or {}
    return dict(next((m["_environment"] for m in report.get("notebook_measurements", []) if m.get("label") == label),
                     report.get("environment", {})))


def label_caption(label: str) -> str:
    """'measured on <GPU> on <date> (committed GPU report)' for the run whose `label` rows a plot shows."""
    return report_caption(label_environment(label))


VERIFY_REPORTS = "gpu-verification*.json"  # the whole course's, and parts' (gpu-verification-day12.json, ...)


def _reported_solution(exercise: str) -> tuple[dict, dict] | None:
    """(grading row, environment) of the reference solution's newest graded run among the committed
    GPU verification reports, or None."""
    found = None
    for path in sorted(REPORT.parent.glob(VERIFY_REPORTS)):
        report = _load(path) or {}
        env = report.get("environment", {})
        for row in report.get("grading", []):
            if row.get("exercise") == exercise and row.get("kind") == "solution" and (
                    found is None or env.get("date", "") > found[1].get("date", "")):
                found = (row, env)
    return found


def reported_result(exercise: str):
    """The reference solution's graded run from the committed GPU reports (the newest that graded it),
    as a Result whose performance rows plot like a learner's (`.plot()`); None if none has it. Its
    `caption` says which GPU and when. Its timed rows are judged against the spec's target as it is now
    (a report may predate a change of target: the plot's target line is the one a check applies); a run
    timed against another baseline than the spec's is not this exercise's result (None)."""
    from . import exercises
    from .check.result import Result

    found = _reported_solution(exercise)
    if found is None:
        return None
    row, env = found
    spec = exercises.get(exercise).target
    if any(i.get("metrics", {}).get("baseline", spec.baseline.name) != spec.baseline.name
           for i in row.get("items", []) if i["group"] == "performance" and i.get("metrics")):
        return None
    target = spec.ratio
    res = Result(exercise, f"solutions/ ({report_caption(env)})", "gpu")
    for item in row.get("items", []):
        metrics, status = item.get("metrics"), item["status"]
        if item["group"] == "performance" and metrics and "ratio" in metrics:
            metrics = dict(metrics, target=target)
            status = "pass" if metrics["ratio"] >= target else "fail"
        res.add(item["group"], item["name"], status, item.get("detail", ""), metrics)
    res.caption = report_caption(env)
    return res


def plot_result(result, ax=None):
    """The check's performance plot: yours where a GPU timed your kernel; without a GPU, the same plot
    of the reference solution from the committed GPU report, labelled with that GPU and date."""
    if result.performance():
        return result.plot(ax=ax)
    if machine.has_gpu():
        print("No performance plot: the check did not time your kernel (see the table: it times only a "
              "kernel that passed every correctness case).")
        return None
    ref = reported_result(result.exercise)
    if ref is None or not ref.performance():
        print("Skipped: the performance plot needs a CUDA GPU, and the committed GPU reports have no run of "
              f"{result.exercise}'s reference timed against its baseline as the spec states it now.")
        return None
    print(f"No GPU here, so your kernel was not timed. The plot shows the reference solution, {ref.caption}:"
          " what the target means on that GPU.")
    return ref.plot(ax=ax, kernel_label="reference solution", caption=ref.caption)


# ------------------------------------------------------- Nsight Compute through jupyterlab-nvidia-nsight
NCU_ENABLE = ("%ncu enable --section SpeedOfLight --section MemoryWorkloadAnalysis "
              "--section MemoryWorkloadAnalysis_Tables --section Occupancy --section LaunchStats "
              "--section WarpStateStats --section SchedulerStats")


def _nsight_magics():
    """The jupyterlab-nvidia-nsight magics object in this kernel, or None (a kernel not started by a
    Jupyter server with the extension: nbval, a plain console, VS Code on its own)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    ip = get_ipython()
    if ip is None:
        return None
    return ip.magics_manager.registry.get("NsightMagics")


def ncu_ready() -> bool:
    """Whether `%%ncu` cells profile here: the extension's magics in this kernel, its Nsight Compute
    enabled, ncu installed and a GPU. Otherwise says what is missing and how to enable it, and makes
    `%%ncu` cells print "Skipped: ..." instead of running (so they skip cleanly under nbval too)."""
    from . import ncu

    magics = _nsight_magics()
    tool = getattr(magics, "tool", None)
    enabled = tool is not None and getattr(tool, "exe_name", lambda: "")() == "ncu"
    missing = []
    if not machine.has_gpu():
        missing.append("a CUDA GPU (this machine has none)")
    if ncu.ncu_path() is None:
        missing.append("Nsight Compute's `ncu` (it comes with the CUDA toolkit; put its bin/ on PATH)")
    if magics is None:
        missing.append("the jupyterlab-nvidia-nsight server extension: open this notebook in the Lab that "
                       "`make lab` starts (its `%%ncu` magic comes from the Jupyter server)")
    if not missing and enabled:
        print("Nsight Compute is on: each %%ncu cell below runs under ncu and prints its report.")
        return True
    if not missing:
        print("Nsight Compute is not enabled in this kernel. Run, in a cell of its own:\n    " + NCU_ENABLE +
              "\nthen Kernel > Restart Kernel and run the notebook again (the sections listed are the ones "
              "these cells discuss). `%ncu disable` and a restart turn it off.")
    else:
        print("Skipped: the %%ncu cells below profile on a GPU. Missing here: " + "; ".join(missing) + ".")
    _stand_in_ncu("; ".join(missing) or "Nsight Compute not enabled in this kernel (see above)")
    return False


def _stand_in_ncu(reason: str) -> None:
    """A `%%ncu` cell magic that says it skipped and runs nothing (the cells launch GPU kernels)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is None:
        return

    def ncu(line, cell):
        print(f"Skipped %%ncu {line}: {reason}.")

    ip.register_magic_function(ncu, magic_kind="cell", magic_name="ncu")


# --------------------------------------------------- timelines: what the GPU ran, and where it waited
# The profiler's activity types of work on the GPU's streams (its "gpu_user_annotation" ranges and the
# host's "cuda_runtime" calls are not GPU work).
GPU_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")


def _activity(event) -> str:
    """An event's profiler activity type ("kernel", "gpu_memcpy", "user_annotation", ...). Events carry it
    from torch 2.12 on; before, it follows from the event's device type, its user-annotation flag and the
    names the profiler gives copies and memsets."""
    kind = getattr(event, "activity_type", None)
    if kind:
        return kind
    on_gpu = getattr(event.device_type, "name", str(event.device_type)).upper().endswith("CUDA")
    if getattr(event, "is_user_annotation", False):
        return "gpu_user_annotation" if on_gpu else "user_annotation"
    if not on_gpu:
        return "cpu_op"
    return "gpu_memcpy" if event.name.startswith("Memcpy") else "gpu_memset" if event.name.startswith("Memset") else "kernel"


def kernel_spans(prof, device: int | None = 0, within: str | None = None,
                 activities: tuple[str, ...] = GPU_ACTIVITIES) -> list[tuple]:
    """What a GPU ran while torch.profiler recorded (profile(activities=[ProfilerActivity.CPU,
    ProfilerActivity.CUDA])): (name, start_us, end_us) of each kernel, memory copy and memset on GPU
    `device`, in order of start, in us from the profile's start. With `within`, only those inside the
    host's time range of the region marked `with torch.profiler.record_function(within):` (the last
    one, if several): end the region with torch.cuda.synchronize(), so that it holds the whole run of
    what it launched. Read from the profile's structured events (prof.events(): each one's activity
    type, device index and time range), not from its printed tables. `activities` and device=None
    select other events the same way: ("cpu_op",) with device=None gives the host's operators (how
    the tests read a profile without a GPU)."""
    events = list(prof.events())
    first, last = float("-inf"), float("inf")
    if within is not None:
        marks = [e for e in events if e.name == within and _activity(e) == "user_annotation"]
        if not marks:
            raise ValueError(f"no region {within!r} in this profile: mark it with torch.profiler.record_function")
        first, last = marks[-1].time_range.start, marks[-1].time_range.end
    spans = [(e.name, e.time_range.start, e.time_range.end) for e in events
             if _activity(e) in activities and (device is None or e.device_index == device)
             and first <= e.time_range.start and e.time_range.end <= last]
    return sorted(spans, key=lambda s: (s[1], s[2]))


def timeline_gaps(spans) -> list[tuple[float, float]]:
    """The idle gaps of a timeline of (name, start_us, end_us) spans, as (start_us, end_us): the times
    between its first start and its last end when no span was running (overlapping spans, as on two
    streams, cover each other)."""
    gaps, reach = [], None  # reach: the latest end so far; a span that starts after it leaves a gap
    for _, start, end in sorted(spans, key=lambda s: s[1]):
        if reach is not None and start > reach:
            gaps.append((reach, start))
        reach = end if reach is None else max(reach, end)
    return gaps


def timeline_figures(spans) -> dict:
    """The figures of a timeline of (name, start_us, end_us) spans: `total_us` from the first start to
    the last end, `idle_us` the sum of its `gaps` idle gaps (timeline_gaps), `busy_us` the rest (the
    time at least one span was running), `kernels` how many spans, of which `copies` are memory
    copies and memsets (the profiler names them "Memcpy ..." and "Memset ...")."""
    gaps = timeline_gaps(spans)
    total = max(s[2] for s in spans) - min(s[1] for s in spans) if spans else 0.0
    idle = sum(end - start for start, end in gaps)
    return {"total_us": total, "busy_us": total - idle, "idle_us": idle, "gaps": len(gaps), "kernels": len(spans),
            "copies": sum(name.startswith(("Memcpy", "Memset")) for name, _, _ in spans)}


def timeline_title(label: str, figures: dict) -> str:
    """A timeline row's title (and the line a notebook prints): its label and timeline_figures' figures."""
    f = figures
    copies = f" ({f['copies']} of them copies)" if f["copies"] else ""
    busy = f" ({f['busy_us'] / f['total_us']:.0%})" if f["total_us"] else ""
    gaps, kernels = f"{f['gaps']} gap{'s' * (f['gaps'] != 1)}", f"{f['kernels']} kernel{'s' * (f['kernels'] != 1)}"
    return (f"{label}: {f['total_us']:.0f} us first start to last end, GPU busy {f['busy_us']:.0f} us{busy}, "
            f"idle {f['idle_us']:.0f} us in {gaps}, {kernels}{copies}")


# The colour of a span, by the first of these its name contains (case ignored); "other kernels" else.
TIMELINE_KINDS = {"GEMM / GEMV (cuBLAS)": ("gemm", "gemv", "nvjet", "xmma", "cutlass", "splitk"),
                  "memory copy / memset": ("memcpy", "memset")}


def plot_timeline(rows: dict, kinds: dict | None = None, width: float = 10.0):
    """A timeline of several versions of the same work: one row per entry of `rows` ({label: spans},
    spans as kernel_spans returns them) on a time axis shared by all rows, each row's time counted from
    its own first span. In a row, each span is a bar coloured by kind (`kinds`: {legend label: name
    fragments}, default TIMELINE_KINDS), and under the bars each idle gap is a red bar of its own width
    (timeline_gaps), so that gaps too short to see between the bars still show. Each row's title is
    timeline_title's line, above the row; the legend is below the axes. Returns the figure."""
    import matplotlib.pyplot as plt

    kinds = TIMELINE_KINDS if kinds is None else kinds
    labels = [*kinds, "other kernels"]
    colours = {**dict(zip(labels, plt.rcParams["axes.prop_cycle"].by_key()["color"])), "idle gap": "tab:red"}
    fig, axes = plt.subplots(len(rows), 1, figsize=(width, 1.1 + 0.9 * len(rows)), sharex=True,
                             squeeze=False, layout="constrained")
    for ax, (label, spans) in zip(axes[:, 0], rows.items()):
        t0 = min((s[1] for s in spans), default=0.0)
        kind = [next((k for k, frags in kinds.items() if any(f in n.lower() for f in frags)), labels[-1])
                for n, _, _ in spans]
        c = [colours[k] for k in kind]
        # edges of the bar's own colour: a kernel or a gap of 1 us stays visible on an axis of milliseconds
        ax.barh(0.2, [e - s for _, s, e in spans], left=[s - t0 for _, s, _ in spans], height=0.6,
                color=c, edgecolor=c, linewidth=0.4)
        gaps = timeline_gaps(spans)
        ax.barh(-0.4, [e - s for s, e in gaps], left=[s - t0 for s, _ in gaps], height=0.2,
                color=colours["idle gap"], edgecolor=colours["idle gap"], linewidth=0.4)
        ax.set_yticks([-0.4, 0.2], ["idle", "GPU"], fontsize=7)
        ax.set_ylim(-0.6, 0.6)
        ax.set_title(timeline_title(label, timeline_figures(spans)), fontsize=8.5, loc="left")
    axes[-1, 0].set_xlim(left=0)
    axes[-1, 0].set_xlabel("us from the row's first kernel")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in [*labels, "idle gap"]]
    fig.legend(handles, [*labels, "idle gap"], loc="outside lower center", ncols=len(labels) + 1, fontsize=8,
               frameon=False)
    return fig
