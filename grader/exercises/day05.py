"""Day 5 exercise: row softmax (fp32 / fp16 / bf16), a warp or a block per row, one read per element.

Masking follows the attention convention: an entry of -inf gets probability exactly 0, and a
fully masked row (every entry -inf: it attends to nothing) comes out as all zeros, where
torch.softmax would return NaN. +inf and NaN inputs are out of scope.
"""
from __future__ import annotations

from ..spec import Case, Exercise, Tolerance, empty_like_offset, offset_view, torch_dtype

DTYPES = ("fp32", "fp16", "bf16")
SCALE = 3.0  # logits ~ N(0, 3^2): probabilities spread over ~10 orders of magnitude

# (rows, cols): every path of the solution's launcher. A warp per row up to 1024 columns (8 or
# 32 elements per lane), a block per row up to 16384; 16-byte loads when cols is a multiple of
# the vector width (4 floats, 8 halves: 128, 1000, 1024, 1032, 4096 ...), one element per
# load otherwise (1, 2, 3, 127, 129, 4097, or a misaligned base pointer).
SHAPES = [(3, 1), (1, 2), (2, 3), (19, 127), (128, 128), (127, 129), (99, 1000), (33, 1024),
          (7, 1032), (5, 4096), (5, 4097), (3, 8192), (2, 16384)]

# (label, rows, cols, mask): -inf entries. "random": 30% of the entries; "causal": row r keeps
# its first r % cols + 1 entries; "rows": 30% of the entries and every third row fully masked;
# "all": every entry.
MASKED = [("30% -inf", 37, 1024, "random"), ("causal -inf", 129, 129, "causal"),
          ("causal -inf", 40, 2048, "causal"), ("fully masked rows", 30, 3, "rows"),
          ("fully masked rows", 12, 1000, "rows"), ("fully masked rows", 6, 8192, "rows"),
          ("all -inf", 4, 4097, "all")]

# Large logits: without the max subtraction exp overflows (+1000) or every exp underflows to 0 (-1000).
SHIFTED = [(8, 1024, 1000.0), (4, 8192, -1000.0)]

# Rows of 1024, 4096 and 8192 with >= 16384 rows, 268-537 MB moved (4.5-9x the 60 MB L2).
PERF = [("fp32", 32768, 1024), ("fp16", 16384, 4096), ("bf16", 16384, 8192)]


def _params(dt, rows, cols, mask="none", shift=0.0, offset=0):
    return {"dtype": dt, "rows": rows, "cols": cols, "mask": mask, "shift": shift, "offset": offset}


def _cases():
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} {r}x{c}", _params(dt, r, c)) for r, c in SHAPES]
        cases += [Case(f"{dt} {r}x{c} {label}", _params(dt, r, c, mask)) for label, r, c, mask in MASKED]
        cases += [Case(f"{dt} {r}x{c} logits {s:+.0f}", _params(dt, r, c, shift=s)) for r, c, s in SHIFTED]
        cases += [Case(f"{dt} {r}x{c} misaligned by 1", _params(dt, r, c, offset=1)) for r, c in ((33, 1024), (2, 16384))]
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

    x = torch.randn(p["rows"], p["cols"], generator=gen, device=device) * SCALE + p["shift"]
    masked = _mask(p, gen, device)
    if masked is not None:
        x = x.masked_fill(masked, float("-inf"))
    return {"x": offset_view(x.to(torch_dtype(p["dtype"])), p["offset"])}


def _outputs(p, inputs):
    return {"out": empty_like_offset((p["rows"], p["cols"]), torch_dtype(p["dtype"]), inputs["x"].device, p["offset"])}


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


def _tolerance(p):
    if p["dtype"] == "fp32":
        # __expf is ex2.approx(x * log2 e): with |x - max| up to ~40 the rounded product costs
        # ~3e-6 relative, plus the fp32 row sum: a few 1e-6 in all. 2e-5 rejects any result that
        # went through fp16 or bf16 (2^-11 = 4.9e-4 relative and worse).
        return Tolerance(2e-5, 1e-9, "fp32: fast exp and fp32 sums, a few 1e-6 relative; rejects a "
                                     "result rounded to fp16/bf16 (>= 2^-11)")
    if p["dtype"] == "fp16":
        # One rounding of an fp32 result: 2^-11 = 4.9e-4 relative for normal fp16, 2^-25 = 3e-8
        # absolute below 6.1e-5 (subnormals; long rows have many such probabilities). Every
        # row that is not fully masked has an entry >= 1 / cols >= 6.1e-5 >> atol, so zeros fail.
        return Tolerance(1e-3, 1e-7, "fp16 output: one rounding of an fp32 result (2^-11 relative, "
                                     "3e-8 absolute for subnormals); rejects bf16 precision and zeros")
    return Tolerance(4e-3, 1e-7, "bf16 output: one rounding of an fp32 result (2^-9 = 2e-3 relative) "
                                 "with 2x slack; every row's largest entry >= 1 / cols >> atol")


EXERCISES = [
    Exercise(
        id="day05.softmax",
        title="Row softmax, a warp or a block per row",
        summary="out[r, :] = softmax(x[r, :]) for fp32, fp16 and bf16 and any row length from 1 to 16384, "
                "numerically safe (max subtracted), each row read from memory once. -inf entries get "
                "probability 0; a fully masked row (all -inf) is all zeros, not NaN.",
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
        target_note="eager torch.softmax measured 0.26x of the copy on an H200; read once, write once "
                    "should reach 0.85x for rows of 1024-8192",
        required_sass={"SHFL.BFLY": "row max and sum by butterfly shuffles (course::warp_reduce_max / _sum)"},
        max_registers=128,
        notebook="notebooks/day05_warp_level_programming.ipynb",
    ),
]
