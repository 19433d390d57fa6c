"""The sandbox the grading processes run in, set up by the grader itself with bubblewrap.

`wrap(argv, scratch, readable, hidden)` turns a command into one that runs in new Linux
namespaces (bubblewrap, `bwrap`: Debian/Ubuntu package `bubblewrap`; found on PATH or at
$COURSE_BWRAP):

- no network (a network namespace of its own: only a loopback nobody else listens on),
  no view of other processes (pid namespace), its own IPC and hostname;
- the whole file system read-only, a fresh empty /tmp, a minimal /dev with the NVIDIA
  device nodes (not the disks) and a /proc of its own;
- each `hidden` folder covered by an empty read-only folder (the solutions, the class's
  submissions and output, the build cache), then the `readable` paths it needs bound back
  read-only (its module's build folder, the grader copy it imports), then `scratch` the
  only writable folder, its working directory and HOME;
- no capabilities (even when the grader runs as root) and no new privileges, a session of
  its own (no terminal injection), killed with its parent.

`available()` says whether bubblewrap can create those namespaces here (many containers
forbid it): None when it can, else the reason. Where it cannot, the grader says so at
the start of a class run and the container recipe in docs/instructors.md applies. COURSE_SANDBOX=off
turns it off on purpose (it is then reported as not available, with that reason).
"""
from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

DESCRIPTION = ("bubblewrap (no network; course read-only; only the scratch folder writable; "
               "submissions, gradebook and solutions hidden)")

# Environment variables a grading process keeps (by name or prefix); everything else (tokens,
# the instructor's secret seed, paths that say where the gradebook is) stays outside.
ENV_KEEP = ("PATH", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "LANG", "LANGUAGE", "LC_", "TZ", "TERM",
            "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CUDA_", "NVIDIA_", "PYTORCH_", "TORCH_",
            "COURSE_", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NCCL_",
            "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")
ENV_DROP = ("GRADER_SECRET_SEED",)


def bwrap_path() -> str | None:
    env = os.environ.get("COURSE_BWRAP")
    if env:
        return env if os.access(env, os.X_OK) else None
    return shutil.which("bwrap")


def _base_flags() -> list[str]:
    flags = ["--ro-bind", "/", "/", "--dev", "/dev"]
    # The GPU: its device nodes only (nvidiactl, nvidia0.., nvidia-uvm, nvidia-caps/), never the disks.
    extra = os.environ.get("COURSE_SANDBOX_DEVICES", "").split()
    for node in sorted(glob.glob("/dev/nvidia*")) + extra:
        if os.path.exists(node):
            flags += ["--dev-bind", node, node]
    flags += ["--proc", "/proc", "--tmpfs", "/tmp",
              "--unshare-net", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    return flags + _user_namespace


# Run as root without the capability to make namespaces (in many containers), bwrap can still
# make them inside a user namespace of its own; the probe finds out (a user does so anyway).
_user_namespace: list[str] = []


_disabled: list[str] = []


def disable(reason: str) -> None:
    """Stop using the sandbox in this process, e.g. when CUDA does not work inside it (`check_gpu`)."""
    _disabled[:] = [reason]


def available() -> str | None:
    """None when the sandbox works here; else why not (one line)."""
    return _disabled[0] if _disabled else _probe()


@functools.lru_cache(maxsize=None)
def _probe() -> str | None:
    if os.environ.get("COURSE_SANDBOX", "").lower() in ("0", "off", "no", "false"):
        return "turned off by COURSE_SANDBOX=off"
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux (this is {sys.platform})"
    bwrap = bwrap_path()
    if not bwrap:
        where = f"COURSE_BWRAP={os.environ['COURSE_BWRAP']} is not executable" if os.environ.get("COURSE_BWRAP") \
            else "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
        return where
    errors = []
    for userns in ([], ["--unshare-user"]) if os.geteuid() == 0 else ([],):
        _user_namespace[:] = userns
        try:
            proc = subprocess.run([bwrap, *_base_flags(), "--", sys.executable, "-c", "pass"],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{bwrap} did not run: {e}"
        if proc.returncode == 0:
            return None
        lines = (proc.stderr.strip() or proc.stdout.strip() or f"exit code {proc.returncode}").splitlines()
        errors.append(lines[-1])
    _user_namespace[:] = []
    return f"{bwrap} cannot create the namespaces here: {'; with --unshare-user: '.join(errors)}"


# What check_gpu runs inside the sandbox: a kernel whose result the probe checks itself, printing
# GPU_PROBE_OK only when it is right (2 x (0 + 1 + ... + 7) = 56). The device is DEVICE's value.
GPU_PROBE_OK = "sandbox-cuda-ok"
GPU_PROBE = ("import torch; x = torch.arange(8.0, device=DEVICE); s = float((x * 2).sum()); "
             f"print({GPU_PROBE_OK!r} if s == 56.0 else f'wrong result {{s}} (56.0 expected)')")


def check_gpu(timeout: float = 180) -> str | None:
    """On a GPU machine: None when CUDA works inside the sandbox (torch runs a kernel there),
    else why not (the device nodes it needs may be missing: COURSE_SANDBOX_DEVICES adds some)."""
    import tempfile

    why = available()
    if why is not None:
        return why
    with tempfile.TemporaryDirectory(prefix="grader-sandbox-") as tmp:
        argv = wrap([sys.executable, "-c", f"DEVICE = 'cuda'; {GPU_PROBE}"], tmp)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=tmp,
                                  env=environment(dict(os.environ)))
        except subprocess.TimeoutExpired:
            return f"torch did not finish a CUDA call inside it within {timeout:.0f} s"
    if proc.returncode != 0 or GPU_PROBE_OK not in proc.stdout:
        lines = (proc.stderr.strip() or proc.stdout.strip() or f"exit code {proc.returncode}").splitlines()
        return f"CUDA fails inside it: {lines[-1]}"
    return None


def banner() -> str:
    """The line a class run starts with."""
    why = available()
    if why is None:
        return f"sandbox: {DESCRIPTION}"
    return (f"sandbox: NOT available here ({why}): submissions run as your user; "
            "see the container recipe in docs/instructors.md")


def _resolve(paths) -> list[Path]:
    out = []
    for p in paths or []:
        if p:
            r = Path(p).resolve()
            if r not in out:
                out.append(r)
    return out


def _needed() -> list[Path]:
    """What any Python grading process reads: the interpreter, its libraries, torch, CUDA."""
    from .. import pyenv, toolkit

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    torch = pyenv.torch_dir()  # (found, not imported: an import here held a check up for seconds)
    if torch:
        paths.append(torch)

    home = toolkit.cuda_home()
    if home:
        paths.append(str(home))
    return _resolve(paths)


def _inside(p: Path, folder: Path) -> bool:
    return p == folder or folder in p.parents


def wrap(argv: list[str], scratch: str | Path, readable=(), hidden=()) -> list[str]:
    """`argv` run in the sandbox: `scratch` writable (and its working directory and HOME),
    `hidden` folders empty, `readable` paths (e.g. inside a hidden folder) bound back read-only."""
    _probe()  # which flags work here (a user namespace or not)
    bwrap = bwrap_path()
    scratch = Path(scratch).resolve()
    hide = [h for h in _resolve(hidden) if h.is_dir() and h != Path("/")]
    keep = [r for r in _resolve(readable) if r.exists()]
    # What the interpreter itself needs comes back too when a hidden folder holds it.
    keep += [n for n in _needed() if n.exists() and n not in keep and any(_inside(n, h) for h in hide)]
    # Mounts apply in order: a shallower path first, so that a folder bound back inside a hidden
    # one shows, and a hidden folder inside a readable one stays hidden.
    ops = [(len(h.parts), 0, "--tmpfs", h) for h in hide]
    ops += [(len(r.parts), 1, "--ro-bind", r) for r in keep]
    ops += [(len(scratch.parts), 2, "--bind", scratch)]
    flags = [bwrap, *_base_flags()]
    for _, _, op, p in sorted(ops, key=lambda o: (o[0], o[1])):
        flags += [op, str(p)] if op == "--tmpfs" else [op, str(p), str(p)]
    for h in hide:  # the empty folders read-only too (unless the scratch folder is inside one)
        if not _inside(scratch, h):
            flags += ["--remount-ro", str(h)]
    flags += ["--chdir", str(scratch), "--setenv", "HOME", str(scratch), "--setenv", "TMPDIR", str(scratch),
              "--setenv", "XDG_CACHE_HOME", str(scratch / ".cache"),
              "--setenv", "XDG_CONFIG_HOME", str(scratch / ".config"), "--setenv", "MPLCONFIGDIR", str(scratch / ".config"),
              "--setenv", "CUDA_CACHE_PATH", str(scratch / ".nv")]
    return [*flags, "--", *argv]


def environment(env: dict[str, str]) -> dict[str, str]:
    """`env` without what a submission has no business reading (see ENV_KEEP)."""
    return {k: v for k, v in env.items()
            if k not in ENV_DROP and any(k == p or (p.endswith("_") and k.startswith(p)) for p in ENV_KEEP)}
