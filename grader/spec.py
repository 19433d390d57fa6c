"""How an exercise is declared: one small `Exercise` per graded kernel.

An exercise is a folder of facts (GPU MODE reference-kernels style): the entry
points it must export, a reference in fp32 computed from the same inputs, a
seeded input generator, the sizes, the tolerance and why, the bytes it must
move, the performance target as a ratio to the copy bandwidth, and the SASS that
proves the day's technique. The specs live in `grader/exercises/dayNN.py`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import config, toolchain


@dataclass(frozen=True)
class Case:
    """One shape to check. `perf` cases are also timed (sized well past L2)."""
    label: str
    params: dict[str, Any]
    perf: bool = False


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    why: str


@dataclass
class Exercise:
    id: str                      # "day02.silu_and_mul"
    title: str
    summary: str                 # one or two sentences and the constraint
    entry_points: list[str]      # expected prototypes, e.g. "cudaError_t f(float* out, int64_t n, cudaStream_t stream)"
    cases: list[Case]
    make_inputs: Callable[[dict, Any], dict]            # (case params, torch.Generator) -> named inputs
    make_outputs: Callable[[dict, dict], dict]          # (params, inputs) -> named output tensors (fresh;
                                                        # in-place results are named after their input)
    call: Callable[[Any, dict, dict, dict], None]       # (module, params, inputs, outputs)
    reference: Callable[[dict, dict], dict]             # (params, inputs) -> expected outputs, fp32/fp64
    tolerance: Callable[[dict], Tolerance]              # per case (dtype decides)
    bytes_moved: Callable[[dict], int]                  # fewest bytes the kernel must read + write
    baseline: Callable[[dict, dict, dict], None]        # eager PyTorch doing the same work
    baseline_name: str
    target_copy_ratio: float                            # >= this fraction of the measured copy bandwidth
    target_note: str = ""
    required_sass: dict[str, str] = field(default_factory=dict)  # opcode prefix -> what it proves
    max_registers: int = 255
    # Where ncu runs: the most shared-memory bank conflicts (extra passes of shared loads
    # and stores, counted per instruction: grader/ncu.py) allowed over all untimed cases.
    max_bank_conflicts: int | None = None
    inplace: tuple[str, ...] = ()                       # inputs the kernel updates in place (also outputs)
    notebook: str = ""                                  # the notebook that teaches it
    timeout_s: float = config.CHECK_TIMEOUT_S

    @property
    def day(self) -> str:
        return self.id.split(".")[0]

    @property
    def name(self) -> str:
        return self.id.split(".")[1]

    @property
    def stub_path(self) -> Path:
        return toolchain.KERNELS / self.day / f"{self.name}.cu"

    @property
    def solution_path(self) -> Path:
        return toolchain.SOLUTIONS / self.day / f"{self.name}.cu"

    @property
    def spec_path(self) -> Path:
        return Path(__file__).parent / "exercises" / f"{self.day}.py"

    @property
    def perf_cases(self) -> list[Case]:
        return [c for c in self.cases if c.perf]


def torch_dtype(name: str):
    """A case's "dtype" parameter ("fp32", "fp16", "bf16") as the torch dtype."""
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def poison(t):
    """Fill an output with NaN (or an unlikely integer) so unwritten elements fail."""
    import torch

    if t.is_floating_point():
        return t.fill_(float("nan"))
    return t.fill_(torch.iinfo(t.dtype).min)


def offset_view(t, offset: int):
    """The same shape as `t` but starting `offset` elements into a fresh buffer:
    a misaligned base pointer, as a tensor slice can give a kernel."""
    import torch

    if offset == 0:
        return t
    buf = torch.empty(t.numel() + offset, dtype=t.dtype, device=t.device)
    view = buf[offset:].view(t.shape)
    view.copy_(t)
    return view


def empty_like_offset(shape, dtype, device, offset: int):
    import torch

    buf = torch.empty(int(torch.Size(shape).numel()) + offset, dtype=dtype, device=device)
    return buf[offset:].view(shape)
