"""Does grading on one GPU slow the gradings on another GPU of the host?

In the class benchmark on 2 x H200 (32 CPUs, half of them idle) every stage of a grading ran 25-50% longer
with both GPUs grading than with one, the timing with its GPU to itself among them (median 0.20 -> 0.32 s at
a95bcad), while a CPU-bound loop ran as fast on 32 busy CPUs as on one (reports/cpu/topology-2xh200-32cpus.txt).
One suspect is the driver: what a grading asks of it (CUDA contexts made and torn down, cudaMalloc and
cudaFree after each case's empty_cache) may serialise across GPUs.

The probe, on GPU 0, times what a grading does, each step apart, in rounds:
- `context`: a fresh process's CUDA context (torch imported first, not counted);
- `malloc`: 256 MB allocated and freed back to the driver (torch.cuda.empty_cache);
- `case`: one case as the worker runs it (inputs, an elementwise op, a comparison, empty_cache);
- `case_keep`: the same case with the allocator's blocks kept (no empty_cache);
- `launch`: a small kernel launched and synchronised.
It runs with GPU 1 idle, then beside a load on GPU 1 of LOAD processes doing the same steps in a loop (the
lanes of a GPU in class grading), or only some of them (contexts alone; allocations alone), then with the
whole load on GPU 0 itself (for scale). Needs two GPUs.
`python3 benchmarks/gpu_neighbours/run.py` prints a table, also to $OUT/gpu-neighbours.json.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

ROUNDS = int(os.environ.get("ROUNDS", "20"))
CONTEXT_ROUNDS = int(os.environ.get("CONTEXT_ROUNDS", "5"))
LOAD = int(os.environ.get("LOAD", "4"))

STEPS = r"""
import os, subprocess, sys, time, json
import torch
def context():
    code = "import torch, time, sys; t = time.perf_counter(); torch.cuda.init(); torch.zeros(1, device='cuda'); print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    return float(out.stdout.strip().splitlines()[-1])
def malloc():
    t = time.perf_counter()
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
    del x; torch.cuda.empty_cache()
    return time.perf_counter() - t
def case(keep=False):
    t = time.perf_counter()
    a = torch.randn(4096, 8192, device="cuda", dtype=torch.float16)
    b = torch.nn.functional.silu(a) * a
    ok = torch.allclose(b, torch.nn.functional.silu(a) * a)
    del a, b
    torch.cuda.synchronize() if keep else torch.cuda.empty_cache()
    return time.perf_counter() - t
def launch():
    x = torch.ones(1024, device="cuda"); torch.cuda.synchronize()
    t = time.perf_counter()
    x.add_(1); torch.cuda.synchronize()
    return time.perf_counter() - t
torch.zeros(1, device="cuda")
steps = {"context": context, "malloc": malloc, "case": case, "case_keep": lambda: case(keep=True), "launch": launch}
mode, rounds = sys.argv[1], int(sys.argv[2])
if mode != "probe":  # a load: the steps named, comma-separated, in a loop
    chosen = [steps[name] for name in mode.split(",")]
    while True:
        for f in chosen:
            f()
out = {name: [] for name in steps}
for i in range(rounds):
    for name, f in steps.items():
        if name != "context" or i < int(sys.argv[3]):
            out[name].append(f())
print(json.dumps(out))
"""


ALL = "context,malloc,case,launch"


def probe(load_gpu: str | None, load: str = ALL) -> dict:
    loads = []
    if load_gpu is not None:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=load_gpu)
        loads = [subprocess.Popen([sys.executable, "-c", STEPS, load, "0"], env=env, stdout=subprocess.DEVNULL)
                 for _ in range(LOAD)]
        time.sleep(8)  # (their torch imported, their loops going)
    try:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="0")
        out = subprocess.run([sys.executable, "-c", STEPS, "probe", str(ROUNDS), str(CONTEXT_ROUNDS)], env=env, capture_output=True,
                             text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        for p in loads:
            p.kill()
            p.wait()


def main() -> None:
    loads = {"GPU 1 idle": (None, ALL), f"{LOAD} on GPU 1: every step": ("1", ALL),
             f"{LOAD} on GPU 1: contexts": ("1", "context"), f"{LOAD} on GPU 1: malloc, case": ("1", "malloc,case"),
             f"{LOAD} on GPU 0 (the probe's): every step": ("0", ALL)}
    out = os.path.join(os.environ.get("OUT", "/tmp"), "gpu-neighbours.json")
    print("median ms of each step on GPU 0, by what ran beside it", flush=True)
    runs = {}
    for name, (gpu, load) in loads.items():  # (each printed and saved as it ends: a run cut short keeps them)
        runs[name] = r = probe(gpu, load)
        print(f"{name:40s} " + "  ".join(f"{step} {1000 * statistics.median(v):.2f}" for step, v in r.items()),
              flush=True)
        with open(out, "w") as f:
            json.dump({"rounds": ROUNDS, "context_rounds": CONTEXT_ROUNDS, "load": LOAD, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
