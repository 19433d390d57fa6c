"""How an exercise is declared: one small `Exercise` per graded kernel.

An exercise is a folder of facts (GPU MODE reference-kernels style): the entry
points it must export, a reference in fp32 computed from the same inputs, a
seeded input generator, the sizes, the tolerance and why, the performance
target (a `Target`: memory-bound against a device copy, compute-bound against a
named baseline such as cuBLAS, or latency against a reference implementation),
and the SASS that proves the day's technique. The specs live in
`grader/exercises/dayNN.py`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import config, machine, paths
from .jit.source import Source
from .stubs import lines_to_write


# A grid's y and z dimensions hold at most 65535 blocks (x: 2^31 - 1): a case with more rows than this
# fails a kernel that maps its rows to blockIdx.y, which every smaller case lets pass.
GRID_Y_LIMIT = 65535
PAST_GRID_Y = GRID_Y_LIMIT + 2  # (odd: no tile or block of rows divides it)


@dataclass(frozen=True)
class Case:
    """One shape to check. `perf` cases are also timed (sized well past L2). `gpu_gib`: the GPU memory
    an untimed case needs (arrays past 2^31 elements, to show 32-bit indices and offsets): on a GPU with
    less it is skipped, saying so."""
    label: str
    params: dict[str, Any]
    perf: bool = False
    gpu_gib: float = 0.0


@dataclass(frozen=True)
class Tolerance:
    """How an output is compared with its reference, and why (the exercise text states it).
    kind "close": |yours - expected| <= atol + rtol |expected| elementwise, NaN/Inf-aware;
    "exact": equal, for integer and index outputs; "distribution": the output holds draws
    (token ids) and the reference holds, per row, the exact probabilities they must follow:
    never a draw outside the support, and a chi-square test per distinct distribution whose
    chance of failing a right sampler is at most `alpha` per case (grader/check/stats.py); with
    `pairs`, draws d apart (each d) that follow the same distribution must also be independent:
    they may not repeat each other more often than chance (another row, another call)."""
    rtol: float = 0.0
    atol: float = 0.0
    why: str = ""
    kind: str = "close"
    alpha: float = 1e-4
    pairs: tuple[int, ...] = ()

    @classmethod
    def exact(cls, why: str) -> "Tolerance":
        return cls(0.0, 0.0, why, kind="exact")

    @classmethod
    def distribution(cls, why: str, alpha: float = 1e-4, pairs: tuple[int, ...] = ()) -> "Tolerance":
        return cls(0.0, 0.0, why, kind="distribution", alpha=alpha, pairs=tuple(pairs))


# Unit roundoff of each storage type: rounding an exact result once errs by at most this, relative.
UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}


def dot_tolerance(out_dtype: str, k: int, term_rms: float = 1.0, slack: float = 2.0) -> Tolerance:
    """The tolerance of outputs that are dot products of length `k` accumulated in fp32 (GEMM,
    attention), rounded once to `out_dtype`; `term_rms` is the RMS of one product a_i b_i.
    A right kernel errs by one output rounding (UNIT_ROUNDOFF relative) plus the fp32
    accumulation error, which depends on the summation order: about u32 sqrt(k / 2) relative to
    the sum's typical size term_rms sqrt(k) for random terms, so the absolute bound grows like
    k. Summing in fp16 or bf16 instead errs ~2^11 or 2^16 times more and fails."""
    u_out, u32 = UNIT_ROUNDOFF[out_dtype], UNIT_ROUNDOFF["fp32"]
    typical = term_rms * k ** 0.5
    atol = slack * (u_out * typical + 4 * u32 * term_rms * k)
    return Tolerance(slack * u_out, atol,
                     f"{out_dtype} output of fp32-accumulated dot products of length {k}: one {out_dtype} rounding "
                     f"(2^-{round(-math.log2(u_out))} relative; {slack:g}x slack) plus fp32 accumulation in any order, which grows "
                     f"with k (4 u32 k |a_i b_i| = {4 * u32 * term_rms * k:.2g} here)")


def attention_tolerance(dtype: str, n: int, v_scale: float, score_max: float, what: str = "keys") -> Tolerance:
    """The tolerance of attention outputs o and lse over `n` keys per row, computed on the tensor cores
    (Days 11-12). o: P is rounded to fp16/bf16 for the tensor cores and o once on the way out (2 u
    relative of the largest |v|), plus the fp32 accumulation of P V, which on the tensor cores truncates
    a few ulps of the running sum per 16-key step (Day 9): n / 16 steps of 5 x 2^-21 of max |v|, growing
    with n. lse: 8 fp32 ulps of scores up to `score_max` plus the fp32 sum of n exponentials (up to n u32
    relative, sequential worst case): also growing with n. One tolerance for both outputs (lse ~ ln(n) +
    scores: its own bound is the smaller one here)."""
    u, u32 = UNIT_ROUNDOFF[dtype], UNIT_ROUNDOFF["fp32"]
    n = max(1, n)
    atol_o = v_scale * (2 * u + 5 * 2.0 ** -21 * n / 16)
    atol_lse = 8 * u32 * score_max + 2 * u32 * n
    bits = round(-math.log2(u))
    why = (f"o: {dtype} rounding of P and of o (2 x 2^-{bits}) plus fp32 tensor-core accumulation over {n} {what} "
           f"(5 x 2^-21 max|v| per 16-step), x |v| scale {v_scale:g}: atol {atol_o:.2g}, grows with the number of "
           f"{what}; a sum kept in {dtype} errs ~2^-{bits} per step and fails; lse (natural log): 8 fp32 ulps of "
           f"scores up to {score_max:g} plus the fp32 sum of {n} exponentials (2 n u32): atol {atol_lse:.2g}, grows "
           f"with n; lse in base 2 is off by 44%")
    return Tolerance(2 * u, max(atol_o, atol_lse), why)


@dataclass(frozen=True)
class Baseline:
    """Work timed beside the learner's kernel, interleaved, in the same process.
    `name` is the short key of the report's `<name>_ratio` field ("copy", "torch", "matmul",
    "sdpa"); `run(params, inputs, outputs)` does the same work (outputs are the baseline's
    own scratch copies); the device copy needs no `run` (the grader builds it). `required`: for a
    baseline in a Target's `also`, the ratio it must reach too (graded beside the target's own)."""
    name: str
    label: str
    run: Callable[[dict, dict, dict], None] | None = None
    required: float | None = None


# The speeds of light of memory-bound work, built by the grader for as many bytes as the kernel
# must move: a kernel that reads and writes alike against a copy, one that only reads (a skinny GEMM,
# decode attention) against the read-ceiling kernel, never against a copy.
COPY = Baseline("copy", "device-to-device copy")
READ = Baseline("read", "streaming read of as many bytes (the read ceiling)")
CEILINGS = {"copy": COPY, "read": READ}


def matmul_baseline(run: Callable[[dict, dict, dict], None]) -> Baseline:
    """`torch.matmul` (cuBLAS) on the case's inputs: `run` calls it with the exercise's layout."""
    return Baseline("matmul", "torch.matmul (cuBLAS)", run)


def sdpa_flash_baseline(run: Callable[[dict, dict, dict], None]) -> Baseline:
    """`scaled_dot_product_attention` with the FLASH backend forced (FlashAttention-2)."""
    def forced(p, inputs, outputs):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            run(p, inputs, outputs)

    return Baseline("sdpa", "scaled_dot_product_attention (FLASH backend)", forced)


@dataclass(frozen=True)
class Target:
    """What "fast enough" means, measured as a ratio against `baseline` timed in the same run.
    kind "memory": bytes / time against the speed of light of as many bytes of the same traffic
    (a device copy, or the read ceiling for a kernel that only reads: `ratio` x its GB/s);
    "compute": `flops` / time against `baseline` on the same inputs (`ratio` x its TFLOP/s);
    "latency": time against a reference implementation (`ratio` x faster).
    `bytes` (every kind): the fewest bytes a call must read and write; a result faster than
    the device's peak bandwidth allows for them (or, compute-bound, above the dense
    tensor-core peak of `dtype`) is no measurement and fails. `also`: more baselines reported
    beside it (e.g. eager PyTorch), not graded."""
    kind: str
    ratio: float
    baseline: Baseline
    bytes: Callable[[dict], float]
    flops: Callable[[dict], float] | None = None
    dtype: Callable[[dict], str] | None = None
    also: tuple[Baseline, ...] = ()

    UNITS = {"memory": "GB/s", "compute": "TFLOP/s", "latency": "us"}

    @property
    def unit(self) -> str:
        return self.UNITS[self.kind]

    def describe(self) -> str:
        if self.kind == "latency":
            return f">= {self.ratio:g}x faster than {self.baseline.label}"
        return f">= {self.ratio:.2f}x {self.baseline.label} ({self.unit})"


def memory_bound(bytes_moved, ratio: float, also: tuple[Baseline, ...] = (), traffic: str = "copy") -> Target:
    """`ratio` x the speed of light of the kernel's `traffic`: "copy" (reads and writes alike) or
    "read" (reads, writes next to nothing)."""
    return Target("memory", ratio, CEILINGS[traffic], bytes_moved, also=also)


def compute_bound(flops, bytes_moved, baseline: Baseline, ratio: float, dtype, also=()) -> Target:
    return Target("compute", ratio, baseline, bytes_moved, flops=flops, dtype=dtype, also=also)


def latency(baseline: Baseline, speedup: float, bytes_read, also=()) -> Target:
    return Target("latency", speedup, baseline, bytes_read, also=also)


@dataclass(frozen=True)
class TimedApart:
    """How a Python-module exercise's timed case is timed where its code cannot reach the clock
    (check/timed_apart.py): its process runs batches of steps on demand, the grader's own process
    times each batch from outside, and the judge checks a random projection of every step's output.
    Each callable returns `step(request) -> output [rows, width]`, built once for the case's inputs:
    `learner` (submission, params, inputs) the learner's, `baseline` (Baseline, params, inputs) a
    baseline's, `reference` (params, inputs) the reference's (fp32). `requests` (params, torch.Generator,
    n) -> the n base requests of a batch as one tensor (row k: the k-th call's); `chain` (params, base
    request, the step before's projection [rows] fp32) -> the request made, a function of exact bits
    (the judge makes it again from the projections handed over); `width` (params) -> the output's
    last dimension."""
    learner: Callable[[Any, dict, dict], Callable]
    baseline: Callable[[Baseline, dict, dict], Callable]
    reference: Callable[[dict, dict], Callable]
    requests: Callable[[dict, Any, int], Any]
    chain: Callable[[dict, Any, Any], Any]
    width: Callable[[dict], int]


# What a learner's file is: a .cu kernel file (most days), a Jinja2 template of one that the
# exercise renders to .cu (Day 13), or a Python module (Day 14's capstone).
LEARNER_FILES = {"cu": ".cu", "template": ".cu.j2", "python": ".py"}


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
    target: Target | None = None                        # how fast, against what (see Target)
    # The memory-bound shorthand of Days 1-6, turned into `target` when none is given: the
    # fewest bytes moved, >= target_copy_ratio x a device copy, eager PyTorch reported beside.
    bytes_moved: Callable[[dict], int] | None = None
    baseline: Callable[[dict, dict, dict], None] | None = None   # eager PyTorch doing the same work
    baseline_name: str = ""
    target_copy_ratio: float | None = None
    target_note: str = ""
    # (regex, why) over the source without comments: what this exercise refuses besides static.DENY, where
    # a wrong formula lies within every tolerance a right kernel needs (Day 3's erf GELU)
    source_deny: tuple[tuple[str, str], ...] = ()
    required_sass: dict[str, str] = field(default_factory=dict)  # opcode prefix -> what it proves
    max_registers: int = 255
    device_globals_limit: int = config.DEVICE_GLOBALS_LIMIT  # bytes of `__device__` variables (config.py)
    # architectures whose compiler allocates more for the same code: {"12.0": 104}
    max_registers_per_arch: dict[str, int] = field(default_factory=dict)
    # known gaps of the reference on an architecture it runs on: {"12.0": "what fails, and why"}
    # (tests/test_archs.py expects each to fail until it is fixed; docs/support.md lists them)
    arch_gaps: dict[str, str] = field(default_factory=dict)
    # The fewest bytes a timed case moves: 4x the H200's 60 MB L2, so that no data read twice can
    # come from the cache. An exercise whose every byte is read once after the grader's L2 flush
    # may go lower, and says why.
    min_timed_bytes: float = 4 * 60e6
    # Where ncu runs: the most shared-memory bank conflicts (extra passes of shared loads
    # and stores, counted per instruction: grader/ncu.py) allowed over all untimed cases.
    max_bank_conflicts: int | None = None
    inplace: tuple[str, ...] = ()                       # inputs the kernel updates in place (also outputs)
    notebook: str = ""                                  # the notebook that teaches it
    timeout_s: float = config.CHECK_TIMEOUT_S
    # one call of the learner's code that takes longer is a hang (config.RUN_LIMIT_S); None: no such limit
    run_limit_s: float | None = config.RUN_LIMIT_S
    learner_file: str = "cu"                            # a key of LEARNER_FILES
    # the lowest compute capability whose GPUs run it (config.ARCHS); on an older GPU it is compiled for
    # this one, its SASS checked, and its runs skipped with the reason
    min_arch: str = "8.0"
    # the arch-specific target the exercise is compiled for, whatever the GPU ('9.0a': Hopper's wgmma and
    # TMA); it runs only on a GPU of that compute capability, elsewhere its checks stop after the SASS
    arch_specific: str | None = None
    # template exercises: the learner's template text -> the .cu source that is built and graded
    render: Callable[[str], str] | None = None
    # template exercises: more checks of the learner's template, after the rendered source passed
    # its source and SASS checks: (template text, Result) -> False to stop before the build
    template_checks: Callable[[str, Any], bool] | None = None
    # template exercises: a repeat request for a built specialization (render, hash, find the build)
    # must take less than this many seconds
    cache_hit_s: float = 1.0
    # True when the same inputs (for samplers: the same seed and offset) must give bit-identical
    # outputs; the worker calls twice and compares.
    repeatable: bool = False
    # True: every timed call is checked (check/timed.py): the inputs take turns between two contents,
    # the outputs are poisoned before it and sampled after it. False where a timed call redoes only a
    # part of the untimed one (Day 14's Decoder, built once, replays its last step).
    check_timed_calls: bool = True
    # Integer inputs that place a call's random numbers (a sampler's Philox offset): each timed call gets
    # its own value, so a right sampler draws afresh, and its draws at the timed size are tested
    # (check/timed.py: within the support, no more repeats from one call to the next than chance).
    call_varies: tuple[str, ...] = ()
    # Python-module exercises: the exercises whose learner files the module builds on (their kernels,
    # built and handed to `call` as `submission.kernels`, by exercise id; `submission.module` is the
    # module), and checks of the module that run in the isolated worker before the cases, on the CPU
    # too: (submission, gpu: bool) -> rows (group, name, status, detail).
    depends_on: tuple[str, ...] = ()
    module_checks: Callable[[Any, bool], list] | None = None
    # Python-module exercises with timed cases: how they are timed (TimedApart). A module's code runs in
    # the process that would time it, so its timings are taken from outside.
    timed_apart: TimedApart | None = None
    # The file that defines the exercise (set by the registry): grader/exercises/<day>.py, or a
    # COURSE_EXTRA_EXERCISES file.
    spec_file: Path | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.target is None:
            if self.bytes_moved is None or self.target_copy_ratio is None:
                raise ValueError(f"{self.id}: give a target (or bytes_moved and target_copy_ratio)")
            also = (Baseline("torch", self.baseline_name, self.baseline),) if self.baseline else ()
            self.target = memory_bound(self.bytes_moved, self.target_copy_ratio, also)
        if self.learner_file not in LEARNER_FILES:
            raise ValueError(f"{self.id}: learner_file must be one of {sorted(LEARNER_FILES)}")
        if self.learner_file == "template" and self.render is None:
            raise ValueError(f"{self.id}: a template exercise needs `render`")
        if (self.learner_file == "python" and bool(self.perf_cases)) != (self.timed_apart is not None):
            raise ValueError(f"{self.id}: `timed_apart` is for a Python-module exercise with timed cases, and each needs it")

    def case_bytes(self, p: dict) -> float:
        """The fewest bytes a call with these parameters reads and writes."""
        return self.target.bytes(p)

    @property
    def day(self) -> str:
        return self.id.split(".")[0]

    @property
    def name(self) -> str:
        return self.id.split(".")[1]

    @property
    def build_name(self) -> str:
        """The name its extension is built and cached under (jit.build_checked's `name`)."""
        return self.id.replace(".", "_")

    @property
    def stub_path(self) -> Path:
        return paths.KERNELS / self.day / f"{self.name}{LEARNER_FILES[self.learner_file]}"

    @property
    def solution_path(self) -> Path:
        return paths.SOLUTIONS / self.day / f"{self.name}{LEARNER_FILES[self.learner_file]}"

    @property
    def lines_to_write(self) -> int:
        """About how many lines a learner writes: the reference's, where the stub has its TODOs."""
        return lines_to_write(self.solution_path.read_text(), str(self.solution_path))

    @property
    def spec_path(self) -> Path:
        return self.spec_file or Path(__file__).parent / "exercises" / f"{self.day}.py"

    def graded_source(self, path: str | Path):
        """The .cu source that is checked and built for the learner's file at `path`: the file
        itself, or for a template exercise its rendering (a Jinja2 error raises)."""
        src = Source.read(path)
        if self.learner_file == "template":
            src = Source(f"{src.path} (rendered)", self.render(src.text))
        return self.with_arch(src)

    def with_arch(self, src, gpu_arch: str | None = None):
        """`src` (a jit.Source) to be compiled for what this exercise needs on a GPU of compute capability
        `gpu_arch` (default: this machine's, machine.arch()): its arch-specific target if it has one,
        else its min_arch where the GPU is older; unchanged (the GPU's own) otherwise."""
        from dataclasses import replace

        target = self.compile_arch(gpu_arch or machine.arch())
        return replace(src, arch=target) if target != (gpu_arch or machine.arch()) else src

    def compile_arch(self, gpu_arch: str) -> str:
        """The compute capability (or arch-specific target, '9.0a') the exercise is compiled for on a GPU of
        compute capability `gpu_arch`."""
        if self.arch_specific:
            return self.arch_specific
        return gpu_arch if arch_key(gpu_arch) >= arch_key(self.min_arch) else self.min_arch

    def runs_here(self, gpu_arch: str) -> bool:
        """Whether a GPU of compute capability `gpu_arch` ('9.0') runs this exercise's kernels."""
        if self.arch_specific:
            return self.arch_specific.rstrip("a") == gpu_arch
        return arch_key(gpu_arch) >= arch_key(self.min_arch)

    def register_limit(self, arch: str) -> int:
        """The register limit of a kernel compiled for `arch` ('12.0', or a report's 'sm_120')."""
        if arch.startswith("sm_"):
            digits = arch[3:].rstrip("a")
            arch = f"{digits[:-1]}.{digits[-1]}"
        return self.max_registers_per_arch.get(arch, self.max_registers)

    def needs(self) -> str:
        """What GPU the exercise runs on, in words: 'compute capability 9.0 (Hopper: H100, H200)' or
        'compute capability 8.0 or newer (Ampere: A100 and later)'."""
        if self.arch_specific:
            arch = self.arch_specific.rstrip("a")
            return f"compute capability {arch} ({config.ARCHS.get(arch, 'sm_' + arch.replace('.', ''))})"
        first = config.ARCHS.get(self.min_arch, "").split(":")[0]
        return f"compute capability {self.min_arch} or newer" + (f" ({first} and later)" if first else "")

    @property
    def perf_cases(self) -> list[Case]:
        return [c for c in self.cases if c.perf]


def arch_key(arch: str) -> tuple[int, int]:
    """'8.9' -> (8, 9), '12.0' -> (12, 0), '9.0a' -> (9, 0): compute capabilities in order."""
    major, minor = arch.rstrip("a").split(".")
    return int(major), int(minor)


def torch_dtype(name: str):
    """A case's "dtype" parameter ("fp32", "fp16", "bf16") as the torch dtype."""
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def poison_value(dtype):
    """What an output of `dtype` is filled with before a call, so that unwritten elements fail: NaN, or
    an unlikely integer: the most negative signed value, the largest unsigned one (0 is the commonest
    right byte; 0xFF is an e4m3 NaN)."""
    import torch

    if dtype.is_floating_point:
        return float("nan")
    info = torch.iinfo(dtype)
    return info.min if dtype.is_signed else info.max


def poison(t):
    """Fill an output with poison_value, so unwritten elements fail."""
    return t.fill_(poison_value(t.dtype))


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


def misaligned_alone(label: str, params: dict, pointers: dict[str, int]) -> list[Case]:
    """The cases of `params` with each pointer of `pointers` (name: element size in bytes) misaligned
    alone, by 1, 2, 4 and 8 bytes where its elements allow (p["alone"] = (name, elements), read by
    pointer_offset): each offset passes one more wrong alignment check (% 2, % 4, % 8) than the one
    before, and none passes % 16. Labelled `label` and what is misaligned."""
    return [Case(f"{label} {name} misaligned by {nbytes} byte{'s' if nbytes > 1 else ''}",
                 {**params, "alone": (name, nbytes // size)})
            for name, size in pointers.items() for nbytes in (1, 2, 4, 8) if nbytes % size == 0]


def pointer_offset(p: dict, pointer: str, shared: int = 0) -> int:
    """The offset in elements of `pointer`'s base in case `p`: p["alone"] = (name, elements) moves
    that one pointer and leaves every other aligned, so that a kernel which decides the alignment
    of all its pointers from one of them is caught; without it, `shared` (the case's own offset)."""
    alone = p.get("alone")
    if alone:
        return alone[1] if alone[0] == pointer else 0
    return shared
