import pytest

from grader import toolchain


def gpu(test):
    """A test that runs kernels: skipped without a GPU, selected by `-m gpu` in the GPU verification."""
    return pytest.mark.gpu(pytest.mark.skipif(not toolchain.has_gpu(), reason="needs a CUDA GPU")(test))
