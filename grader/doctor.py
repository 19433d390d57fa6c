"""`python -m grader doctor`: what this machine has, and which mode the course will run in."""
from __future__ import annotations

import shutil

from . import machine, pyenv, toolkit


def runs_here(arch: str) -> str:
    """Which exercises a GPU of compute capability `arch` runs, and which it only compiles and checks
    (docs/support.md has the table for every GPU)."""
    from . import exercises

    not_run = [f"{ex.id} (needs {ex.needs()})" for ex in exercises.all_exercises().values() if not ex.runs_here(arch)]
    if not not_run:
        return "every exercise and notebook of the course"
    return ("every exercise but these, which are compiled and checked but not run on this GPU: " + "; ".join(not_run)
            + " (docs/support.md)")


def doctor(echo=print) -> int:
    problems = []

    def row(what, value, ok=True, fix=""):
        echo(f"{'ok ' if ok else 'NO '} {what:<22} {value}")
        if not ok:
            problems.append(f"{what}: {fix}")

    echo(f"    {'python':<22} {pyenv.python_info()}")
    try:
        import torch
    except ImportError:
        row("torch", "not installed", False, "pip install -e . (see README)")
        return 1
    row("torch", f"{torch.__version__}, built for CUDA {torch.version.cuda}", torch.version.cuda is not None,
        "this torch is a CPU-only build: install a CUDA build from PyPI (pip install torch, not torch+cpu)")
    nvcc = toolkit.nvcc_version()
    row("nvcc", f"{nvcc} at {toolkit.nvcc_path()}" if nvcc else "not found", nvcc is not None,
        "install the CUDA toolkit (nvcc) or set CUDA_HOME")
    if nvcc and torch.version.cuda:
        same_major = nvcc.split(".")[0] == torch.version.cuda.split(".")[0]
        row("nvcc vs torch CUDA", f"{nvcc} vs {torch.version.cuda}", same_major,
            "torch refuses to build extensions when the CUDA major versions differ")
    row("CUDA_HOME", str(toolkit.cuda_home()), toolkit.cuda_home() is not None, "set CUDA_HOME")
    row("ninja", shutil.which("ninja") or "not found", shutil.which("ninja") is not None, "pip install ninja")
    cuobjdump = toolkit.binary_tool("cuobjdump")
    row("cuobjdump", cuobjdump or "not found", cuobjdump is not None, "pip install nvidia-cuda-cuobjdump")
    nvdisasm = toolkit.binary_tool("nvdisasm")
    row("nvdisasm", nvdisasm or "not found", nvdisasm is not None, "pip install nvidia-cuda-nvdisasm")
    objdump = shutil.which("objdump")
    row("objdump", objdump or "not found", objdump is not None,
        "install GNU binutils (apt-get install binutils): the link checks disassemble host code")
    feats = pyenv.load_inline_features()
    echo(f"    {'load_inline':<22} no_implicit_headers={feats['no_implicit_headers']}, use_pch={feats['use_pch']}")
    if machine.has_gpu():
        p = torch.cuda.get_device_properties(0)
        echo(f"    {'GPU':<22} {p.name}, compute capability {p.major}.{p.minor}, {p.multi_processor_count} SMs, "
             f"{p.L2_cache_size / 2**20:.0f} MB L2, {p.total_memory / 2**30:.0f} GiB")
        try:
            import subprocess

            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True).stdout.strip()
            echo(f"    {'driver':<22} {drv or 'unknown'}")
        except OSError:
            pass
        echo(f"    {'runs here':<22} {runs_here(f'{p.major}.{p.minor}')}")
    else:
        echo(f"    {'GPU':<22} none")
    echo(f"    {'build cache':<22} {pyenv.cache_dir()}")
    from .check import sandbox

    why = sandbox.available()
    if why is None and machine.has_gpu():  # the grading processes need the GPU inside it
        gpu_why = sandbox.check_gpu()
        row("sandbox", f"bubblewrap at {sandbox.bwrap_path()}" + ("; CUDA works inside it" if gpu_why is None
                                                                   else f"; {gpu_why}"), gpu_why is None,
            "grading processes cannot use the GPU in the sandbox: add the device nodes they need with "
            "COURSE_SANDBOX_DEVICES, or COURSE_SANDBOX=off and the container recipe in docs/instructors.md")
    elif why is None:
        echo(f"ok  {'sandbox':<22} bubblewrap at {sandbox.bwrap_path()} (grading processes: no network, course "
             "read-only, only their scratch folder writable)")
    else:  # a learner checking their own kernels does not need it; an instructor grading a class does
        echo(f"    {'sandbox':<22} NOT available ({why}): submissions would run as your user; to grade a class, "
             "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) or use the container recipe in docs/instructors.md")
    echo(f"    {'mode':<22} {machine.mode()}" + ("" if machine.has_gpu() else
         " (kernels are compiled for sm_90 and their SASS checked; running them is skipped)"))
    for p in problems:
        echo("fix: " + p)
    return 1 if problems else 0
