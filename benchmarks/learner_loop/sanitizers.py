"""What compute-sanitizer adds to a learner's check: each named exercise's reference checked as a learner
checks it (config.CHECK_SANITIZERS on the cases up to config.CHECK_SANITIZE_MAX_BYTES, their processes
started beside the build) and with no sanitizer, the seconds of each and of each sanitizer's stage; then
the exercise's mutants that a sanitizer must see (tests/mutants, `sanitizer = ...`) checked as a learner
checks them. Run from the repo root on a GPU machine:
    python3 benchmarks/learner_loop/sanitizers.py day02.silu_and_mul day05.softmax ...
(writes $OUT/check-sanitizers.json)"""
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grader import check  # noqa: E402
from grader.maintain import corpus  # noqa: E402


def main():
    out = {"commit": os.environ.get("COURSE_COMMIT", "unknown"), "solutions": [], "mutants": []}
    for ex in sys.argv[1:]:
        for label, kw in (("no sanitizer", {"sanitizers": ()}), ("learner check", {})):
            t0 = time.time()
            res = check(ex, solutions=True, quiet=True, **kw)
            row = {"exercise": ex, "run": label, "verdict": res.verdict, "seconds": round(time.time() - t0, 1),
                   "stages": {i.name: {"status": i.status, "seconds": round(i.metrics.get("seconds", 0), 1),
                                       "cached": i.metrics.get("cached", False)}
                              for i in res.items if i.name.startswith("compute-sanitizer")}}
            out["solutions"].append(row)
            print(json.dumps(row), flush=True)
        for m in corpus.mutants_for(ex):
            if not m.sanitizer:
                continue
            res = check(ex, source=m.write(corpus.written_dir()), quiet=True, perf=False)
            hit = [i for i in res.failures if m.reason in f"{i.name} {i.detail}"
                   or i.name == f"compute-sanitizer {m.sanitizer}"]
            row = {"mutant": f"{ex}/{m.name}", "caught": bool(hit), "verdict": res.verdict,
                   "first_failure": res.first_failure()[:300]}
            out["mutants"].append(row)
            print(json.dumps(row), flush=True)
    path = Path(os.environ.get("OUT", "/tmp")) / "check-sanitizers.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
