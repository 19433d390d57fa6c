"""The course's grader: build, inspect, check and time CUDA kernels.

    import grader
    grader.check("day02.silu_and_mul")      # a Result: a table in a notebook, text in a terminal
"""
from . import toolchain

toolchain.cuda_home()  # torch reads CUDA_HOME once, when cpp_extension is first imported
