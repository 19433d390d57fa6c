"""Which write-after-read races in shared memory compute-sanitizer racecheck reports (probe.cu says
the four modes). Run from the repository root on a GPU machine:
    python3 benchmarks/racecheck_probe/run.py        (prints a table; writes $OUT/racecheck-probe.json)
Needs nvcc and compute-sanitizer (the CUDA toolkit's); about 30 s."""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repo root, for `grader`
from grader import toolkit  # noqa: E402

MODES = {0: ("LDS", "STS"), 1: ("LDSM", "STS"), 2: ("LDS", "LDGSTS"), 3: ("LDSM", "LDGSTS")}


def main() -> int:
    home = toolkit.cuda_home()
    sanitizer = str(Path(home) / "bin" / "compute-sanitizer") if home else "compute-sanitizer"
    exe = Path(tempfile.mkdtemp()) / "probe"
    subprocess.run([toolkit.nvcc_path() or "nvcc", "-arch=sm_90", "-o", str(exe), str(HERE / "probe.cu")], check=True)
    rows = []
    for mode, (read, write) in MODES.items():
        proc = subprocess.run([sanitizer, "--tool", "racecheck", "--racecheck-report", "all", str(exe), str(mode)],
                              capture_output=True, text=True, timeout=120)
        log = proc.stdout + proc.stderr
        m = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", log)
        rows.append({"mode": mode, "read": read, "write": write, "hazards": int(m[1]) if m else None,
                     "errors": int(m[2]) if m else None, "ran": f"mode {mode}: no error" in log,
                     "summary": m[0] if m else log.strip().splitlines()[-1:]})
        print(f"read {read:5} write {write:7} -> {rows[-1]['summary']}", flush=True)
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "racecheck-probe.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
