"""pytest plugin: `pytest --grader day02.silu_and_mul` (or `--grader all`) grades exercises
as test items, with the same options as `python -m grader check` under the --grader- prefix."""
from __future__ import annotations

import pytest

from .options import OPTIONS, check_kwargs


def pytest_addoption(parser):
    group = parser.getgroup("grader", "grade course exercises")
    group.addoption("--grader", action="append", default=[], metavar="EXERCISE",
                    help="grade this exercise (repeatable; 'all' for every exercise)")
    for name, help_, kw in OPTIONS:
        group.addoption(f"--grader-{name}", dest=f"grader_{name.replace('-', '_')}", help=help_, **kw)


class GraderItem(pytest.Item):
    def __init__(self, *, exercise: str, **kw):
        super().__init__(**kw)
        self.exercise = exercise
        self.result = None

    def runtest(self):
        from .check import check

        opt = self.config.getoption
        self.result = check(self.exercise, **check_kwargs(lambda k: opt(f"grader_{k.replace('-', '_')}")))
        if not self.result.ok:
            raise GradeFailed(str(self.result))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, GradeFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"grade {self.exercise}"


class GradeFailed(Exception):
    pass


def pytest_collection_modifyitems(session, config, items):
    wanted = config.getoption("grader")
    if not wanted:
        return
    from . import exercises

    ids = list(exercises.all_exercises()) if "all" in wanted else [exercises.get(w).id for w in wanted]
    items.extend(GraderItem.from_parent(session, name=f"grade[{ex_id}]", exercise=ex_id) for ex_id in ids)
