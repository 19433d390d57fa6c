"""Day 13's attention variants (grader/exercises/day13_variants.py, kernels/day13/attention_variant.cu.j2),
on the CPU: every variant renders, each configuration to a text of its own (the build's cache key);
the renderings compile for sm_90 without spills, with MUFU.TANH exactly where the soft cap's fast tanh
is; the registry refuses what it does not hold; the PyTorch references agree with plain loops."""
import math

import pytest
import torch

from grader.jit import compile_cubin, parse_exports
from grader.exercises import day12
from grader.exercises import day13_variants as V

CAUSAL = {name: V.AttentionConfig(name, "bf16", 128, causal=True) for name in V.VARIANTS}
PRECISE_TANH = V.AttentionConfig("soft_cap", "bf16", 128, causal=True, fast_tanh=False)
PLAIN_FULL = V.AttentionConfig("plain", "bf16", 128, causal=False)


def _registrable():
    return [V.AttentionConfig(v, dt, hd, c, sw, ft) for v in V.VARIANTS for dt in V.DTYPES for hd in V.HEAD_DIMS
            for c in (False, True) for sw in (False, True) for ft in (False, True)
            if c or not V.VARIANTS[v].causal_only]


@pytest.fixture(scope="module")
def reports():
    """One compile per configuration the SASS tests read (cached by content hash across runs)."""
    return {c: compile_cubin(V.source(c)) for c in [*CAUSAL.values(), PRECISE_TANH, PLAIN_FULL]}


def test_every_configuration_renders_to_a_text_of_its_own():
    texts = {c: V.render(c) for c in _registrable()}
    assert len(set(texts.values())) == len(texts)
    for c, text in texts.items():
        assert "{{" not in text and "{%" not in text and c.entry_point in text
        assert f"constexpr int HEAD_DIM = {c.head_dim};" in text
        assert f"constexpr bool CAUSAL = {'true' if c.causal else 'false'};" in text


def test_each_variant_renders_its_hooks_and_arguments():
    for name, c in CAUSAL.items():
        var, text = V.VARIANTS[name], V.render(c)
        (export,) = parse_exports(text)
        assert export.name == c.entry_point
        assert [p.name for p in export.params][-len(var.args) - 2:] == ["sm_scale", *var.arg_names, "stream"]
        assert f"constexpr bool LOGITS_HOOK = {'true' if var.logits else 'false'};" in text
        assert f"constexpr bool MASK_HOOK = {'true' if var.mask else 'false'};" in text
        for piece in (var.logits, var.mask, var.check):
            assert piece in text


def test_renderings_compile_without_spills(reports):
    for c, report in reports.items():
        (k,) = report.kernels
        assert k.spill_stores == 0 and k.spill_loads == 0 and k.stack_bytes == 0, (c.label, k)
        for op in ("HMMA.16816.F32", "LDSM", "LDGSTS", "MUFU.EX2"):
            assert k.has_opcode(op), (c.label, op)


def test_mufu_tanh_only_in_the_soft_cap_with_the_fast_tanh(reports):
    for c, report in reports.items():
        has = report.kernels[0].has_opcode("MUFU.TANH")
        assert has == (c.variant == "soft_cap" and c.fast_tanh), c.label
    # tanhf instead is a sequence of instructions per score: many more than one MUFU.TANH
    fast, precise = (sum(reports[c].kernels[0].opcodes().values()) for c in (CAUSAL["soft_cap"], PRECISE_TANH))
    assert precise > fast + 64


def test_the_causal_mask_is_compiled_in_only_where_asked(reports):
    full, causal = (sum(reports[c].kernels[0].opcodes().values()) for c in (PLAIN_FULL, CAUSAL["plain"]))
    assert full < causal


def test_the_registry_refuses_what_it_does_not_hold():
    reg = V.KernelRegistry([CAUSAL["soft_cap"], CAUSAL["plain"]])
    assert CAUSAL["soft_cap"] in reg and len(reg) == 2
    with pytest.raises(V.NotRegistered, match=r"no kernel registered for \(alibi, bf16, d 128, causal\)"):
        reg.lookup(CAUSAL["alibi"])
    with pytest.raises(V.NotRegistered, match=r"registered: \(soft_cap, bf16, d 128, causal\)$"):
        reg.lookup(PRECISE_TANH)  # the nearest: the same variant's
    q = torch.zeros(1, 4, 2, 96, dtype=torch.bfloat16)  # head_dim 96: never registered, nothing is built
    with pytest.raises(V.NotRegistered, match="d 96"):
        reg.attention(q, q, q, variant="plain", causal=True)
    with pytest.raises(ValueError, match="causal only"):
        reg.register(V.AttentionConfig("sliding_window", causal=False))
    for wrong in (V.AttentionConfig("gelu"), V.AttentionConfig("plain", "fp32"), V.AttentionConfig("plain", head_dim=96)):
        with pytest.raises(ValueError, match="cannot register"):
            reg.register(wrong)
    with pytest.raises(KeyError, match="no attention variant"):
        V.render(V.AttentionConfig("gelu"))


def _inputs(sq=37, skv=53, qo=4, kv=2, hd=64, seed=0):
    p = day12.params("bf16", 2, sq, skv, qo, kv, hd)
    return p, day12.make_inputs(p, torch.Generator().manual_seed(seed), device="cpu")


def _loop(x, *, variant, causal, sm_scale, **args):
    """o, lse query by query in fp64, the variant written out by hand."""
    q, k, v = (x[n].double() for n in "qkv")
    b, sq, qo, hd = q.shape
    skv, group = k.shape[1], qo // k.shape[2]
    o, lse = torch.zeros(b, sq, qo, hd, dtype=torch.float64), torch.full((b, sq, qo), -math.inf, dtype=torch.float64)
    for bi in range(b):
        for h in range(qo):
            for i in range(sq):
                pos = i + skv - sq
                keys = [j for j in range(skv) if (not causal or j <= pos)
                        and (variant != "sliding_window" or j >= pos - args["window_left"])]
                if not keys:
                    continue
                s = torch.stack([q[bi, i, h] @ k[bi, j, h // group] * sm_scale for j in keys])
                if variant == "soft_cap":
                    s = args["logits_soft_cap"] * torch.tanh(s / args["logits_soft_cap"])
                if variant == "alibi":
                    s = s + args["alibi_slopes"][h].double() * torch.tensor([j - pos for j in keys], dtype=torch.float64)
                lse[bi, i, h] = torch.logsumexp(s, 0)
                o[bi, i, h] = torch.softmax(s, 0) @ v[bi, keys, h // group]
    return o, lse


ARGS = {"plain": {}, "soft_cap": {"logits_soft_cap": 5.0}, "alibi": {"alibi_slopes": V.alibi_slopes(4, "cpu")},
        "sliding_window": {"window_left": 7}}


@pytest.mark.parametrize("variant, causal", [(v, c) for v in V.VARIANTS for c in (False, True)
                                             if c or not V.VARIANTS[v].causal_only],
                         ids=lambda x: x if isinstance(x, str) else ("causal" if x else "full"))
def test_the_reference_agrees_with_a_loop(variant, causal):
    p, x = _inputs(sq=53 if causal else 37, skv=37 if causal else 53)  # causal: rows without a key too
    o, lse = V.reference(x["q"], x["k"], x["v"], variant=variant, causal=causal, **ARGS[variant])
    want_o, want_lse = _loop(x, variant=variant, causal=causal, sm_scale=day12.sm_scale(p), **ARGS[variant])
    assert torch.equal(torch.isinf(lse), torch.isinf(want_lse)) and not o[torch.isinf(want_lse)].any()
    fin = torch.isfinite(want_lse)
    assert torch.allclose(o.double(), want_o, atol=1e-5) and torch.allclose(lse.double()[fin], want_lse[fin], atol=1e-5)


def test_the_plain_reference_is_day12s_and_the_variants_reduce_to_it():
    p, x = _inputs()
    p = {**p, "causal": True}
    o, lse = V.reference(x["q"], x["k"], x["v"], causal=True)
    ref = day12.reference(p, x)
    assert torch.allclose(o.double(), ref["o"], atol=1e-5) and torch.allclose(lse.double(), ref["lse"], atol=1e-5)
    # a cap far above every logit, slopes of 0 and a window of every key change nothing
    for variant, args in (("soft_cap", {"logits_soft_cap": 1e6}), ("alibi", {"alibi_slopes": torch.zeros(4)}),
                          ("sliding_window", {"window_left": 10 ** 6})):
        o2, lse2 = V.reference(x["q"], x["k"], x["v"], variant=variant, causal=True, **args)
        assert torch.allclose(o2, o, atol=1e-5) and torch.allclose(lse2, lse, atol=1e-4), variant


def test_the_soft_cap_bounds_the_logits_and_its_tolerance_counts_tanh_approx():
    p, x = _inputs(seed=1)
    x["q"] = (x["q"].float() * 20).bfloat16()  # logits far past the cap
    _, lse = V.reference(x["q"], x["k"], x["v"], variant="soft_cap", causal=False, logits_soft_cap=5.0)
    assert (lse <= 5.0 + math.log(p["seq_kv"]) + 1e-4).all()  # every logit < cap: lse < cap + ln(n)
    plain, capped = (V.tolerance(V.AttentionConfig(v), 1000, **ARGS[v]) for v in ("plain", "soft_cap"))
    assert capped.atol == pytest.approx(plain.atol + 2 * 5.0 * 2.0 ** -11)
    precise = V.tolerance(V.AttentionConfig("soft_cap", fast_tanh=False), 1000, **ARGS["soft_cap"])
    assert precise.atol == plain.atol


def test_max_excess_counts_inf_and_nan():
    tol = V.tolerance(PLAIN_FULL, 100)
    ref = torch.tensor([1.0, -math.inf])
    assert V.max_excess(torch.tensor([1.0, -math.inf]), ref, tol) <= 0
    assert V.max_excess(torch.tensor([1.0, 0.0]), ref, tol) == math.inf
    assert V.max_excess(torch.tensor([math.nan, -math.inf]), ref, tol) == math.inf
    assert V.max_excess(torch.tensor([1.5, -math.inf]), ref, tol) > 0
