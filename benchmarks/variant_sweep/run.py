"""Grade variants of a solution that differ only in #define knobs, and print each timed case's ratio
to its graded baseline: the measurement behind a solution's tuning constants. Run from the repository
root on a GPU machine:
    python3 benchmarks/variant_sweep/run.py 'day14.rope:ROPE_HEADS_PER_STEP=8' 'day14.rope:' ...
Each argument is EXERCISE:NAME=VALUE,NAME=VALUE (nothing after the colon: the solution as it is), or
EXERCISE@FILE:... to grade FILE (a candidate design, e.g. a copy of the solution with another tiling)
in place of the solution.
Every variant goes through `grader check --source` (correct on one seed, then timed beside its
baselines in the same run); writes $OUT/variant-sweep.json when $OUT is set. The variants are first
built and checked untimed in parallel (`check --no-perf`, SWEEP_JOBS at a time, 6 unless set), so the
timed runs load their builds from the cache and only the timing is serial."""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from grader import exercises  # noqa: E402


def variant(spec: str, folder: Path) -> tuple[str, str, dict, Path]:
    target, _, knobs = spec.partition(":")
    eid, _, file = target.partition("@")
    defines = dict(k.split("=", 1) for k in knobs.split(",") if k)
    ex = exercises.get(eid)
    source = ROOT / file if file else ex.solution_path
    text = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + source.read_text()
    path = folder / f"{eid.replace('.', '_')}_{len(list(folder.iterdir()))}{''.join(ex.solution_path.suffixes)}"
    path.write_text(text)
    return eid, file or "solution", defines, path


def check(eid: str, path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "check", eid, "--source", str(path), "--seeds", "1",
                           "--json", *extra], capture_output=True, text=True, cwd=ROOT)


def main() -> int:
    folder = Path(tempfile.mkdtemp())
    rows = []
    variants = [(spec, *variant(spec, folder)) for spec in sys.argv[1:]]
    with concurrent.futures.ThreadPoolExecutor(int(os.environ.get("SWEEP_JOBS", 6))) as pool:  # builds in parallel
        list(pool.map(lambda v: check(v[1], v[4], "--no-perf"), variants))
    for spec, eid, source, defines, path in variants:
        proc = check(eid, path)
        try:  # the JSON document is the last thing printed, from a line that opens with "{"
            out = proc.stdout
            result = json.loads(out[out.rindex("\n{") + 1:] if not out.startswith("{") else out)
        except ValueError:
            print(spec, "no result:", (proc.stderr or proc.stdout)[-800:], flush=True)
            rows.append({"exercise": eid, "source": source, "defines": defines, "verdict": "no result"})
            continue
        cases = {i["name"]: {"status": i["status"], "ratio": i["metrics"].get("ratio"),
                             "value": i["metrics"].get("value"), "unit": i["metrics"].get("unit")}
                 for i in result["items"] if i["group"] == "performance"}
        failed = [f'{i["name"]}: {i.get("detail", "")}' for i in result["items"]
                  if i["status"] == "fail" and i["group"] != "performance"]
        rows.append({"exercise": eid, "source": source, "defines": defines, "verdict": result["verdict"], "failed": failed,
                     "cases": cases})
        ratios = " ".join(f"{c['ratio']:.3f}" if c["ratio"] else "-" for c in cases.values())
        print(f"{spec:60s} {result['verdict']:6s} ratios {ratios}" + (f" FAILED {failed}" if failed else ""),
              flush=True)
        if os.environ.get("OUT"):  # after every variant: a run cut off keeps what it measured
            Path(os.environ["OUT"], "variant-sweep.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
