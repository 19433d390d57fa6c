"""Does day10.gemm lose its ratio to torch.matmul at 8192^3 to the clock? Runs the solution and
torch.matmul (cuBLAS) back to back for a few seconds each at the exercise's timed shapes while
nvidia-smi samples the SM clock, power and temperature every 50 ms; prints TFLOP/s and the mean
clock and power of each phase. Run from the repo root on a GPU machine:
    python3 benchmarks/gemm_clocks/run.py        (writes $OUT/gemm-clocks.json when $OUT is set)
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from grader import jit  # noqa: E402
from grader.exercises import get  # noqa: E402

SECONDS = 3.0


def sampler(path: Path) -> subprocess.Popen:
    return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                             "--format=csv,noheader,nounits", "-lms", "50", "-i", str(torch.cuda.current_device())],
                            stdout=path.open("w"), stderr=subprocess.DEVNULL)


def run_phase(fn, flops: float) -> dict:
    fn()
    torch.cuda.synchronize()
    start = time.time()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls, gpu_ms = 0, 0.0
    while time.time() - start < SECONDS:
        a.record()
        for _ in range(10):
            fn()
        b.record()
        b.synchronize()
        gpu_ms += a.elapsed_time(b)
        calls += 10
    return {"start": start, "end": time.time(), "tflops": flops * calls / (gpu_ms * 1e-3) / 1e12}


def main():
    ex = get("day10.gemm")
    mod = jit.build([ex.solution_path], name="gemm_clocks", quiet=True).module
    log = Path(os.environ.get("OUT", "/tmp")) / "gemm-clocks-smi.csv"
    smi = sampler(log)
    time.sleep(1.0)
    phases = []
    gen = torch.Generator(device="cuda")
    for case in ex.perf_cases:
        p = case.params
        gen.manual_seed(0)
        inputs = ex.make_inputs(p, gen)
        outputs = ex.make_outputs(p, inputs)
        flops = 2.0 * p["m"] * p["n"] * p["k"]
        a, b = inputs["a"], inputs["b"]
        for name, fn in [("solution", lambda: ex.call(mod, p, inputs, outputs)), ("torch.matmul", lambda: a @ b.T),
                         ("solution again", lambda: ex.call(mod, p, inputs, outputs))]:
            r = run_phase(fn, flops)
            phases.append({"case": case.label, "kernel": name, **r})
            time.sleep(0.5)
        del inputs, outputs
        torch.cuda.empty_cache()
    time.sleep(0.3)
    smi.terminate()
    smi.wait()
    rows = []
    for line in log.read_text().splitlines():
        parts = [x.strip() for x in line.split(",")]
        try:
            t = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + parts[0].split(".")[1])
            rows.append((t, float(parts[1]), float(parts[2]), float(parts[3])))
        except (ValueError, IndexError):
            continue
    for ph in phases:
        inside = [r for r in rows if ph["start"] + 0.5 <= r[0] <= ph["end"]]
        ph["samples"] = len(inside)
        if inside:
            ph["sm_mhz"] = round(sum(r[1] for r in inside) / len(inside))
            ph["sm_mhz_min"] = min(r[1] for r in inside)
            ph["power_w"] = round(sum(r[2] for r in inside) / len(inside))
            ph["temp_c"] = max(r[3] for r in inside)
        print(f"{ph['case']:28s} {ph['kernel']:15s} {ph['tflops']:6.1f} TFLOP/s  SM {ph.get('sm_mhz')} MHz "
              f"(min {ph.get('sm_mhz_min')})  {ph.get('power_w')} W  {ph.get('temp_c')} C  n={ph['samples']}", flush=True)
    out = {"device": torch.cuda.get_device_name(), "commit": os.environ.get("COURSE_COMMIT", "unknown"),
           "phases": phases}
    (Path(os.environ.get("OUT", "/tmp")) / "gemm-clocks.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
