"""FlashInfer beside the course (grader/beside.py): which exercises it covers, what a learner sees
without FlashInfer or a GPU, and the plot from measured or reported numbers. Timing FlashInfer
itself needs a GPU and the optional extra: the GPU verification runs the notebooks' cells."""
import json
import sys

import pytest

from grader import beside, exercises, machine, paths


def _notebook_cells():
    """(notebook, exercise id) for every "FlashInfer beside yours" code cell of the notebooks."""
    found = []
    for path in sorted(paths.NOTEBOOKS.glob("day*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code" and "beside.measure(" in src:
                found.append((path.name, src.split('beside.measure("')[1].split('"')[0]))
    return found


def test_every_adapter_names_a_timed_exercise_and_its_notebook_times_it():
    cells = _notebook_cells()
    for eid in beside.ADAPTERS:
        ex = exercises.get(eid)
        assert ex.perf_cases, f"{eid} has no timed case to run FlashInfer on"
        assert any(e == eid and nb.startswith(ex.day) for nb, e in cells), f"no notebook cell times {eid}"
    for nb, eid in cells:
        assert eid in beside.ADAPTERS, f"{nb} times {eid}, which has no FlashInfer adapter"


def test_without_a_gpu_everything_says_why_and_returns_none(monkeypatch, capsys):
    monkeypatch.setattr(machine, "has_gpu", lambda: False)
    assert beside.load("FlashInfer's first call") is None
    assert beside.measure("day06.rmsnorm", {}) is None
    out = capsys.readouterr().out
    assert out.count("Skipped:") == 2 and "needs a CUDA GPU" in out


def test_without_flashinfer_it_says_how_to_install_it(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(machine, "has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer -> ImportError
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)
    assert beside.load() is None
    out = capsys.readouterr().out
    assert "not installed" in out and "make flashinfer" in out
    import os

    assert os.environ["FLASHINFER_CUDA_ARCH_LIST"] == "9.0"  # its JIT builds for this GPU only


def test_plot_draws_measured_bars_and_skips_with_nothing_to_show(monkeypatch, capsys):
    import matplotlib

    matplotlib.use("Agg")
    from grader import nb

    monkeypatch.setattr(nb, "reported", lambda label, what="": None)
    assert beside.plot("day06.rmsnorm") is None
    assert "Skipped:" in capsys.readouterr().out
    measured = {"fp16 rows=32768 hidden=4096 (past L2)": {
        "solution": {"copy_ratio": 0.93}, "yours": {"copy_ratio": 0.5}, "flashinfer": {"copy_ratio": 0.7},
        "copy": {"copy_ratio": 1.0}}}
    ax = beside.plot("day06.rmsnorm", measured)
    heights = sorted(round(p.get_height(), 2) for p in ax.patches)
    assert heights == [0.5, 0.7, 0.93]  # the copy is the unit, not a bar
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [n for n in legend if not n.startswith("target")] == ["solution", "yours", "flashinfer"]


def test_plot_falls_back_to_the_committed_report(monkeypatch, capsys):
    import matplotlib

    matplotlib.use("Agg")
    from grader import nb

    ex = exercises.get("day11.batch_decode")
    first = ex.perf_cases[0].label
    # (the report machine's "yours" was its exercise file, not this learner's kernel: never drawn)
    rows = {beside.label(ex.id, first): {"solution": {"read_ratio": 0.6}, "flashinfer": {"read_ratio": 0.8},
                                         "yours": {"read_ratio": 3.0}, "sdpa": {"copy_ratio": 0.9}}}
    monkeypatch.setattr(nb, "reported", lambda label, what="": rows.get(label))
    monkeypatch.setattr(nb, "gpu_report", lambda: {"environment": {"gpu": "NVIDIA H200", "date": "2026-11-27 10:00"}})
    ax = beside.plot(ex.id)
    assert sorted(round(p.get_height(), 2) for p in ax.patches) == [0.6, 0.8]
    assert "yours" not in [t.get_text() for t in ax.get_legend().get_texts()]
    assert "NVIDIA H200 on 2026-11-27" in capsys.readouterr().out


@pytest.mark.parametrize("eid", sorted(beside.ADAPTERS))
def test_adapters_call_functions_flashinfer_has(eid):
    fi = pytest.importorskip("flashinfer")  # the optional extra, where it is installed
    obj = fi
    for part in beside.ADAPTERS[eid].function.split(".")[1:]:
        obj = getattr(obj, part)
    assert callable(obj)


def test_your_kernel_runs_beside_flashinfer_only_after_its_check_passed(monkeypatch, capsys):
    import grader.jit
    from grader.check.result import Result

    built = []

    class Fake:
        def __init__(self, files, name, quiet):
            built.append(files[0].name)
            self.module = name

    monkeypatch.setattr(grader.jit, "build", Fake)
    assert list(beside.modules("day02.silu_and_mul")) == ["solution"]
    assert "left out (no check of it was given)" in capsys.readouterr().out
    failed = Result("day02.silu_and_mul", "kernels/day02/silu_and_mul.cu", "gpu")
    failed.add("correctness", "fp16 tokens=1 d=8", "pass")
    failed.add("correctness", "fp16 tokens=7 d=4100", "fail", "differ")
    assert list(beside.modules("day02.silu_and_mul", failed)) == ["solution"]
    assert "did not pass all its correctness cases" in capsys.readouterr().out
    compile_only = Result("day02.silu_and_mul", "kernels/day02/silu_and_mul.cu", "compile-only")
    compile_only.add("correctness", "run on a GPU", "skip")
    assert list(beside.modules("day02.silu_and_mul", compile_only)) == ["solution"]
    passed = Result("day02.silu_and_mul", "kernels/day02/silu_and_mul.cu", "gpu")
    passed.add("correctness", "fp16 tokens=1 d=8", "pass")
    assert list(beside.modules("day02.silu_and_mul", passed)) == ["solution", "yours"]
    assert built[-2:] == ["silu_and_mul.cu", "silu_and_mul.cu"]  # solutions/day02 and kernels/day02
    # What the check judged is what runs as yours: a file elsewhere, by its absolute path ...
    elsewhere = Result("day02.silu_and_mul", "/tmp/alice/silu_and_mul_v2.cu", "gpu")
    elsewhere.add("correctness", "fp16 tokens=1 d=8", "pass")
    assert list(beside.modules("day02.silu_and_mul", elsewhere)) == ["solution", "yours"]
    assert built[-1] == "silu_and_mul_v2.cu"
    # ... and never the untouched exercise file when the check judged the solution (the GPU
    # verification's notebook run, COURSE_USE_SOLUTIONS=1): it was timed as "yours" there.
    solution = Result("day02.silu_and_mul", "solutions/day02/silu_and_mul.cu", "gpu")
    solution.add("correctness", "fp16 tokens=1 d=8", "pass")
    capsys.readouterr()
    assert list(beside.modules("day02.silu_and_mul", solution)) == ["solution"]
    assert "judged the reference solution" in capsys.readouterr().out


def test_plot_skips_a_report_measured_against_another_baseline(monkeypatch, capsys):
    import matplotlib

    matplotlib.use("Agg")
    from grader import nb

    ex = exercises.get("day11.batch_decode")  # graded against the read ceiling
    rows = {beside.label(ex.id, c.label): {"solution": {"copy_ratio": 0.7}, "flashinfer": {"copy_ratio": 0.8}}
            for c in ex.perf_cases}
    monkeypatch.setattr(nb, "reported", lambda label, what="": rows.get(label))
    assert beside.plot(ex.id) is None
    assert "against its streaming read" in capsys.readouterr().out
