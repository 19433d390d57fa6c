"""Day 4 exercise: a conflict-free matrix transpose (fp32 and fp16), any shape."""
from __future__ import annotations

from ..spec import Case, Exercise, Tolerance, empty_like_offset, offset_view, torch_dtype

# (rows, cols): single elements, single rows and columns, tails 1/2/3/127/128/129 around the
# 64-unit tile, odd sizes (fp16 then moves single halves instead of pairs), 33 x 4097 (one tile
# row, a long ragged edge), and 8192 x 8192 fp32 / 16384 x 8192 fp16 (537 MB moved, 9x the
# L2), which are also timed. fp16 2047 x 2049 is the largest untimed case, the one the grader
# profiles with ncu: odd sizes take the 2-byte-word path, where a pad of one element (instead
# of one 4-byte bank word) would leave 2-way bank conflicts.
SHAPES = [(1, 1), (1, 2), (2, 1), (2, 3), (3, 127), (1, 4099), (4099, 1), (127, 129), (128, 128),
          (129, 64), (64, 130), (33, 4097), (66, 62), (1000, 999)]
DTYPES = ("fp32", "fp16")
PERF_SHAPES = {"fp32": (8192, 8192), "fp16": (16384, 8192)}


def _cases():
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} {r} x {c}", {"dtype": dt, "rows": r, "cols": c, "offset": 0}) for r, c in SHAPES]
        cases.append(Case(f"{dt} 128 x 130 misaligned by 1",
                          {"dtype": dt, "rows": 128, "cols": 130, "offset": 1}))
    cases.append(Case("fp16 2047 x 2049 (2-byte words)", {"dtype": "fp16", "rows": 2047, "cols": 2049, "offset": 0}))
    for dt in DTYPES:
        r, c = PERF_SHAPES[dt]
        cases.append(Case(f"{dt} {r} x {c} (past L2)", {"dtype": dt, "rows": r, "cols": c, "offset": 0}, perf=True))
    return cases


def _element_size(p):
    return {"fp32": 4, "fp16": 2}[p["dtype"]]


def _inputs(p, gen):
    import torch

    x = torch.randn(p["rows"], p["cols"], generator=gen, device="cuda")
    return {"input": offset_view(x.to(torch_dtype(p["dtype"])), p["offset"])}


def _outputs(p, inputs):
    return {"out": empty_like_offset((p["cols"], p["rows"]), torch_dtype(p["dtype"]), "cuda", p["offset"])}


def _call(mod, p, inputs, outputs):
    getattr(mod, f"transpose_{p['dtype']}")(outputs["out"], inputs["input"], p["rows"], p["cols"])


def _reference(p, inputs):
    import torch

    # A fresh fp32 copy (fp16 -> fp32 is exact), never a view that shares the input's memory.
    return {"out": inputs["input"].t().to(torch.float32, copy=True)}


def _baseline(p, inputs, outputs):
    outputs["out"].copy_(inputs["input"].t())  # eager: one strided copy kernel


def _tolerance(p):
    return Tolerance(0.0, 0.0, "exact: a transpose only moves bits, so every element must equal its input "
                               "element; a missed, duplicated or misplaced element (or any arithmetic) fails")


EXERCISES = [
    Exercise(
        id="day04.transpose",
        title="Conflict-free matrix transpose",
        summary="out[c, r] = in[r, c] for fp32 and fp16, any shape. Go through a shared-memory tile so "
                "that reads and writes are both coalesced, with no bank conflicts (padding or swizzle).",
        entry_points=[
            "cudaError_t transpose_fp32(float* out, const float* inp, int64_t rows, int64_t cols, "
            "cudaStream_t stream)",
            "cudaError_t transpose_fp16(__half* out, const __half* inp, int64_t rows, int64_t cols, "
            "cudaStream_t stream)",
        ],
        cases=_cases(),
        make_inputs=_inputs,
        make_outputs=_outputs,
        call=_call,
        reference=_reference,
        tolerance=_tolerance,
        bytes_moved=lambda p: 2 * _element_size(p) * p["rows"] * p["cols"],
        baseline=_baseline,
        baseline_name="out.copy_(x.t()) (eager)",
        target_copy_ratio=0.85,
        target_note="a transpose moves a copy's bytes; the issue asks >= 0.85x the copy at 8192 x 8192 fp32",
        required_sass={
            "STS": "stores to shared memory (the tile is written)",
            "LDS": "loads from shared memory (the tile is read back transposed)",
            "BAR.SYNC": "__syncthreads between writing the tile and reading it",
        },
        max_registers=64,
        # Tile reads and writes must spread over the 32 banks (padding or an XOR swizzle, counted
        # in 4-byte bank words): not one bank conflict in any shared load or store, counted per
        # instruction by ncu (an unpadded 32 x 32 float tile has 31 per column read).
        max_bank_conflicts=0,
        notebook="notebooks/day04_shared_memory_and_bank_conflicts.ipynb",
    ),
]
