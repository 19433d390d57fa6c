"""pytest plugin: `pytest --grader day02.silu_and_mul` (or `--grader all`) grades exercises
as test items, with the same options as `python -m grader check` under the --grader- prefix.

Given --grader and no test paths, pytest runs only the grading items, not the course's own test
suite (the `testpaths` of pyproject.toml); with paths (`pytest tests/test_check.py --grader ...`)
it runs both."""
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
        if self.result.verdict == "not graded":  # no GPU: the static checks passed, nothing more is known
            pytest.skip(f"{self.exercise}: {self.result.headline}")

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, GradeFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"grade {self.exercise}"


class GradeFailed(Exception):
    pass


def _grading_only(config) -> bool:
    """--grader without explicit test paths: the paths pytest would collect are its defaults."""
    if not config.getoption("grader"):
        return False
    source = getattr(config, "args_source", None)
    if source is not None:
        return source != pytest.Config.ArgsSource.ARGS
    return not any(not a.startswith("-") for a in config.invocation_params.args)


def pytest_ignore_collect(collection_path, config):
    if _grading_only(config):
        return True
    return None


def pytest_collection_modifyitems(session, config, items):
    wanted = config.getoption("grader")
    if not wanted:
        return
    from . import exercises

    ids = list(exercises.all_exercises()) if "all" in wanted else [exercises.get(w).id for w in wanted]
    items.extend(GraderItem.from_parent(session, name=f"grade[{ex_id}]", exercise=ex_id) for ex_id in ids)
