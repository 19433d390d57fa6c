"""Day 13 exercise: a Jinja2 template for the gated-activation family, out = act(x[:, :d]) * x[:, d:],
rendered once per specialization (activation, dtype, vector width) and built through the course's
content-hash cache.

The learner's file is the template (kernels/day13/act_and_mul_template.cu.j2). The grader renders
it for five activations, four of them named in the exercise text and one that is not, in fp16 and
bf16 with 16-byte vectors, and SiLU in fp16 at vec_size 4, into one .cu source, and grades that like
Days 2 and 3: correct within one rounding, at its target against the copy, LDG.E.128 in the 16-byte
kernels. Before that, on any machine, it checks
what a JIT cache needs of a template: each parameter changes the rendered source (the cache key is
a hash of it), vec_size reaches the SASS (LDG.E.64 at 4), a repeat request renders the same source
and finds the same module, flags and edits give new ones (grader/check/pipeline.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..spec import UNIT_ROUNDOFF, Baseline, Exercise, Tolerance, memory_bound
from . import _render_child
from ._rounding import FP16_SUBNORMAL, ULP32, expf_ulp, round_up
from .day02 import DTYPES, gated_cases, gated_outputs, uniform_gated_inputs

NOTEBOOK = "notebooks/day13_jit_templates.ipynb"
TEMPLATE_NAME = "act_and_mul_template.cu.j2"


# ---------------------------------------------------------------------------- rendering
@dataclass(frozen=True)
class Specialization:
    """One rendering of the template: the values of its four parameters."""
    name: str        # the activation's name, part of every symbol
    act_expr: str    # the activation: a C++ expression of a float `x`, evaluated in fp32
    dtype: str       # "fp16" or "bf16"
    vec_size: int    # elements per vector load and store

    @property
    def label(self) -> str:
        return f"{self.name}, {self.dtype}, vec_size {self.vec_size}"

    @property
    def entry_point(self) -> str:
        return f"{self.name}_and_mul_{self.dtype}"


def jinja_environment():
    """How the exercise's template is rendered (grader/exercises/_render_child.py): in Jinja2's sandbox,
    an undefined name an error, a line holding only a {% tag %} leaving no blank line behind."""
    return _render_child.environment()


RENDER_LIMIT_S = 5.0  # one rendering takes milliseconds; a template that loops for longer is refused
RenderTimeout = _render_child.RenderTimeout


def _context(spec: Specialization) -> dict:
    return {"name": spec.name, "act_expr": spec.act_expr, "dtype": spec.dtype, "vec_size": spec.vec_size}


def render_many(template_text: str, specs: list[Specialization]) -> list[str]:
    """The .cu source of each specialization, rendered in a process of its own (Jinja2's sandbox, within
    RENDER_LIMIT_S each and the child's memory and output limits): a learner's template never runs in
    the grader's process."""
    return _render_child.render_isolated(template_text, [_context(s) for s in specs], RENDER_LIMIT_S)


def render_specialization(template_text: str, spec: Specialization) -> str:
    """The .cu source of one specialization (render_many)."""
    return render_many(template_text, [spec])[0]


# ---------------------------------------------------------------------------- activations
@dataclass(frozen=True)
class Activation:
    name: str
    expr: str                            # what the template renders, on a float x
    reference: Callable                  # fp64 torch, x -> act(x)
    about: str                           # what it is and why the expression is written so
    eager: Callable | None = None        # eager PyTorch, as the reported baseline (else `reference`)
    # An absolute error beyond the relative bound, per unit |gate| |up|: an expression that subtracts
    # nearly equal numbers (1 + erf(v) for v < 0) keeps the error of the larger one (erff: 2 ulp of 1).
    cancels: float = 0.0
    large_gate: tuple[float, float] = (1000.0, 1000.0)  # the "large" case's gate bound (fp16, bf16)


# The references, in fp64 and written without cancellation, so that they are right down to the
# smallest outputs (F.gelu's 0.5 x (1 + tanh(z)) is 0 in fp64 for x < -6, where the exact value
# is ~x e^(2z)); the eager baselines as a PyTorch user writes them.
def _silu(x):
    import torch.nn.functional as F

    return F.silu(x)


def _gelu_tanh(x):
    import torch

    return x * torch.sigmoid(1.5957691216057308 * (x + 0.044715 * x ** 3))  # 0.5 (1 + tanh z) = sigmoid(2z)


def _gelu(x):
    import math

    import torch

    return 0.5 * x * torch.special.erfc(-x / math.sqrt(2.0))  # 1 + erf(v) = erfc(-v)


def _relu2(x):
    return x.clamp(min=0) ** 2


def _quick_gelu(x):
    import torch

    return x * torch.sigmoid(1.702 * x)


def _eager_gelu_tanh(x):
    import torch.nn.functional as F

    return F.gelu(x, approximate="tanh")


def _eager_gelu(x):
    import torch.nn.functional as F

    return F.gelu(x)


# Four activations the exercise names (the ones FlashInfer's activation module and current models
# use), and one it does not: the template must render whatever expression it is given.
SILU = Activation("silu", "x / (1.0f + __expf(-x))", _silu, "SiLU (Llama, Qwen, Mistral): Day 2's form")
GELU_TANH = Activation(
    "gelu_tanh", "x / (1.0f + __expf(-1.5957691216057308f * x * fmaf(0.044715f, x * x, 1.0f)))", _gelu_tanh,
    "GELU, tanh form (Gemma): 0.5 (1 + tanh(z)) = 1 / (1 + exp(-2z)), one exp and no 1 - 1 cancellation for x < 0",
    eager=_eager_gelu_tanh)
GELU = Activation(
    "gelu", "0.5f * x * (1.0f + erff(0.7071067811865476f * x))", _gelu,
    "GELU, erf form (FlashInfer's `gelu`): for x < 0, 1 + erf(v) cancels; erff's 2 ulp near 1 become an "
    "absolute error", cancels=2.0 ** -23, eager=_eager_gelu)
RELU2 = Activation("relu2", "x > 0.0f ? x * x : 0.0f", _relu2,
                   "squared ReLU (Nemotron, Primer): a conditional expression, so the template must keep it whole",
                   large_gate=(64.0, 4096.0))
UNSEEN = Activation("unseen", "x / (1.0f + __expf(-1.702f * x))", _quick_gelu,
                    "an activation the exercise text does not name")
ACTIVATIONS = {a.name: a for a in (SILU, GELU_TANH, GELU, RELU2, UNSEEN)}
VEC_16B = 8  # fp16 / bf16 elements in 16 bytes
# SiLU in fp16 once more at vec_size 4, run on its own cases: a kernel whose offsets or element loop
# assume 8 elements per vector, not VEC, is right at 8 and leaves half of every row unwritten at 4.
NARROW = Specialization(f"{SILU.name}_vec4", SILU.expr, "fp16", 4)
GRADED = [Specialization(a.name, a.expr, dt, VEC_16B) for a in ACTIVATIONS.values() for dt in DTYPES] + [NARROW]


def render(template_text: str) -> str:
    """The graded source: every graded specialization rendered and compiled as one file."""
    parts = [f"// ---- specialization {n} of {len(GRADED)}: {s.label}\n{text}"
             for n, (s, text) in enumerate(zip(GRADED, render_many(template_text, GRADED)), 1)]
    return "\n".join(parts)


# ------------------------------------------------------------------- the template's own checks
SOURCE_PER_SPEC = "one source per specialization"


def _code(text: str) -> str:
    """The rendered source without comments and spacing: what the compiler sees."""
    from ..jit.exports import _strip_comments

    return " ".join(_strip_comments(text).split())

NARROW_SASS = "vec_size 4: LDG.E.64"


def _template_checks(template_text: str, result) -> bool:
    """What a JIT cache needs of a template (on any machine): each parameter changes the rendered
    source, since the build's key is a hash of it, and vec_size reaches the SASS."""
    from ..jit import BuildError, Source, compile_cubin

    base = Specialization("silu", SILU.expr, "fp16", VEC_16B)
    variants = {"act_expr": replace(base, act_expr=GELU_TANH.expr), "dtype": replace(base, dtype="bf16"),
                "vec_size": replace(base, vec_size=4)}
    try:
        text, *others = render_many(template_text, [base, *variants.values()])
        rendered = dict(zip(variants, others))
    except Exception as e:  # a Jinja2 error, the sandbox's refusals, the time limit
        result.add("build", SOURCE_PER_SPEC, "fail", f"{TEMPLATE_NAME}: {type(e).__name__}: {e}")
        return False
    code = _code(text)
    problems = []
    for p, v in variants.items():
        pair = (f"act_expr `{base.act_expr}` and `{v.act_expr}` (both {base.label})" if p == "act_expr"
                else f"({base.label}) and ({v.label})")
        if rendered[p] == text:
            problems.append(f"`{p}` does not change the rendered source: {pair} would share one cache key, and "
                            "one would be handed the other's module")
        elif _code(rendered[p]) == code:
            problems.append(f"`{p}` changes only comments: {pair} compile to the same code")
    result.add("build", SOURCE_PER_SPEC, "fail" if problems else "pass", "; ".join(problems) or
               "act_expr, dtype and vec_size each change the rendered code: each specialization gets a cache key, "
               "and a module, of its own")
    narrow = variants["vec_size"]
    try:
        report = compile_cubin(Source(f"{TEMPLATE_NAME} (rendered: {narrow.label})", rendered["vec_size"]))
    except BuildError as e:
        result.add("sass", NARROW_SASS, "fail", e.summary())
        return True
    wrong = [k.name for k in report.kernels if not k.has_opcode("LDG.E.64") or k.has_opcode("LDG.E.128")]
    result.add("sass", NARROW_SASS, "fail" if wrong or not report.kernels else "pass",
               f"rendered with vec_size 4, {', '.join(wrong) or 'no kernel'} should load 8 bytes at a time (LDG.E.64, "
               "no LDG.E.128): is VEC rendered from vec_size?" if wrong or not report.kernels else
               "rendered with vec_size 4, the kernel loads 8 bytes at a time (LDG.E.64): the width is the template's")
    return True


# ------------------------------------------------------------------------------ the cases
# Day 2's shapes for every activation (tails, unaligned d, batch 1/19/99/989, a misaligned
# pointer, the intermediate sizes of real models, padding rows, small and large inputs), with
# Day 3's bounded inputs: gate and up uniform in [-4, 4], so that the error bounds below hold.
INPUT_BOUND = 4.0
LARGE_UP = 8.0  # the "large" case's up half: |out| <= act(gate bound) x 8 stays inside fp16
# Day 2's cases each pointer misaligned alone: for one activation (the alignment check is the same
# text in every rendering).
ALONE_ACT = "silu"


def _cases():
    cases, gated = [], gated_cases()
    for act in ACTIVATIONS:
        for c in gated:
            if c.perf and c.params["dtype"] != "bf16":
                continue  # timed once per activation, in bf16 (what LLMs serve in)
            if "alone" in c.params and act != ALONE_ACT:
                continue
            cases.append(replace(c, label=f"{act} {c.label}", params={**c.params, "act": act}))
    for c in gated:
        if c.params["dtype"] == NARROW.dtype and not c.perf and "alone" not in c.params:
            cases.append(replace(c, label=f"{NARROW.name} (vec_size {NARROW.vec_size}) {c.label}",
                                 params={**c.params, "act": SILU.name, "rendering": NARROW.name}))
    return cases


def bounds(p) -> tuple[float, float]:
    """(bound of |gate|, bound of |up|) of a case's inputs: uniform in [-bound, bound]."""
    magnitude = p.get("magnitude", "normal")
    if magnitude == "small":
        return INPUT_BOUND / 64, INPUT_BOUND / 64
    if magnitude == "large":  # gates where exp(-x) overflows (|x| > 88.7): act(x) is x or 0 there
        fp16, bf16 = ACTIVATIONS[p["act"]].large_gate
        return (fp16 if p["dtype"] == "fp16" else bf16), LARGE_UP
    return INPUT_BOUND, INPUT_BOUND


def _inputs(p, gen, device="cuda"):
    return uniform_gated_inputs(p, gen, *bounds(p), device)


def _call(mod, p, inputs, outputs):
    entry_point = f"{p.get('rendering', p['act'])}_and_mul_{p['dtype']}"  # (Specialization.entry_point)
    getattr(mod, entry_point)(outputs["out"], inputs["input"], p["tokens"], p["d"])


def _reference(p, inputs):
    x = inputs["input"].double()  # fp64 from the same fp16/bf16 inputs
    d = p["d"]
    return {"out": ACTIVATIONS[p["act"]].reference(x[:, :d]) * x[:, d:]}


def _eager(p, inputs, outputs):
    x, d = inputs["input"], p["d"]
    act = ACTIVATIONS[p["act"]]
    outputs["out"].copy_((act.eager or act.reference)(x[:, :d]) * x[:, d:])  # eager: a kernel per operation


# The fp32 evaluation of a graded expression, relative: __expf(-t) errs by <= 2 + 1.173 |t| ulp
# (<= 106 ulp = 6.3e-6 where the result is not 0 or x, |t| <= 88.7); t itself carries up to 4
# roundings (gelu_tanh: x * x, the fma, two multiplies), which exp turns into |t| x 4 ulp (2.1e-5);
# the division and the multiply by the up half add one rounding each. 2.8e-5 in all; 2^-14 leaves
# 2x room. erff errs by 2 ulp.
FP32_EVAL = 2.0 ** -14
assert expf_ulp(88.7) * ULP32 + 88.7 * 4 * ULP32 + 2 * ULP32 < FP32_EVAL / 2


def _tolerance(p):
    act = ACTIVATIONS[p["act"]]
    u = UNIT_ROUNDOFF[p["dtype"]]
    gate_bound, up_bound = bounds(p)
    floor = FP16_SUBNORMAL if p["dtype"] == "fp16" else 1e-30  # fp16 subnormals; bf16 reaches 1e-38
    # 0.5 |x| |up| times the cancelled error, with 2x slack (erff's argument rounding adds 1/8 of it)
    cancel = round_up(act.cancels * gate_bound * up_bound) if act.cancels else 0.0
    rejects = ("A second rounding (act(x1) rounded to fp16 before the multiply), fp16 arithmetic or a result "
               "through bf16 is rejected" if p["dtype"] == "fp16" else "bf16 arithmetic or a zero output is rejected")
    extra = (f"; plus {cancel:.3g} absolute: 1 + erff(v) for v < 0 keeps erff's 2 ulp of 1 (2^-23), times "
             f"0.5 |x| |up| <= {0.5 * gate_bound * up_bound:g}, 2x slack" if cancel else "")
    return Tolerance(round_up(u + FP32_EVAL), floor + cancel,
                     f"{p['dtype']} output: the fp32 evaluation of act(x) = {act.expr} (__expf <= 2 + 1.173 |t| ulp, "
                     f"erff 2 ulp, a few roundings: <= 2^-14 relative in all) rounded once ({u:.3g}){extra}. {rejects}")


EXERCISES = [
    Exercise(
        id="day13.act_and_mul_template",
        title="A Jinja2 template for the gated-activation family",
        summary="Write kernels/day13/act_and_mul_template.cu.j2: rendered with name, act_expr (a C++ expression "
                "of a float x), dtype (fp16 or bf16) and vec_size, it is the .cu source of out[t, i] = "
                "act(x[t, i]) * x[t, d + i] for that specialization, computed in fp32 and rounded once, "
                "vec_size elements per vector load, any d, aligned or not. Graded for SiLU, GELU (tanh and erf), "
                "squared ReLU and an activation the text does not name, in fp16 and bf16 with 16-byte vectors, and "
                "SiLU in fp16 at vec_size 4; "
                "each parameter must change the rendered source (the build cache's key).",
        entry_points=[f"cudaError_t {s.entry_point}({'__half' if s.dtype == 'fp16' else '__nv_bfloat16'}* out, "
                      f"const {'__half' if s.dtype == 'fp16' else '__nv_bfloat16'}* input, int64_t num_tokens, "
                      "int64_t d, cudaStream_t stream)" for s in GRADED],
        cases=_cases(),
        make_inputs=_inputs,
        make_outputs=gated_outputs,
        call=_call,
        reference=_reference,
        tolerance=_tolerance,
        target=memory_bound(lambda p: 3 * 2 * p["tokens"] * p["d"], 0.95,
                            also=(Baseline("torch", "act(x[:, :d]) * x[:, d:] (eager)", _eager),)),
        target_note="on an H100, FlashInfer's silu_and_mul and gelu_tanh_and_mul measured 1.01x the copy, eager "
                    "PyTorch 0.36x (reports/gpu-notebooks.json)",
        required_sass={"LDG.E.128": "16-byte vector loads (vec_size 8: course::vec_t<T, 8>::load)"},
        max_registers=64,
        max_registers_per_arch={"12.0": 104},  # sm_120's compiler gives the bf16 kernels ~96-98
        notebook=NOTEBOOK,
        learner_file="template",
        render=render,
        template_checks=_template_checks,
    ),
]
