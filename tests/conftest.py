import pytest

from grader import machine
from grader.check.shared_gpu import check_sharing_gpu as check  # noqa: F401  (the tests' check, below)

# The tests grade with `check` from here: a learner's check, except in the GPU self-test, where the
# tests run side by side and each check shares its GPU through the gate the self-test sets
# ($COURSE_GPU_GATE; grader/check/shared_gpu.py).


def gpu(test):
    """A test that runs kernels: skipped without a GPU, selected by `-m gpu` in the GPU verification."""
    return pytest.mark.gpu(pytest.mark.skipif(not machine.has_gpu(), reason="needs a CUDA GPU")(test))
