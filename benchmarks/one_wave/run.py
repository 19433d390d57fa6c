"""Where the time of a one-wave read-bound call goes, Days 7 and 11 at their timed shapes: a
globaltimer trace of every block after the grader's flush (start, first tile landed, loop end, end;
the blocks grouped by how many share their SM), and timings beside the read ceiling under the
grader's protocol of: Day 11's reference as of commit 8ef8d12 and candidates built from it
(day11_candidates.py: balanced token splits, the warps' weights once per row, the merge as a
programmatic dependent launch), Day 7's reference with 3, 4 and 5 stages, and cp.async ring reads
of the same bytes (ring_read.cu: LDGSTS into shared memory, nothing computed; span_read: the same
spans into registers). Run from the repo root on a GPU machine:
    python3 benchmarks/one_wave/run.py      (writes $OUT/one-wave.json)"""
import json, os, re, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
ROOT = Path.cwd()
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "benchmarks/day11_decode_sweep")); sys.path.insert(0, str(ROOT / "benchmarks/one_wave"))
import torch
from grader import jit
from grader.bench import bench_interleaved, ceiling_baseline, L2Flusher
from grader.exercises import get
from sweep import only_head_dim_128
from timeline import traced7, traced11, q
from day11_candidates import candidate

OUT = Path(os.environ.get("OUT", "/tmp"))
tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "probe2"; tmp.mkdir(parents=True, exist_ok=True)
sol = subprocess.run(["git", "show", "8ef8d12:solutions/day11/batch_decode.cu"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
full = candidate(sol)
(tmp / "cand_full.cu").write_text(full)
s128 = only_head_dim_128
srcs = {"committed": s128(sol), "cand": s128(full), "cand_nopdl": s128(candidate(sol, ("balanced", "weights"))),
        "cand_bal": s128(candidate(sol, ("balanced",))), "cand_w": s128(candidate(sol, ("weights",))),
        "tr_committed": traced11(s128(sol)), "tr_cand": traced11(s128(full))}
sol7 = (ROOT / "solutions/day07/skinny_gemm.cu").read_text()
def stages7(t, s):
    t2 = t.replace("launch_skinny<T, 2, 4, 256, 8, 4>", f"launch_skinny<T, 2, 4, 256, 8, {s}>").replace("launch_skinny<T, 2, 4, 256, 16, 4>", f"launch_skinny<T, 2, 4, 256, 16, {s}>")
    assert t2 != t or s == 4
    return t2
srcs7 = {"d7_ref": sol7, "d7_s3": stages7(sol7, 3), "d7_s5": stages7(sol7, 5), "d7_tr": traced7(sol7)}
jobs = {}
for k, v in {**srcs, **srcs7}.items():
    (tmp / f"{k}.cu").write_text(v); jobs[k] = tmp / f"{k}.cu"
jobs["ring"] = ROOT / "benchmarks/one_wave/ring_read.cu"
t0 = time.time()
with ThreadPoolExecutor(12) as pool:
    futs = {k: pool.submit(jit.build, [v], name=f"p2_{k}", quiet=True) for k, v in jobs.items()}
    mods = {k: f.result().module for k, f in futs.items()}
dev = torch.cuda.get_device_name(); sms = torch.cuda.get_device_properties(0).multi_processor_count
print(f"built in {time.time()-t0:.0f} s on {dev}", flush=True)
res = {"device": dev}
flush = L2Flusher()
tr = torch.zeros(16384 * 4, dtype=torch.int64, device="cuda")
def trace(mod, call, label):
    for rep in range(2):
        call(); torch.cuda.synchronize()
        mod.trace_clear(); torch.cuda.synchronize()
        flush(); call(); mod.trace_copy(tr); torch.cuda.synchronize()
        t = tr.view(16384, 4).cpu().double()
        p0 = t[:8192][t[:8192, 0] > 0]; p1 = t[8192:][t[8192:, 0] > 0]
        base = p0[:, 0].min()
        line = {"blocks": len(p0), "start": q(p0[:, 0], base), "first": q(p0[:, 1][p0[:, 1] > 0], base),
                "loop_end": q(p0[:, 2][p0[:, 2] > 0], base), "end": q(p0[:, 3], base)}
        if len(p1):
            line["merge_start"] = q(p1[:, 0], base); line["merge_end"] = q(p1[:, 3], base)
        print(f"  trace {label} rep {rep} (us; 0/10/50/90/100%): {json.dumps(line)}", flush=True)
        smt = torch.zeros(16384, dtype=torch.int32, device="cuda"); mod.sm_copy(smt); torch.cuda.synchronize()
        sm = smt.cpu()[:8192]; live = (t[:8192, 0] > 0) & (t[:8192, 2] > 0)
        per = torch.bincount(sm[live].long(), minlength=200)
        for n in sorted(set(per[sm[live].long()].tolist())):
            sel = live.clone(); sel[live] = per[sm[live].long()] == n
            le = (t[:8192, 2][sel] - base) / 1e3
            print(f"    blocks on SMs holding {n}: {int(sel.sum())}, loop_end mean {le.mean():.1f} min {le.min():.1f} max {le.max():.1f} us", flush=True)

def ratios(t, nbytes, read_bytes):
    """The read ceiling's GB/s and, per timed callable, its fraction of it and its median time."""
    base = t["read"].gbps(read_bytes)
    return base, {k: {"vs_read": round(v.gbps(nbytes) / base, 3), "us": round(v.median_ms * 1e3, 1)}
                  for k, v in t.items()}


# Day 11
ex = get("day11.batch_decode")
gen = torch.Generator(device="cuda")
for case in ex.perf_cases:
    p = case.params
    gen.manual_seed(0)
    inputs = ex.make_inputs(p, gen)
    nbytes = int(ex.case_bytes(p))
    ref = ex.reference(p, inputs)
    for k in srcs:
        o = ex.make_outputs(p, inputs); ex.call(mods[k], p, inputs, o); torch.cuda.synchronize()
        err = (o["o"].float() - ref["o"].float()).abs().max().item()
        lerr = (o["lse"].float() - ref["lse"].float()).abs().max().item()
        if err > 2e-2 or lerr > 1e-2:
            print(f"  WRONG {k}: {err:.3g} {lerr:.3g}", flush=True)
    if p["batch"] == 1:
        for k in ("tr_committed", "tr_cand"):
            o = ex.make_outputs(p, inputs)
            trace(mods[k], lambda m=mods[k], o=o: ex.call(m, p, inputs, o), f"{case.label} {k}")
    read, read_bytes = ceiling_baseline("read", nbytes)
    fns = {"read": read}
    for k in ("committed", "cand", "cand_nopdl", "cand_bal", "cand_w"):
        o = ex.make_outputs(p, inputs)
        fns[k] = lambda m=mods[k], o=o: ex.call(m, p, inputs, o)
    if p["batch"] == 1 and p["dtype"] == "bf16":
        buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda"); sink = torch.zeros(1, dtype=torch.int32, device="cuda")
        for cfg, bps, th in [(2161, 3, 128), (2161, 2, 128), (2160, 3, 128), (3161, 2, 128), (4041, 4, 128), (4040, 4, 128),
                             (4081, 3, 128), (4080, 3, 128), (8041, 3, 128), (8040, 3, 128), (8020, 4, 128), (16020, 2, 128),
                             (4080, 2, 256), (90004, 8, 256), (90008, 4, 256), (90016, 4, 256), (90016, 2, 256)]:
            blocks = bps * sms
            fns[f"ring{cfg}_b{blocks}_t{th}"] = lambda c=cfg, b=blocks, t=th: mods["ring"].ring_read(buf, sink, nbytes, c, b, t)
    base, row = ratios(bench_interleaved(fns, max_reps=60, time_cap_s=1.5), nbytes, read_bytes)
    res[case.label] = row
    print(f"{case.label}: read {base:.0f} GB/s", flush=True)
    for k, v in sorted(row.items(), key=lambda kv: -kv[1]["vs_read"]):
        print(f"    {k:26s} {v['vs_read']:.3f}x read  {v['us']:8.1f} us", flush=True)
    del inputs, fns, ref
    torch.cuda.empty_cache()

# Day 7
ex = get("day07.skinny_gemm")
for case in ex.perf_cases:
    p = case.params
    gen.manual_seed(0)
    inputs = ex.make_inputs(p, gen)
    nbytes = int(ex.case_bytes(p))
    ref = ex.reference(p, inputs)
    for k in srcs7:
        o = ex.make_outputs(p, inputs); ex.call(mods[k], p, inputs, o); torch.cuda.synchronize()
        key = next(iter(ref))
        err = (o[key].float() - ref[key].float()).abs().max().item() / (ref[key].float().abs().max().item() + 1e-9)
        if err > 2e-2:
            print(f"  WRONG {k}: rel {err:.3g}", flush=True)
    if case is ex.perf_cases[0] or case is ex.perf_cases[3]:
        o = ex.make_outputs(p, inputs)
        trace(mods["d7_tr"], lambda o=o: ex.call(mods["d7_tr"], p, inputs, o), f"{case.label} d7_tr")
    read, read_bytes = ceiling_baseline("read", nbytes)
    fns = {"read": read}
    for k in ("d7_ref", "d7_s3", "d7_s5"):
        o = ex.make_outputs(p, inputs)
        fns[k] = lambda m=mods[k], o=o: ex.call(m, p, inputs, o)
    base, row = ratios(bench_interleaved(fns, max_reps=60, time_cap_s=1.0), nbytes, read_bytes)
    res[case.label] = row
    print(f"{case.label}: read {base:.0f} GB/s " + "  ".join(f"{k} {v['vs_read']:.3f}x {v['us']:.1f}us" for k, v in sorted(row.items(), key=lambda kv: -kv[1]['vs_read'])), flush=True)
    del inputs, fns, ref
(OUT / "one-wave.json").write_text(json.dumps(res, indent=1))
print(f"total {time.time()-t0:.0f} s", flush=True)
