"""The grading subprocess: runs a learner's kernel where a crash cannot hurt.

Started by `grader.check` as `python -m grader.check.worker CONFIG.json`. It loads the
already built extension, runs every correctness case, profiles one call, and
times the performance cases, appending one JSON line per result to the results
file as it goes. If the kernel hangs or kills the process (an illegal address
corrupts the CUDA context), the parent still has every line written so far and
knows which case was running.
"""
from __future__ import annotations

import json
import sys
import traceback


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


def run_case(ex, mod, case, seed):
    """One correctness run. Returns (ok, message, outputs, inputs, expected, before)."""
    import torch

    p = case.params
    gen = torch.Generator(device="cuda").manual_seed(seed)
    inputs = ex.make_inputs(p, gen)
    before = {k: v.clone() for k, v in inputs.items() if torch.is_tensor(v)}
    expected = ex.reference(p, inputs)  # computed before the kernel can touch the inputs
    outputs = _fresh_outputs(ex, p, inputs)
    ex.call(mod, p, inputs, outputs)
    torch.cuda.synchronize()
    return _judge(ex, p, inputs, before, outputs, expected) + (outputs, inputs, expected, before)


def _fresh_outputs(ex, p, inputs):
    """Outputs filled with NaN, so unwritten elements fail; in-place results are the inputs."""
    import torch

    from ..spec import poison

    outputs = ex.make_outputs(p, inputs)
    for t in outputs.values():
        poison(t)
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
    from .compare import compare, unchanged

    tol = ex.tolerance(p)
    problems = []
    worst = 0.0
    for name, exp in expected.items():
        c = compare(name, outputs[name], exp, tol.rtol, tol.atol)
        worst = max(worst, c.max_abs_err)
        if not c.ok:
            problems.append(c.message())
    for name, b in before.items():
        if name in ex.inplace:
            continue
        msg = unchanged(name, b, inputs[name])
        if msg:
            problems.append(msg)
    if problems:
        return False, " | ".join(problems)
    return True, f"max abs err {worst:.2g} (rtol {tol.rtol:g}, atol {tol.atol:g})"


def _profile_kernels(ex, mod, case, kernels, emit):
    """Every CUDA kernel the call launches must be one of the module's own."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    p = case.params
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = ex.make_inputs(p, gen)
    outputs = _fresh_outputs(ex, p, inputs)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        ex.call(mod, p, inputs, outputs)
        torch.cuda.synchronize()
    launched = sorted({e.name for e in prof.events() if str(e.device_type).endswith("CUDA")})
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


def _perf(ex, mod, case, flusher, emit, calibrated_copy_gbps=None):
    import torch

    from ..bench import bench_interleaved, copy_baseline, theoretical_bandwidth

    p = case.params
    ok, msg, outputs, inputs, expected, before = run_case(ex, mod, case, 0)
    if not ok:
        emit(group="performance", name=case.label, status="fail", detail="not timed, results are wrong: " + msg)
        return
    nbytes = ex.bytes_moved(p)
    fns = {"yours": lambda: ex.call(mod, p, inputs, outputs)}
    if calibrated_copy_gbps is None:  # one check: time the baselines interleaved with the kernel
        copy_fn, copy_bytes = copy_baseline(nbytes)
        base_out = ex.make_outputs(p, inputs)
        fns["copy"] = copy_fn
        fns["torch"] = lambda: ex.baseline(p, inputs, base_out)
    timings = bench_interleaved(fns, flusher)
    torch.cuda.synchronize()
    ok, msg = _rerun(ex, mod, p, inputs, before, outputs, expected)  # still correct after timing
    yours = timings["yours"]
    gbps = yours.gbps(nbytes)
    if calibrated_copy_gbps is None:
        copy, eager = timings["copy"], timings["torch"]
        copy_gbps, torch_gbps = copy.gbps(copy_bytes), eager.gbps(nbytes)
    else:  # class grading: the copy was measured once for the whole run
        copy_gbps, torch_gbps, copy, eager = calibrated_copy_gbps, float("nan"), None, None
    ratio = gbps / copy_gbps
    peak = theoretical_bandwidth()
    metrics = dict(gbps=gbps, copy_gbps=copy_gbps, torch_gbps=torch_gbps, copy_ratio=ratio,
                   torch_ratio=gbps / torch_gbps, target=ex.target_copy_ratio, bytes=nbytes,
                   peak_gbps=peak / 1e9 if peak else None, yours=yours.as_dict(),
                   copy=copy.as_dict() if copy else None, torch=eager.as_dict() if eager else None)
    if not ok:
        status, detail = "fail", "results went wrong during timing: " + msg
    elif peak and gbps * 1e9 > peak * 1.01:
        status, detail = "fail", (f"{gbps:.0f} GB/s is above the theoretical peak {peak / 1e9:.0f} GB/s: "
                                  "the kernel cannot have moved the bytes it had to")
    else:
        status = "pass" if ratio >= ex.target_copy_ratio else "fail"
        vs_torch = (f"{gbps / torch_gbps:.2f}x {ex.baseline_name} ({torch_gbps:.0f} GB/s); "
                    if copy else "copy calibrated once for this grading run; ")
        detail = (f"{gbps:.0f} GB/s = {ratio:.3f}x copy ({copy_gbps:.0f} GB/s), target {ex.target_copy_ratio:.2f}x; "
                  f"{vs_torch}median {yours.median_ms * 1e3:.1f} us [p20 {yours.p20_ms * 1e3:.1f}, "
                  f"p80 {yours.p80_ms * 1e3:.1f}]")
    emit(group="performance", name=case.label, status=status, detail=detail, metrics=metrics)


def calibrate(nbytes: int = 1 << 30) -> float:
    """Copy bandwidth in GB/s (read + write), measured once for a class grading run."""
    from ..bench import bench_interleaved, copy_baseline

    fn, moved = copy_baseline(nbytes)
    return bench_interleaved({"copy": fn})["copy"].gbps(moved)


def call_once(config_path: str) -> None:
    """Run the untimed cases once each, unchecked: the process `ncu` profiles for counters."""
    import torch

    from .. import build, exercises

    cfg = json.loads(open(config_path, encoding="utf-8").read())
    ex = exercises.get(cfg["exercise"])
    mod = build.load_built(cfg["module_dir"], cfg["module_name"])
    for case in ex.cases:
        if case.perf:
            continue
        inputs = ex.make_inputs(case.params, torch.Generator(device="cuda").manual_seed(0))
        outputs = _fresh_outputs(ex, case.params, inputs)
        ex.call(mod, case.params, inputs, outputs)
        torch.cuda.synchronize()


def main(config_path: str) -> int:
    cfg = json.loads(open(config_path, encoding="utf-8").read())
    emit = Emitter(cfg["results"])
    import torch

    from .. import build, exercises

    ex = exercises.get(cfg["exercise"])
    try:
        mod = build.load_built(cfg["module_dir"], cfg["module_name"])
    except Exception as e:
        emit(event="fatal", detail=f"could not load the built module: {_short_error(e)}")
        return 1
    seeds = cfg["seeds"]
    small = cfg.get("max_case_bytes")
    for case in ex.cases:
        if case.perf or (small and ex.bytes_moved(case.params) > small):
            continue
        emit(event="start", name=case.label)
        result = None
        for label, seed in seeds:
            try:
                ok, msg, *_ = run_case(ex, mod, case, seed)
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
        emit(group="correctness", name=case.label, status=result[0], detail=result[1])
        torch.cuda.empty_cache()
    if cfg.get("profile", True) and not small:
        small = [c for c in ex.cases if not c.perf]
        emit(event="start", name="kernels launched")
        try:
            _profile_kernels(ex, mod, small[len(small) // 2], cfg["kernels"], emit)
        except Exception as e:
            emit(group="work", name="kernels launched", status="fail", detail=_short_error(e))
    if cfg.get("perf", True):
        from ..bench import L2Flusher

        flusher = L2Flusher()
        for case in ex.perf_cases:
            emit(event="start", name=case.label)
            try:
                _perf(ex, mod, case, flusher, emit, cfg.get("copy_gbps"))
            except Exception as e:
                emit(group="performance", name=case.label, status="fail", detail=_short_error(e))
                if not _cuda_alive():
                    emit(event="fatal", detail=f"crashed while timing '{case.label}'")
                    return 1
            torch.cuda.empty_cache()
    emit(event="done")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except Exception:
        traceback.print_exc()
        sys.exit(3)
