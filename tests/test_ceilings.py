"""The speeds of light memory-bound exercises are graded against, and what a learner who falls short
is told. No GPU needed: the read-ceiling kernel is assembled by ptxas, the specs are read."""
import shutil
import subprocess

import pytest

from grader import exercises
from grader.check.ptx import READ_UNROLL, read_ptx
from grader.check.verdict import verdict
from grader.spec import COPY, READ

# Exercises whose kernel reads far more than it writes: judged against the read ceiling, never a copy.
READ_BOUND = {"day07.skinny_gemm", "day11.batch_decode"}


@pytest.mark.parametrize("unroll", sorted({1, 2, READ_UNROLL, 8}))
def test_read_ceiling_kernel_assembles(tmp_path, unroll):
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not shutil.which(ptxas):
        pytest.skip("ptxas (the CUDA toolkit) is not installed")
    src = tmp_path / "read.ptx"
    src.write_text(read_ptx(unroll))
    out = subprocess.run([ptxas, "-arch=sm_90", str(src), "-o", str(tmp_path / "read.cubin")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # every load of the unrolled body is there (16-byte streaming loads), and the tail's one
    assert read_ptx(unroll).count("ld.global.cs.v4.u32") == unroll + 1


def test_memory_bound_exercises_name_their_traffic():
    for ex in exercises.all_exercises().values():
        t = ex.target
        if t.kind != "memory":
            continue
        want = READ if ex.id in READ_BOUND else COPY
        assert t.baseline is want, f"{ex.id} is graded against {t.baseline.name}, not {want.name}"


def test_falling_short_shows_the_targets_note():
    ex = exercises.get("day10.gemm")
    assert ex.target_note
    status, detail = verdict(ex, ex.target.ratio * 0.9, [], "x")
    assert status == "fail" and detail.endswith(ex.target_note)
    status, detail = verdict(ex, ex.target.ratio * 1.01, [], "x")
    assert (status, detail) == ("pass", "x")
    status, detail = verdict(ex, ex.target.ratio * 1.01, ["short"], "x")
    assert status == "fail" and ex.target_note in detail
