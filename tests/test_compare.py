import pytest
import torch

from grader.check.compare import compare, unchanged

# The chunked comparisons on the tensors the grading processes compare: CUDA ones, where there is a GPU.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]


def test_exact_match_and_tolerance():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert compare("out", a, a.double(), 1e-6, 1e-6).ok
    assert compare("out", a + 1e-4, a, 1e-3, 1e-3).ok
    assert not compare("out", a + 1e-2, a, 1e-3, 1e-3).ok


def test_nan_poison_is_reported_as_unwritten():
    got = torch.tensor([[1.0, float("nan")], [float("nan"), 4.0]])
    c = compare("out", got, torch.tensor([[1.0, 2.0], [3.0, 4.0]]), 1e-3, 1e-3)
    assert not c.ok and c.mismatches == 2 and c.unwritten == 2
    assert "[0, 1]: yours nan vs expected 2" in c.message()
    assert "never written" in c.message()


def test_inf_must_match_sign_and_nan_only_nan():
    inf = float("inf")
    assert compare("o", torch.tensor([inf, -inf]), torch.tensor([inf, -inf]), 0, 0).ok
    assert not compare("o", torch.tensor([inf]), torch.tensor([-inf]), 0, 0).ok
    assert compare("o", torch.tensor([float("nan")]), torch.tensor([float("nan")]), 0, 0).ok
    assert not compare("o", torch.tensor([0.0]), torch.tensor([float("nan")]), 1, 1).ok


def test_zeros_do_not_pass_as_an_answer():
    expected = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    assert not compare("o", torch.zeros(1000), expected, 1e-3, 1e-3).ok


def test_shape_mismatch_and_modified_inputs():
    assert "shape" in compare("o", torch.zeros(3), torch.zeros(4), 0, 0).message()
    x = torch.arange(5.0)
    y = x.clone()
    y[3] = 7
    assert unchanged("x", x, x.clone()) is None
    assert "first at [3]" in unchanged("x", x, y)


def _whole(got, expected, rtol, atol, show=5):
    """The comparison done on the whole tensors at once, as before it went by chunks."""
    g, e = got.double(), expected.double()
    bad = ~torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    finite = torch.isfinite(g) & torch.isfinite(e)
    diff = (g - e).abs()
    max_err = float(diff[finite].max()) if bool(finite.any()) else 0.0
    examples = [f"{list(r)}: yours {float(g[tuple(r)]):.6g} vs expected {float(e[tuple(r)]):.6g}"
                for r in bad.nonzero()[:show].tolist()]
    return int(bad.sum()), int((torch.isnan(g) & ~torch.isnan(e)).sum()), max_err, examples


@pytest.mark.parametrize("device", DEVICES)
def test_chunks_give_what_the_whole_tensors_give(monkeypatch, device):
    # The fp64 temporaries of one chunk at a time (a 16384 x 8192 output took ~7 GB whole): the counts, the
    # largest error and the first differing elements (in order, across chunks) are those of the whole.
    from grader.check import compare as compare_module

    gen = torch.Generator().manual_seed(3)
    for chunk in (7, 64, 1 << 24):
        monkeypatch.setattr(compare_module, "CHUNK_ELEMENTS", chunk)
        for shape, dtype in (((5, 37), torch.float16), ((3, 4, 29), torch.bfloat16), ((211,), torch.float32),
                             ((1, 1), torch.float16), ((), torch.float32), ((0, 8), torch.float16)):
            expected = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
            got = expected.clone()
            if got.numel() > 2:
                flat = got.view(-1)
                pick = torch.randperm(flat.numel(), generator=gen)[:max(1, flat.numel() // 6)].to(device)
                flat[pick[0::3]] += 0.5
                flat[pick[1::3]] = float("nan")
                flat[pick[2::3]] = float("inf")
                expected.view(-1)[pick[2::3][:1]] = float("inf")  # one Inf where Inf is expected
            for rtol, atol in ((0.0, 0.0), (1e-2, 1e-2)):
                c = compare("out", got, expected, rtol, atol)
                mismatches, unwritten, max_err, examples = _whole(got, expected, rtol, atol)
                assert (c.mismatches, c.unwritten, c.examples) == (mismatches, unwritten, examples), (chunk, shape)
                assert c.max_abs_err == max_err and c.total == expected.numel() and c.ok == (mismatches == 0)


@pytest.mark.parametrize("device", DEVICES)
def test_a_modified_input_is_found_in_any_chunk(monkeypatch, device):
    from grader.check import compare as compare_module

    monkeypatch.setattr(compare_module, "CHUNK_ELEMENTS", 5)
    x = torch.arange(24.0, device=device).reshape(2, 3, 4)
    assert unchanged("x", x, x.clone()) is None
    y = x.clone()
    y[1, 2, 1] = float("nan")
    y[1, 2, 3] = -1
    assert unchanged("x", x, y) == "input 'x' was modified: 2 elements changed, first at [1, 2, 1]"
    n = torch.full((7,), float("nan"), device=device)
    assert unchanged("n", n, n.clone()) is None  # NaN stays NaN: unchanged
    i = torch.arange(12, dtype=torch.int32, device=device)
    j = i.clone()
    j[11] = 0
    assert unchanged("i", i, j) == "input 'i' was modified: 1 elements changed, first at [11]"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_an_output_of_several_real_chunks_on_the_gpu():
    """At the real CHUNK_ELEMENTS, on the GPU: differences at the chunks' edges are counted and shown in
    order as on the whole tensors; an input changed in its last chunk is found."""
    from grader.check.compare import CHUNK_ELEMENTS

    expected = torch.randn(5000, 8192, device="cuda", dtype=torch.float16)  # 41M elements: 3 chunks
    got = expected.clone()
    flat = got.view(-1)
    for i in (CHUNK_ELEMENTS - 1, CHUNK_ELEMENTS, 2 * CHUNK_ELEMENTS + 5, flat.numel() - 1):
        flat[i] += 1.0
    flat[CHUNK_ELEMENTS + 7] = float("nan")
    c = compare("out", got, expected, 1e-3, 1e-3)
    mismatches, unwritten, max_err, examples = _whole(got, expected, 1e-3, 1e-3)
    assert (c.mismatches, c.unwritten, c.examples) == (mismatches, unwritten, examples) == (5, 1, c.examples)
    assert c.max_abs_err == max_err
    before = expected.clone()
    expected.view(-1)[-1] = 0.5 if float(before.view(-1)[-1]) != 0.5 else 0.25
    assert unchanged("x", before, expected) == "input 'x' was modified: 1 elements changed, first at [4999, 8191]"


@pytest.mark.parametrize("shape", [(3, 5, 7), (1,), (4, 1, 6), ()])
def test_positions_are_torch_unravel_index(shape):
    from grader.check.compare import _positions

    n = 1
    for size in shape:
        n *= size
    coords = torch.unravel_index(torch.arange(n), shape)
    assert _positions(shape, list(range(n))) == [[int(c[j]) for c in coords] for j in range(n)]


def test_a_failing_comparison_imports_nothing_heavy():
    """A failing case's message is built without torch.unravel_index, whose import of sympy and
    mpmath (487 modules) cost each failing grading process 3 s on an H100 host."""
    import subprocess
    import sys

    code = ("import sys, torch\nfrom grader.check.compare import compare, unchanged\n"
            "a = torch.zeros(3, 4)\nb = a.clone(); b[2, 1] = 1\n"
            "before = set(sys.modules)\n"
            "assert '[2, 1]' in compare('out', b, a, 0, 0).message()\n"
            "assert 'first at [2, 1]' in unchanged('x', a, b)\n"
            "new = set(sys.modules) - before\n"
            "assert not new, sorted(new)[:10]\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
