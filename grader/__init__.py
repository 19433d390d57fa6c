"""The course's grader: build, inspect, check and time CUDA kernels.

    import grader
    grader.check("day02.silu_and_mul")      # a Result: a table in a notebook, text in a terminal
"""
from . import machine, paths, pyenv, toolkit

pyenv.quiet_torch_notices()  # torch's "No CUDA runtime is found" on machines without a GPU
toolkit.cuda_home()  # torch reads CUDA_HOME once, when cpp_extension is first imported

from .check import check  # noqa: E402
from .exercises import all_exercises  # noqa: E402

__all__ = ["check", "all_exercises", "paths", "machine", "toolkit", "pyenv"]
