"""`grader list`: every exercise with every place its facts live, each path one that exists."""
import re

from grader import cli, exercises, paths


def test_list_names_every_exercise_and_only_paths_that_exist(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for ex in exercises.all_exercises().values():
        block = out.split(f"{ex.id} ", 1)[1].split("\nday", 1)[0]
        for label in ("your file", "solution", "spec", "notebook", "wrong code", "right code"):
            assert f"    {label} " in block, (ex.id, label)
    listed = re.findall(r"^    (?:your file|solution|spec|wrong code|right code|benchmark) +(\S+)", out, re.M)
    assert listed and all((paths.ROOT / p).exists() for p in listed), [p for p in listed if not (paths.ROOT / p).exists()]
    assert "benchmarks/day11_ladder/" in out
