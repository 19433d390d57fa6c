"""Day 11's decode ladder, v1 to v5 (kernels/day11/decode_v*.cu: v1 naive, v2 one warp per token,
v3 FlashInfer's GQA lanes, v4 + the cp.async ring, v5 + the paged cache and split-KV), with the
exercise's solution beside them: each built as the notebook builds the day's versions, checked against
the spec's reference (softmax attention with GQA in fp32/fp64) on small problems (contiguous, and ragged
paged requests for the paged kernels) and at each timed shape, then timed at batch 64 x 4096 and
batch 1 x 32768 (32 query / 8 KV heads, head_dim 128, bf16, page 16) against the read ceiling of the
same KV bytes, with the notebook's own timing (nb.measure_bandwidth: interleaved, L2 flushed before
every call, median). Run from the repository root:
    python3 benchmarks/day11_ladder/run.py                 (a GPU: writes $OUT/day11-ladder.json)
    python3 benchmarks/day11_ladder/run.py --compile-only  (no GPU needed: builds every version)"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root, for `grader`
import torch  # noqa: E402

from grader import jit, nb  # noqa: E402
from grader.jit.extension import DAY_FLAGS  # noqa: E402
from grader.exercises import day11, get  # noqa: E402

DAY = ROOT / "kernels" / "day11"
LADDER = {  # name -> file: one extension, as grader.jit.build_day builds the day's versions
    "v1 naive": DAY / "decode_v1_naive.cu",
    "v2 one warp per token": DAY / "decode_v2_online.cu",
    "v3 GQA lanes": DAY / "decode_v3_gqa_lanes.cu",
    "v4 cp.async ring": DAY / "decode_v4_cp_async.cu",
    "v5 paged, split-KV": DAY / "decode_v5_split_paged.cu",
}
PAGED = ("v5 paged, split-KV", "exercise")  # the versions that read the page table (ragged lengths)
EXERCISE = "exercise"  # solutions/day11/batch_decode.cu, built on its own as the notebook builds it
SHAPES = ((64, 4096), (1, 32768))  # (batch, tokens per request), timed
SMALL = [((3, 333), 16)]  # contiguous: (batch, tokens), page size; 333 is no multiple of any tile
RAGGED = [([1, 17, 300, 1000, 4099], 16), ([5, 64, 129, 700], 3)]  # paged: lengths, page size
QO, KV, HD = 32, 8, 128  # Llama 3 8B


def compile_report() -> dict:
    """Registers, spills and shared memory of every kernel of every version (nvcc -cubin for this GPU,
    or sm_90 without one)."""
    files = {**LADDER, EXERCISE: get("day11.batch_decode").solution_path}
    out = {}
    for name, path in files.items():
        try:
            kernels = jit.compile_cubin(path).kernels
        except jit.BuildError as e:  # the exercise's file may be mid-edit: the ladder stands without it
            if name != EXERCISE:
                raise
            print(f"  {name}: does not compile: {e.first_error}", flush=True)
            continue
        for k in kernels:
            out[f"{name}: {k.name[:60]}"] = {"registers": k.registers, "spill_stores": k.spill_stores,
                                            "spill_loads": k.spill_loads, "shared_bytes": k.shared_bytes}
    for key, r in out.items():
        print(f"  {key:<80} {r['registers']:>3} regs  {r['spill_stores']} / {r['spill_loads']} B spilled"
              f"  {r['shared_bytes']:>6} B smem", flush=True)
    return out


def build_all(load: bool):
    """The ladder in one extension (every file in one translation unit, as the notebook's build_day),
    and the exercise's solution on its own; (ladder module, exercise module or None)."""
    ladder = jit.build(list(LADDER.values()), name="day11_ladder", load=load, flags=DAY_FLAGS)
    try:
        exercise = jit.build([get("day11.batch_decode").solution_path], name="day11_batch_decode", load=load)
    except jit.BuildError as e:  # the ladder stands without it
        print(f"exercise left out: it does not build:\n{e.first_error}", flush=True)
        exercise = None
    return ladder.module, exercise.module if exercise else None


def inputs(lens, page_size, seed=0):
    """The spec's inputs (paged cache, page table, q) and the same tokens as contiguous K, V
    [batch, len, kv_heads, head_dim] (every request of length lens[0]: the contiguous versions' shape)."""
    p = day11.decode_params("bf16", lens, QO, KV, HD, page_size)
    x = day11.decode_inputs(p, torch.Generator(device="cuda").manual_seed(seed))
    if len(set(lens)) > 1:
        return p, x, None, None
    page, slot = day11.token_slots(p["lens"], page_size, x["kv_indptr"], x["kv_indices"])
    k = x["kv_cache"][page, 0, slot].view(p["batch"], lens[0], KV, HD)
    v = x["kv_cache"][page, 1, slot].view(p["batch"], lens[0], KV, HD)
    return p, x, k, v


def calls(mod, exercise, p, x, k, v):
    """o and {name: call} for every version that takes this problem (contiguous ones need k, v)."""
    b, qo, kv, ps, sc, q = p["batch"], p["qo_heads"], p["kv_heads"], p["page_size"], day11.sm_scale(p), x["q"]
    n = p["lens"][0]
    o = torch.empty(b, qo, HD, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(b, qo, device="cuda")
    ws = torch.empty(day11.workspace_floats(qo, HD), device="cuda")  # v5's and the exercise's states
    paged = (x["kv_cache"], x["kv_indptr"], x["kv_indices"], x["kv_last_page_len"])
    fns = {"v5 paged, split-KV": lambda: mod.decode_v5_split_paged_bf16(o, q, *paged, ws, b, ps, qo, kv, sc)}
    if exercise is not None:
        fns[EXERCISE] = lambda: exercise.batch_decode_bf16(o, lse, q, *paged, ws, ws.numel(), b, qo, kv, HD, ps, sc)
    if k is not None:
        scores = torch.empty(b * qo * n, device="cuda")  # v1's workspace
        fns = {"v1 naive": lambda: mod.decode_v1_naive_bf16(o, q, k, v, scores, b, n, qo, kv, HD, sc),
               "v2 one warp per token": lambda: mod.decode_v2_online_bf16(o, q, k, v, b, n, qo, kv, sc),
               "v3 GQA lanes": lambda: mod.decode_v3_gqa_lanes_bf16(o, q, k, v, b, n, qo, kv, sc),
               "v4 cp.async ring": lambda: mod.decode_v4_cp_async_bf16(o, q, k, v, b, n, qo, kv, sc), **fns}
    return o, fns


def check(o, fns, p, x, label) -> dict:
    """Each version once against the spec's reference, with the exercise's tolerance (|o - ref| <=
    atol + rtol |ref|); o is filled with NaN first, so a row never written fails."""
    ref = day11.reference(p, x)["o"].float()
    tol = day11._tolerance(p)
    out = {}
    for name, fn in fns.items():
        o.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = (o.float() - ref).abs()
        ok = bool((err <= tol.atol + tol.rtol * ref.abs()).all())  # NaN compares False
        out[name] = {"max_err": err.max().item(), "ok": ok}
        print(f"  check {label:<32} {name:<22} max |error| {out[name]['max_err']:.3g}"
              f"{'' if ok else '  WRONG (atol %.3g, rtol %.3g)' % (tol.atol, tol.rtol)}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile-only", action="store_true", help="build every version and exit (no GPU)")
    args = ap.parse_args()
    t0 = time.time()
    print("registers, spills and shared memory:", flush=True)
    registers = compile_report()
    if args.compile_only:
        build_all(load=False)
        print(f"built every version in {time.time() - t0:.0f} s (compile only)", flush=True)
        return 0
    mod, exercise = build_all(load=True)
    print(f"built in {time.time() - t0:.0f} s on {torch.cuda.get_device_name()}", flush=True)
    out = {"device": torch.cuda.get_device_name(), "commit": os.environ.get("COURSE_COMMIT", "unknown"),
           "registers": registers, "checks": {}, "timed": {}}
    wrong = 0
    for (batch, n), ps in SMALL:
        p, x, k, v = inputs([n] * batch, ps)
        o, fns = calls(mod, exercise, p, x, k, v)
        label = f"contiguous {batch} x {n}"
        out["checks"][label] = check(o, fns, p, x, label)
    for lens, ps in RAGGED:
        p, x, k, v = inputs(lens, ps)
        o, fns = calls(mod, exercise, p, x, k, v)
        label = f"ragged {list(lens)} page {ps}"
        out["checks"][label] = check(o, fns, p, x, label)
    wrong += sum(not r["ok"] for c in out["checks"].values() for r in c.values())
    for batch, n in SHAPES:
        p, x, k, v = inputs([n] * batch, 16)
        o, fns = calls(mod, exercise, p, x, k, v)
        label = f"batch {batch} x {n}"
        checked = check(o, fns, p, x, label)
        wrong += sum(not r["ok"] for r in checked.values())
        right = {name: fn for name, fn in fns.items() if checked[name]["ok"]}  # a wrong one is not timed
        measured = nb.measure_bandwidth(right, day11.kv_bytes(p), label=f"day11 ladder {label}", ceiling="read")
        out["timed"][label] = {name: {**m, **checked.get(name, {})} for name, m in measured.items()}
        for name, m in measured.items():
            print(f"  {label:<18} {name:<22} {m['gbps']:7.0f} GB/s  {m['read_ratio']:.3f}x read  {m['us']:9.1f} us",
                  flush=True)
        del x, k, v, fns
        torch.cuda.empty_cache()
    path = Path(os.environ.get("OUT", "/tmp")) / "day11-ladder.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}; {wrong} wrong; total {time.time() - t0:.0f} s", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
