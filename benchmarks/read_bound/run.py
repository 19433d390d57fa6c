"""The read-bound exercises' kernels beside their read ceiling: versions of an exercise (the
solution, and other .cu files given as NAME=PATH) checked on its cases, then timed interleaved with
the read ceiling (grader/check/ptx.py StreamingRead) and a device copy of the same bytes, on its timed
cases, under the grader's L2 flush and under the write-only one (bench.L2Flusher). Run from the repo root on a GPU machine:
    python3 benchmarks/read_bound/run.py day11.batch_decode [NAME=PATH ...]   ($OUT/read-bound-<id>.json)"""
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from grader import jit, config  # noqa: E402
from grader.bench import L2Flusher, bench_interleaved, copy_baseline, read_baseline  # noqa: E402
from grader.check.worker import _baseline_fns, run_case  # noqa: E402
from grader.exercises import get  # noqa: E402

CHECKED = 12  # untimed cases each version must pass first (the first of the spec's, and its largest)


def main():
    ex = get(sys.argv[1])
    versions = {"solution": ex.solution_path, **dict(a.split("=", 1) for a in sys.argv[2:])}
    t0 = time.time()
    mods = {name: jit.build([Path(path)], name=f"rb_{ex.build_name}_{name}", quiet=True).module
            for name, path in versions.items()}
    print(f"built {list(mods)} in {time.time() - t0:.0f} s", flush=True)
    untimed = [c for c in ex.cases if not c.perf]
    cases = untimed[:CHECKED] + sorted(untimed, key=lambda c: ex.case_bytes(c.params))[-4:]
    wrong = {}
    for name, mod in mods.items():
        for case in cases:
            ok, msg, *_ = run_case(ex, mod, case, 1, poison=False)
            if not ok:
                wrong[name] = f"{case.label}: {msg[:300]}"
                print(f"{name} WRONG at {wrong[name]}", flush=True)
                break
    out = {"exercise": ex.id, "device": torch.cuda.get_device_name(), "versions": {k: str(v) for k, v in versions.items()},
           "wrong": wrong, "results": {}}
    flushers = {m: L2Flusher(m) for m in ("write+read", "write")}
    for case in ex.perf_cases:
        p = case.params
        ok, msg, outputs, inputs, *_ = run_case(ex, next(iter(mods.values())), case, config.PROFILE_SEED, poison=False)
        nbytes = int(ex.case_bytes(p))
        fns = {name: (lambda mod=mod, o=ex.make_outputs(p, inputs): ex.call(mod, p, inputs, o))
               for name, mod in mods.items() if name not in wrong}
        fns["read"], read_bytes = read_baseline(nbytes)
        fns["copy"], copy_bytes = copy_baseline(nbytes)
        for b in ex.target.also:
            fns[b.name], _ = _baseline_fns(ex, ex.target, p, inputs, [b])[b.name]
        sizes = {k: nbytes for k in fns}
        sizes.update(read=read_bytes, copy=copy_bytes)
        row = {}
        for mode, flusher in flushers.items():
            tm = bench_interleaved(fns, flusher, max_reps=100, time_cap_s=2.0)
            gbps = {k: sizes[k] / (t.median_ms * 1e-3) / 1e9 for k, t in tm.items()}
            row[mode] = {k: {"gbps": g, "us": tm[k].median_ms * 1e3, "vs_read": g / gbps["read"],
                             "vs_copy": g / gbps["copy"]} for k, g in gbps.items()}
            print(f"{case.label} [{mode:10s}] " + "; ".join(
                f"{k} {v['us']:.1f} us {v['vs_read']:.3f}x read {v['vs_copy']:.3f}x copy" for k, v in row[mode].items()),
                flush=True)
        out["results"][case.label] = row
        del inputs, outputs, fns
        torch.cuda.empty_cache()
    dest = Path(os.environ.get("OUT", ".")) / f"read-bound-{ex.id}.json"
    dest.write_text(json.dumps(out, indent=1))
    print("wrote", dest, f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
