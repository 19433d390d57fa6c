"""Small helpers the notebooks share: the setup banner, GPU-or-skip, device printf capture,
and bandwidth and TFLOP/s measurement of in-notebook kernels with the grader's timing protocol."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile

from . import toolchain


def setup() -> str:
    """Print what this session can do; return the mode ('gpu' or 'compile-only')."""
    import torch

    mode = toolchain.mode()
    feats = toolchain.load_inline_features()
    print(f"course root   {toolchain.ROOT}")
    print(f"torch         {torch.__version__} (CUDA {torch.version.cuda}), nvcc {toolchain.nvcc_version()}")
    if mode == "gpu":
        p = torch.cuda.get_device_properties(0)
        print(f"GPU           {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs")
    else:
        print("GPU           none: kernels are compiled for sm_90 and inspected; running them is skipped")
    print(f"build cache   {toolchain.cache_dir()}")
    print(f"load_inline   no_implicit_headers={feats['no_implicit_headers']}, use_pch={feats['use_pch']}")
    print(f"mode          {mode}")
    return mode


def gpu(what: str) -> bool:
    """True if a GPU is here; otherwise say plainly that `what` is skipped and why."""
    if toolchain.has_gpu():
        return True
    print(f"Skipped: {what} needs a CUDA GPU, and this machine has none (compile-only mode).")
    return False


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
            if toolchain.has_gpu():
                torch.cuda.synchronize()  # device printf is flushed at synchronisation
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", errors="replace")
    if text:
        print(text, end="" if text.endswith("\n") else "\n")


def measure_bandwidth(fns: dict, nbytes: dict | int, include_copy: bool = True, label: str = "") -> dict[str, dict]:
    """Time callables interleaved (cold L2, CUDA events, median) and return, for each,
    GB/s and the fraction of a device-to-device copy of the same size timed alongside.
    `label` names the measurement in the GPU verification report."""
    from .bench import bench_interleaved, copy_baseline

    sizes = nbytes if isinstance(nbytes, dict) else {k: nbytes for k in fns}
    fns = dict(fns)
    copy_bytes = None
    if include_copy:
        fn, copy_bytes = copy_baseline(max(sizes.values()))
        fns["copy"] = fn
        sizes["copy"] = copy_bytes
    timings = bench_interleaved(fns, max_reps=100, time_cap_s=1.0)
    copy_gbps = timings["copy"].gbps(copy_bytes) if include_copy else None
    out = {}
    for k, t in timings.items():
        g = t.gbps(sizes[k])
        out[k] = {"gbps": g, "us": t.median_ms * 1e3, "copy_ratio": g / copy_gbps if copy_gbps else None}
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
