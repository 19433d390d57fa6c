"""mma.sync's rate on this GPU against the warps per SM sub-partition (scheduler) and the independent
mma per warp (mma_rate.cu): what the GEMM and attention kernels of Days 10 and 12 can reach with 2
warps per scheduler (8 per SM, their occupancy) and what 3 or 4 would give. TFLOP/s counts 2 x 16 x 8
x 16 flops per mma. Run from the repo root on a GPU machine:
    python3 benchmarks/mma_rate/run.py        (writes $OUT/mma-rate.json)"""
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from grader import jit  # noqa: E402

ITERS = 4096


def main():
    mod = jit.build([Path(__file__).with_name("mma_rate.cu")], name="mma_rate", quiet=True).module
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.zeros(1024, device="cuda")
    rows = []
    for warps_per_sched in (1, 2, 3, 4, 6, 8):
        for ilp in (1, 2, 4, 8, 16):
            warps = 4 * warps_per_sched  # one block per SM: its warps spread over the 4 schedulers
            try:
                mod.mma_rate(out, sms, warps, ilp, 16)  # warm-up
            except RuntimeError as e:  # e.g. 32 warps x 16 accumulators: too many registers for a block
                print(f"warps/scheduler {warps_per_sched}  ilp {ilp:2d}: not launched ({e})", flush=True)
                continue
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            best = None
            for _ in range(5):
                a.record()
                mod.mma_rate(out, sms, warps, ilp, ITERS)
                b.record()
                torch.cuda.synchronize()
                ms = a.elapsed_time(b)
                best = ms if best is None else min(best, ms)
            flops = 2 * 16 * 8 * 16 * ITERS * ilp * warps * sms
            tflops = flops / (best * 1e-3) / 1e12
            rows.append({"warps_per_scheduler": warps_per_sched, "ilp": ilp, "tflops": round(tflops, 1)})
            print(f"warps/scheduler {warps_per_sched}  ilp {ilp:2d}: {tflops:6.1f} TFLOP/s", flush=True)
    report = {"device": torch.cuda.get_device_name(), "commit": os.environ.get("COURSE_COMMIT", "unknown"),
              "rows": rows}
    Path(os.environ.get("OUT", "/tmp"), "mma-rate.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
