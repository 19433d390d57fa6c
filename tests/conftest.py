import pytest

from grader import toolchain

gpu = pytest.mark.skipif(not toolchain.has_gpu(), reason="needs a CUDA GPU (runs in the GPU verification)")
