"""check/timed.py: every timed call checked. On the CPU, with Python stand-ins for a learner's kernel:
a right one passes every call; one that skips work on repeated calls, keeps an earlier call's result
or leaves an output unwritten is caught, and says which call and output."""
import torch

from grader.check.timed import SAMPLE, TimedCalls, other_content
from grader.spec import Tolerance, poison


class Ex:
    inplace = ()
    call_varies = ()

    def __init__(self, kernel):
        self.kernel = kernel

    def call(self, mod, p, inputs, outputs):
        self.kernel(inputs, outputs)


def reference(inputs):
    return {"y": inputs["x"] * inputs["w"] + inputs["rows"][:, None].float()}


def right(inputs, outputs):
    outputs["y"].copy_(inputs["x"] * inputs["w"] + inputs["rows"][:, None].float())


def timed_run(kernel, calls=12, rows=64, cols=32, tol=None):
    g = torch.Generator().manual_seed(1)
    inputs = {"x": torch.randn(rows, cols, generator=g), "w": torch.randn(rows, cols, generator=g),
              "rows": torch.arange(rows), "n": rows}
    before = {k: v.clone() for k, v in inputs.items() if torch.is_tensor(v)}
    contents = [(before, reference(inputs))]
    other = other_content(before)
    contents.append((other, reference({**inputs, **other})))
    outputs = {"y": torch.empty(rows, cols)}
    tol = tol or Tolerance(1e-5, 1e-5, "")
    t = TimedCalls(Ex(kernel), None, {}, inputs, outputs, contents, {"y": tol}, poison)
    for _ in range(calls):
        t.prepare()
        t.call()
        t.verify()
    return t.failure()


def test_the_other_content_has_the_same_shapes_and_integers_and_other_floats():
    x, w, rows = torch.randn(4, 8), torch.randn(4, 8), torch.arange(4)
    other = other_content({"x": x, "w": w, "rows": rows, "n": 4})
    assert set(other) == {"x", "w", "rows"}  # (non-tensors are kept by the caller)
    assert torch.equal(other["rows"], rows) and other["rows"] is not rows
    assert torch.equal(other["x"], torch.roll(x, 1, -1)) and torch.equal(other["w"], torch.roll(w, 2, -1))
    # each row keeps its values (a softmax row, a probability row stays one)
    assert torch.allclose(other["x"].sort(-1).values, x.sort(-1).values)


def test_a_right_kernel_passes_every_timed_call():
    assert timed_run(right) is None


def test_a_kernel_that_skips_a_row_on_every_other_call_is_caught():
    calls = {"n": 0}

    def skips(inputs, outputs):
        calls["n"] += 1
        if calls["n"] % 2:
            return right(inputs, outputs)
        y = inputs["x"] * inputs["w"] + inputs["rows"][:, None].float()
        outputs["y"][1:].copy_(y[1:])  # row 0 "already holds the answer"

    f = timed_run(skips)
    assert f is not None and f.calls == 12 and f.wrong == 6 and f.first == 1 and f.name == "y"
    assert f.elements == 32 and f.sampled == 64 * 32
    assert "6 of 12 calls made while timing gave wrong results (the first, call 2" in f.message()


def test_a_result_kept_from_an_earlier_call_is_caught():
    kept = {}

    def caches(inputs, outputs):
        if "y" not in kept:
            right(inputs, outputs)
            kept["y"] = outputs["y"].clone()
        outputs["y"].copy_(kept["y"])  # "same pointers, same answer"

    f = timed_run(caches)
    assert f is not None and f.wrong == 6 and f.first == 1


def test_a_large_output_is_sampled_and_a_skipped_tile_still_found():
    rows, cols = 512, 512  # 4 x SAMPLE elements; one 32 x 32 tile is 1/256 of them
    assert rows * cols > SAMPLE

    def skips_a_tile(inputs, outputs):
        right(inputs, outputs)
        outputs["y"][:32, :32] = float("nan")  # never written

    f = timed_run(skips_a_tile, calls=4, rows=rows, cols=cols)
    assert f is not None and f.wrong == 4 and f.sampled == SAMPLE and 0 < f.elements < 1024


def test_a_distribution_output_only_has_to_be_written():
    def fills_half(inputs, outputs):
        outputs["y"][:32] = 0.0

    assert timed_run(fills_half, tol=Tolerance(0, 0, "", kind="distribution")) is not None

    def fills_all(inputs, outputs):
        outputs["y"].fill_(3.0)

    assert timed_run(fills_all, tol=Tolerance(0, 0, "", kind="distribution")) is None


def _sampler_calls(sampler, calls=40):
    """A sampler timed as the worker times it (check/timed.py), on the CPU: each call at its own offset."""
    from types import SimpleNamespace

    from grader.check.timed import TimedCalls
    from grader.spec import Tolerance

    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(64, 300, dtype=torch.float64) * 2, 1)
    probs[:, 200:] = 0.0  # outside the nucleus
    probs /= probs.sum(1, keepdim=True)
    inputs = {"probs": probs.clone(), "philox_offset": 7}
    outputs = {"tokens": torch.empty(64, dtype=torch.int64)}
    ex = SimpleNamespace(call_varies=("philox_offset",), inplace=(),
                         call=lambda mod, p, i, o: o["tokens"].copy_(sampler(i)))
    contents = [({"probs": probs}, {"tokens": probs})] * 2
    timed = TimedCalls(ex, None, {}, inputs, outputs, contents, {"tokens": Tolerance.distribution("x", alpha=1e-6)},
                       lambda t: t.fill_(torch.iinfo(t.dtype).min))
    for _ in range(calls):
        timed.prepare()
        timed.call()
        timed.verify()
    failure = timed.failure()
    assert inputs["philox_offset"] == 7  # the case's own offset again for the run after the timing
    return failure


def test_a_sampler_is_tested_at_the_timed_size_each_call_at_its_own_offset():
    """A right sampler draws afresh at every offset and passes; one that returns the argmax, or the same
    draws whatever the offset, when timed repeats itself from call to call and fails."""
    def draw(seed):
        return lambda i: torch.multinomial(i["probs"], 1, generator=torch.Generator().manual_seed(seed(i))).squeeze(1)

    assert _sampler_calls(draw(lambda i: i["philox_offset"])) is None
    for wrong in (draw(lambda i: 3), lambda i: i["probs"].argmax(1)):
        failure = _sampler_calls(wrong)
        assert failure is not None and "repeat each other" in failure.message(), failure
    # right draws, but one row's draw outside the nucleus on every timed call
    def one_outside(i):
        tokens = draw(lambda i: i["philox_offset"])(i)
        tokens[5] = 299
        return tokens

    failure = _sampler_calls(one_outside)
    assert failure is not None and "outside the nucleus" in failure.message(), failure
