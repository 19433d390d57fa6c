"""Day 7 sweep of benchmarks/day07_skinny_sweep/splitk.cu (split-K / stream-K skinny GEMM). Run from the repo root:
    python3 benchmarks/day07_skinny_sweep/splitk.py            (writes $OUT/splitk.json, else /tmp/splitk.json)
Every variant is checked twice against x.float() @ W.float().T before timing (the second call proves
the workspace cleaned itself), and once more after timing."""
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `grader`
import torch  # noqa: E402

from grader import jit  # noqa: E402
from grader.bench import bench_interleaved, copy_baseline  # noqa: E402

T0 = time.time()
mod = jit.build(["benchmarks/day07_skinny_sweep/splitk.cu"], name="d7splitk", quiet=True).module
print(f"build/load {time.time() - T0:.0f} s on {torch.cuda.get_device_name()}", flush=True)
CFGS = sorted(n[3:] for n in dir(mod) if n.startswith("sk_"))
INFO = {c: dict(zip(("smem", "blocks_per_sm", "threads", "rows"), (getattr(mod, "info_" + c)(i) for i in range(4))))
        for c in CFGS}
for c in CFGS:
    print(f"  {c:26s} {INFO[c]}", flush=True)

# (config, split): split >= 1: grid = row tiles x split (1: no atomics); 0: stream-K, one wave of
# resident blocks; -w: stream-K over w x SMs blocks.
V8 = [(c, 0) for c in CFGS if "_m8_" in c] + \
     [("rg4_ks2_t128_m8_s4_cp", s) for s in (1, 4, 8, 16, -2)] + \
     [("rg2_ks4_t256_m8_s4_cp", s) for s in (4, 8)]
V16 = [(c, 0) for c in CFGS if "_m16_" in c] + \
      [("rg4_ks2_t128_m16_s5_cp", s) for s in (1, 4, 8, 16)] + \
      [("rg8_ks1_t64_m16_s6_cp", s) for s in (4, 8)]

CASES = [(dt, N, K, M) for (N, K) in [(4096, 14336), (14336, 4096), (28672, 8192)] for M in (1, 4, 8, 16)
         for dt in (torch.bfloat16,)]
CASES += [(torch.float16, 4096, 14336, M) for M in (1, 16)]


def rel_err(y, ref):
    return ((y.float() - ref).abs().max() / ref.abs().max()).item()


out = {"device": torch.cuda.get_device_name(), "configs": INFO, "results": {}}
torch.manual_seed(0)
weights = {}
for (dt, N, K, M) in CASES:
    key = (dt, N, K)
    if key not in weights:
        weights.clear()
        torch.cuda.empty_cache()
        weights[key] = torch.randn(N, K, device="cuda", dtype=dt)
    w = weights[key]
    x = torch.randn(M, K, device="cuda", dtype=dt)
    ref = x.float() @ w.float().T
    fp16 = dt == torch.float16
    nbytes = (N * K + M * K + M * N) * 2
    tag = f"{'fp16' if fp16 else 'bf16'} M={M} {N}x{K}"
    fns, wrong = {}, []
    for (c, split) in (V8 if M <= 8 else V16):
        name = f"{c}/S{split}"
        fn = getattr(mod, "sk_" + c)
        y = torch.empty(M, N, device="cuda", dtype=dt)
        errs = []
        try:
            for _ in range(2):  # the second call must find the workspace and counters clean
                y.fill_(float("nan"))
                fn(y, x, w, M, N, K, split, fp16)
                torch.cuda.synchronize()
                errs.append(rel_err(y, ref))
        except RuntimeError as e:
            print(f"  FAILED {name} {tag}: {e}", flush=True)
            wrong.append(name)
            continue
        if not all(e <= 2e-2 for e in errs):  # NaN fails too
            print(f"  WRONG {name} {tag}: errors {errs}", flush=True)
            wrong.append(name)
            continue
        fns[name] = (lambda fn=fn, y=y, split=split: fn(y, x, w, M, N, K, split, fp16))
    fns["matmul"] = lambda: torch.matmul(x, w.T)
    cf, cb = copy_baseline(nbytes)
    fns["copy"] = cf
    t = bench_interleaved(fns, max_reps=60, time_cap_s=0.6)
    # after thousands of calls: still right (the workspace cleans itself every time)
    for name in list(fns):
        if name in ("matmul", "copy"):
            continue
        c, split = name.split("/S")
        y = torch.empty(M, N, device="cuda", dtype=dt).fill_(float("nan"))
        getattr(mod, "sk_" + c)(y, x, w, M, N, K, int(split), fp16)
        torch.cuda.synchronize()
        e = rel_err(y, ref)
        if not e <= 2e-2:
            print(f"  WRONG-AFTER-BENCH {name} {tag}: error {e}", flush=True)
            wrong.append(name + " (after bench)")
    copy_gbps = t["copy"].gbps(cb)
    mm_ms = t["matmul"].median_ms
    row = {}
    for k, v in t.items():
        if k == "copy":
            continue
        row[k] = {"vs_copy": round(v.gbps(nbytes) / copy_gbps, 3), "vs_matmul": round(mm_ms / v.median_ms, 3),
                  "us": round(v.median_ms * 1e3, 2), "w_gbps": round(N * K * 2 / (v.median_ms * 1e-3) / 1e9),
                  "p20_us": round(v.p20_ms * 1e3, 2), "p80_us": round(v.p80_ms * 1e3, 2)}
    out["results"][tag] = {"copy_gbps": round(copy_gbps), "copy_us": round(t["copy"].median_ms * 1e3, 2),
                           "wrong": wrong, "variants": row}
    best = sorted(((v["vs_copy"], k) for k, v in row.items() if k != "matmul"), reverse=True)[:6]
    print(f"{tag}: copy {copy_gbps:.0f} GB/s ({t['copy'].median_ms * 1e3:.1f} us), matmul {row['matmul']['vs_copy']:.3f}x copy",
          flush=True)
    for r, k in best:
        print(f"    {k:32s} {r:.3f}x copy  {row[k]['vs_matmul']:.2f}x matmul  {row[k]['us']:7.1f} us  "
              f"W {row[k]['w_gbps']} GB/s", flush=True)
    del ref, x

path = os.path.join(os.environ.get("OUT", "/tmp"), "splitk.json")
json.dump(out, open(path, "w"), indent=1)
print(f"wrote {path}; total {time.time() - T0:.0f} s", flush=True)
