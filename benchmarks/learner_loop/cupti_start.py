"""What CUPTI's start costs a grading process's "kernels launched" check (issue 16 item 1), and
whether the order or CUDA's module loading changes it: each variant in a fresh plain Python (no
sandbox), twice, on an idle GPU; then the same question asked of Nsight Compute (a Python under
`ncu` that profiles one small call, as a possible other way to list the kernels a call launched).
Prints seconds from the process's start. Run from the repo root:
    python3 benchmarks/learner_loop/cupti_start.py"""
import os
import subprocess
import sys
import time

HEAD = "import time; t0 = time.perf_counter(); out = {}\nimport torch\nout['torch imported'] = time.perf_counter() - t0\n"
CONTEXT = "torch.cuda.init(); torch.ones(8, device='cuda').sum().item(); out['CUDA context'] = time.perf_counter() - t0\n"
PROFILE = ("from torch.profiler import ProfilerActivity, profile\n"
           "with profile(activities=[ProfilerActivity.CUDA]) as p:\n    torch.ones(8, device='cuda').sum().item()\n"
           "out['profiler session ({})'] = time.perf_counter() - t0\n")
TAIL = "print({k: round(v, 2) for k, v in out.items()})\n"
VARIANTS = {
    "context, then the profiler (the check's order)": HEAD + CONTEXT + PROFILE.format("first") + PROFILE.format("second") + TAIL,
    "the profiler before any CUDA context": HEAD + ("from torch.profiler import ProfilerActivity, profile\n"
        "with profile(activities=[ProfilerActivity.CUDA]):\n    pass\nout['empty session, no context'] = time.perf_counter() - t0\n")
        + CONTEXT + PROFILE.format("after") + TAIL,
    "CPU activities only (no CUPTI)": HEAD + CONTEXT + ("from torch.profiler import ProfilerActivity, profile\n"
        "with profile(activities=[ProfilerActivity.CPU]):\n    torch.ones(8, device='cuda').sum().item()\n"
        "out['CPU-only session'] = time.perf_counter() - t0\n") + TAIL,
}
ENVS = {"": {}, " [CUDA_MODULE_LOADING=EAGER]": {"CUDA_MODULE_LOADING": "EAGER"}}

for name, code in VARIANTS.items():
    for tag, env in ENVS.items():
        if tag and "check's order" not in name:
            continue
        for rep in range(2):
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
            print(f"{name}{tag}, rep {rep}: {r.stdout.strip() or r.stderr[-300:]}", flush=True)

NCU_CODE = HEAD + CONTEXT + ("with torch.cuda.nvtx.range('course-profiled'):\n    torch.ones(8, device='cuda').sum().item()\n"
                             "torch.cuda.synchronize(); out['profiled call'] = time.perf_counter() - t0\n") + TAIL
sys.path.insert(0, os.getcwd())
from grader import ncu  # noqa: E402

exe = ncu.ncu_path()
if exe:
    for rep in range(2):
        t0 = time.perf_counter()
        r = subprocess.run([exe, "--clock-control", "none", "--csv", "--metrics", "gpu__time_duration.sum", "--nvtx",
                            "--nvtx-include", "course-profiled/", sys.executable, "-c", NCU_CODE], capture_output=True, text=True)
        names = sorted({line.split('","')[4] for line in r.stdout.splitlines() if line.startswith('"') and '","' in line
                        and not line.startswith('"ID"')})
        print(f"under ncu, rep {rep}: whole run {time.perf_counter() - t0:.2f} s; inside: "
              f"{[l for l in r.stdout.splitlines() if l.startswith('{')]}; kernels: {names[:3]}", flush=True)
else:
    print("no ncu here")
