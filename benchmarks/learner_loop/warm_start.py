"""Timeline of the warm grading processes' start (issue 16 item 1): when each is ready, in the
learner check's arrangement and variants, on an idle GPU. Prints seconds from the spawn. Run from the
repo root: python3 benchmarks/learner_loop/warm_start.py"""
import os, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, os.getcwd())
from grader.check.supervise import RunOptions, WarmWorker
from grader.check.worker import WARM_READY, WARM_GO

STAGES = r'''
import time, sys; t0 = time.perf_counter(); out = {}
import torch; out["import torch"] = time.perf_counter() - t0
torch.cuda.init(); torch.ones(8, device="cuda").sum().item(); out["context + first kernel"] = time.perf_counter() - t0
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CUDA]):
    torch.ones(8, device="cuda").sum().item()
out["profiler session 1"] = time.perf_counter() - t0
with profile(activities=[ProfilerActivity.CUDA]):
    torch.ones(8, device="cuda").sum().item()
out["profiler session 2"] = time.perf_counter() - t0
print({k: round(v, 2) for k, v in out.items()})
'''

def watch(files, limit=30):
    t0 = time.perf_counter(); seen = {}
    while len(seen) < len(files) and time.perf_counter() - t0 < limit:
        for name, path in files.items():
            if name not in seen and path.exists():
                seen[name] = round(time.perf_counter() - t0, 2)
        time.sleep(0.005)
    return seen

def variant(name, make):
    for rep in range(3):
        ws, files = make()
        seen = watch(files)
        print(f"{name:34s} rep {rep}: {seen}", flush=True)
        for w in ws:
            w.discard()

opts = RunOptions()
def pair_after():
    a = WarmWorker(opts); b = WarmWorker(opts, profiler=True, after=a)
    return (a, b), {"first ready": a.tmp / WARM_READY, "second go": b.tmp / WARM_GO,
                    "second ready": b.tmp / WARM_READY}
def pair_together():
    a = WarmWorker(opts); b = WarmWorker(opts, profiler=True)
    return (a, b), {"first ready": a.tmp / WARM_READY, "second ready": b.tmp / WARM_READY}
def first_alone():
    a = WarmWorker(opts); return (a,), {"ready": a.tmp / WARM_READY}
def profiler_alone():
    a = WarmWorker(opts, profiler=True); return (a,), {"ready": a.tmp / WARM_READY}

for i in range(2):
    r = subprocess.run([sys.executable, "-c", STAGES], capture_output=True, text=True)
    print("plain process stages", r.stdout.strip(), r.stderr[-300:])
variant("first alone", first_alone)
variant("profiler alone", profiler_alone)
variant("pair, second after (the check's)", pair_after)
variant("pair, together (23858ac)", pair_together)
# stages with an env that may skip kineto's slow parts
for env in ({"KINETO_LOG_LEVEL": "5"}, {"TORCH_CUDA_SANITIZER": "0", "KINETO_USE_DAEMON": "0"}):
    r = subprocess.run([sys.executable, "-c", STAGES], capture_output=True, text=True, env={**os.environ, **env})
    print("plain process stages", env, r.stdout.strip(), r.stderr[-300:])
