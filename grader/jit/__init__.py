"""Compiling kernels just in time (the layer FlashInfer calls jit/): reading sources, the torch
extension (load_inline, hash cache, precompiled headers), compile-only SASS (nvcc, cuobjdump,
cu++filt), first errors with file and line, and the COURSE_EXPORT entry points with their
generated binding."""
from .errors import BuildError, parse_first_error
from .exports import ExportError, generate_binding, global_kernel_names, parse_exports
from .extension import (WARMUP_SOURCE, Built, build, build_checked, build_day, day_files, load_built, module_name,
                        prebuild_binding, precompiled_header)
from .sass import CompileReport, KernelInfo, compile_cubin
from ..paths import display_path
from .source import HALF_OPERATORS_BACK, NVCC_FLAGS, TORCH_NVCC_FLAGS, Source, content_hash

__all__ = ["HALF_OPERATORS_BACK", "WARMUP_SOURCE", "BuildError", "Built", "CompileReport", "ExportError", "KernelInfo", "NVCC_FLAGS", "Source",
           "TORCH_NVCC_FLAGS", "build", "build_checked", "prebuild_binding", "build_day", "compile_cubin", "content_hash", "day_files",
           "display_path", "generate_binding", "global_kernel_names", "load_built", "module_name", "parse_exports",
           "parse_first_error", "precompiled_header"]
