"""reports/README.md, the index of reports/ (grader/maintain/reports_index.py): the committed index is
what the generator writes now, it lists every file of reports/ with a description, and every
`reports/...` path that the docs and code cite names a file or folder that exists."""
from grader.maintain import reports_index as ri

# Report paths written as examples, not citations: (the file, the path).
EXAMPLES = {("tests/test_course_text.py", "reports/x-35a5927.json")}


def _files():
    return [str(p.relative_to(ri.REPORTS)) for p in ri._files()]


def test_the_index_is_what_the_generator_writes():
    held = (ri.REPORTS / ri.INDEX).read_text(encoding="utf-8") if (ri.REPORTS / ri.INDEX).exists() else ""
    assert held == ri.render(), f"reports/README.md is out of date: run `{ri.COMMAND}` and commit it"


def test_the_index_lists_every_file_with_a_description():
    text = ri.render()
    for rel in _files():
        top = rel.split("/")[0]
        link = f"]({top}/)" if top in ri.GROUPED else f"]({rel})"
        assert link in text, f"reports/{rel} is not in the index"
    assert ri.UNDESCRIBED not in text, (
        "a report matches no pattern of grader/maintain/reports_index.py's PATTERNS: add one saying what it shows")


def test_every_cited_report_exists():
    files = _files() + [ri.INDEX]  # (the index itself is no report, but a path that exists)
    # (reports/raw/ and reports/class/ are run outputs that git ignores: cited as where a run writes)
    broken = [f"{src}: {cited}" for cited, sources in ri.citations().items() for src in sorted(sources)
              if not ri.matches(cited, files) and (src, cited) not in EXAMPLES
              and cited.split("/")[1] not in ri.RUN_OUTPUTS]
    assert not broken, "cited report paths that match no file under reports/:\n" + "\n".join(broken)


def test_citations_are_read_as_paths_globs_and_folders():
    files = ["a.md", "cpu/class-84-1gpu-x-cpumon.txt", "learner-loop-c38ffa3-h100.log", "sweep.json", "sweep.log"]
    assert ri.matches("reports/a.md", files) == ["a.md"]
    assert ri.matches("reports/sweep.*", files) == ["sweep.json", "sweep.log"]
    assert ri.matches("reports/learner-loop-<hash>-h100.log", files) == ["learner-loop-c38ffa3-h100.log"]
    assert ri.matches("reports/cpu/", files) == ["cpu/class-84-1gpu-x-cpumon.txt"]
    assert ri.matches("reports/read-ceiling-*.json", files) == []
    found = ri.CITATION.findall("see `reports/a.md`, (reports/cpu/class-84-*-x-*) and reports/b.json.")
    assert [c.rstrip(".") for c in found] == ["reports/a.md", "reports/cpu/class-84-*-x-*", "reports/b.json"]


def test_a_report_says_its_gpu_date_and_commit():
    line = ("2026-12-06 18:36 UTC, commit 2c0f931: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 50 MB L2, "
            "theoretical 3352 GB/s), driver 580.159.04")
    assert ri._from_text(f"# GPU verification report\n\n{line}\n") == {
        "date": "2026-12-06 18:36 UTC", "commit": "2c0f931", "gpu": "NVIDIA H100 80GB HBM3"}
    assert ri._from_text("2026-11-27 12:07 UTC: NVIDIA H200, 32 CPUs, torch 2.11.0")["gpu"] == "NVIDIA H200"
    assert ri._from_json('{"commit": "unknown", "device": "NVIDIA H200"}')["gpu"] == "NVIDIA H200"
    assert ri._describe("class-benchmark-84-lanes4-2gpu-af51a64-one-process")[1:] == (
        "class", "The log of a class benchmark: 84 students, 4 lanes a GPU, 2 GPUs; one process")
