"""Hardware counters through Nsight Compute (`ncu`), where it works.

`ncu` needs a GPU and a runtime that lets it read counters (on the course's H200
machine it does with `--clock-control none`, which leaves the clocks as found).
Everything here returns None rather than raising when it cannot measure.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import config, machine, pyenv, toolkit

# Shared-memory bank conflicts, two ways (sm_70 and later):
# - per executed shared-memory instruction (the `smsp__sass_*` metrics, from the addresses
#   each instruction's threads used): the passes (wavefronts) that shared loads and stores
#   took, minus the fewest they could take (`bank_conflicts`). This is what the 32-bank
#   model predicts, and it is exactly 0 for a conflict-free layout. The grader judges this.
# - DATA_BANK_CONFLICTS: what the L1's data banks counted, all traffic included. On the
#   course's H200 it is not 0 for layouts that are conflict-free on paper while global
#   loads and stores run alongside (about one extra pass per 10-15 shared loads for a
#   padded transpose): L1 and shared memory share those banks.
SHARED_WAVEFRONTS = ("smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                     "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_st.sum")
SHARED_INSTRUCTIONS = ("smsp__sass_inst_executed_op_shared_ld.sum",
                       "smsp__sass_inst_executed_op_shared_st.sum")
BANK_CONFLICT_METRICS = SHARED_WAVEFRONTS + SHARED_INSTRUCTIONS
DATA_BANK_CONFLICTS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                       "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
# ldmatrix (LDSM) is not among the `smsp__sass_*op_shared_ld` instructions: on the H200 they read 0
# for kernels whose only shared loads are ldmatrix. The L1's own counters for shared loads
# include it (ncu --query-metrics: "LDS, LD, 3D attribute loads, LDSM"): its wavefronts, and
# the data-bank conflicts among them (the second line's caveat applies).
SHARED_LOAD_COUNTERS = ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum")


def bank_conflicts(row: dict, access_bytes: tuple[int, int] = (4, 4)) -> tuple[float, float] | None:
    """(loads, stores): the extra passes that one launch's shared loads and stores took
    because of bank conflicts, from a `start_python` row with BANK_CONFLICT_METRICS; None
    if ncu could not read them. `access_bytes`: the widest shared load and store per thread
    (the SASS says: LDS is 4 bytes, LDS.64 8, LDS.128 16): a warp's access of 32 x b bytes
    takes at least max(1, 32 b / 128) passes of 128 bytes even without a conflict."""
    values = [row.get(m) for m in BANK_CONFLICT_METRICS]
    if not all(isinstance(v, float) for v in values):
        return None
    waves_ld, waves_st, inst_ld, inst_st = values
    ideal = [max(1, 32 * b // 128) for b in access_bytes]
    return waves_ld - inst_ld * ideal[0], waves_st - inst_st * ideal[1]


def ncu_path() -> str | None:
    home = toolkit.cuda_home()
    for p in ([home / "bin" / "ncu"] if home else []):
        if p.exists():
            return str(p)
    return shutil.which("ncu")


# The NVTX range (torch.cuda.nvtx.range) whose kernels a profiled call's rows come from.
PROFILED_RANGE = "course-profiled"


class Pending:
    """A Python under ncu, started early: it imports torch and makes its CUDA context (ncu profiles
    nothing outside PROFILED_RANGE, so it runs no profiled kernel yet), then waits for `go()` to run
    its code. Its seconds of start-up then pass while the parent builds and grades."""

    def __init__(self, code: str, metrics, isolate, kernels=None):
        self.proc = None
        self._tmp = tempfile.TemporaryDirectory(prefix="ncu-")
        self.folder = Path(self._tmp.name)
        self._go = self.folder / "go"
        script = self.folder / "profiled.py"
        # It waits for `go`; it gives up after config.IDLE_WAIT_S (ncu, its parent, outlives a check
        # that dies; in the sandbox, bubblewrap ends it with the check).
        script.write_text(f"import os, time\nos.chdir({str(self.folder)!r})\nimport torch\n"
                          f"torch.ones(1, device='cuda').sum().item()\n"
                          f"give_up = time.monotonic() + {config.IDLE_WAIT_S}\n"
                          f"while not os.path.exists('go'):\n"
                          f"    if time.monotonic() > give_up:\n        os._exit(0)\n"
                          f"    time.sleep(0.01)\n{code}")
        env = pyenv.grading_env()
        cmd = [ncu_path(), "--clock-control", "none", "--csv", "--metrics", ",".join(metrics),
               "--nvtx", "--nvtx-include", f"{PROFILED_RANGE}/",
               *(["--kernel-name", "regex:" + "|".join(kernels)] if kernels else []), sys.executable, str(script)]
        if isolate is not None:
            cmd, env = isolate(cmd, env, str(self.folder))
        try:  # its own process group, so that a timeout stops the profiled Python too
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                         cwd=self.folder, start_new_session=True)
        except OSError:
            pass

    def go(self, timeout: float = 180) -> list[dict] | None:
        """Run the code now and wait for ncu's rows: one per kernel launch, {"kernel": name, "id":
        launch index, metric: value, ...}; None if ncu could not run it."""
        if self.proc is None:
            self.cancel()
            return None
        self._go.touch()
        try:
            stdout, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.cancel()
            return None
        self._tmp.cleanup()
        return _rows(stdout, self.proc.returncode)

    def cancel(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.communicate()
        self._tmp.cleanup()


def start_python(code: str, metrics: tuple[str, ...] | list[str], isolate=None, kernels=None) -> Pending | None:
    """A fresh Python under ncu that will run `code` when told (`.go()`), profiling the kernels
    launched inside NVTX ranges named PROFILED_RANGE (and named like one of `kernels`, regular
    expressions, where given); None if ncu cannot run. `isolate(argv, env,
    scratch) -> (argv, env)` wraps the command (ncu and the Python under it) when the code runs a
    submission: the grader's sandbox, whose one visible folder is `Pending.folder`. The caller
    knows there is a GPU (machine.has_gpu() imports torch: seconds a check starting it early
    would wait)."""
    if not ncu_path():
        return None
    return Pending(code, metrics, isolate, kernels)


def available() -> bool:
    """ncu is installed and there is a GPU for it to profile (the notebooks' counter cells ask)."""
    return ncu_path() is not None and machine.has_gpu()


def profile_python(code: str, metrics: tuple[str, ...] | list[str], kernels: list[str] | None = None,
                   timeout: float = 180) -> list[dict] | None:
    """Run `code` now in a fresh Python under ncu, profiling every kernel it launches (those whose
    names match one of `kernels`): the notebooks' counter cells. One row per launch, as Pending.go;
    None if ncu could not run it."""
    wrapped = (f"with torch.cuda.nvtx.range({PROFILED_RANGE!r}):\n"
               f"    exec(compile({code!r}, 'profiled.py', 'exec'), {{'__name__': '__main__'}})\n")
    pending = start_python(wrapped, metrics, kernels=kernels)
    return pending.go(timeout) if pending else None


def _rows(stdout: str, returncode: int) -> list[dict] | None:
    """ncu's --csv output as one dict per kernel launch."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if returncode != 0 or start is None:
        return None
    rows: dict[str, dict] = {}
    for rec in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        row = rows.setdefault(rec["ID"], {"kernel": rec["Kernel Name"], "id": int(rec["ID"])})
        try:
            row[rec["Metric Name"]] = float(rec["Metric Value"].replace(",", ""))
        except ValueError:
            row[rec["Metric Name"]] = rec["Metric Value"]
    return sorted(rows.values(), key=lambda r: r["id"])
