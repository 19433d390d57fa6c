"""Near formulas on the CPU: what Day 3's GELU-tanh tolerance admits and what it can reject.

A correct kernel computes gelu_tanh in fp32 from the fp16/bf16 inputs with tanh.approx.f32 (relative
error up to 2^-10.987, which the tolerance must admit) and rounds once. The exact (erf) GELU differs from
the tanh form by at most 4.67e-4 |tanh| (at |v| = 1.139): less than tanh.approx's error, so no elementwise
tolerance that accepts a tanh.approx kernel can reject it, whatever the inputs. These tests prove that
(so the exercise refuses erf in its source instead: Exercise.source_deny, mutant erf_gelu_with_dead_tanh), check
that the tolerance admits the tanh.approx kernel on every correctness case, and that Day 13, which allows
no tanh.approx, does tell its erf GELU from its tanh form. No GPU: the exercises' own input makers run on
the CPU, the kernels are emulated in fp32 with torch."""
import math

import pytest
import torch

from grader import exercises
from grader.check.compare import compare
from grader.exercises import day03
from grader.spec import torch_dtype

SQRT_2_OVER_PI = 0.7978845608028654
GELU_CUBIC = 0.044715
E = day03.TANH_APPROX_ERR  # tanh.approx.f32's error, the exercise's (larger) reading: 2^-10.987
GELU = exercises.all_exercises()["day03.gelu_tanh_and_mul"]


def _halves(p, inputs):
    x, d = inputs["input"], p["d"]
    return x[:, :d].float(), x[:, d:].float()


def _tanh_form(p, inputs, rel_err=0.0):
    """The reference kernel in fp32: tanh of the same fp32 argument, times (1 + rel_err) as tanh.approx
    may err (a number or a tensor of per-element errors), one rounding to the output type."""
    v, u = _halves(p, inputs)
    inner = v * (SQRT_2_OVER_PI * GELU_CUBIC * v * v + SQRT_2_OVER_PI)
    t = (torch.tanh(inner.double()) * (1 + rel_err)).float()
    half_v = 0.5 * v
    return ((half_v * t + half_v) * u).to(torch_dtype(p["dtype"]))


def _erf_form(p, inputs):
    """The exact GELU in fp32 (erff), one rounding to the output type."""
    v, u = _halves(p, inputs)
    half_v = 0.5 * v
    return ((half_v * torch.special.erf(v * 0.7071067811865476) + half_v) * u).to(torch_dtype(p["dtype"]))


def _toward_erf(p, inputs):
    """tanh.approx's worst case against the erf GELU: the full error E, signed toward erf(v / sqrt 2)."""
    v, _ = _halves(p, inputs)
    v = v.double()
    t = torch.tanh(SQRT_2_OVER_PI * (v + GELU_CUBIC * v ** 3))
    return E * torch.sign((torch.special.erf(v / math.sqrt(2.0)) - t) * t)


def _grade(p, inputs, got):
    tol = GELU.tolerance(p)
    return compare("out", got, GELU.reference(p, inputs)["out"], tol.rtol, tol.atol)


def test_erf_gelu_is_closer_to_the_tanh_form_than_tanh_approx_errs():
    # fp64 on a grid of 1e-5 over [-10, 10]: where the two formulas differ most, relative to tanh
    v = torch.arange(-1_000_000, 1_000_001, dtype=torch.float64) * 1e-5
    v = v[v != 0]
    t = torch.tanh(SQRT_2_OVER_PI * (v + GELU_CUBIC * v ** 3))
    erf = torch.special.erf(v / math.sqrt(2.0))
    rel = (erf - t).abs() / t.abs()
    worst = int(rel.argmax())
    assert abs(abs(float(v[worst])) - 1.139) < 2e-3 and 4.66e-4 < float(rel[worst]) < 4.67e-4
    assert float(rel.max()) < 2.0 ** -11 < E  # inside tanh.approx.f32's documented error, both readings
    gelu_diff = (0.5 * v * (erf - t)).abs()  # the largest absolute difference of the GELUs: 4.73e-4
    assert abs(abs(float(v[int(gelu_diff.argmax())])) - 2.699) < 2e-3 and float(gelu_diff.max()) < 4.74e-4


def _small_cases():
    return [c for c in GELU.cases if not c.perf and c.params["tokens"] * c.params["d"] <= 1 << 20]


@pytest.mark.parametrize("case", _small_cases(), ids=lambda c: c.label)
def test_the_tolerance_admits_tanh_approx_and_cannot_reject_erf(case):
    p = case.params
    inputs = GELU.make_inputs(p, torch.Generator().manual_seed(0), "cpu")
    for name, got in [("fp32 tanh", _tanh_form(p, inputs)), ("tanh.approx +E", _tanh_form(p, inputs, E)),
                      ("tanh.approx -E", _tanh_form(p, inputs, -E)),
                      ("tanh.approx toward erf", _tanh_form(p, inputs, _toward_erf(p, inputs)))]:
        result = _grade(p, inputs, got)
        assert result.ok, f"{case.label}: a correct kernel ({name}) fails: {result.message()}"
    # the erf GELU passes the tolerance too: the source check refuses it (tests/mutants: erf_gelu_with_dead_tanh)
    assert _grade(p, inputs, _erf_form(p, inputs)).ok


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_no_input_separates_erf_from_tanh_approx(dtype):
    # The most favourable inputs: every gate value of the type with 0.5 <= |v| <= 2 (the erf GELU's
    # relative difference is largest there), up halves of 4 to 16. Rounding is monotone and erf's
    # value lies between the exact tanh form's and tanh.approx's worst case toward it, so the erf GELU
    # is never farther from the reference than a kernel the tolerance has to accept.
    dt = torch_dtype(dtype)
    bits = torch.arange(0, 1 << 15, dtype=torch.int32).to(torch.int16).view(dt)
    gates = bits[(bits.float() >= 0.5) & (bits.float() <= 2.0)]
    gates = torch.cat([gates, -gates])
    ups = torch.linspace(4.0, 16.0, 7).repeat(2) * torch.tensor([1.0] * 7 + [-1.0] * 7)
    x = torch.cat([gates.repeat(len(ups)), ups.repeat_interleave(len(gates))]).to(dt)
    p = {"dtype": dtype, "tokens": 1, "d": len(gates) * len(ups), "offset": 0, "magnitude": "normal"}
    inputs = {"input": x.reshape(1, -1)}
    expected = GELU.reference(p, inputs)["out"]
    err = {name: (got.double() - expected).abs() for name, got in [
        ("exact", _tanh_form(p, inputs)), ("approx", _tanh_form(p, inputs, _toward_erf(p, inputs))),
        ("erf", _erf_form(p, inputs))]}
    admitted = torch.maximum(err["exact"], err["approx"])  # the least any sound tolerance must admit
    assert (err["erf"] <= admitted).all()
    assert (err["erf"] > err["exact"]).sum() > p["d"] // 10  # erf moves many outputs, each by less than E


def test_day13_tells_the_erf_gelu_from_the_tanh_form():
    # Day 13 renders the expression it is given (no tanh.approx): its tolerance is one rounding plus
    # 2^-14, and the negative gates' outputs (the 1 + tanh cancellation) differ by percents.
    from grader.exercises import day13

    act = exercises.all_exercises()["day13.act_and_mul_template"]
    for dtype in ("fp16", "bf16"):
        p = {"dtype": dtype, "tokens": 7, "d": 4100, "offset": 0, "magnitude": "normal", "act": "gelu_tanh"}
        inputs = act.make_inputs(p, torch.Generator().manual_seed(0), "cpu")
        x, d = inputs["input"].double(), p["d"]
        tol = act.tolerance(p)
        expected = act.reference(p, inputs)["out"]
        erf = (day13.ACTIVATIONS["gelu"].reference(x[:, :d]) * x[:, d:]).to(torch_dtype(dtype))
        tanh = (day13.ACTIVATIONS["gelu_tanh"].reference(x[:, :d]) * x[:, d:]).to(torch_dtype(dtype))
        assert compare("out", tanh, expected, tol.rtol, tol.atol).ok
        assert not compare("out", erf, expected, tol.rtol, tol.atol).ok


def test_the_source_check_refuses_erf_in_the_tanh_exercise():
    """What the tolerance cannot see the source check does: erf anywhere in Day 3's GELU-tanh file."""
    import types

    from grader.check.result import Result
    from grader.check.static import static_checks
    from grader.paths import SOLUTIONS

    text = (SOLUTIONS / "day03" / "gelu_tanh_and_mul.cu").read_text()
    ok = Result(GELU.id, "x.cu", "cpu")
    assert static_checks(GELU, types.SimpleNamespace(path="x.cu", text=text), ok), ok.items
    bad = Result(GELU.id, "x.cu", "cpu")
    src = text.replace("#include", "__device__ float g(float v) { return erff(v); }\n#include", 1)
    assert not static_checks(GELU, types.SimpleNamespace(path="x.cu", text=src), bad)
    assert any("computes GELU with erf" in i.detail for i in bad.failures)
