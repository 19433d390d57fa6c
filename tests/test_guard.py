"""Guard bytes around the outputs (grader/check/guard.py), on CPU tensors: a store past the end of an
output, or before its start, fails the case even where every element of the output is right."""
import types

import torch

from grader.check import guard, worker
from grader.spec import Tolerance, empty_like_offset, poison


def _base_and_start(out):
    base = out._base  # the guarded buffer the output is a view of
    return base, out.storage_offset()


def test_an_output_keeps_its_shape_dtype_and_alignment_in_a_guarded_buffer():
    for dtype, offset in ((torch.float32, 0), (torch.float32, 1), (torch.float16, 3), (torch.int64, 0),
                          (torch.uint8, 5)):
        t = empty_like_offset((7, 13), dtype, "cpu", offset)
        out, g = guard.guarded("out", t, poison)
        assert g is not None and out.shape == t.shape and out.dtype == dtype and out.is_contiguous()
        assert out.data_ptr() % guard.GUARD_BYTES == t.data_ptr() % guard.GUARD_BYTES  # misaligned stays misaligned
        assert g.damage() is None
        out.fill_(1)  # the whole output written, nothing else
        assert g.damage() is None


def test_a_store_past_the_end_or_before_the_start_is_said_with_how_far():
    t = empty_like_offset((4, 10), torch.float16, "cpu", 1)
    out, g = guard.guarded("out", t, poison)
    base, start = _base_and_start(out)
    out.fill_(0.5)
    base[start + out.numel(): start + out.numel() + 3] = 0.5  # a vector stored whole at the tail: 3 past it
    msg = g.damage()
    assert msg and "3 elements past its end (the farthest 3 after it)" in msg and "tail guard" in msg
    base[start + out.numel(): start + out.numel() + 3] = float("nan")  # put back, then write before it
    assert g.damage() is None
    base[start - 1] = 0.0
    assert "1 element before its start (the farthest 1 before it)" in g.damage()


def test_outputs_that_cannot_be_guarded_are_left_as_they_are():
    t = torch.empty(6, 4).t()  # not contiguous
    out, g = guard.guarded("out", t, poison)
    assert out is t and g is None
    e = torch.empty(0)
    assert guard.guarded("e", e, poison) == (e, None)
    outs = guard.guard_outputs({"a": torch.empty(3), "t": t}, poison)
    assert outs["t"] is t and set(outs.guards) == {"a"} and guard.damage(outs) == []
    assert torch.isnan(t).all() and torch.isnan(outs["a"]).all()  # poisoned, guarded or not


def test_a_case_whose_outputs_are_right_fails_when_the_call_wrote_past_them():
    # the worker's judge: the comparison passes, the guard does not
    ex = types.SimpleNamespace(tolerance=lambda p: Tolerance(rtol=0.0, atol=0.0), inplace=())
    outputs = guard.guard_outputs({"out": torch.empty(5)}, poison)
    outputs["out"].copy_(torch.arange(5.0))
    expected = {"out": torch.arange(5.0)}
    ok, msg = worker._judge(ex, {}, {}, {}, outputs, expected)
    assert ok, msg
    base, start = _base_and_start(outputs["out"])
    base[start + 5] = 5.0  # i <= n
    ok, msg = worker._judge(ex, {}, {}, {}, outputs, expected)
    assert not ok and "out: the call wrote outside the output: 1 element past its end (the farthest 1 after it)" in msg
