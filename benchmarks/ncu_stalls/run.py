"""Where a compute-bound solution's time goes, by Nsight Compute: one launch of the reference
solution on one timed case (and of the graded baseline beside it: cuBLAS, SDPA's FLASH backend),
profiled with --clock-control none (the clocks as the timed run has them): SM clock, tensor-pipe
utilization, issue slots, occupancy, and the warp stall reasons per issued instruction, biggest
first. Run from the repo root on a GPU machine with ncu:
    python3 benchmarks/ncu_stalls/run.py day10.gemm "bf16 4096" [day12.flash_attention "causal=False" ...]
Arguments come in pairs: an exercise and a substring of one of its timed cases' labels. Writes
$OUT/ncu-stalls.json and each profile's raw CSV."""
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

KEEP = {"gpu__time_duration.sum": "duration",
        "sm__cycles_elapsed.avg.per_second": "SM clock",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe % active",
        "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active": "HMMA issue % of peak",
        "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue slots %",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput %",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput %",
        "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy %",
        "launch__registers_per_thread": "registers",
        "smsp__average_warp_latency_per_inst_issued.ratio": "cycles per issued instruction (warp)"}
STALL = "smsp__average_warps_issue_stalled_"
EXTRA = ["regex:" + STALL + r".*_per_issue_active\.ratio",
         "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
         "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
         "smsp__average_warp_latency_per_inst_issued.ratio"]


def child(eid: str, sub: str, which: str) -> None:
    """Set up the case, call once untimed, then once inside the profiler's range."""
    import torch

    from grader import jit
    from grader.check.worker import _baseline_fns
    from grader.exercises import get

    ex = get(eid)
    case = next(c for c in ex.perf_cases if sub in c.label)
    p = case.params
    inputs = ex.make_inputs(p, torch.Generator(device="cuda").manual_seed(0))
    if which == "solution":
        mod = jit.build([ex.solution_path], name=f"solution_{eid.replace('.', '_')}", quiet=True).module
        outputs = ex.make_outputs(p, inputs)
        fn = lambda: ex.call(mod, p, inputs, outputs)  # noqa: E731
    else:
        (fn, _), = _baseline_fns(ex, ex.target, p, inputs, [ex.target.baseline]).values()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def profile(eid: str, sub: str, which: str, out: Path) -> list[dict]:
    from grader import ncu

    exe = ncu.ncu_path()
    base = [exe, "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
            "--section", "SpeedOfLight", "--section", "Occupancy", "--section", "LaunchStats",
            "--section", "WarpStateStats", "--section", "ComputeWorkloadAnalysis"]
    argv = [sys.executable, __file__, "--child", eid, sub, which]
    for extra in (["--metrics", ",".join(EXTRA)], []):  # without the extra metrics if ncu refuses them
        proc = subprocess.run(base + extra + argv, capture_output=True, text=True, cwd=ROOT, timeout=400)
        tag = f"{eid}-{which}".replace(".", "_")
        (out / f"ncu-{tag}.csv").write_text(proc.stdout + "\n---stderr---\n" + proc.stderr[-4000:])
        lines = proc.stdout.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
        if proc.returncode == 0 and start is not None:
            break
        print(f"ncu failed ({proc.returncode}) for {eid} {which}: {proc.stderr[-600:]}", flush=True)
    else:
        return []
    reader = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, rows = reader[0], reader[2:]  # second row: units
    units = dict(zip(header, reader[1]))
    found = []
    for r in rows:
        rec = dict(zip(header, r))
        row = {"kernel": rec.get("Kernel Name", "")[:120]}
        for k, label in KEEP.items():
            if k in rec:
                row[label] = f"{rec[k]} {units.get(k, '')}".strip()
        stalls = {}
        for k, v in rec.items():
            if k.startswith(STALL) and k.endswith("_per_issue_active.ratio") and "not_issued" not in k:
                try:
                    stalls[k[len(STALL):-len("_per_issue_active.ratio")]] = float(v.replace(",", ""))
                except ValueError:
                    pass
        row["stalls per issued instruction"] = dict(sorted(stalls.items(), key=lambda kv: -kv[1])[:10])
        found.append(row)
    return found


def main() -> int:
    if sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return 0
    out = Path(os.environ.get("OUT", "/tmp"))
    pairs = list(zip(sys.argv[1::2], sys.argv[2::2]))
    report = {"commit": os.environ.get("COURSE_COMMIT", "unknown"), "profiles": []}
    for eid, sub in pairs:
        for which in ("solution", "baseline"):
            rows = profile(eid, sub, which, out)
            report["profiles"].append({"exercise": eid, "case": sub, "which": which, "launches": rows})
            for row in rows:
                print(f"== {eid} [{sub}] {which}: {row['kernel']}", flush=True)
                for k, v in row.items():
                    if k != "kernel":
                        print(f"   {k}: {v}", flush=True)
            (out / "ncu-stalls.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
