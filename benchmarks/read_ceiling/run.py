"""Is the grader's read ceiling (grader/check/ptx.py StreamingRead) a ceiling? Times, interleaved
under the grader's L2 flush, the read kernel in every shape of a sweep (16-byte loads in flight per
thread, threads per block, blocks per SM) and a device copy (torch's copy_, reads and writes
counted), at the bytes the read-bound exercises' timed cases read and at 1 GiB, beside the DRAM's
theoretical bandwidth. The grader's shape should be the best of the sweep or within 1% of it, and
at 1 GiB it should read as fast as the copy moves bytes. Run from the repo root on a GPU machine:
    python3 benchmarks/read_ceiling/run.py        (writes $OUT/read-ceiling.json)"""
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from grader.bench import bench_interleaved, copy_baseline, theoretical_bandwidth  # noqa: E402
from grader.check.ptx import READ_BLOCKS_PER_SM, READ_THREADS, READ_UNROLL, StreamingRead  # noqa: E402

SIZES = {"day07 4096 x 14336 weight": 2 * 4096 * 14336, "day11 1 x 32768 KV": 2 * 32768 * 8 * 128 * 2,
         "1 GiB": 1 << 30}
SHAPES = [(u, t, b) for u in (2, 4, 8) for t in (256, 512) for b in (4, 8, 16) if t * b <= 2048]


def main():
    peak = theoretical_bandwidth()
    out = {"device": torch.cuda.get_device_name(), "commit": os.environ.get("COURSE_COMMIT", "unknown"),
           "theoretical_gbps": peak / 1e9 if peak else None,
           "grader_shape": [READ_UNROLL, READ_THREADS, READ_BLOCKS_PER_SM], "sizes": {}}
    for label, nbytes in SIZES.items():
        buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        fns = {f"u{u} t{t} b{b}": StreamingRead(nbytes, u, t, b, buffer=buf) for u, t, b in SHAPES}
        copy, copy_bytes = copy_baseline(2 * nbytes)  # reads nbytes, writes nbytes
        fns["copy"] = copy
        tm = bench_interleaved(fns, max_reps=60, time_cap_s=2.0)
        gbps = {k: (copy_bytes if k == "copy" else nbytes) / (t.median_ms * 1e-3) / 1e9 for k, t in tm.items()}
        best = max((k for k in gbps if k != "copy"), key=gbps.get)
        grader = f"u{READ_UNROLL} t{READ_THREADS} b{READ_BLOCKS_PER_SM}"
        out["sizes"][label] = {"bytes": nbytes, "gbps": gbps, "best": best,
                               "grader_vs_best": gbps[grader] / gbps[best], "grader_vs_copy": gbps[grader] / gbps["copy"],
                               "grader_vs_theoretical": gbps[grader] * 1e9 / peak if peak else None}
        print(f"{label:28s} copy {gbps['copy']:.0f} GB/s; read: grader's shape {gbps[grader]:.0f} GB/s "
              f"({gbps[grader] / gbps[best]:.3f}x the best, {best}: {gbps[best]:.0f}; "
              f"{gbps[grader] / gbps['copy']:.3f}x copy; {gbps[grader] * 1e9 / peak:.3f}x theoretical)", flush=True)
        del buf, fns, copy
        torch.cuda.empty_cache()
    dest = Path(os.environ.get("OUT", ".")) / "read-ceiling.json"
    dest.write_text(json.dumps(out, indent=1))
    print("wrote", dest)


if __name__ == "__main__":
    main()
