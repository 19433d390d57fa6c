"""Candidates for day11.batch_decode's reference beside the committed one: checked on every head_dim-128
case of the spec (twice each), then timed at the timed cases with their own split choice (and forced
counts with --forced), beside the committed reference and the read ceiling of the same bytes (the
grader's protocol: L2 flush before each call, interleaved). A candidate is CANDIDATE.cu (default: the
working tree's solution) with each of --variants applied: sSwW sets STAGES and WARPS, a trailing p
launches the merge with programmatic dependent launch (Hopper: the merge grid starts while phase 0
runs and waits for it in griddepcontrol.wait). Run from the repo root on a GPU machine:
    python3 benchmarks/day11_decode_sweep/candidate.py [CANDIDATE.cu] [--variants s2w4,s3w2p] [--forced]
(writes $OUT/day11-candidate.json)."""
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from grader import jit  # noqa: E402
from grader.bench import bench_interleaved, ceiling_baseline  # noqa: E402
from grader.check.compare import compare  # noqa: E402
from grader.exercises import get  # noqa: E402

from splits import forced  # noqa: E402  (this folder: the solution with set_splits(s))

FORCED = {1: [33, 40, 49, 66, 99], 64: [1, 2, 3, 4], 256: [1, 2]}

PDL_WAIT = "  if (phase == 1) {\n"
PDL_LAUNCH = """    batch_decode_kernel<T, HEAD_DIM><<<merge_grid, THREADS, merge_smem_bytes(), stream>>>(
        o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace, static_cast<int>(kv_heads), group,
        static_cast<int>(page_size), sm_scale * course::LOG2E, splits, 1);
"""


def with_pdl(text: str) -> str:
    """The merge launched with programmatic stream serialization: phase 0 lets it launch at once
    (griddepcontrol.launch_dependents), the merge waits for phase 0's completion (griddepcontrol.wait)."""
    assert text.count(PDL_WAIT) == 1 and text.count(PDL_LAUNCH) == 1
    text = text.replace(PDL_WAIT, PDL_WAIT + "#if __CUDA_ARCH__ >= 900\n    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
                        "#endif\n", 1)
    text = text.replace(PDL_WAIT + "#if", "  #if __CUDA_ARCH__ >= 900\n  if (phase == 0) asm volatile(\"griddepcontrol.launch_dependents;\");\n"
                        "  #endif\n" + PDL_WAIT + "#if", 1)
    launch = """    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = merge_grid;
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = merge_smem_bytes();
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t e1 = cudaLaunchKernelEx(&cfg, batch_decode_kernel<T, HEAD_DIM>, o, lse, q, kv_cache, kv_indptr,
        kv_indices, kv_last_page_len, workspace, static_cast<int>(kv_heads), group, static_cast<int>(page_size),
        sm_scale * course::LOG2E, splits, 1);
    if (e1 != cudaSuccess) return e1;
"""
    return text.replace(PDL_LAUNCH, launch, 1)


def variant(text: str, name: str) -> str:
    m = re.fullmatch(r"s(\d+)w(\d+)(p?)", name)
    assert m, name
    text = re.sub(r"constexpr int STAGES = \d+;", f"constexpr int STAGES = {m[1]};", text)
    text = re.sub(r"constexpr int WARPS = \d+;", f"constexpr int WARPS = {m[2]};", text)
    return with_pdl(text) if m[3] else text


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    cand_path = Path(args[0]) if args and args[0].endswith(".cu") else ROOT / "solutions/day11/batch_decode.cu"
    names = sys.argv[sys.argv.index("--variants") + 1].split(",") if "--variants" in sys.argv else ["s2w4"]
    committed = subprocess.run(["git", "show", "HEAD:solutions/day11/batch_decode.cu"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "day11_candidate"
    tmp.mkdir(parents=True, exist_ok=True)
    sources = {"committed": forced(committed)}
    for name in names:
        sources[f"cand_{name}"] = forced(variant(cand_path.read_text(), name))
    t0 = time.time()

    def one(item):
        name, text = item
        path = tmp / f"{name}.cu"
        path.write_text(text)
        return name, jit.build([path], name=f"d11c_{name}", quiet=True).module

    with ThreadPoolExecutor(8) as pool:
        mods = dict(pool.map(one, sources.items()))
    print(f"built {list(mods)} in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()}", flush=True)
    ex = get("day11.batch_decode")
    gen = torch.Generator(device="cuda")
    out = {"commit": os.environ.get("COURSE_COMMIT", "unknown"), "device": torch.cuda.get_device_name(),
           "candidate": str(cand_path), "wrong": {}, "results": {}}
    # 1. every case, each candidate with its own split choice (head_dim 128 only: forced() drops 64 and 256)
    for case in ex.cases:
        p = case.params
        if p["head_dim"] != 128:
            continue
        gen.manual_seed(1)
        inputs = ex.make_inputs(p, gen)
        ref = ex.reference(p, inputs)
        tol = ex.tolerance(p)
        for name, mod in mods.items():
            if name == "committed":
                continue
            for repeat in range(2):  # twice: the tile queues must be back at zero after a call
                outputs = ex.make_outputs(p, inputs)
                for o in outputs.values():
                    o.fill_(float("nan"))
                mod.set_splits(0)
                ex.call(mod, p, inputs, outputs)
                torch.cuda.synchronize()
                for key in ("o", "lse"):
                    t = tol[key] if isinstance(tol, dict) else tol
                    c = compare(key, outputs[key], ref[key], t.rtol, t.atol)
                    if not c.ok:
                        out["wrong"].setdefault(name, []).append(f"{case.label} (call {repeat + 1}): {c.message()}")
        del inputs, ref
    print(f"checked every head_dim-128 case: wrong {json.dumps(out['wrong'])[:2000] or 'none'}", flush=True)
    # 2. timings
    for case in ex.perf_cases:
        p = case.params
        gen.manual_seed(0)
        inputs = ex.make_inputs(p, gen)
        nbytes = int(ex.case_bytes(p))
        read, read_bytes = ceiling_baseline("read", nbytes)
        fns = {"read": read}
        for name, mod in mods.items():
            for s in [0] + (FORCED[p["batch"]] if name != "committed" and "--forced" in sys.argv else []):
                outputs = ex.make_outputs(p, inputs)
                fns[f"{name}/{'own' if s == 0 else f's{s}'}"] = (
                    lambda mod=mod, s=s, o=outputs: (mod.set_splits(s), ex.call(mod, p, inputs, o)))
        t = bench_interleaved(fns, max_reps=60, time_cap_s=1.0)
        base = t["read"].gbps(read_bytes)
        row = {k: {"vs_read": round(v.gbps(nbytes) / base, 3), "us": round(v.median_ms * 1e3, 1)} for k, v in t.items()}
        out["results"][case.label] = row
        print(f"{case.label}: read {base:.0f} GB/s", flush=True)
        for k, v in sorted(row.items(), key=lambda kv: -kv[1]["vs_read"]):
            print(f"    {k:22s} {v['vs_read']:.3f}x read  {v['us']:8.1f} us", flush=True)
        del inputs, fns
        torch.cuda.empty_cache()
    path = Path(os.environ.get("OUT", "/tmp")) / "day11-candidate.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}; total {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
