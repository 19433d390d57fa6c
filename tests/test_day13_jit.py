"""Day 13's cache checks can fail: a build path whose key ignores the flags or the source, and a
repeat request slower than the limit, are each caught (the learner's template cannot break the key,
so these are broken here, not in tests/mutants/); `grader release` makes a template's stub; and the
tolerances pass the graded expressions evaluated in fp32 and reject a second rounding (on the CPU)."""
import pytest
import torch

from grader import exercises, paths, release
from grader.jit import extension
from conftest import check

EXERCISE = "day13.act_and_mul_template"
_real = extension.cache_key


def _cache_key_item(**kw):
    result = check(EXERCISE, solutions=True, quiet=True, perf=False, seeds=1, **kw)
    return next(i for i in result.items if i.name == "cache key")


def test_the_solution_passes_the_cache_key_check():
    item = _cache_key_item()
    assert item.status == "pass", item.detail


@pytest.mark.parametrize("broken, says", [
    (lambda sources, binding, arch, features, flags=(): _real(sources, binding, arch, features, ()),
     "ignores the nvcc flags"),
    (lambda sources, binding, arch, features, flags=(): _real([], binding, arch, features, flags),
     "ignores the source"),
], ids=["key_ignores_flags", "key_ignores_source"])
def test_a_key_that_leaves_out_an_input_is_caught(monkeypatch, broken, says):
    monkeypatch.setattr(extension, "cache_key", broken)
    item = _cache_key_item()
    assert item.status == "fail" and says in item.detail, item.detail


def test_a_slow_repeat_request_is_caught(monkeypatch):
    ex = exercises.get(EXERCISE)
    monkeypatch.setattr(ex, "cache_hit_s", 0.0)  # no request is that fast
    item = _cache_key_item()
    assert item.status == "fail" and "took" in item.detail, item.detail


def test_release_makes_a_templates_stub(tmp_path, monkeypatch):
    solution = paths.SOLUTIONS / "day13" / "act_and_mul_template.cu.j2"
    committed = (paths.KERNELS / "day13" / solution.name).read_text()
    (tmp_path / "solutions" / "day13").mkdir(parents=True)
    (tmp_path / "solutions" / "day13" / solution.name).write_text(solution.read_text())
    monkeypatch.setattr(paths, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(paths, "KERNELS", tmp_path / "kernels")
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    assert release.release(echo=lambda s: None) == 0
    stub = tmp_path / "kernels" / "day13" / solution.name
    assert stub.read_text() == committed  # what kernels/day13 holds
    assert "return {{ act_expr }};" not in committed and "return x;" in committed
    stub.write_text(stub.read_text() + "{# my work #}\n")
    assert release.release(force=True, echo=lambda s: None) == 0
    assert (stub.parent / (stub.name + ".bak")).read_text().endswith("{# my work #}\n")


# The graded expressions evaluated as the kernel does (in fp32, rounded once to the storage type),
# with PyTorch on the CPU: every untimed case must pass its tolerance; rounding act(x) to the
# storage type before the multiply (two roundings) must fail in most of them.
FP32_FORMS = {
    "silu": lambda x: x / (1 + torch.exp(-x)),
    "gelu_tanh": lambda x: x / (1 + torch.exp(-1.5957691216057308 * x * (0.044715 * x * x + 1))),
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(0.7071067811865476 * x)),
    "relu2": lambda x: torch.where(x > 0, x * x, torch.zeros_like(x)),
    "unseen": lambda x: x / (1 + torch.exp(-1.702 * x)),
}


def test_the_tolerances_pass_fp32_evaluation_and_reject_two_roundings():
    from grader.check.compare import compare

    ex = exercises.get(EXERCISE)
    assert set(FP32_FORMS) == {c.params["act"] for c in ex.cases}
    wrong, missed = [], {}
    for case in (c for c in ex.cases if not c.perf):
        p = case.params
        x = ex.make_inputs(p, torch.Generator().manual_seed(0), device="cpu")["input"]
        want, tol = ex.reference(p, {"input": x})["out"], ex.tolerance(p)
        gate, up = x[:, :p["d"]].float(), x[:, p["d"]:].float()
        act = FP32_FORMS[p["act"]](gate)
        right = compare("out", (act * up).to(x.dtype), want, tol.rtol, tol.atol)
        if not right.ok:
            wrong.append(f"{case.label}: {right.message()}")
        twice = compare("out", (act.to(x.dtype).float() * up).to(x.dtype), want, tol.rtol, tol.atol)
        missed.setdefault((p["act"], p["dtype"]), []).append(twice.ok)
    assert not wrong, "\n".join(wrong[:5])
    for key, passed in missed.items():  # tiny cases (1-3 elements) may pass by luck
        assert sum(passed) <= len(passed) // 4, f"{key}: two roundings passed {sum(passed)} of {len(passed)} cases"


# A learner's template is rendered in a process of its own (grader/exercises/_render_child.py): Jinja2's
# sandbox refuses what would reach Python's internals; a template that loops too long, builds a huge
# value or renders a huge source is stopped by the child's limits, which hold on every thread.
@pytest.mark.parametrize("attack, says", [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "unsafe"),
    ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "longer than"),
    ("{% set s = 'x' * 1500000000 %}", "MemoryError"),
    ("{% for a in range(100000) %}{{ 'padding' * 100 }}{% endfor %}", "characters"),
], ids=["python_internals", "endless_loop", "huge_value", "huge_source"])
def test_a_hostile_template_is_refused_when_rendered(tmp_path, monkeypatch, attack, says):
    from grader.exercises import day13

    monkeypatch.setattr(day13, "RENDER_LIMIT_S", 0.5)
    solution = (paths.SOLUTIONS / "day13" / "act_and_mul_template.cu.j2").read_text()
    path = tmp_path / "act_and_mul_template.cu.j2"
    path.write_text(solution.replace('#include "course/vec.cuh"\n', f'#include "course/vec.cuh"\n// {attack}\n', 1))
    result = check(EXERCISE, source=path, quiet=True, perf=False, seeds=1)
    first = result.failures[0]
    assert first.name == "renders (Jinja2)" and says in first.detail, str(result)
