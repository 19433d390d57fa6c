"""The options of a check, defined once: the CLI's `check` takes them as --NAME, the pytest
plugin as --grader-NAME, and both turn them into `grader.check` arguments here."""
from __future__ import annotations

from . import config

# name, help, argparse kwargs: shared by the CLI's `check` and the pytest plugin (prefixed --grader-).
OPTIONS = [
    ("source", "grade this .cu file instead of the learner's kernels/dayNN/NAME.cu", dict(default=None)),
    ("solutions", "grade the reference solution (solutions/dayNN/NAME.cu)", dict(action="store_true")),
    ("seeds", "number of random seeds per correctness case", dict(type=int, default=config.PUBLIC_SEEDS)),
    ("secret-seed", "one more seed whose value is not shown (also GRADER_SECRET_SEED)", dict(type=int, default=None)),
    ("no-perf", "skip the performance measurement", dict(action="store_true")),
    ("timeout", "seconds before a hanging kernel is stopped", dict(type=float, default=None)),
    ("sanitize", "run the small cases under compute-sanitizer (memcheck or racecheck)",
     dict(choices=["memcheck", "racecheck"], default=None)),
]


def check_kwargs(get) -> dict:
    """Turn option values (looked up by their dashed name) into grader.check arguments."""
    return dict(source=get("source"), solutions=True if get("solutions") else None, seeds=get("seeds"),
                secret_seed=get("secret-seed"), perf=not get("no-perf"), timeout=get("timeout"),
                sanitize=get("sanitize"))
