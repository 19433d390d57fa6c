import torch

from grader.check.compare import compare, unchanged


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
