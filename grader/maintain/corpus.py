"""The grader's corpus of known-wrong and known-right submissions, and the verdict each must get.

A mutant is a reference solution with one deliberate defect, kept as small edits to
the current solution rather than as a copy of it: `tests/mutants/<exercise id>.toml`
has one table per mutant,

    [missing_tail_guard]
    what = "missing tail guard: the vector loop has no scalar tail, so ..."
    group = "correctness"      # the check that must fail (GROUPS)
    reason = "never written"   # a substring of that check's name or detail
    needs_gpu = true           # false when the source, SASS or build checks find it
    sanitizer = "racecheck"    # races only: the compute-sanitizer tool that must see it

    [[missing_tail_guard.edit]]
    old = '''
    ...lines of the solution, enough of them to occur exactly once...
    '''
    new = '''
    ...what they become...
    '''

The edits apply in order, each replacing the single occurrence of its `old`; an
`old` found nowhere or more than once raises MutantError naming the mutant, so a
changed solution fails loudly instead of silently testing something else. The
materialized source starts with `// MUTANT <what>`. tests/test_mutants.py grades
every mutant; the self-test (self_test.py) tallies them on a GPU.

Hostile submissions (`tests/hostile/<exercise id>.toml`) are kept the same way: each table
adds one attack to the solution, with `expect` (the words the refusal must name) in place of
group, reason and needs_gpu; `hostile_submissions()` loads them, headed `// HOSTILE <what>`.

Correct submissions (`tests/correct/<exercise id>/<name>.cu`, `.cu.j2` or `.py`) are whole files, each
headed `// CORRECT <what is different from the reference>` (`# CORRECT` in Python): right code written
as learners write it
(plain __device__ helpers, a scalar kernel beside the vectorized one, `half` for `__half`, quoted
toolkit headers, printing, a __constant__ table...). Every check must pass them: compile-only
everywhere, and on a GPU the whole check, speed included (tests/test_correct.py).
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .. import exercises, paths, pyenv
from ..config import GROUPS

MUTANTS_DIR = paths.ROOT / "tests" / "mutants"
HOSTILE_DIR = paths.ROOT / "tests" / "hostile"
CORRECT_DIR = paths.ROOT / "tests" / "correct"
CORRECT_HEADING = "// CORRECT "
PY_CORRECT_HEADING = "# CORRECT "  # the same heading in a Python module (Day 14's decoder)
_REQUIRED = {"what": str, "group": str, "reason": str, "needs_gpu": bool, "edit": list}
_OPTIONAL = {"sanitizer": str, "undetected": str}
_REQUIRED_HOSTILE = {"what": str, "expect": list, "edit": list}


class MutantError(ValueError):
    """A mutant file that does not parse, or an edit that no longer applies to its solution."""


@dataclass
class Mutant:
    key: str                     # "<exercise>/<name>"
    exercise: str                # "day02.silu_and_mul"
    name: str                    # "missing_tail_guard"
    what: str                    # what is wrong, one line
    group: str                   # the check that must fail: one of GROUPS
    reason: str                  # a substring of that check's name or detail
    needs_gpu: bool
    sanitizer: str | None = None
    # A defect no check or tool sees on our GPU (e.g. a race whose window the copies' latency always
    # covers, which compute-sanitizer does not report): why. The self-test lists it as a blind spot,
    # and fails if it is ever caught (then this goes).
    undetected: str | None = None
    edits: list[tuple[str, str]] = field(default_factory=list)  # (old, new), applied in order
    expect: list[str] = field(default_factory=list)  # hostile ones: words the refusal must name
    heading: str = "MUTANT"                            # or "HOSTILE"

    @property
    def toml_path(self) -> Path:
        return (HOSTILE_DIR if self.heading == "HOSTILE" else MUTANTS_DIR) / f"{self.exercise}.toml"

    def source(self) -> str:
        """The current solution with the edits applied, headed by `// MUTANT <what>` (`# MUTANT` in a .py)."""
        solution = exercises.get(self.exercise).solution_path
        text = solution.read_text()
        for n, (old, new) in enumerate(self.edits, 1):
            found = _occurrences(text, old)
            if found != 1:
                first = next((line.strip() for line in old.splitlines() if line.strip()), repr(old))
                raise MutantError(
                    f"{self.exercise} mutant {self.name}: edit {n}'s `old` (first line: {first!r}) is "
                    f"{'not found' if found == 0 else 'found more than once'} in "
                    f"{solution.relative_to(paths.ROOT)}"
                    f"{' (after the edits before it)' if n > 1 else ''}: if the solution changed, fix this edit in "
                    f"{self.toml_path.relative_to(paths.ROOT)}")
            text = text.replace(old, new, 1)
        comment = "#" if solution.suffix == ".py" else "//"  # a Python module's mutants open with a # line
        return f"{comment} {self.heading} {self.what}\n{text}"

    def write(self, directory: str | Path) -> Path:
        """Write the source to `<directory>/<exercise>/<name>.cu` (`.cu.j2` for a template exercise,
        as the learner's file) and return that path."""
        from ..spec import LEARNER_FILES

        suffix = LEARNER_FILES[exercises.get(self.exercise).learner_file]
        path = Path(directory) / self.exercise / f"{self.name}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = self.source()
        if not path.exists() or path.read_text() != text:  # atomically: parallel tests read it
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(text)
            os.replace(tmp, path)
        return path


def _occurrences(text: str, old: str) -> int:
    """0, 1 or 2 (two or more, overlapping ones included)."""
    first = text.find(old)
    if first < 0 or not old:
        return 0 if first < 0 else 2
    return 1 if text.find(old, first + 1) < 0 else 2


def _load(path: Path, hostile: bool = False) -> list[Mutant]:
    exercise = path.stem
    where_file = path.relative_to(paths.ROOT)
    required, optional = (_REQUIRED_HOSTILE, {}) if hostile else (_REQUIRED, _OPTIONAL)
    try:
        tables = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise MutantError(f"{where_file}: {e}") from e
    mutants = []
    for name, t in tables.items():
        where = f"{where_file}, {'submission' if hostile else 'mutant'} {name}"
        if not isinstance(t, dict):
            raise MutantError(f"{where}: an entry is a table ([{name}]), not a value")
        unknown = set(t) - set(required) - set(optional)
        if unknown:
            raise MutantError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        for key, kind in required.items():
            if not isinstance(t.get(key), kind):
                raise MutantError(f"{where}: `{key}` is missing or not a {kind.__name__}")
        for key in optional:
            if key in t and not isinstance(t[key], str):
                raise MutantError(f"{where}: `{key}` is not a string")
        if not hostile and t["group"] not in GROUPS:
            raise MutantError(f"{where}: group {t['group']!r} is not one of {', '.join(GROUPS)}")
        if hostile and not (t["expect"] and all(isinstance(w, str) and w for w in t["expect"])):
            raise MutantError(f"{where}: `expect` needs one or more non-empty strings")
        edits = []
        for n, e in enumerate(t["edit"], 1):
            if not (isinstance(e, dict) and set(e) == {"old", "new"} and isinstance(e["old"], str)
                    and isinstance(e["new"], str) and e["old"]):
                raise MutantError(f"{where}: edit {n} needs a non-empty `old` and a `new` string, nothing else")
            edits.append((e["old"], e["new"]))
        if not edits:
            raise MutantError(f"{where}: no [[{name}.edit]]")
        if hostile:
            mutants.append(Mutant(key=f"{exercise}/{name}", exercise=exercise, name=name, what=t["what"],
                                  group="source", reason=t["expect"][0], needs_gpu=False, edits=edits,
                                  expect=list(t["expect"]), heading="HOSTILE"))
        else:
            mutants.append(Mutant(key=f"{exercise}/{name}", exercise=exercise, name=name, what=t["what"],
                                  group=t["group"], reason=t["reason"], needs_gpu=t["needs_gpu"],
                                  sanitizer=t.get("sanitizer"), undetected=t.get("undetected"), edits=edits))
    return mutants


def all_mutants() -> dict[str, Mutant]:
    """Every mutant of every tests/mutants/*.toml, sorted by key."""
    found = [m for path in sorted(MUTANTS_DIR.glob("*.toml")) for m in _load(path)]
    return {m.key: m for m in sorted(found, key=lambda m: m.key)}


def mutants_for(exercise_id: str) -> list[Mutant]:
    """The mutants of one exercise, sorted by name (none when it has no TOML file)."""
    path = MUTANTS_DIR / f"{exercise_id}.toml"
    return sorted(_load(path), key=lambda m: m.name) if path.exists() else []


def hostile_submissions() -> dict[str, Mutant]:
    """Every hostile submission of every tests/hostile/*.toml, by name (names are unique)."""
    found = [m for path in sorted(HOSTILE_DIR.glob("*.toml")) for m in _load(path, hostile=True)]
    names = [m.name for m in found]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise MutantError(f"tests/hostile: the name(s) {', '.join(dup)} are used more than once")
    return {m.name: m for m in sorted(found, key=lambda m: m.name)}


@dataclass
class CorrectSubmission:
    key: str        # "<exercise>/<name>"
    exercise: str   # "day02.silu_and_mul"
    path: Path
    what: str       # what it does differently from the reference, from its first line

    def source(self) -> str:
        return self.path.read_text()


def correct_submissions() -> dict[str, CorrectSubmission]:
    """Every file of tests/correct/<exercise id>/, by key, sorted."""
    found = {}
    for path in sorted(CORRECT_DIR.glob("*/*")):
        if path.is_file():
            first = path.read_text().split("\n", 1)[0]
            heading = PY_CORRECT_HEADING if path.suffix == ".py" else CORRECT_HEADING
            what = first[len(heading):].strip() if first.startswith(heading) else ""
            key = f"{path.parent.name}/{path.stem}"
            found[key] = CorrectSubmission(key, path.parent.name, path, what)
    return found


def written_dir() -> Path:
    """Where the tests and `self-test` write mutants to grade: one stable folder in
    the build cache, so that a mutant built once (the cache key includes the file's path) is
    found again by the next run."""
    return pyenv.cache_dir() / "mutants"
