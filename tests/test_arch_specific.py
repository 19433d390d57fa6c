"""An exercise written for an arch-specific target (day10.wgmma_gemm: sm_90a) is compiled for it whatever
its file is called (a class's submissions come under other names), its SASS is checked on any machine,
and on a GPU of another compute capability its runs are skipped with the reason, not failed."""
import shutil
from pathlib import Path

from grader import exercises, machine
from grader.jit import Source
from grader.jit.source import target_arch
from grader.check import pipeline

WGMMA = exercises.get("day10.wgmma_gemm")


def test_the_target_comes_from_the_exercise_or_from_the_file_name():
    assert target_arch([Source("student.cu", "", arch="9.0a")], "8.9") == "9.0a"
    assert target_arch([Path("kernels/day10/gemm_v5_wgmma_tma_sm90a.cu")], "9.0") == "9.0a"
    assert target_arch([Path("kernels/day10/gemm_v5_wgmma_tma_sm90a.cu")], "8.0") == "8.0"
    assert target_arch([Source("kernels/day10/gemm.cu", "")], "9.0") == "9.0"
    assert WGMMA.graded_source(WGMMA.stub_path).arch == "9.0a"
    assert exercises.get("day10.gemm").graded_source(exercises.get("day10.gemm").stub_path).arch is None


def test_which_gpus_run_it():
    assert WGMMA.runs_here("9.0") and not WGMMA.runs_here("8.9") and not WGMMA.runs_here("10.0")
    assert all(exercises.get(i).runs_here("8.0") for i in ("day10.gemm", "day02.silu_and_mul"))


def test_a_renamed_submission_compiles_for_sm90a_and_skips_its_runs_on_another_gpu(tmp_path, monkeypatch):
    submission = tmp_path / "student_07.cu"
    shutil.copyfile(WGMMA.solution_path, submission)
    monkeypatch.setattr(machine, "start_gpu_probe", lambda: None)
    monkeypatch.setattr(machine, "has_gpu", lambda: True)
    monkeypatch.setattr(machine, "arch", lambda: "8.9")  # an RTX 4090 or an L4
    prep = pipeline.prepare(WGMMA, submission, display="class/student_07.cu")
    rows = {(i.group, i.name): i for i in prep.result.items}
    assert all(rows[("sass", op)].status == "pass" for op in WGMMA.required_sass), str(prep.result)
    for group in ("correctness", "work", "performance"):
        row = rows[(group, "run on a GPU")]
        assert row.status == "skip" and "compute capability 9.0" in row.detail and "8.9" in row.detail
    assert prep.module_dir is None  # nothing was built to run
