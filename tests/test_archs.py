"""The GPUs learners have (config.ARCHS: Turing to Blackwell): every solution, stub and kernel version
compiles for each architecture that runs it, without a GPU; each solution shows its exercise's required
SASS there and spills nowhere. An exercise on a GPU older than its min_arch is compiled for its min_arch
and says why its runs are skipped. (sm_90 itself: tests/test_kernels.py.)"""
from dataclasses import replace

import pytest

from grader import config, exercises, machine, paths
from grader.jit import Source, compile_cubin
from grader.check import Result, pipeline, sass_checks, static_checks
from grader.spec import arch_key

EXERCISES = [ex for ex in exercises.all_exercises().values() if ex.learner_file != "python"]
OTHER_ARCHS = [a for a in config.ARCHS if a != machine.DEFAULT_ARCH]
STUBS = {ex.stub_path for ex in exercises.all_exercises().values()}
VERSION_FILES = sorted(p for p in paths.KERNELS.glob("day*/*.cu") if p not in STUBS)


def _day_min_arch(day: str) -> str:
    """The oldest architecture a day's kernels run on: its exercises' oldest min_arch."""
    return min((ex.min_arch for ex in exercises.all_exercises().values() if ex.day == day), key=arch_key)


def _runs(ex, arch):
    return not ex.arch_specific and ex.runs_here(arch)


SOLUTION_CASES = [(ex, a) for ex in EXERCISES for a in OTHER_ARCHS if _runs(ex, a)]


def _marked(cases):
    """Each known gap (Exercise.arch_gaps) is expected to fail, strictly: the day it passes, the entry goes."""
    return [pytest.param(ex, a, marks=pytest.mark.xfail(reason=ex.arch_gaps[a], strict=True))
            if a in ex.arch_gaps else (ex, a) for ex, a in cases]


@pytest.mark.parametrize("ex,arch", _marked(SOLUTION_CASES),
                         ids=[f"{e.id}-sm{a.replace('.', '')}" for e, a in SOLUTION_CASES])
def test_solution_compiles_with_its_sass_and_no_spills(ex, arch):
    result = Result(ex.id, str(ex.solution_path), "compile-only")
    src = replace(ex.graded_source(ex.solution_path), arch=arch)
    assert static_checks(ex, src, result), str(result)
    report = sass_checks(ex, src, result)  # the required opcodes, under the register limit
    assert report, str(result)
    assert result.ok and all(op in [i.name for i in result.items] for op in ex.required_sass)
    assert not [k.name for k in report.kernels if k.local_memory], str(result)  # the references spill nowhere


@pytest.mark.parametrize("ex,arch", SOLUTION_CASES, ids=[f"{e.id}-sm{a.replace('.', '')}" for e, a in SOLUTION_CASES])
def test_stub_compiles(ex, arch):
    result = Result(ex.id, str(ex.stub_path), "compile-only")
    src = replace(ex.graded_source(ex.stub_path), arch=arch)
    assert static_checks(ex, src, result), str(result)
    sass_checks(ex, src, result)
    assert not any(i.group == "build" for i in result.failures), str(result)


VERSION_CASES = [(p, a) for p in VERSION_FILES for a in OTHER_ARCHS
                 if arch_key(a) >= arch_key(_day_min_arch(p.parent.name))]


@pytest.mark.parametrize("path,arch", VERSION_CASES,
                         ids=[f"{p.parent.name}/{p.stem}-sm{a.replace('.', '')}" for p, a in VERSION_CASES])
def test_kernel_version_compiles_without_spills(path, arch):
    report = compile_cubin(Source.read(path), arch=arch)
    for k in report.kernels:
        assert k.spill_stores == 0 and k.spill_loads == 0, f"{k.name} spills on sm_{arch.replace('.', '')}"


def test_every_day_runs_from_ampere_and_days_1_to_6_from_turing():
    for ex in exercises.all_exercises().values():
        assert arch_key(ex.min_arch) <= (8, 0) or ex.id == "day10.fp8_quantize" or ex.arch_specific, ex.id
        assert (arch_key(ex.min_arch) <= (7, 5)) == (int(ex.day[3:]) <= 6), ex.id


def test_an_older_gpu_compiles_for_the_exercise_and_skips_its_runs(monkeypatch):
    ex = exercises.get("day09.tensor_core_gemm")
    monkeypatch.setattr(machine, "start_gpu_probe", lambda: None)
    monkeypatch.setattr(machine, "has_gpu", lambda: True)
    monkeypatch.setattr(machine, "arch", lambda: "7.5")  # a T4: no bf16 mma, no cp.async
    prep = pipeline.prepare(ex, ex.solution_path)
    rows = {(i.group, i.name): i for i in prep.result.items}
    assert all(rows[("sass", op)].status == "pass" for op in ex.required_sass), str(prep.result)
    for group in ("correctness", "work", "performance"):
        row = rows[(group, "run on a GPU")]
        assert row.status == "skip" and "compute capability 8.0 or newer" in row.detail and "7.5" in row.detail
    assert prep.module_dir is None


def test_a_notebook_on_an_older_gpu_skips_its_gpu_steps_and_says_why(monkeypatch, capsys):
    from grader import nb

    monkeypatch.setattr(machine, "has_gpu", lambda: True)
    monkeypatch.setattr(machine, "arch", lambda: "7.5")
    monkeypatch.setattr(nb, "_day_min_arch", "8.0")  # what nb.setup("day09") sets
    assert not nb.gpu("timing the versions")
    assert "needs a GPU of compute capability 8.0 or newer; this one is 7.5" in capsys.readouterr().out
    assert not nb.arch_at_least("9.0") and nb.arch_at_least("7.5")
    monkeypatch.setattr(machine, "arch", lambda: "8.9")
    assert nb.gpu("timing the versions") and not nb.arch_at_least("9.0")
    monkeypatch.setattr(nb, "_day_min_arch", None)
    monkeypatch.setattr(machine, "arch", lambda: "7.5")
    assert nb.gpu("timing the versions")  # a day without a minimum (setup() with no day)


def test_a_day_is_built_for_its_oldest_gpu_where_this_one_is_older(monkeypatch):
    from grader.jit import extension

    built = {}
    monkeypatch.setattr(machine, "arch", lambda: "7.5")
    monkeypatch.setattr(extension, "build", lambda files, **kw: built.setdefault("files", files))
    extension.build_day("day09")
    assert built["files"] and all(isinstance(f, Source) and f.arch == "8.0" for f in built["files"])
    built.clear()
    extension.build_day("day03")  # Days 1-6 run on a T4: built for it as they are
    assert built["files"] and not any(isinstance(f, Source) and f.arch for f in built["files"])


def test_the_support_table_is_generated_from_the_specs(monkeypatch):
    from grader.maintain import support_table

    assert support_table.main(["--check"]) == 0, "run python -m grader.maintain.support_table"
    text = support_table.render()
    assert "| `day10.fp8_quantize` | compiled for sm_89, not run | compiled for sm_89, not run |" in text
    assert "(known gap)" not in text and "## Known gaps\n\nNone." in text
    # a gap, where an exercise has one, shows in its cell and in the list below the table
    monkeypatch.setattr(exercises.get("day12.flash_attention"), "arch_gaps", {"12.0": "spills 16 bytes"})
    text = support_table.render()
    assert "runs, graded (known gap)" in text and "`day12.flash_attention` on sm_120: spills 16 bytes" in text


def test_doctor_says_what_a_gpu_runs():
    from grader.doctor import runs_here

    assert runs_here("9.0") == "every exercise and notebook of the course"
    assert "day10.fp8_quantize" in runs_here("8.0") and "day10.wgmma_gemm" in runs_here("8.0")
    assert "day09.tensor_core_gemm" in runs_here("7.5") and "day06.rmsnorm" not in runs_here("7.5")
