"""The registry of graded exercises: one module per day, each listing its `EXERCISES`."""
from __future__ import annotations

import importlib
import pkgutil

from ..spec import Exercise


def all_exercises() -> dict[str, Exercise]:
    found: dict[str, Exercise] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for ex in getattr(module, "EXERCISES", []):
            found[ex.id] = ex
    return found


def get(exercise_id: str) -> Exercise:
    exercises = all_exercises()
    if exercise_id not in exercises:
        close = [e for e in exercises if exercise_id in e or e.split(".")[-1] == exercise_id]
        if len(close) == 1:
            return exercises[close[0]]
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no exercise '{exercise_id}'; `python -m grader list` shows them.{hint}")
    return exercises[exercise_id]
