"""Exercises that exist only to test the grader (tests/test_kinds.py): one per kind of target,
comparison and learner file that the course's Days 7-14 rely on, proven here first.

- kinds.wmma_gemm     compute-bound (TFLOP/s against torch.matmul), a tolerance growing with K
- kinds.sampler       latency (x faster than torch's sort-based sampling), statistical grading,
                      repeatable draws for the same seed and offset
- kinds.scale_template  the learner's file is a Jinja2 template the exercise renders
- kinds.py_scale      the learner's file is a Python module; exact comparison of an index output

Registered through COURSE_EXTRA_EXERCISES (grader/exercises/__init__.py); the sources are the
.cu, .cu.j2 and .py files beside this one.
"""
from __future__ import annotations

from pathlib import Path

from grader import config
from grader.spec import (Baseline, Case, Exercise, Tolerance, compute_bound, dot_tolerance, latency,
                         matmul_baseline)

HERE = Path(__file__).parent


# --------------------------------------------------------------------------- wmma_gemm
GEMM_SHAPES = [(16, 16, 16), (64, 128, 64), (48, 80, 256), (32, 32, 16384)]  # multiples of 16; a long K


def _gemm_inputs(p, gen):
    import torch

    a = torch.randn(p["m"], p["k"], generator=gen, device="cuda").half()
    b = torch.randn(p["n"], p["k"], generator=gen, device="cuda").half()
    return {"a": a, "b": b}


def _gemm_outputs(p, inputs):
    import torch

    return {"c": torch.empty(p["m"], p["n"], dtype=torch.float16, device="cuda")}


def _gemm_reference(p, inputs):
    return {"c": inputs["a"].double() @ inputs["b"].double().t()}  # exact products and sums, fp64


def _gemm_matmul(p, inputs, outputs):
    import torch

    torch.matmul(inputs["a"], inputs["b"].t(), out=outputs["c"])


# ----------------------------------------------------------------------------- sampler
# (vocab, distinct distributions, rows each): every row draws once, so each distribution is
# drawn rows-each times; vocab 1 must always give token 0.
SAMPLER_SHAPES = [(1, 1, 64), (7, 2, 4000), (1000, 2, 4000), (4096, 2, 2000)]


def _sampler_inputs(p, gen):
    import torch

    base = torch.rand(p["distributions"], p["vocab"], generator=gen, device="cuda") ** 4  # spiky
    if p["vocab"] > 2:  # a third of the tokens outside the support: never to be drawn
        base = base.masked_fill(torch.rand(base.shape, generator=gen, device="cuda") < 0.33, 0.0)
        base[:, 0] += 1e-3  # every distribution keeps one token
    probs = (base / base.sum(dim=1, keepdim=True)).repeat_interleave(p["rows_each"], dim=0).contiguous()
    seed, offset = torch.randint(0, 2**31, (2,), generator=gen, device="cuda").tolist()
    return {"probs": probs, "seed": seed, "offset": offset}


def _sampler_outputs(p, inputs):
    import torch

    return {"tokens": torch.empty(inputs["probs"].shape[0], dtype=torch.int64, device="cuda")}


def _sampler_call(mod, p, inputs, outputs):
    probs = inputs["probs"]
    mod.sample(outputs["tokens"], probs, probs.shape[0], probs.shape[1], inputs["seed"], inputs["offset"])


def _sort_based_sampling(p, inputs, outputs):
    """torch's usual top-p sampling (here top_p = 1): sort, cumulative sum, mask, multinomial."""
    import torch

    probs = inputs["probs"]
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    cum = torch.cumsum(sorted_p, dim=-1)
    sorted_p = sorted_p.masked_fill(cum - sorted_p > 1.0, 0.0)
    pick = torch.multinomial(sorted_p, 1)
    outputs["tokens"].copy_(order.gather(1, pick).squeeze(1))


# ----------------------------------------------------------------------- scale_template
OPS = {"twice": "2.0f * x", "square": "x * x"}


def _render(text: str) -> str:
    import jinja2

    template = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(text)
    return "\n".join(template.render(name=name, expr=expr) for name, expr in OPS.items())


def _elementwise_inputs(p, gen):
    import torch

    return {"x": torch.randn(p["n"], generator=gen, device="cuda")}


def _template_outputs(p, inputs):
    import torch

    return {name: torch.empty(p["n"], device="cuda") for name in OPS}


def _template_call(mod, p, inputs, outputs):
    for name in OPS:
        getattr(mod, name)(outputs[name], inputs["x"], p["n"])


def _template_reference(p, inputs):
    x = inputs["x"].double()
    return {"twice": 2 * x, "square": x * x}


# ---------------------------------------------------------------------------- py_scale
def _py_outputs(p, inputs):
    import torch

    return {"out": torch.empty(p["n"], device="cuda"), "argmax": torch.empty((), dtype=torch.int64, device="cuda")}


def _py_call(mod, p, inputs, outputs):
    outputs["out"].copy_(mod.scale(inputs["x"], 3.0))
    outputs["argmax"].copy_(mod.argmax(inputs["x"]))


def _py_reference(p, inputs):
    x = inputs["x"]
    return {"out": x.double() * 3.0, "argmax": x.argmax()}


EXERCISES = [
    Exercise(
        id="kinds.wmma_gemm", title="(grader test) WMMA GEMM, compute-bound",
        summary="C = A B^T, fp16 in, fp32 accumulation, fp16 out; M, N, K multiples of 16.",
        entry_points=["cudaError_t gemm(__half* c, const __half* a, const __half* b, int64_t m, int64_t n, "
                      "int64_t k, cudaStream_t stream)"],
        cases=[Case(f"{m}x{n}x{k}", {"m": m, "n": n, "k": k}) for m, n, k in GEMM_SHAPES]
        + [Case("4096x4096x4096", {"m": 4096, "n": 4096, "k": 4096}, perf=True)],
        make_inputs=_gemm_inputs, make_outputs=_gemm_outputs,
        call=lambda mod, p, i, o: mod.gemm(o["c"], i["a"], i["b"], p["m"], p["n"], p["k"]),
        reference=_gemm_reference,
        tolerance=lambda p: dot_tolerance("fp16", p["k"]),
        target=compute_bound(flops=lambda p: 2 * p["m"] * p["n"] * p["k"],
                             bytes_moved=lambda p: 2 * (p["m"] * p["k"] + p["n"] * p["k"] + p["m"] * p["n"]),
                             baseline=matmul_baseline(_gemm_matmul), ratio=0.01, dtype=lambda p: "fp16"),
        required_sass={"HMMA": "tensor-core matrix multiply-accumulate (wmma::mma_sync)"},
    ),
    Exercise(
        id="kinds.sampler", title="(grader test) sampling from a distribution, latency-bound",
        summary="tokens[r] ~ probs[r, :]; the same seed and offset give the same tokens.",
        entry_points=["cudaError_t sample(int64_t* tokens, const float* probs, int64_t rows, int64_t vocab, "
                      "int64_t seed, int64_t offset, cudaStream_t stream)"],
        cases=[Case(f"vocab {v}, {d} x {r} rows", {"vocab": v, "distributions": d, "rows_each": r})
               for v, d, r in SAMPLER_SHAPES]
        + [Case("128 x 128256", {"vocab": 128256, "distributions": 128, "rows_each": 1}, perf=True)],
        make_inputs=_sampler_inputs, make_outputs=_sampler_outputs, call=_sampler_call,
        device_globals_limit=config.DEVICE_GLOBALS_WITH_CURAND,
        reference=lambda p, i: {"tokens": i["probs"].double()},
        tolerance=lambda p: Tolerance.distribution("draws follow probs (chi-square per distribution, "
                                                   "false-failure rate <= 1e-4 per case); never a token of "
                                                   "probability 0"),
        target=latency(Baseline("torch", "torch sort + cumsum + multinomial", _sort_based_sampling), speedup=5.0,
                       bytes_read=lambda p: 4 * p["vocab"] * p["distributions"] * p["rows_each"]),
        repeatable=True,
    ),
    Exercise(
        id="kinds.scale_template", title="(grader test) a Jinja2 template of elementwise kernels",
        summary="A template rendered once per operation (twice, square).",
        entry_points=[f"cudaError_t {n}(float* out, const float* in, int64_t n, cudaStream_t stream)" for n in OPS],
        cases=[Case(f"n={n}", {"n": n}) for n in (1, 1000, 100_003)],
        make_inputs=_elementwise_inputs, make_outputs=_template_outputs, call=_template_call,
        reference=_template_reference,
        tolerance=lambda p: Tolerance(1e-6, 1e-6, "fp32: one rounding"),
        bytes_moved=lambda p: 4 * 4 * p["n"], target_copy_ratio=0.5,
        learner_file="template", render=_render,
    ),
    Exercise(
        id="kinds.py_scale", title="(grader test) a Python module",
        summary="scale(x, alpha) and argmax(x) in Python.",
        entry_points=["scale", "argmax"],
        cases=[Case(f"n={n}", {"n": n}) for n in (1, 1000, 100_003)],
        make_inputs=_elementwise_inputs, make_outputs=_py_outputs, call=_py_call, reference=_py_reference,
        tolerance=lambda p: {"out": Tolerance(1e-6, 1e-6, "fp32: one rounding"),
                             "argmax": Tolerance.exact("an index: exact")},
        bytes_moved=lambda p: 8 * p["n"], target_copy_ratio=0.5,
        learner_file="python",
    ),
]
