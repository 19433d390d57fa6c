"""The README's table of days is rendered from the exercise specs (grader/maintain/days_table.py):
the committed block must be what the specs render now."""
from grader import exercises, paths
from grader.maintain import days_table


def test_the_readme_table_is_rendered_from_the_specs():
    held = days_table.current((paths.ROOT / "README.md").read_text(encoding="utf-8"))
    assert held is not None, f"README.md has no block between {days_table.BEGIN!r} and {days_table.END!r}"
    assert held == days_table.render(), (f"README.md's table of days differs from the specs: run "
                                         f"`{days_table.COMMAND}` and commit README.md")


def test_every_exercise_and_its_target_is_in_the_table():
    table = days_table.render()
    for ex in exercises.all_exercises().values():
        assert (f"`{ex.id}`: {ex.title}. About {ex.lines_to_write} lines to write. Target: {ex.target.describe()}"
                in table)


def test_days_table_rewrites_only_its_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\n    make lab\n\n{days_table.BEGIN}\n| stale |\n{days_table.END}\n\nthe rest\n")
    out = []
    assert days_table.days_table(check=True, readme=readme, echo=out.append) == 1 and "DRIFT" in out[0]
    assert days_table.COMMAND in out[0]
    assert days_table.days_table(readme=readme, echo=out.append) == 0
    text = readme.read_text()
    assert text.startswith("# title\n\n    make lab\n\n") and text.endswith("\n\nthe rest\n")
    assert days_table.current(text) == days_table.render()
    assert days_table.days_table(check=True, readme=readme, echo=out.append) == 0
