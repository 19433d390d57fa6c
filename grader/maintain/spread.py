"""A pytest plugin for the GPU verification on a host with several GPUs (`verify --gpus`, `self-test --gpus`).

`self-test` and `verify --notebooks-only` run their tests side by side with pytest-xdist;
with this plugin (`-p grader.maintain.spread`) each xdist worker is pinned to one of the GPUs named in
$COURSE_VERIFY_GPUS (CUDA_VISIBLE_DEVICES, set before anything in the worker starts CUDA: the grading
processes and notebook kernels it starts inherit it), and its checks share that GPU's gate
(check/gate.py, one folder per GPU under $COURSE_VERIFY_GATES), so that every timing still has its GPU
to itself. Without those variables, or outside an xdist worker, it does nothing.
"""
from __future__ import annotations

import os

from .. import config

GPUS_ENV = "COURSE_VERIFY_GPUS"    # "0,1,2,3": the GPUs the workers spread over, in turn
GATES_ENV = "COURSE_VERIFY_GATES"  # the folder holding each GPU's gate folder


def device_of(worker: str, gpus: list[str]) -> str:
    """The GPU of xdist worker `worker` ("gw5"): the workers take the GPUs in turn."""
    return gpus[int(worker.removeprefix("gw")) % len(gpus)]


def gate_of(root: str, device: str) -> str:
    return os.path.join(root, f"gpu-{device}")


def pin(environ=os.environ) -> str | None:
    """This worker's GPU and gate set in `environ`; the GPU, or None where nothing is spread."""
    gpus, worker = environ.get(GPUS_ENV), environ.get("PYTEST_XDIST_WORKER")
    if not gpus or not worker:
        return None
    device = device_of(worker, gpus.split(","))
    environ["CUDA_VISIBLE_DEVICES"] = device
    if environ.get(GATES_ENV):
        environ[config.GATE_ENV] = gate_of(environ[GATES_ENV], device)
    return device


def pytest_configure(config):  # noqa: ARG001 (pytest's hook signature)
    pin()
