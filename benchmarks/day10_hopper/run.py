"""Day 10's Hopper ladder (kernels/day10/gemm_v5..v8_*_sm90a.cu), the wgmma_gemm exercise's solution and
the cluster-multicast candidate (cluster_multicast_sm90a.cu here), built as one extension as the notebook
builds the day's versions: each checked against an fp64 product on tails of every dimension, then timed
beside torch.matmul (cuBLAS) at the exercise's timed shapes with the notebook's own timing
(nb.measure_tflops: interleaved, L2 flushed before every call, median). Needs an sm_90 GPU. Run from the
repository root:
    python3 benchmarks/day10_hopper/run.py                 (an H100 or H200: writes $OUT/day10-hopper.json)
    python3 benchmarks/day10_hopper/run.py --compile-only  (no GPU needed: builds every version)"""
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
from grader.exercises import day10  # noqa: E402
from grader.spec import dot_tolerance  # noqa: E402

DAY = ROOT / "kernels" / "day10"
FILES = [DAY / "gemm_v5_wgmma_tma_sm90a.cu", DAY / "gemm_v6_persistent_sm90a.cu", DAY / "gemm_v8_tma_store_sm90a.cu",
         ROOT / "solutions" / "day10" / "wgmma_gemm.cu", Path(__file__).parent / "cluster_multicast_sm90a.cu"]
NAMES = {"gemm_v5_wgmma_tma_bf16": "v5 wgmma + TMA", "gemm_v6_persistent_bf16": "v6 persistent",
         "gemm_v8_tma_store_bf16": "v8 TMA-store epilogue", "wgmma_gemm_bf16": "exercise solution",
         "gemm_cluster_multicast_bf16": "cluster candidate"}
TAILS = [(1, 1, 8), (129, 257, 72), (300, 7, 64), (384, 512, 512), (1000, 1000, 1000), (257, 513, 4104)]


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--compile-only", action="store_true")
    args = args.parse_args()
    t0 = time.perf_counter()
    mod = jit.build(FILES, name="day10_hopper", flags=DAY_FLAGS, load=not args.compile_only)
    print(f"built in {time.perf_counter() - t0:.1f} s")
    if args.compile_only:
        return 0
    fns = {NAMES[e.name]: getattr(mod, e.name) for e in mod.exports if e.name in NAMES}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, f in fns.items():
        for m, n, k in TAILS:
            if name.startswith("v5") and (m % 128 or n % 256 or k % 64):
                continue  # v5 covers whole tiles only
            a = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16)
            b = torch.randn(n, k, generator=gen, device="cuda").to(torch.bfloat16)
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            f(c, a, b, m, n, k)
            ref, tol = a.double() @ b.double().t(), dot_tolerance("bf16", k)
            ok = bool(((c.double() - ref).abs() <= tol.atol + tol.rtol * ref.abs()).all())
            print(f"{name:<24} {m}x{n}x{k}: {'right' if ok else 'WRONG'}")
    out = {}
    for dt, m, n, k in [s for s in day10.WGMMA_PERF if s[0] == "bf16"]:
        a = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16)
        b = torch.randn(n, k, generator=gen, device="cuda").to(torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        run = {name: (lambda f=f: f(c, a, b, m, n, k)) for name, f in fns.items()}
        run["torch.matmul"] = lambda: torch.matmul(a, b.t(), out=c)
        out[f"{m}x{n}x{k}"] = r = nb.measure_tflops(run, 2 * m * n * k, baseline="torch.matmul")
        for name, x in r.items():
            print(f"{m}x{n}x{k} {name:<24} {x['tflops']:6.1f} TFLOP/s {x['us']:9.1f} us {x['ratio']:.3f}x torch.matmul")
        del a, b, c
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    path = Path(os.environ.get("OUT", ".")) / "day10-hopper.json"
    path.write_text(json.dumps({"environment": env, "timings": out}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
