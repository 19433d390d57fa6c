"""Where day07.skinny_gemm's reference loses to the read ceiling, at the exercise's timed cases: the
reference beside the same kernel with its mma taken out (copies, pipeline, stream-K fix-ups kept), under
the grader's protocol. Run from the repo root on a GPU machine:
    python3 benchmarks/day07_skinny_sweep/no_math.py      (writes $OUT/day07-no-math.json)"""
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from grader import jit  # noqa: E402
from grader.bench import bench_interleaved, ceiling_baseline  # noqa: E402
from grader.exercises import get  # noqa: E402

CALL = "    warp_tile_mma<T, ROWS, MTOK, K_TILE, KSPLIT>(stages + (f % STAGES) * STAGE_ELEMS, rg, kh, acc);\n"


def main():
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "day07_no_math"
    tmp.mkdir(parents=True, exist_ok=True)
    sol = (ROOT / "solutions/day07/skinny_gemm.cu").read_text()
    assert sol.count(CALL) == 1
    (tmp / "no_math.cu").write_text(sol.replace(CALL, ""))
    t0 = time.time()
    mods = {"solution": jit.build([ROOT / "solutions/day07/skinny_gemm.cu"], name="d07nm_sol", quiet=True).module,
            "no_math": jit.build([tmp / "no_math.cu"], name="d07nm_nm", quiet=True).module}
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    ex = get("day07.skinny_gemm")
    gen = torch.Generator(device="cuda")
    out = {"commit": os.environ.get("COURSE_COMMIT", "unknown"), "device": torch.cuda.get_device_name(), "results": {}}
    for case in ex.perf_cases:
        p = case.params
        gen.manual_seed(0)
        inputs = ex.make_inputs(p, gen)
        nbytes = int(ex.case_bytes(p))
        read, read_bytes = ceiling_baseline("read", nbytes)
        fns = {"read": read}
        for name, mod in mods.items():
            outputs = ex.make_outputs(p, inputs)
            fns[name] = lambda mod=mod, o=outputs: ex.call(mod, p, inputs, o)
        fns["torch.matmul"] = lambda: torch.matmul(inputs["x"], inputs["weight"].t())
        t = bench_interleaved(fns, max_reps=60, time_cap_s=1.0)
        base = t["read"].gbps(read_bytes)
        row = {k: {"vs_read": round(v.gbps(nbytes) / base, 3), "us": round(v.median_ms * 1e3, 1)} for k, v in t.items()}
        out["results"][case.label] = row
        print(f"{case.label}: read {base:.0f} GB/s; " + "; ".join(f"{k} {v['vs_read']:.3f}x {v['us']:.1f}us"
                                                                   for k, v in row.items() if k != "read"), flush=True)
        del inputs, fns
        torch.cuda.empty_cache()
    path = Path(os.environ.get("OUT", "/tmp")) / "day07-no-math.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}; total {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
