"""Where a shared-memory-heavy, read-bound call's time goes after the grader's L2 flush, at the timed
cases of day07.skinny_gemm and day11.batch_decode: each launch's GPU time and the gaps around it
(torch.profiler, the flush included), and the timings of the reference, its variants and the read
ceiling under the grader's flush and under the same flush followed by a kernel that only asks for
the reference's shared memory (touch.cu: the SMs' L1 / shared split then needs no switch inside the
timed call). Day 11's variants: split count forced, token ranges balanced, merge launch skipped
(timing only, wrong results). Run from the repo root on a GPU machine:
    python3 benchmarks/smem_switch/run.py     (writes $OUT/smem-switch.json)"""
import json
import os
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from grader import jit  # noqa: E402
from grader.bench import L2Flusher, bench_interleaved, ceiling_baseline  # noqa: E402
from grader.exercises import get  # noqa: E402

HERE = Path(__file__).resolve().parent
TMP = Path(os.environ.get("TMPDIR", "/tmp")) / "smem_switch"


def day11_knobs(text: str) -> str:
    """The Day 11 reference with knobs: set_mode(splits, balanced, merge). splits 0: its own choice;
    balanced: every split the same number of tokens (not whole tiles); merge 0: no phase-1 launch."""
    text, n = re.subn(r"    case (64|256): return launch_decode<T, \1>\(.*?\);\n", "", text, flags=re.S)
    assert n == 2
    call = "const int splits = choose_splits(batch, kv_heads, per_sm);"
    assert text.count(call) == 1
    text = text.replace(call, "const int splits = g_splits > 0 ? g_splits : choose_splits(batch, kv_heads, per_sm);")
    per = "const int per_split = max(MIN_SPLIT_TILES, (tiles + splits - 1) / splits) * TILE;"
    assert text.count(per) == 1
    text = text.replace(per, "const int per_split = phase == 2 ? max(MIN_SPLIT_TILES * TILE, (len + splits - 1) / splits)"
                             " : max(MIN_SPLIT_TILES, (tiles + splits - 1) / splits) * TILE;")
    merge = "  if (splits > 1) {  // phase 1"
    assert text.count(merge) == 1
    text = text.replace(merge, "  if (splits > 1 && g_merge) {  // phase 1")
    launch = "static_cast<int>(page_size), sm_scale * course::LOG2E, splits, 0);"
    assert text.count(launch) == 1  # phase 2: phase 0 with balanced token ranges
    text = text.replace(launch, "static_cast<int>(page_size), sm_scale * course::LOG2E, splits, g_balanced ? 2 : 0);")
    text = text.replace("namespace {\n", "namespace {\nint g_splits = 0, g_merge = 1, g_balanced = 0;\n", 1)
    return text + ("\nCOURSE_EXPORT int set_mode(int64_t s, int64_t balanced, int64_t merge) {\n"
                   "  g_splits = static_cast<int>(s); g_balanced = static_cast<int>(balanced);\n"
                   "  g_merge = static_cast<int>(merge);\n  return 0;\n}\n")


def builds():
    TMP.mkdir(parents=True, exist_ok=True)
    d11 = TMP / "day11_knobs.cu"
    d11.write_text(day11_knobs((ROOT / "solutions/day11/batch_decode.cu").read_text()))
    jobs = {"touch": HERE / "touch.cu", "day11": d11, "day07": ROOT / "solutions/day07/skinny_gemm.cu"}
    with ThreadPoolExecutor(3) as pool:
        futs = {k: pool.submit(jit.build, [v], name=f"smemsw_{k}", quiet=True) for k, v in jobs.items()}
        return {k: f.result().module for k, f in futs.items()}


def kernel_times(fn, flush, calls=8):
    """Per call after the flush: gap from the flush's last kernel to the first of the call, each of
    the call's kernels' GPU time, and the call's span (first start to last end), medians in us."""
    from torch.profiler import ProfilerActivity, profile

    flush(); fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush()
            torch.cuda.synchronize()
            fn()
            torch.cuda.synchronize()
    ev = sorted((e for e in prof.events() if str(e.device_type).endswith("CUDA") and e.time_range.elapsed_us() > 0
                 and not e.name.startswith("Memcpy") and not e.name.startswith("Memset")),
                key=lambda e: e.time_range.start)
    # each call: the flush's kernels (fill, read, and touch for SmemFlush), then the call's
    per, nf = len(ev) // calls, 3 if isinstance(flush, SmemFlush) else 2
    assert len(ev) == per * calls and per > nf, [e.name for e in ev]
    calls_k = [ev[i * per + nf:(i + 1) * per] for i in range(calls)]
    gaps = [c[0].time_range.start - ev[i * per + nf - 1].time_range.end for i, c in enumerate(calls_k)]
    n = min(len(c) for c in calls_k)
    durs = [round(statistics.median(c[i].time_range.elapsed_us() for c in calls_k), 1) for i in range(n)]
    span = round(statistics.median(c[-1].time_range.end - c[0].time_range.start for c in calls_k), 1)
    names = [calls_k[0][i].name[:60] for i in range(n)]
    return {"kernels": names, "kernel_us": durs, "span_us": span, "gap_after_flush_us": round(statistics.median(gaps), 1)}


class SmemFlush(L2Flusher):
    """The grader's flush, then `touch` asking for `smem` bytes a block on every SM slot."""

    def __init__(self, touch, smem, blocks):
        super().__init__()
        self.touch, self.smem, self.blocks = touch, smem, blocks
        self.sink = torch.zeros(1, dtype=torch.int32, device="cuda")

    def __call__(self):
        super().__call__()
        self.touch.touch(self.sink, self.smem, self.blocks)


def main():
    t0 = time.time()
    mods = builds()
    print(f"built in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()}", flush=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = {"commit": os.environ.get("COURSE_COMMIT", "unknown"), "device": torch.cuda.get_device_name(), "results": {}}
    gen = torch.Generator(device="cuda")
    # shared memory a block of each reference asks for, and its blocks per SM
    smem = {"day07": (96 * 1024 + 1024, 2), "day11": (68 * 1024, 3)}
    plain = L2Flusher()
    for ex_id, key in (("day11.batch_decode", "day11"), ("day07.skinny_gemm", "day07")):
        ex = get(ex_id)
        mod = mods[key]
        cases = ex.perf_cases if key == "day07" else [c for c in ex.perf_cases if c.params["batch"] <= 64]
        for case in cases:
            p = case.params
            gen.manual_seed(0)
            inputs = ex.make_inputs(p, gen)
            nbytes = int(ex.case_bytes(p))
            read, read_bytes = ceiling_baseline("read", nbytes)
            fns = {"read": read}
            variants = {"solution": (0, 0, 1)}
            if key == "day11" and p["batch"] == 1:
                variants.update({"s49": (49, 0, 1), "bal49": (49, 1, 1), "bal45": (45, 1, 1), "bal66": (66, 1, 1),
                                 "bal98": (98, 1, 1), "s45_nomerge": (45, 0, 0), "bal49_nomerge": (49, 1, 0)})
            ref = ex.reference(p, inputs)
            wrong = []
            for name, mode in variants.items():
                outputs = ex.make_outputs(p, inputs)

                def call(o=outputs, mode=mode):
                    if key == "day11":
                        mod.set_mode(*mode)
                    ex.call(mod, p, inputs, o)
                call(); torch.cuda.synchronize()
                if mode[2]:
                    got = outputs["o"] if key == "day11" else outputs[next(iter(outputs))]
                    want = ref["o"] if key == "day11" else ref[next(iter(ref))]
                    err = (got.float() - want.float()).abs().max().item()
                    if not err < 5e-2:
                        wrong.append(f"{name} (max err {err})")
                        continue
                fns[name] = call
            row = {"bytes": nbytes, "wrong": wrong, "profile": {}, "plain": {}, "smem_flush": {}}
            for name in ("read", "solution"):
                row["profile"][name] = kernel_times(fns[name], plain)
            sm_flush = SmemFlush(mods["touch"], smem[key][0], smem[key][1] * sms)
            row["profile"]["solution_after_smem_touch"] = kernel_times(fns["solution"], sm_flush)
            for label, fl in (("plain", plain), ("smem_flush", sm_flush)):
                t = bench_interleaved(fns, flush=fl, max_reps=80, time_cap_s=1.0)
                base = t["read"].gbps(read_bytes)
                row[label] = {k: {"us": round(v.median_ms * 1e3, 2), "vs_read": round(v.gbps(nbytes) / base, 3)}
                              for k, v in t.items()}
                row[label]["read_gbps"] = round(base)
            out["results"][f"{ex_id}: {case.label}"] = row
            print(f"{ex_id}: {case.label}: wrong {wrong or 'none'}", flush=True)
            print(f"    profile: {json.dumps(row['profile'])}", flush=True)
            for label in ("plain", "smem_flush"):
                print(f"    {label:10s} read {row[label]['read_gbps']} GB/s; " + "; ".join(
                    f"{k} {v['vs_read']:.3f}x {v['us']:.1f}us" for k, v in row[label].items() if k != "read_gbps"),
                    flush=True)
            del inputs, ref, fns
            torch.cuda.empty_cache()
    path = Path(os.environ.get("OUT", "/tmp")) / "smem-switch.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}; total {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
