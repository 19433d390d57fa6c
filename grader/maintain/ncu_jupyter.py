"""`%%ncu` as a learner meets it in JupyterLab, run headless: `python -m grader ncu-jupyter`.

A Jupyter server is started the way `make lab` starts JupyterLab's (rooted at the course, with the
jupyterlab-nvidia-nsight server extension), and a kernel is started through its REST API, so that
the extension injects its magics into it, as it does for every kernel Lab starts. Then cells run
in that kernel as Lab sends them:
  1. the magics are there (the extension's NsightMagics);
  2. `nb.ncu_ready()`, the check every profiling section of the notebooks opens with;
  3. with a GPU and ncu: `%ncu enable ...` (the sections the notebooks discuss), a restart of the
     kernel through the server (it comes back running under ncu), the magics again, and a `%%ncu`
     cell that runs Day 6's two RMSNorm versions: Nsight Compute's report of each kernel;
  4. without them, the same `%%ncu` cell, which must print "Skipped ..." and run nothing.
Every cell's output is kept, and the report says which steps ran and which were skipped, and why.
"""
from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .. import machine, paths

PROFILED = """%%ncu
mod.rmsnorm_v1_bf16(yn, xn, wn, 8192, 4096, 1e-6)
mod.rmsnorm_v2_bf16(yn, xn, wn, 8192, 4096, 1e-6)
torch.cuda.synchronize()"""
SETUP = """import torch
import grader.jit
from grader import nb
mod = grader.jit.build_day("day06", quiet=True)
ready = nb.ncu_ready()
if ready:
    xn = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    wn = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
    yn = torch.empty_like(xn)
print("ready", ready)"""
HAS_MAGICS = "print('magics', get_ipython().magics_manager.registry.get('NsightMagics') is not None)"


@dataclass
class Cell:
    step: str
    code: str
    output: str = ""
    error: str = ""
    seconds: float = 0.0


@dataclass
class Run:
    gpu: bool
    ncu: str | None
    cells: list[Cell] = field(default_factory=list)
    profiled: bool = False
    skipped_why: str = ""
    error: str = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`jupyter server` from this interpreter, rooted at the course, on a free port with a token."""

    def __init__(self, state: Path):
        self.port, self.token = _free_port(), secrets.token_hex(16)
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(state / "runtime"), JUPYTER_DATA_DIR=str(state / "data"))
        self.runtime = state / "runtime"
        cmd = [sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={self.port}", "--ServerApp.ip=127.0.0.1",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={paths.ROOT}"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log = open(state / "server.log", "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=paths.ROOT)
        self._wait("api/status", 60)

    def request(self, path: str, method: str = "GET", body: dict | None = None) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read().decode()
        return json.loads(text) if text else {}

    def _wait(self, path: str, limit_s: float) -> None:
        deadline = time.time() + limit_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Jupyter server exited ({self.proc.returncode}): see server.log")
            try:
                self.request(path)
                return
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"the Jupyter server did not answer within {limit_s:.0f} s") from None
                time.sleep(0.3)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Kernel:
    """A kernel the server started (REST), driven through its connection file with jupyter_client."""

    def __init__(self, server: Server):
        self.server = server
        self.id = server.request("api/kernels", "POST", {"name": "python3"})["id"]
        self.client = None
        self.connect()

    def connect(self) -> None:
        from jupyter_client import BlockingKernelClient

        if self.client is not None:
            self.client.stop_channels()
        path = self.server.runtime / f"kernel-{self.id}.json"
        deadline = time.time() + 30
        while not path.exists() and time.time() < deadline:
            time.sleep(0.2)
        self.client = BlockingKernelClient(connection_file=str(path))
        self.client.load_connection_file()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(self, step: str, code: str, timeout: float = 300) -> Cell:
        cell, parts = Cell(step, code), []
        t0 = time.perf_counter()

        def hook(msg):
            kind, c = msg["msg_type"], msg["content"]
            if kind == "stream":
                parts.append(c["text"])
            elif kind in ("execute_result", "display_data"):
                parts.append(c["data"].get("text/plain", "") + "\n")
            elif kind == "error":
                cell.error = f"{c['ename']}: {c['evalue']}"

        try:
            self.client.execute_interactive(code, output_hook=hook, timeout=timeout, allow_stdin=False)
        except (TimeoutError, queue.Empty):
            cell.error = f"no answer within {timeout:.0f} s"
        cell.output, cell.seconds = "".join(parts), time.perf_counter() - t0
        return cell

    def restart(self) -> None:
        self.server.request(f"api/kernels/{self.id}/restart", "POST", {})
        self.connect()

    def wait_for_magics(self, run: Run, step: str, limit_s: float = 60) -> bool:
        """The extension injects its magics right after the kernel starts: poll until they are there."""
        deadline = time.time() + limit_s
        while True:
            cell = self.run(step, HAS_MAGICS, timeout=30)
            if "magics True" in cell.output or time.time() > deadline:
                run.cells.append(cell)
                return "magics True" in cell.output
            time.sleep(1.0)

    def shutdown(self) -> None:
        if self.client is not None:
            self.client.stop_channels()
        try:
            self.server.request(f"api/kernels/{self.id}", "DELETE")
        except OSError:
            pass


def prove() -> Run:
    """Steps 1-4 above; never raises: what failed is in Run.error and the cells."""
    from .. import ncu
    from ..nb import NCU_ENABLE

    run = Run(gpu=machine.has_gpu(), ncu=str(ncu.ncu_path()) if ncu.ncu_path() else None)
    state = Path(tempfile.mkdtemp(prefix="course-ncu-jupyter-"))
    server = kernel = None
    try:
        server = Server(state)
        kernel = Kernel(server)
        if not kernel.wait_for_magics(run, "the extension's magics in a kernel the server started"):
            run.error = ("the extension did not inject its magics into the kernel: the server did not load "
                         "jupyterlab_nvidia_nsight (its etc/jupyter/jupyter_server_config.d must be on Jupyter's "
                         "config path: a `pip install --target DIR` leaves it in DIR/etc/jupyter, for "
                         "JUPYTER_CONFIG_PATH)")
            return run
        run.cells.append(kernel.run("nb.ncu_ready() and Day 6's kernels", SETUP, timeout=900))
        if run.gpu and run.ncu:
            run.cells.append(kernel.run("enable Nsight Compute", NCU_ENABLE))
            kernel.restart()
            if not kernel.wait_for_magics(run, "the magics after the restart under ncu", limit_s=120):
                run.error = "after `%ncu enable` and a restart, the kernel had no magics"
                return run
            setup = kernel.run("nb.ncu_ready() under ncu", SETUP, timeout=900)
            run.cells.append(setup)
            if "ready True" not in setup.output:
                run.error = "the kernel restarted under ncu, but nb.ncu_ready() said no"
                return run
        else:
            run.skipped_why = "; ".join(w for w, missing in (("no CUDA GPU", not run.gpu), ("no ncu", not run.ncu))
                                        if missing)
        cell = kernel.run("a %%ncu cell: Day 6's rmsnorm v1 and v2", PROFILED, timeout=600)
        run.cells.append(cell)
        run.profiled = bool(run.gpu and run.ncu and not cell.error and "Skipped" not in cell.output)
        if run.gpu and run.ncu and not run.profiled:
            run.error = "the %%ncu cell did not profile: " + (cell.error or cell.output[-300:])
    except Exception as e:  # noqa: BLE001 (any failure is the report's, not a crash of the command)
        run.error = f"{type(e).__name__}: {e}"
    finally:
        if kernel is not None:
            kernel.shutdown()
        if server is not None:
            server.stop()
            log = (state / "server.log").read_text(errors="replace")
            if run.error:
                run.error += "\n\nserver log (end):\n" + log[-2000:]
        shutil.rmtree(state, ignore_errors=True)
    return run


def markdown(run: Run, env: dict) -> str:
    out = ["# %%ncu in JupyterLab (jupyterlab-nvidia-nsight), run headless", "",
           f"{env.get('date', '')}, commit {env.get('commit', 'unknown')}: {env.get('gpu', 'no GPU')}; ncu "
           f"{run.ncu or 'not found'}.", "", "Generated by `python -m grader ncu-jupyter`; not edited by hand.", "",
           "Result: " + ("**profiled**: the %%ncu cell ran under Nsight Compute in a kernel the server started."
                         if run.profiled else
                         f"**not profiled** ({run.skipped_why or 'see the error'})." +
                         (" The server, the extension's magics and the skip path were exercised." if not run.error else "")),
           ""]
    if run.error:
        out += ["Error:", "", "```", run.error, "```", ""]
    for c in run.cells:
        out += [f"## {c.step} ({c.seconds:.1f} s)", "", "```python", c.code, "```", "", "Output:", "", "```",
                (c.output.rstrip() or "(nothing)") + (f"\n{c.error}" if c.error else ""), "```", ""]
    return "\n".join(out)


def ncu_jupyter(out: str | Path) -> int:
    """Run the proof, write gpu-ncu-jupyter.{json,md} into `out`; 0 if it did what this machine allows
    (profiled on a GPU with ncu; without them, every step but the profiling, and a clean skip)."""
    from .runs import commit

    import datetime

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run = prove()
    env = {"commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    if run.gpu:
        import torch

        env["gpu"] = torch.cuda.get_device_name()
    (out / "gpu-ncu-jupyter.json").write_text(json.dumps({"environment": env, **run.__dict__,
                                                          "cells": [c.__dict__ for c in run.cells]}, indent=1))
    (out / "gpu-ncu-jupyter.md").write_text(markdown(run, env))
    print(markdown(run, env)[-3000:])
    return 1 if run.error else 0
