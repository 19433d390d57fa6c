"""Day 11 split sweep: day11.batch_decode's reference (solutions/day11/batch_decode.cu) at the
exercise's timed cases, with the number of splits forced (s8, s49, ...) and with the launcher's own
choice ("solution"), all beside a device copy of the KV bytes; each call's two launches (phase 0:
attention per split, phase 1: merge) are also timed apart with torch.profiler. Run from the repo root
on a GPU machine:
    python3 benchmarks/day11_decode_sweep/splits.py        (writes $OUT/day11-splits.json)
Every variant is checked against the spec's reference before it is timed. The run of 2026-11-26 on
an H100 (reports/day11-splits.json, commit af7f1d9) compared the then solution (at most 32 states a
query head, its own split rule) with the design the solution now has ("policy": the wave model
without its two-wave stop)."""
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root, for `grader`
import torch  # noqa: E402

from grader import jit  # noqa: E402
from grader.bench import bench_interleaved, copy_baseline  # noqa: E402
from grader.exercises import get  # noqa: E402
from sweep import only_head_dim_128  # noqa: E402  (this folder's sweep.py)

# Forced split counts per timed case (by batch); 0 is the launcher's own choice.
CANDIDATES = {1: [0, 16, 24, 32, 40, 49, 64, 74, 99, 128], 64: [0, 1, 2, 3, 4, 5, 6, 8], 256: [0, 1, 2, 3, 4]}


def forced(text: str) -> str:
    """The solution with an exported knob: set_splits(s) forces s splits (0: the launcher's choice)."""
    text = only_head_dim_128(text)
    call = "const int splits = choose_splits(batch, kv_heads, per_sm);"
    assert text.count(call) == 1
    text = text.replace(call, "const int splits = g_splits > 0 ? g_splits : choose_splits(batch, kv_heads, per_sm);")
    text = text.replace("namespace {\n", "namespace {\nint g_splits = 0;\n", 1)
    return text + "\nCOURSE_EXPORT int set_splits(int64_t s) { g_splits = static_cast<int>(s); return 0; }\n"


def phase_us(fn, calls=5):
    """Mean GPU time of each launch of one call (phase 0, phase 1), by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if str(e.device_type).endswith("CUDA") and "batch_decode_kernel" in e.name]
    ev.sort(key=lambda e: e.time_range.start)
    per_call = len(ev) // calls
    return [round(sum(e.time_range.elapsed_us() for e in ev[i::per_call]) / calls, 1) for i in range(per_call)]


def main():
    ex = get("day11.batch_decode")
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "day11_splits"
    tmp.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    path = tmp / "decode_forced.cu"  # one build: set_splits(0) is the solution's own choice
    path.write_text(forced((ROOT / "solutions/day11/batch_decode.cu").read_text()))
    mod = jit.build([path], name="d11_splits_forced", quiet=True).module
    print(f"built in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()}", flush=True)
    out = {"commit": os.environ.get("COURSE_COMMIT", "unknown"), "device": torch.cuda.get_device_name(),
           "sms": torch.cuda.get_device_properties(0).multi_processor_count, "results": {}}
    gen = torch.Generator(device="cuda")
    for case in ex.perf_cases:
        p = case.params
        gen.manual_seed(0)
        inputs = ex.make_inputs(p, gen)
        ref = ex.reference(p, inputs)
        fns, wrong, phases = {}, [], {}
        for label, s in [("solution", 0)] + [(f"s{s}", s) for s in CANDIDATES[p["batch"]] if s]:
            outputs = ex.make_outputs(p, inputs)  # with the spec's workspace (MAX_SPLITS states a head)

            def call(o=outputs, s=s):
                mod.set_splits(s)
                ex.call(mod, p, inputs, o)
            call()
            torch.cuda.synchronize()
            err = (outputs["o"].float() - ref["o"].float()).abs().max().item()
            lerr = (outputs["lse"].float() - ref["lse"].float()).abs().max().item()
            if not (err < 2e-2 and lerr < 1e-2):
                wrong.append(f"{label} (max err o {err}, lse {lerr})")
                continue
            fns[label] = call
            phases[label] = phase_us(call)
        nbytes = int(ex.case_bytes(p))
        fns["copy"], copy_bytes = copy_baseline(nbytes)
        t = bench_interleaved(fns, max_reps=60, time_cap_s=0.6)
        copy_gbps = t["copy"].gbps(copy_bytes)
        row = {k: {"vs_copy": round(v.gbps(nbytes) / copy_gbps, 3), "us": round(v.median_ms * 1e3, 1),
                   "phase_us": phases[k]} for k, v in t.items() if k != "copy"}
        out["results"][case.label] = {"copy_gbps": round(copy_gbps), "wrong": wrong, "variants": row}
        print(f"{case.label}: copy {copy_gbps:.0f} GB/s; wrong: {wrong or 'none'}", flush=True)
        for k, v in sorted(row.items(), key=lambda kv: -kv[1]["vs_copy"]):
            print(f"    {k:8s} {v['vs_copy']:.3f}x copy  {v['us']:8.1f} us  phases {v['phase_us']}", flush=True)
        del inputs, ref, fns
        torch.cuda.empty_cache()
    path = Path(os.environ.get("OUT", "/tmp")) / "day11-splits.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}; total {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
