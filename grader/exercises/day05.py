"""Day 5 exercise: row softmax (fp32 / fp16 / bf16), a warp or a block per row, rows of any length.

Masking follows the attention convention: an entry of -inf gets probability exactly 0, and a
fully masked row (every entry -inf: it attends to nothing) comes out as all zeros, where
torch.softmax would return NaN. +inf and NaN inputs are out of scope.
"""
from __future__ import annotations

from ..spec import (PAST_GRID_Y, UNIT_ROUNDOFF, Case, Exercise, Tolerance, empty_like_offset, misaligned_alone,
                    offset_view, pointer_offset, torch_dtype)
from ._rounding import FLUSH32, FP16_SUBNORMAL, ULP32, round_up

DTYPES = ("fp32", "fp16", "bf16")
SCALE = 3.0  # logits ~ N(0, 3^2): probabilities spread over ~10 orders of magnitude

# The solution's launcher, which the learner keeps: up to WARP_MAX_COLS a warp per row (8 or 32
# elements per lane), up to BLOCK_MAX_COLS a block per row (16 elements per thread), longer rows
# a block of ONLINE_THREADS per row, read twice (online max and sum, then the output).
WARP_MAX_COLS, BLOCK_MAX_COLS, ONLINE_THREADS = 1024, 16384, 1024
MAX_COLS = 262144  # the longest row the exercise promises (vocabularies reach 256000)

# (rows, cols): every path of the solution's launcher. A warp per row up to 1024 columns (8 or
# 32 elements per lane), a block per row up to 16384; 16-byte loads when cols is a multiple of
# the vector width (4 floats, 8 halves: 128, 1000, 1024, 1032, 4096 ...), one element per
# load otherwise (1, 2, 3, 127, 129, 4097, or a misaligned base pointer). Also MoE router rows
# (softmax over 8 / 64 / 256 experts: Mixtral, Qwen-MoE, DeepSeek-V3).
SHAPES = [(3, 1), (1, 2), (2, 3), (19, 127), (128, 128), (127, 129), (99, 1000), (33, 1024),
          (7, 1032), (5, 4096), (5, 4097), (3, 8192), (2, 16384),
          (989, 8), (99, 64), (33, 256)]

# Rows too long for a block's registers (the two-pass online path): the vocabularies of current
# open models (Llama 2 / Mistral 32000, GPT-2 50257 (odd: one element per load), Llama 3
# 128256, Qwen2 151936, Gemma 256000), long-context attention rows (32768, 131072), and the
# first row length past the register path (16385). Each is many passes of the block's loop:
# 1024 threads x 4 floats (8 halves) cover 4096 (8192) elements per pass.
LONG = [(2, 16385), (3, 32000), (2, 32768), (3, 50257), (2, 128256), (1, 131072), (2, 151936), (2, 256000)]

# (label, rows, cols, mask): -inf entries. "random": 30% of the entries; "causal": row r keeps
# its first r % cols + 1 entries; "rows": 30% of the entries and every third row fully masked;
# "all": every entry.
MASKED = [("30% -inf", 37, 1024, "random"), ("causal -inf", 129, 129, "causal"),
          ("causal -inf", 40, 2048, "causal"), ("fully masked rows", 30, 3, "rows"),
          ("fully masked rows", 12, 1000, "rows"), ("fully masked rows", 6, 8192, "rows"),
          ("all -inf", 4, 4097, "all"),
          # the online path: its running max starts at -inf, so masked entries meet it early
          ("30% -inf", 3, 128256, "random"), ("causal -inf", 4, 32768, "causal"),
          ("fully masked rows", 6, 32000, "rows"), ("all -inf", 2, 151936, "all")]

# Large logits: without the max subtraction exp overflows (+1000) or every exp underflows to 0
# (-1000); on both paths (the online one keeps a running max instead). 1000 and 4100 columns leave
# pad slots in the last vectors of a row (warp and block path): a pad that is not -inf raises the
# max of an all-negative row above its own entries.
SHIFTED = [(8, 1024, 1000.0), (4, 8192, -1000.0), (2, 128256, 1000.0), (2, 32000, -1000.0),
           (19, 1000, -1000.0), (3, 4100, -1000.0)]

# (label, rows, cols, scale, zero_rows): logits of other magnitudes. All-zero rows (padding
# tokens: a uniform distribution) among normal ones; logits ~ 1e-3 (a near-uniform row, every
# probability ~ 1 / cols: in fp16 below 6.1e-5 many are subnormal); logits ~ 3000 (a near
# one-hot row: differences of thousands, most exps underflow to exactly 0).
MAGNITUDES = [("zero rows (padding)", 12, 1000, SCALE, True), ("zero rows (padding)", 6, 32000, SCALE, True),
              ("logits ~1e-3", 4, 4096, 1e-3, False), ("logits ~1e-3", 2, 128256, 1e-3, False),
              ("logits ~3000", 8, 4096, 3000.0, False), ("logits ~3000", 2, 151936, 3000.0, False)]

# Rows of 1024, 4096 and 8192 with >= 16384 rows, 268-537 MB moved (4.5-9x the 60 MB L2).
PERF = [("fp32", 32768, 1024), ("fp16", 16384, 4096), ("bf16", 16384, 8192)]


# x and out each misaligned alone (the other aligned) by 2 (fp16), 4 and 8 bytes at 33 x 1024, where
# the vector path is open when aligned: a launcher that decides the alignment of both from one of
# them, or checks a smaller modulus than the 16 bytes of a vector, faults.
ALONE = [("fp32", 33, 1024), ("fp16", 33, 1024)]
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def _params(dt, rows, cols, mask="none", shift=0.0, offset=0, scale=SCALE, zero_rows=False):
    return {"dtype": dt, "rows": rows, "cols": cols, "mask": mask, "shift": shift, "offset": offset,
            "scale": scale, "zero_rows": zero_rows}


def _cases():
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} {r}x{c}", _params(dt, r, c)) for r, c in SHAPES + LONG]
        cases += [Case(f"{dt} {r}x{c} {label}", _params(dt, r, c, mask)) for label, r, c, mask in MASKED]
        cases += [Case(f"{dt} {r}x{c} logits {s:+.0f}", _params(dt, r, c, shift=s)) for r, c, s in SHIFTED]
        cases += [Case(f"{dt} {r}x{c} {label}", _params(dt, r, c, scale=s, zero_rows=z))
                  for label, r, c, s, z in MAGNITUDES]
        cases += [Case(f"{dt} {r}x{c} misaligned by 1", _params(dt, r, c, offset=1))
                  for r, c in ((33, 1024), (2, 16384), (2, 128256))]
    for dt, r, c in ALONE:
        size = ELEMENT_BYTES[dt]
        cases += misaligned_alone(f"{dt} {r}x{c}", _params(dt, r, c), {"x": size, "out": size})
    cases += [Case(f"fp16 {PAST_GRID_Y}x{c} (more rows than a grid's y holds)", _params("fp16", PAST_GRID_Y, c))
              for c in (40, 1500)]
    cases += [Case(f"{dt} {r}x{c} (past L2)", _params(dt, r, c), perf=True) for dt, r, c in PERF]
    return cases


def _mask(p, gen, device):
    """Where the logits are -inf (True), or None."""
    import torch

    rows, cols, kind = p["rows"], p["cols"], p["mask"]
    if kind == "none":
        return None
    if kind == "all":
        return torch.ones(rows, cols, dtype=torch.bool, device=device)
    if kind == "causal":
        keep = torch.arange(rows, device=device)[:, None] % cols  # last column row r keeps
        return torch.arange(cols, device=device)[None, :] > keep
    masked = torch.rand(rows, cols, generator=gen, device=device) < 0.3
    if kind == "rows":
        masked[::3] = True
    return masked


def _inputs(p, gen, device="cuda"):
    import torch

    scale = p.get("scale", SCALE)
    x = torch.randn(p["rows"], p["cols"], generator=gen, device=device) * scale + p["shift"]
    if scale > 1000:  # fp16 stops at 65504: logits of up to ~+-6e4 (a spread of thousands is enough)
        x = x.clamp(-60000.0, 60000.0)
    if p.get("zero_rows"):
        x[::3] = 0.0  # a padding token's logits: all equal, the uniform distribution
    masked = _mask(p, gen, device)
    if masked is not None:
        x = x.masked_fill(masked, float("-inf"))
    return {"x": offset_view(x.to(torch_dtype(p["dtype"])), pointer_offset(p, "x", p["offset"]))}


def _outputs(p, inputs):
    return {"out": empty_like_offset((p["rows"], p["cols"]), torch_dtype(p["dtype"]), inputs["x"].device,
                                     pointer_offset(p, "out", p["offset"]))}


def _call(mod, p, inputs, outputs):
    getattr(mod, f"softmax_{p['dtype']}")(outputs["out"], inputs["x"], p["rows"], p["cols"])


def _reference(p, inputs):
    import torch

    x = inputs["x"].double()  # fp64 from the same fp32/fp16/bf16 inputs
    m = x.amax(dim=-1, keepdim=True)
    # The fully-masked-row rule, applied explicitly: such a row has m = -inf; shifting by 0
    # instead makes every exp(-inf) = 0, the sum 0, and the row all zeros.
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    s = e.sum(dim=-1, keepdim=True)
    return {"out": torch.where(s > 0, e / s.clamp_min(1e-300), torch.zeros_like(e))}


def _baseline(p, inputs, outputs):
    import torch

    torch.softmax(inputs["x"], dim=-1)  # eager; NaN on fully masked rows, but only timed here


# ----------------------------------------------------------------------------- tolerance
SHORT_ROW_RTOL = 2e-5  # fp32, rows held in registers: the budget of fp32_rtol's docstring
T_MAX = 87.0           # exp(-t) < 2^-126 past it: such a term is flushed to 0 and below atol
FLUSH = FLUSH32        # ex2.approx.ftz (inside __expf) flushes results below the smallest normal fp32


def _elements_per_thread(cols: int) -> int:
    if cols <= 8 * 32:
        return 8
    if cols <= WARP_MAX_COLS:
        return 32
    if cols <= BLOCK_MAX_COLS:
        return 16
    return -(-cols // ONLINE_THREADS)


def fp32_rtol(cols: int) -> float:
    """The fp32 result's relative error bound for rows of `cols` elements (t = m - x >= 0).

    Rows held in registers (the budget SHORT_ROW_RTOL = 2e-5 = 335 ulp, verified on an H200 over
    20 seeds): __expf errs by at most 2 + 1.173 t ulp (CUDA C Programming Guide, intrinsic
    functions) and x - m is rounded once (t ulp more); a probability >= 2^-126 has t <= 87, so
    its own exp errs by <= 193 ulp. The row sum adds <= 32 positive terms per thread and 10
    butterfly steps (<= 42 ulp) to its terms' exp errors, which weigh little where t is large
    (a row's terms with t >> 1 are a small share of a sum >= 1). A division and a multiply: 2.
    The online path (cols > 16384) adds its longer per-thread sums (E = ceil(cols / 1024)
    elements instead of 32) and its rescaling: a thread's sum is multiplied by exp(-d), one
    rounding and a 2 + 1.173 d ulp factor, each time its running max grows by d, at most E
    times, then once more by the block's combine; the d a term sees add up to m - x = t <= 87.
    """
    if cols <= BLOCK_MAX_COLS:
        return SHORT_ROW_RTOL
    e = _elements_per_thread(cols)
    longer_sums = e - 32                      # beyond the 32 per thread of the budget
    rescale = 3 * (e + 1) + 1.173 * T_MAX     # E rescales and the combine; their d add up to <= t
    return SHORT_ROW_RTOL + (longer_sums + rescale) * ULP32


def _tolerance(p):
    cols = p.get("cols", 1024)
    r32 = fp32_rtol(cols)
    if p["dtype"] == "fp32":
        # Every probability >= 2^-126 is checked relative to itself; smaller ones may flush to 0.
        return Tolerance(round_up(r32), FLUSH,
                         f"fp32: fast exp and fp32 sums, <= {r32:.2g} relative for rows of {cols} (day05.fp32_rtol: "
                         f"__expf's 2 + 1.173 |x| ulp, per-thread sums of <= 32 terms, and on the two-pass path "
                         f"the longer sums and the online rescaling); exps below 2^-126 may flush to 0. Rejects "
                         f"any result rounded to fp16/bf16 (2^-11 relative and worse)")
    u = UNIT_ROUNDOFF[p["dtype"]]
    if p["dtype"] == "fp16":
        # One rounding of the fp32 result: u relative for normal fp16, 2^-25 absolute below 6.1e-5
        # (subnormals; long rows and near-uniform rows have many). Every row that is not fully
        # masked has an entry >= 1 / cols >= 3.8e-6 >> atol, so zeros fail.
        return Tolerance(round_up(u + r32), FP16_SUBNORMAL,
                         f"fp16 output: one rounding of an fp32 result (2^-11 relative, 2^-25 absolute for "
                         f"subnormals) plus the fp32 bound {r32:.2g}; rejects a second rounding, bf16 "
                         f"precision and zeros")
    return Tolerance(round_up(u + r32), FLUSH,
                     f"bf16 output: one rounding of an fp32 result (2^-8 relative) plus the fp32 bound "
                     f"{r32:.2g}; every probability >= 2^-126 checked relative to itself, so zeros fail")


EXERCISES = [
    Exercise(
        id="day05.softmax",
        min_arch="7.5",  # Days 1-6 need nothing newer than Turing
        title="Row softmax, a warp or a block per row",
        summary="out[r, :] = softmax(x[r, :]) for fp32, fp16 and bf16 and any row length from 1 to 262144, "
                "numerically safe (max subtracted), in fp32 rounded once. Rows of up to 16384 are read from "
                "memory once (a warp or a block holds the row); longer rows (vocabularies) twice, by an online "
                "softmax (running max and rescaled sum, then the output). -inf entries get probability 0; a "
                "fully masked row (all -inf) is all zeros, not NaN.",
        entry_points=[
            "cudaError_t softmax_fp32(float* out, const float* x, int64_t rows, int64_t cols, cudaStream_t stream)",
            "cudaError_t softmax_fp16(__half* out, const __half* x, int64_t rows, int64_t cols, cudaStream_t stream)",
            "cudaError_t softmax_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, int64_t rows, int64_t cols, "
            "cudaStream_t stream)",
        ],
        cases=_cases(),
        make_inputs=_inputs,
        make_outputs=_outputs,
        call=_call,
        reference=_reference,
        tolerance=_tolerance,
        bytes_moved=lambda p: 2 * p["rows"] * p["cols"] * (4 if p["dtype"] == "fp32" else 2),
        baseline=_baseline,
        baseline_name="torch.softmax (eager)",
        target_copy_ratio=0.85,
        target_note="eager torch.softmax measured 0.26x of the copy for bf16 rows of 8192 on an H200, 0.6-1.0x "
                    "for fp32 rows on an H100 (reports/gpu-notebooks.json); read once, write once should reach the "
                    "target for rows of 1024-8192",
        required_sass={"SHFL.BFLY": "row max and sum by butterfly shuffles (course::warp_reduce_max / _sum)"},
        max_registers=128,
        notebook="notebooks/day05_warp_level_programming.ipynb",
    ),
]
