"""Day 4 exercise: a conflict-free matrix transpose (fp32 and fp16), any shape."""
from __future__ import annotations

from ..spec import (PAST_GRID_Y, Case, Exercise, Tolerance, empty_like_offset, misaligned_alone, offset_view,
                    pointer_offset, torch_dtype)

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

# Matrices real models transpose, kept small (at most 10 MB moved): a head's keys for 4096
# positions (4096 x 128) and back, head dims 64 and 256 (Gemma), an MLP activation of 128 tokens
# by 14336 (Llama 3 8B), 7 tokens by 28672 (Llama 3 70B: odd rows, so fp16 moves single halves),
# and the logits of 8 tokens over Qwen2's 151936-token vocabulary (one tile row, 2374 tiles).
REAL_SHAPES = [(4096, 128), (128, 4096), (2048, 64), (1024, 256), (128, 14336), (7, 28672), (8, 151936)]

# Special values: a transpose moves bits, so every bit pattern must arrive unchanged: NaNs with
# their payloads, +-inf, -0.0, subnormals, the largest finite values. The case's inputs are random
# bit patterns (0.4% NaN in fp32, 3% NaN or inf in fp16) with each special value spliced in, and
# the outputs are also compared as integers ("out_bits"): a value compare would let a NaN payload
# or the sign of a zero change.
SPECIAL_BITS = {
    "fp32": [0x7FC00000, 0x7FA00001, 0xFFC12345, 0x7F800001, 0x7F800000, 0xFF800000, 0x80000000, 0x00000000,
             0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF],
    "fp16": [0x7E00, 0x7D01, 0xFE3F, 0x7C01, 0x7C00, 0xFC00, 0x8000, 0x0000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF],
}
INT_DTYPE = {"fp32": "int32", "fp16": "int16"}
# In fp16, input and out each misaligned alone (the other aligned) by 2, 4 and 8 bytes, on a shape
# whose pair path is open when aligned: a launcher that decides the alignment of both from one of
# them moves 4-byte pairs at a 2-byte offset, and faults.
ALONE = ("fp16", 128, 130)
ALONE_POINTERS = {"input": 2, "out": 2}


def _params(dt, rows, cols, offset=0, special=False):
    return {"dtype": dt, "rows": rows, "cols": cols, "offset": offset, "special": special}


def _cases():
    cases = []
    for dt in DTYPES:
        cases += [Case(f"{dt} {r} x {c}", _params(dt, r, c)) for r, c in SHAPES]
        cases.append(Case(f"{dt} 128 x 130 misaligned by 1", _params(dt, 128, 130, offset=1)))
        cases += [Case(f"{dt} {r} x {c} (real model)", _params(dt, r, c)) for r, c in REAL_SHAPES]
        cases.append(Case(f"{dt} 130 x 66 special values (NaN payloads, inf, -0.0, subnormals)",
                          _params(dt, 130, 66, special=True)))
        cases.append(Case(f"{dt} 127 x 129 special values (NaN payloads, inf, -0.0, subnormals)",
                          _params(dt, 127, 129, special=True)))
    cases.append(Case("fp16 2047 x 2049 (2-byte words)", _params("fp16", 2047, 2049)))
    dt, r, c = ALONE
    cases += misaligned_alone(f"{dt} {r} x {c}", _params(dt, r, c), ALONE_POINTERS)
    # more tiles down (or across) than a grid's y holds, for tiles of up to 64 rows: a 2-D grid of tiles
    # needs its loop past 65535 there
    long = 64 * PAST_GRID_Y
    cases += [Case(f"fp32 {long} x 2 (more tile rows than a grid's y holds)", _params("fp32", long, 2)),
              Case(f"fp32 2 x {long} (more tile columns than a grid's y holds)", _params("fp32", 2, long))]
    for dt in DTYPES:
        r, c = PERF_SHAPES[dt]
        cases.append(Case(f"{dt} {r} x {c} (past L2)", _params(dt, r, c), perf=True))
    return cases


def _element_size(p):
    return {"fp32": 4, "fp16": 2}[p["dtype"]]


def _int_dtype(p):
    import torch

    return getattr(torch, INT_DTYPE[p["dtype"]])


def _inputs(p, gen, device="cuda"):
    import torch

    if not p.get("special"):
        x = torch.randn(p["rows"], p["cols"], generator=gen, device=device)
        return {"input": offset_view(x.to(torch_dtype(p["dtype"])), pointer_offset(p, "input", p["offset"]))}
    # Random bit patterns of the element's width, viewed as floats: no arithmetic touches them.
    bits = 8 * _element_size(p)
    lo, hi = -(1 << (bits - 1)), 1 << (bits - 1)
    raw = torch.randint(lo, hi, (p["rows"] * p["cols"],), generator=gen, device=device, dtype=torch.int64)
    special = torch.tensor([b - (1 << bits) if b >= hi else b for b in SPECIAL_BITS[p["dtype"]]],
                           dtype=torch.int64, device=device)
    where = torch.randperm(raw.numel(), generator=gen, device=device)[: 4 * special.numel()]
    raw[where] = special.repeat(4)  # each special value 4 times, at random places
    x = raw.to(_int_dtype(p)).view(torch_dtype(p["dtype"])).view(p["rows"], p["cols"])
    return {"input": offset_view(x, pointer_offset(p, "input", p["offset"]))}


def _outputs(p, inputs):
    return {"out": empty_like_offset((p["cols"], p["rows"]), torch_dtype(p["dtype"]), "cuda",
                                     pointer_offset(p, "out", p["offset"]))}


def _call(mod, p, inputs, outputs):
    getattr(mod, f"transpose_{p['dtype']}")(outputs["out"], inputs["input"], p["rows"], p["cols"])
    if p.get("special"):
        # The same memory seen as integers, compared exactly: the bits, not the values.
        outputs["out_bits"] = outputs["out"].view(_int_dtype(p))


def _reference(p, inputs):
    import torch

    # A fresh fp32 copy (fp16 -> fp32 is exact), never a view that shares the input's memory.
    expected = {"out": inputs["input"].t().to(torch.float32, copy=True)}
    if p.get("special"):
        expected["out_bits"] = inputs["input"].view(_int_dtype(p)).t().contiguous()
    return expected


def _baseline(p, inputs, outputs):
    outputs["out"].copy_(inputs["input"].t())  # eager: one strided copy kernel


def _tolerance(p):
    return Tolerance.exact("exact: a transpose only moves bits, so every element must equal its input element "
                           "(NaN payloads, inf, -0.0 and subnormals included: the special-values cases compare "
                           "the bits); a missed, duplicated or misplaced element (or any arithmetic) fails")


EXERCISES = [
    Exercise(
        id="day04.transpose",
        min_arch="7.5",  # Days 1-6 need nothing newer than Turing
        title="Conflict-free matrix transpose",
        summary="out[c, r] = in[r, c] for fp32 and fp16, any shape, every bit pattern moved unchanged (NaN "
                "payloads, inf, -0.0, subnormals). Go through a shared-memory tile so that reads and writes are "
                "both coalesced, with no bank conflicts (padding or swizzle).",
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
        target_note="a transpose moves a copy's bytes: the copy is its speed of light (timed at 8192 x 8192 fp32)",
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
