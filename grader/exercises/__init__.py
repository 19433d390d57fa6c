"""The registry of graded exercises: one module per day, each listing its `EXERCISES`.

COURSE_EXTRA_EXERCISES (paths of .py files, separated by the OS path separator) adds
modules from elsewhere: the grader's own tests use it for specs that exist only to test
the grader (tests/kinds/); the grading processes inherit it.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from pathlib import Path

from ..spec import Exercise, arch_key


def all_exercises() -> dict[str, Exercise]:
    found: dict[str, Exercise] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for ex in getattr(module, "EXERCISES", []):
            ex.spec_file = Path(module.__file__)
            found[ex.id] = ex
    for path in filter(None, os.environ.get("COURSE_EXTRA_EXERCISES", "").split(os.pathsep)):
        for ex in _load_file(path).EXERCISES:
            ex.spec_file = Path(path).resolve()
            found[ex.id] = ex
    return found


def day_min_arch(day: str) -> str:
    """The oldest compute capability a day's kernels run on ('day09' -> '8.0'): its exercises' oldest
    min_arch; 7.5 for a day without exercises."""
    archs = [ex.min_arch for ex in all_exercises().values() if ex.day == day]
    return min(archs, key=arch_key) if archs else "7.5"


_extra: dict[str, object] = {}


def _load_file(path: str):
    if path not in _extra:
        spec = importlib.util.spec_from_file_location(f"course_extra_{Path(path).stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _extra[path] = module
    return _extra[path]


def get(exercise_id: str) -> Exercise:
    exercises = all_exercises()
    if exercise_id not in exercises:
        close = [e for e in exercises if exercise_id in e or e.split(".")[-1] == exercise_id]
        if len(close) == 1:
            return exercises[close[0]]
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no exercise '{exercise_id}'; `python -m grader list` shows them.{hint}")
    return exercises[exercise_id]
