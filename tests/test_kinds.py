"""The grader's kinds of target, comparison and learner file, on exercises that exist only to
test them (tests/kinds/). Compile-only checks and the statistics run everywhere; timing and
statistical grading of real kernels on a GPU (the GPU verification's self-test selects them)."""
from pathlib import Path

import pytest

from conftest import gpu

from grader import exercises
from conftest import check
from grader.check.compare import compare
from grader.check.stats import chi_square_p_value, compare_distribution
from grader.spec import dot_tolerance

KINDS = Path(__file__).parent / "kinds"


@pytest.fixture(autouse=True)
def test_only_exercises(monkeypatch):
    """The tests/kinds exercises, for these tests only (the grading processes inherit it)."""
    monkeypatch.setenv("COURSE_EXTRA_EXERCISES", str(KINDS / "exercises.py"))


def _grade(name, source, **kw):
    return check(f"kinds.{name}", source=source, quiet=True, **kw)


def _first(result):
    f = result.failures
    return f"{f[0].group} / {f[0].name}: {f[0].detail}" if f else "no failure"


def test_test_only_exercises_register_and_describe_their_targets():
    ex = exercises.all_exercises()
    assert ex["kinds.wmma_gemm"].target.kind == "compute" and ex["kinds.wmma_gemm"].target.unit == "TFLOP/s"
    assert ex["kinds.wmma_gemm"].target.baseline.name == "matmul"
    assert ex["kinds.sampler"].target.describe().startswith(">= 5x faster than torch sort")
    assert ex["kinds.scale_template"].stub_path.name == "scale_template.cu.j2"
    assert ex["kinds.py_scale"].stub_path.name == "py_scale.py"


# ------------------------------------------------------------------- statistics (CPU)
def test_chi_square_survival_function_matches_known_quantiles():
    assert abs(chi_square_p_value(3.841459, 1) - 0.05) < 1e-5
    assert abs(chi_square_p_value(18.307038, 10) - 0.05) < 1e-5
    assert chi_square_p_value(0.0, 5) == pytest.approx(1.0)


def _distributions(vocab=40, distinct=3, each=4000, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    base = torch.rand(distinct, vocab, generator=g) ** 3
    base[:, vocab // 2:] = 0.0  # half the tokens outside the support
    base /= base.sum(1, keepdim=True)
    return base.repeat_interleave(each, 0), g


def test_right_draws_pass_and_wrong_ones_fail_the_statistical_grading():
    import torch

    probs, g = _distributions()
    right = torch.multinomial(probs, 1, generator=g).squeeze(1)
    assert compare_distribution("tokens", right, probs, 1e-4).ok
    # Off by one token: what a sampler with a wrong boundary draws.
    shifted = torch.multinomial(probs.roll(1, dims=1), 1, generator=g).squeeze(1)
    assert not compare_distribution("tokens", shifted, probs, 1e-4).ok
    # Slightly flattened (temperature 1.15): a near-miss the test must still see.
    flat = probs ** (1 / 1.15)
    wrong = torch.multinomial(flat / flat.sum(1, keepdim=True), 1, generator=g).squeeze(1)
    c = compare_distribution("tokens", wrong, probs, 1e-4)
    assert not c.ok and "do not follow" in c.message()
    # A single token of probability 0 fails the hard check, whatever the statistics say.
    right[5] = probs.shape[1] - 1
    c = compare_distribution("tokens", right, probs, 1e-4)
    assert not c.ok and "outside the support" in c.message()


def test_the_statistical_grading_fails_a_right_sampler_rarely():
    # At alpha = 0.05 per case, 100 right samplers: a binomial(100, <= 0.05) count of failures.
    import torch

    probs, g = _distributions(distinct=2, each=2000, seed=1)
    fails = sum(not compare_distribution("t", torch.multinomial(probs, 1, generator=g).squeeze(1), probs, 0.05).ok
                for _ in range(100))
    assert fails <= 14  # P(Binomial(100, 0.05) > 14) < 1e-4


def test_draws_that_repeat_each_other_fail_and_independent_ones_pass():
    """Rows of one call, and the same row in two calls (the caller's next step, at another offset), must
    draw independently: a sampler that ignores the offset (the second call repeats the first) or gives
    neighbouring rows the same random number passes the chi-square test of the pooled counts, not this."""
    import torch

    probs, g = _distributions(distinct=2, each=2000, seed=2)
    rows = probs.shape[0]
    twice = torch.cat([probs, probs])
    first = torch.multinomial(probs, 1, generator=g).squeeze(1)
    second = torch.multinomial(probs, 1, generator=g).squeeze(1)
    assert compare_distribution("t", torch.cat([first, second]), twice, 1e-6, (1, rows)).ok
    c = compare_distribution("t", torch.cat([first, first]), twice, 1e-6, (1, rows))
    assert not c.ok and "repeat each other" in c.message() and f"{rows} rows on" in c.message()
    paired = first.clone()
    paired[1::2] = paired[0::2]  # neighbours share a random number
    c = compare_distribution("t", paired, probs, 1e-6, (1,))
    assert not c.ok and "the next row's draw" in c.message()
    # at alpha = 0.05 per case, right samplers with the pair tests on: still rare
    fails = sum(not compare_distribution("t", torch.multinomial(twice, 1, generator=g).squeeze(1), twice, 0.05,
                                         (1, rows)).ok for _ in range(100))
    assert fails <= 14


def test_dot_tolerance_grows_with_k_passes_fp32_accumulation_and_rejects_fp16():
    import torch

    g = torch.Generator().manual_seed(0)
    assert dot_tolerance("bf16", 16384).atol > 4 * dot_tolerance("bf16", 1024).atol
    for k in (256, 4096, 16384):
        a = torch.randn(8, k, generator=g).half().float()
        b = torch.randn(8, k, generator=g).half().float()
        exact = (a.double() * b.double()).sum(1)
        tol = dot_tolerance("fp16", k)
        fp32 = torch.zeros(8)
        for i in range(0, k, 64):  # fp32 accumulation in chunks, in another order than the reference
            fp32 += (a[:, i:i + 64] * b[:, i:i + 64]).sum(1)
        assert compare("c", fp32.half(), exact, tol.rtol, tol.atol).ok
        if k >= 4096:  # summing in fp16 drifts by whole units: rejected
            fp16 = torch.zeros(8, dtype=torch.float16)
            for i in range(0, k, 16):
                fp16 = (fp16.float() + (a[:, i:i + 16] * b[:, i:i + 16]).sum(1)).half()
            assert not compare("c", fp16, exact, tol.rtol, tol.atol).ok


def test_exact_comparison_of_integer_outputs():
    import torch

    want = torch.arange(10)
    got = want.clone()
    assert compare("idx", got, want, 0.0, 0.0).ok
    got[3] = 4
    c = compare("idx", got, want, 0.0, 0.0)
    assert not c.ok and c.mismatches == 1 and "[3]: yours 4 vs expected 3" in c.message()


# --------------------------------------------------------------- learner files (any machine)
def test_a_template_is_rendered_then_checked_like_a_kernel_file():
    res = _grade("scale_template", KINDS / "scale.cu.j2", perf=False)
    assert res.ok, str(res)
    assert any(i.name == "renders (Jinja2)" and i.status == "pass" for i in res.items)
    assert any(i.group == "source" and i.name == "entry points" and "square" in i.detail for i in res.items)


def test_a_broken_template_fails_with_its_line(tmp_path):
    bad = tmp_path / "scale.cu.j2"
    bad.write_text((KINDS / "scale.cu.j2").read_text().replace("{{ expr }};", "{{ expr };"))
    res = _grade("scale_template", bad, perf=False)
    first = res.failures[0]
    assert first.group == "build" and first.name == "renders (Jinja2)" and "scale.cu.j2:" in first.detail, str(res)


def test_a_python_module_is_checked_without_being_run(tmp_path):
    res = _grade("py_scale", KINDS / "py_scale.py", perf=False)
    assert res.ok, str(res)
    for name, text, says in (("evil", "import os\nos.system('true')\n", "imports os"),
                             ("sneaky", "f = __import__('os')\n", "uses __import__"),
                             ("broken", "def scale(x:\n", "parses"),
                             ("missing", "import torch\ndef scale(x, a):\n    return x * a\n", "argmax")):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        res = _grade("py_scale", path, perf=False)
        assert res.failures and res.failures[0].group == "source" and says in _first(res), f"{name}: {res}"


def test_compute_bound_and_sampler_kernels_compile_with_their_sass():
    assert _grade("wmma_gemm", KINDS / "wmma_gemm.cu", perf=False).ok
    assert _grade("sampler", KINDS / "sampler.cu", perf=False).ok


# ------------------------------------------------------------------------------ on a GPU
@gpu
def test_compute_bound_target_is_measured_in_tflops_against_cublas():
    res = _grade("wmma_gemm", KINDS / "wmma_gemm.cu")
    assert res.passed, str(res)
    (perf,) = res.performance()
    m = perf.metrics
    assert m["kind"] == "compute" and m["unit"] == "TFLOP/s" and m["baseline"] == "matmul" and m["valid"]
    assert 0 < m["value"] < m["baseline_value"] and m["matmul_ratio"] == m["ratio"] >= 0.01
    assert m["flops"] == 2 * 4096 ** 3


@gpu
def test_fp16_accumulation_fails_the_tolerance_that_grows_with_k(tmp_path):
    wrong = tmp_path / "wmma_gemm.cu"
    wrong.write_text("#define ACC_T __half\n" + (KINDS / "wmma_gemm.cu").read_text())
    res = _grade("wmma_gemm", wrong, perf=False)
    failing = [i.name for i in res.failures if i.group == "correctness"]
    assert "32x32x16384" in failing, str(res)


@gpu
def test_latency_target_and_statistical_grading_of_a_sampler():
    res = _grade("sampler", KINDS / "sampler.cu")
    assert res.passed, str(res)
    (perf,) = res.performance()
    m = perf.metrics
    assert m["kind"] == "latency" and m["unit"] == "us" and m["baseline"] == "torch" and m["valid"]
    assert m["ratio"] == pytest.approx(m["baseline_value"] / m["value"]) and m["ratio"] >= 5
    stream = [i for i in res.items if i.name.startswith("on a non-default CUDA stream")]
    assert stream and stream[0].status == "pass"


@gpu
@pytest.mark.parametrize("edit, says", [
    # a boundary off by one: the token after the chosen one (sometimes outside the support)
    (("tokens[row] = last;", "tokens[row] = last + 1 < vocab ? last + 1 : last;"), "outside the support"),
    # the first token of the chunk that holds the draw, not the one the draw falls on: in the
    # support, yet the wrong distribution
    (("    if (acc >= u) break;", "    break;"), "do not follow"),
    # seeded from the clock: the same seed and offset give other tokens
    (("curand_init(seed, row, offset, &state);", "curand_init(seed ^ clock64(), row, offset, &state);"),
     "not repeatable"),
])
def test_wrong_samplers_fail(tmp_path, edit, says):
    wrong = tmp_path / "sampler.cu"
    text = (KINDS / "sampler.cu").read_text()
    assert edit[0] in text
    wrong.write_text(text.replace(edit[0], edit[1]))
    res = _grade("sampler", wrong, perf=False)
    assert any(i.group == "correctness" and says in f"{i.name} {i.detail}" for i in res.failures), str(res)


@gpu
def test_template_and_python_exercises_run_in_the_worker():
    for name, source in (("scale_template", KINDS / "scale.cu.j2"), ("py_scale", KINDS / "py_scale.py")):
        res = _grade(name, source, perf=False)
        assert res.passed, str(res)
        assert any(i.name.startswith("on a non-default CUDA stream") and i.status == "pass" for i in res.items)
