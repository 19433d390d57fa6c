import pytest

from grader import release, stubs
from grader.stubs import ReleaseError, make_stub

SOLUTION = """int f() {
  int x = 1;
  // BEGIN SOLUTION
  // STUB: // TODO: return the answer
  // STUB: return 0;
  return 42;
  // END SOLUTION
}
"""


def test_stub_keeps_stub_lines_and_drops_the_solution():
    stub = make_stub(SOLUTION)
    assert "42" not in stub and "BEGIN SOLUTION" not in stub
    assert "  // TODO: return the answer\n  return 0;\n}" in stub


@pytest.mark.parametrize("text, message", [
    ("a\n", "no BEGIN SOLUTION"),
    ("// BEGIN SOLUTION\nx\n", "never closed"),
    ("// END SOLUTION\n", "without BEGIN"),
    ("// BEGIN SOLUTION\n// BEGIN SOLUTION\n// END SOLUTION\n", "nested"),
])
def test_malformed_markers_are_reported(text, message):
    with pytest.raises(ReleaseError, match=message):
        make_stub(text, "s.cu")


def test_committed_stubs_match_their_solutions():
    """`grader release --check`: the stubs in kernels/ are exactly what the solutions generate."""
    lines = []
    assert release.release(check=True, echo=lines.append) == 0, "\n".join(lines)
    assert lines and all(line.startswith("ok") for line in lines)


def test_release_never_overwrites_a_learners_edits(tmp_path, monkeypatch):
    from grader import paths

    (tmp_path / "solutions" / "day09").mkdir(parents=True)
    (tmp_path / "solutions" / "day09" / "f.cu").write_text(SOLUTION)
    monkeypatch.setattr(paths, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(paths, "KERNELS", tmp_path / "kernels")
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    assert release.release(echo=lambda s: None) == 0
    stub = tmp_path / "kernels" / "day09" / "f.cu"
    assert release.release(check=True, echo=lambda s: None) == 0
    stub.write_text(stub.read_text() + "// my work\n")
    out = []
    assert release.release(echo=out.append) == 1 and "KEPT" in out[0]
    assert stub.read_text().endswith("// my work\n")
    assert release.release(force=True, echo=lambda s: None) == 0
    assert (tmp_path / "kernels" / "day09" / "f.cu.bak").read_text().endswith("// my work\n")


def test_target_token_becomes_the_specs_target(tmp_path, monkeypatch):
    from grader import exercises, paths

    (tmp_path / "solutions" / "day02").mkdir(parents=True)
    (tmp_path / "solutions" / "day02" / "silu_and_mul.cu").write_text(f"// Target: {release.TARGET_TOKEN}.\n{SOLUTION}")
    (tmp_path / "solutions" / "day02" / "other.cu").write_text(f"// {release.TARGET_TOKEN}\n{SOLUTION}")
    monkeypatch.setattr(paths, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(paths, "KERNELS", tmp_path / "kernels")
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    with pytest.raises(ReleaseError, match="no exercise's solution"):
        release.plan()
    (tmp_path / "solutions" / "day02" / "other.cu").unlink()
    assert release.release(echo=lambda s: None) == 0
    stub = (tmp_path / "kernels" / "day02" / "silu_and_mul.cu").read_text()
    target = exercises.get("day02.silu_and_mul").target.describe()
    assert f"// Target: {target}.\n" in stub and release.TARGET_TOKEN not in stub
    assert release.release(check=True, echo=lambda s: None) == 0  # the stub's hash covers the rendered target


def test_target_text_names_the_baselines_that_must_be_reached_too():
    from grader.spec import Baseline, latency

    t = latency(Baseline("torch", "eager"), 2.0, lambda p: 0,
                also=(Baseline("compiled", "compiled", required=1.0), Baseline("other", "reported only")))
    assert release.target_text(t) == ">= 2x faster than eager; and >= 1x faster than compiled"


def test_no_stub_keeps_the_token():
    from grader import paths

    stubs = [p for p in paths.KERNELS.glob("day*/*") if p.is_file() and release.TARGET_TOKEN in p.read_text()]
    assert not stubs, stubs


def test_an_untouched_stub_is_recognised_and_an_edited_one_is_not():
    from grader import exercises
    from conftest import check
    from grader.stubs import untouched_stub

    for ex in exercises.all_exercises().values():
        text = ex.stub_path.read_text()
        assert untouched_stub(text, ex.stub_path), ex.id
        assert not untouched_stub(text + "\n// my code\n", ex.stub_path), ex.id
        assert not untouched_stub(ex.solution_path.read_text(), ex.solution_path), ex.id
    result = check("day01.scale_add", perf=False, quiet=True)
    assert result.not_started and result.headline.startswith("NOT STARTED") and not result.ok


def test_lines_to_write_counts_the_reference_code_in_solution_blocks_only():
    text = ("int given;\n// BEGIN SOLUTION\n// STUB: // TODO: write it\n  // a comment\n  int a = 1;\n\n"
            "  int b = 2;\n// END SOLUTION\nint also_given;\n")
    assert stubs.lines_to_write(text, "x.cu") == 2
    py = "x = 1\n# BEGIN SOLUTION\n# STUB: # TODO\n# why\ny = 2\n# END SOLUTION\n"
    assert stubs.lines_to_write(py, "x.py") == 1


def test_every_exercise_asks_for_at_most_80_lines():
    # A day's exercise asks for its lesson's idea; the bookkeeping around it is given in the file.
    from grader import exercises

    too_long = {i: ex.lines_to_write for i, ex in exercises.all_exercises().items() if ex.lines_to_write > 80}
    assert not too_long, f"exercises asking for more than 80 lines: {too_long}"
