"""Ray for real, on a host with two GPUs: one synthetic class (class_benchmark.synthetic_class) graded twice with
the same secret seed, by this host's slots (--gpus 2, 4 lanes) and on a local Ray cluster started for the
run (--ray, 2 GPUs, a task per grading); prints both times and compares the verdicts, into
OUT/ray-vs-slots.json (reports/ray-class-2gpu.json). Needs Ray (the `ray` extra).
Usage: python -m grader.maintain.ray_check N OUT"""
import json
import sys
import tempfile
import time
from pathlib import Path

from grader import exercises
from grader.classroom import grade_class
from grader.maintain.class_benchmark import synthetic_class


def main():
    n, out = int(sys.argv[1]), Path(sys.argv[2])
    ex = exercises.get("day02.silu_and_mul")
    subs = Path(tempfile.mkdtemp(prefix="class-"))
    roster = synthetic_class(ex, n, subs)
    summary = {}
    for name, kw in (("slots", {}), ("ray", {"ray": "local"})):
        t0 = time.perf_counter()
        code = grade_class(subs, out / name, only=[ex.id], gpus=2, secret_seed=7, lanes=1 if name == "ray" else 4,
                           echo=lambda m: print(f"[{name}] {m}", flush=True), **kw)
        summary[name] = {"rc": code, "seconds": time.perf_counter() - t0,
                         "timing": json.loads((out / name / "timing.json").read_text()) if (out / name / "timing.json").exists() else None}
        print(f"== {name}: exit {code} in {summary[name]['seconds']:.0f} s", flush=True)
    verdicts = {}
    for name in summary:
        rows = json.loads((out / name / "gradebook.json").read_text()) if (out / name / "gradebook.json").exists() else []
        verdicts[name] = {r["student"]: r["verdict"] for r in rows}
    diff = sorted(s for s in set(verdicts["slots"]) | set(verdicts["ray"]) if verdicts["slots"].get(s) != verdicts["ray"].get(s))
    summary["same_verdicts"] = not diff and len(verdicts["ray"]) == n
    summary["differ"] = {s: [verdicts["slots"].get(s), verdicts["ray"].get(s), roster.get(s)] for s in diff}
    (out / "ray-vs-slots.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "timing"}, indent=1, default=str))


if __name__ == "__main__":  # (the grading pools spawn: they import this file)
    main()
