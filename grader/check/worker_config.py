"""What a grading process is told to do: the config file the check writes (supervise.run_worker) and the
worker reads (`python -m grader.check.worker CONFIG.json`), and the one the bank-conflict count's process
reads (worker.call_once). Standard library only: both sides import it, the worker before torch."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import NamedTuple


class Seed(NamedTuple):
    """One seed every untimed case runs with: its label in the results ("0", "secret") and its value."""
    label: str
    value: int


class BuiltModule(NamedTuple):
    """A built extension: the folder it is in and its module name (jit.load_built)."""
    folder: str
    name: str


class DeviceVariable(NamedTuple):
    """A `__device__` or `__constant__` variable of a kernel file, as its cubin places it (device_state.py)."""
    name: str     # its symbol in the cubin
    section: str  # .nv.global (zeroed), .nv.global.init (initialised) or .nv.constant3 (and other banks)
    offset: int   # in the section
    size: int


def exact_fields(cls, text: str, what: str) -> dict:
    """The JSON object `text` as a dict, keyed by exactly the fields of the dataclass `cls`; ValueError
    (naming it as `what`) where it is not a JSON object, has a key that is no field or lacks a field."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{what} is a JSON object, not {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    unknown, missing = sorted(set(data) - names), sorted(names - set(data))
    if unknown or missing:
        raise ValueError(f"{what} with " + "; ".join(
            label + ", ".join(keys) for label, keys in (("unknown keys: ", unknown), ("missing keys: ", missing))
            if keys))
    return data


@dataclass(frozen=True)
class WorkerConfig:
    """One grading process's work, written as a JSON object with every field as a key (to_json) and read
    back with exactly those keys (from_json)."""
    exercise: str                            # the exercise's id
    module_dir: str | None = None            # the built module's folder (as the grading process sees it)
    module_name: str | None = None           # the built module's name (a Python-module exercise: its file's stem)
    kernels: list[str] = field(default_factory=list)  # the module's own CUDA kernels ("kernels launched")
    seeds: list[Seed] = field(default_factory=list)  # each untimed case runs with each
    perf: bool = True                        # time the performance cases
    results: str | None = None               # the file it appends a JSON line to per result (None: call_once)
    calibrated: dict | None = None           # class grading: each timed case's graded baseline (worker.calibrate)
    deps: dict[str, BuiltModule] = field(default_factory=dict)  # Python-module exercises: the kernels they use
    cpu_only: bool = False                   # no GPU: only a Python module's module_checks
    max_case_bytes: int | None = None        # under compute-sanitizer: only the untimed cases up to this size
    part: str = "all"                        # "all", "no launches" or "launches" (supervise.run_worker)
    gate: bool = False                       # beside other gradings on its GPU: it answers the gate (gate.py)
    case_memory_kept: int = 0                # GPU memory kept in torch's allocator between cases (bytes)
    handover: str | None = None              # the folder a Python module's outputs go to, for the judge (judge.py)
    timed_apart: bool = False                # a Python module's timed steps, timed by the check (timed_apart.py)
    # the kernel file's own variables, put back as loaded before each timed call (device_state.py)
    variables: list[DeviceVariable] = field(default_factory=list)

    def to_json(self) -> str:  # (a Seed or BuiltModule as a JSON array)
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_json(cls, text: str) -> "WorkerConfig":
        """The config written by to_json; ValueError where it is not a JSON object with every field as a key
        and no other key (a writer and a reader out of step fail here, not at a default)."""
        data = exact_fields(cls, text, "a worker config")
        data["seeds"] = [Seed(*s) for s in data["seeds"]]
        data["deps"] = {k: BuiltModule(*v) for k, v in data["deps"].items()}
        data["variables"] = [DeviceVariable(*v) for v in data["variables"]]
        return cls(**data)

    @classmethod
    def read(cls, path) -> "WorkerConfig":
        with open(path, encoding="utf-8") as f:
            return cls.from_json(f.read())
