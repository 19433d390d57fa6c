"""Where day11.batch_decode's reference loses to the read ceiling, at the exercise's timed cases: the
reference, the same kernel with its math taken out (its loads, pipeline, split states and merge kept:
the cost of the design's structure), and paged_read.cu (every KV byte read once through the page
table, the read ceiling's shape: the cost of the page table itself), all beside the read ceiling of
the same bytes under the grader's protocol. Run from the repo root on a GPU machine:
    python3 benchmarks/day11_decode_sweep/ceiling.py      (writes $OUT/day11-ceiling.json)"""
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from grader import jit  # noqa: E402
from grader.bench import bench_interleaved, ceiling_baseline  # noqa: E402
from grader.exercises import get  # noqa: E402

from sweep import only_head_dim_128  # noqa: E402

HERE = Path(__file__).resolve().parent


def without_math(text: str) -> str:
    """The reference with S = QK^T, the softmax and O += PV removed from its tile loop."""
    a = text.index("    // S (16 rows, 16 tokens) = Q K^T")
    b = text.index("    __syncthreads();  // every warp is done with this stage")
    return text[:a] + "    (void)ks; (void)vs;\n" + text[b:]


def main():
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "day11_ceiling"
    tmp.mkdir(parents=True, exist_ok=True)
    sol = only_head_dim_128((ROOT / "solutions/day11/batch_decode.cu").read_text())
    (tmp / "solution.cu").write_text(sol)
    (tmp / "no_math.cu").write_text(without_math(sol))
    jobs = {"solution": tmp / "solution.cu", "no_math": tmp / "no_math.cu", "paged_read": HERE / "paged_read.cu"}
    t0 = time.time()
    with ThreadPoolExecutor(3) as pool:
        futs = {k: pool.submit(jit.build, [v], name=f"d11ceil_{k}", quiet=True) for k, v in jobs.items()}
        mods = {k: f.result().module for k, f in futs.items()}
    print(f"built in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()}", flush=True)
    ex = get("day11.batch_decode")
    gen = torch.Generator(device="cuda")
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    out = {"commit": os.environ.get("COURSE_COMMIT", "unknown"), "device": torch.cuda.get_device_name(), "results": {}}
    for case in ex.perf_cases:
        p = case.params
        gen.manual_seed(0)
        inputs = ex.make_inputs(p, gen)
        nbytes = int(ex.case_bytes(p))
        read, read_bytes = ceiling_baseline("read", nbytes)
        fns = {"read": read}
        for name in ("solution", "no_math"):
            outputs = ex.make_outputs(p, inputs)
            fns[name] = lambda mod=mods[name], o=outputs: ex.call(mod, p, inputs, o)
        cache = inputs["kv_cache"].view(torch.bfloat16)
        pages = int(inputs["kv_indptr"][-1])
        assert all(n % p["page_size"] == 0 for n in p["lens"]), "paged_read: whole pages only"
        page_words = 2 * p["page_size"] * p["kv_heads"] * p["head_dim"] * 2 // 16
        for unroll, per_sm in ((4, 8), (8, 8), (8, 4), (16, 4)):
            fns[f"paged_read_u{unroll}_b{per_sm}"] = (
                lambda u=unroll, b=per_sm: mods["paged_read"].paged_read(cache, inputs["kv_indices"], sink, pages,
                                                                         page_words, u, b))
        t = bench_interleaved(fns, max_reps=60, time_cap_s=1.0)
        base = t["read"].gbps(read_bytes)
        row = {k: {"vs_read": round(v.gbps(nbytes) / base, 3), "us": round(v.median_ms * 1e3, 1)} for k, v in t.items()}
        out["results"][case.label] = row
        print(f"{case.label}: read {base:.0f} GB/s", flush=True)
        for k, v in sorted(row.items(), key=lambda kv: -kv[1]["vs_read"]):
            print(f"    {k:20s} {v['vs_read']:.3f}x read  {v['us']:8.1f} us", flush=True)
        del inputs, fns
        torch.cuda.empty_cache()
    path = Path(os.environ.get("OUT", "/tmp")) / "day11-ceiling.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}; total {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
