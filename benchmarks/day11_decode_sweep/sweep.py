"""Day 11 sweep: day11.batch_decode's reference design (solutions/day11/batch_decode.cu) with its
pipeline depth and warps per block varied, at the exercise's timed cases, beside
a device copy of the KV bytes. Run from the repo root on a GPU machine:
    python3 benchmarks/day11_decode_sweep/sweep.py                 (writes $OUT/day11-sweep.json)
    python3 benchmarks/day11_decode_sweep/sweep.py --ncu VARIANT   (one call per timed case, for ncu)
Each variant is checked against the spec's reference before it is timed."""
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root, for `grader`
import torch  # noqa: E402

from grader import jit  # noqa: E402
from grader.bench import bench_interleaved, copy_baseline  # noqa: E402
from grader.exercises import get  # noqa: E402

SOLUTION = (ROOT / "solutions/day11/batch_decode.cu").read_text()


def only_head_dim_128(text: str) -> str:
    """The source without its head_dim 64 and 256 instances (the timed cases are 128): a third of the
    build time. splits.py uses it too."""
    text, n = re.subn(r"    case (64|256): return launch_decode<T, \1>\(.*?\);\n", "", text, flags=re.S)
    assert n == 2, n
    return text


def variant(stages: int, warps: int) -> str:
    text = re.sub(r"constexpr int STAGES = \d+;", f"constexpr int STAGES = {stages};", SOLUTION)
    text = re.sub(r"constexpr int WARPS = \d+;", f"constexpr int WARPS = {warps};", text)
    return only_head_dim_128(text)


VARIANTS = {f"s{s}w{w}": (s, w) for (s, w) in [(2, 4), (3, 4), (2, 2), (3, 2), (4, 2), (2, 8), (3, 8)]}


def build_all(names):
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "day11_sweep"
    tmp.mkdir(parents=True, exist_ok=True)

    def one(name):
        path = tmp / f"decode_{name}.cu"
        path.write_text(variant(*VARIANTS[name]))
        return name, jit.build([path], name=f"d11_{name}", quiet=True).module

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(one, names))


def main():
    ex = get("day11.batch_decode")
    only = sys.argv[sys.argv.index("--ncu") + 1] if "--ncu" in sys.argv else None
    names = [only] if only else list(VARIANTS)
    t0 = time.time()
    mods = build_all(names)
    print(f"built {len(mods)} variants in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()}", flush=True)
    out = {"commit": os.environ.get("COURSE_COMMIT", "unknown"), "device": torch.cuda.get_device_name(), "variants": {n: dict(zip(("stages", "warps"), VARIANTS[n]))
                                                                  for n in names}, "results": {}}
    gen = torch.Generator(device="cuda")
    for case in ex.perf_cases:
        p = case.params
        gen.manual_seed(0)
        inputs = ex.make_inputs(p, gen)
        ref = ex.reference(p, inputs)
        fns, wrong = {}, []
        for name, mod in mods.items():
            outputs = ex.make_outputs(p, inputs)
            ex.call(mod, p, inputs, outputs)
            torch.cuda.synchronize()
            err = (outputs["o"].float() - ref["o"].float()).abs().max().item()
            if not err < 2e-2:
                wrong.append(f"{name} (max err {err})")
                continue
            fns[name] = lambda mod=mod, o=outputs: ex.call(mod, p, inputs, o)
        if only:  # a few calls for ncu to profile
            for _ in range(3):
                fns[only]()
            torch.cuda.synchronize()
            continue
        nbytes = int(ex.case_bytes(p))
        fns["copy"], copy_bytes = copy_baseline(nbytes)
        t = bench_interleaved(fns, max_reps=80, time_cap_s=1.0)
        copy_gbps = t["copy"].gbps(copy_bytes)
        row = {k: {"vs_copy": round(v.gbps(nbytes) / copy_gbps, 3), "us": round(v.median_ms * 1e3, 1)}
               for k, v in t.items() if k != "copy"}
        out["results"][case.label] = {"copy_gbps": round(copy_gbps), "wrong": wrong, "variants": row}
        print(f"{case.label}: copy {copy_gbps:.0f} GB/s; wrong: {wrong or 'none'}", flush=True)
        for k, v in sorted(row.items(), key=lambda kv: -kv[1]["vs_copy"]):
            print(f"    {k:8s} {v['vs_copy']:.3f}x copy  {v['us']:8.1f} us", flush=True)
        del inputs, ref, fns
        torch.cuda.empty_cache()
    if not only:
        path = Path(os.environ.get("OUT", "/tmp")) / "day11-sweep.json"
        path.write_text(json.dumps(out, indent=1))
        print(f"wrote {path}; total {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
