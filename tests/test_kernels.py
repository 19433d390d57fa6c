"""Every kernel file compiles for sm_90 without a GPU; solutions pass their static and SASS
checks; stubs compile (and, on a GPU, fail correctness: see the GPU verification)."""
import pytest

from grader import exercises, paths
from grader.jit import compile_cubin, symbols
from grader.check import sass_checks, static_checks
from grader.check import Result

EXERCISES = list(exercises.all_exercises().values())
# The .cu (and template) exercises: a Python-module exercise's checks are its own (tests/test_day14_decoder.py)
KERNEL_EXERCISES = [ex for ex in EXERCISES if ex.learner_file != "python"]
VERSION_FILES = sorted(p for p in paths.KERNELS.glob("day*/*.cu")
                       if not any(p == ex.stub_path for ex in EXERCISES))


@pytest.mark.parametrize("ex", KERNEL_EXERCISES, ids=lambda e: e.id)
def test_solution_passes_static_and_sass_checks(ex):
    result = Result(ex.id, str(ex.solution_path), "compile-only")
    src = ex.graded_source(ex.solution_path)  # a template exercise's file: its rendering
    assert static_checks(ex, src, result), str(result)
    report = sass_checks(ex, src, result)
    assert report, str(result)
    assert result.ok and all(op in [i.name for i in result.items] for op in ex.required_sass)
    assert not [k.name for k in report.kernels if k.local_memory], str(result)  # the references spill nowhere


@pytest.mark.parametrize("ex", KERNEL_EXERCISES, ids=lambda e: e.id)
def test_stub_compiles_and_keeps_the_entry_points(ex):
    result = Result(ex.id, str(ex.stub_path), "compile-only")
    src = ex.graded_source(ex.stub_path)
    assert static_checks(ex, src, result), str(result)
    sass_checks(ex, src, result)
    assert not any(i.group == "build" for i in result.failures), str(result)
    if ex.required_sass:  # the technique is the exercise: an untouched stub cannot show it
        assert not result.ok


# Course kernel versions whose host code a submission could not have, and why; each must be
# refused for exactly these reasons (so an exemption hides nothing else).
LINK_EXEMPT = {
    # cub::DeviceSegmentedSort's host dispatch (CCCL): it finds the driver with dlopen/dlsym, reads
    # CUB_* environment variables, copies with cudaMemcpyAsync and keeps global objects. The day's
    # notebook shows a device-wide sort as the slow way; the exercise (a sampler with no sort) needs none.
    "kernels/day08/top_p_v1_cub_sort.cu": {"dlopen", "dlsym", "getenv", "cudaMemcpyAsync"},
}


@pytest.mark.parametrize("path", VERSION_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_kernel_version_compiles_without_spills_and_passes_the_link_checks(path):
    """No spills; and the link checks' allow-list, built from what the course's own host code needs,
    passes every version (but the exempt ones above, which a submission would be refused for). One
    nvcc call makes the SASS report and the host object."""
    report = compile_cubin(path, host_object=True)
    if "__global__" in path.read_text():
        assert report.kernels, f"{path} defines no kernel"
    for k in report.kernels:
        assert k.spill_stores == 0 and k.spill_loads == 0, f"{k.name} spills"
    found = symbols.inspect(report.host_object)
    exempt = LINK_EXEMPT.get(str(path.relative_to(paths.ROOT)))
    if exempt:
        assert not found.ok and exempt <= {x.what for x in found.calls}, symbols.summary(found.calls)
    else:
        assert found.ok, symbols.summary(found.calls + found.load_time + found.syscalls)


def test_link_exemptions_name_existing_versions():
    assert all((paths.ROOT / f).exists() for f in LINK_EXEMPT)


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.id)
def test_spec_is_complete(ex):
    """Tails, a case past L2 that is timed, a tolerance with a reason, a notebook cell."""
    assert ex.perf_cases, "a performance case is needed"
    for c in ex.perf_cases:
        if ex.target.kind == "compute":  # timed by its flops: enough work to fill the GPU many times over
            assert ex.target.flops(c.params) >= 1e11, f"{c.label} is too small to time as compute-bound"
        else:
            assert ex.case_bytes(c.params) >= ex.min_timed_bytes, f"{c.label} is not well past the 60 MB L2"
    sizes = {v for c in ex.cases for k, v in c.params.items() if isinstance(v, int) and k != "offset"}
    assert {1, 2, 3, 127, 128, 129} <= sizes
    if any(op.endswith(".128") for op in ex.required_sass):  # vector loads must cope with any pointer
        assert any(c.params.get("offset") for c in ex.cases), "a misaligned base pointer case"
    assert all(ex.tolerance(c.params).why for c in ex.cases)
    nb = paths.ROOT / ex.notebook
    assert nb.exists() and f"## Exercise: {ex.name}" in nb.read_text()
