"""grader.nb's timeline helpers on the CPU: spans read from a real torch.profiler profile (the host's
operators: the same events and fields that a GPU profile's kernels come in) and from events without an
activity type (torch before 2.12), the GPU filter on events of
the profiler's own type, the gap arithmetic against a count on a 1-us grid, and the plot (Agg): one bar
per span and per gap, axes shared from 0, titles and legend clear of the bars."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.autograd import DeviceType  # noqa: E402
from torch.autograd.profiler_util import FunctionEvent  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from grader import nb  # noqa: E402

# Integer times: the expected figures can be counted microsecond by microsecond.
SPANS = [("Memcpy HtoD (Pageable -> Device)", 0, 2), ("rmsnorm_kernel", 10, 14),
         ("nvjet_tst_gemm", 14, 60),            # back to back with the previous one: no gap
         ("elementwise_kernel", 30, 40),         # inside the GEMM (another stream): covered, no gap
         ("elementwise_kernel", 65, 66), ("Memset (Device)", 70, 71), ("silu_and_mul_kernel", 90, 100)]


def _by_grid(spans):
    """(busy, idle) counted on a 1-us grid between the first start and the last end."""
    first, last = min(s for _, s, _ in spans), max(e for _, _, e in spans)
    busy = sum(any(s <= t < e for _, s, e in spans) for t in range(first, last))
    return busy, last - first - busy


def test_figures_count_gaps_once_and_overlaps_once():
    f = nb.timeline_figures(SPANS)
    assert nb.timeline_gaps(SPANS) == [(2, 10), (60, 65), (66, 70), (71, 90)]
    assert (f["busy_us"], f["idle_us"]) == _by_grid(SPANS) == (64, 36)
    assert f["total_us"] == 100 == f["busy_us"] + f["idle_us"]
    assert (f["gaps"], f["kernels"], f["copies"]) == (4, 7, 2)
    assert nb.timeline_figures(list(reversed(SPANS))) == f  # the order spans come in does not matter
    assert nb.timeline_figures([]) == {"total_us": 0.0, "busy_us": 0.0, "idle_us": 0.0, "gaps": 0, "kernels": 0,
                                       "copies": 0}
    title = nb.timeline_title("eager", f)
    assert title.startswith("eager: 100 us") and "busy 64 us (64%)" in title and "idle 36 us in 4 gaps" in title
    assert "7 kernels (2 of them copies)" in title


def _event(name, start, end, activity, device_type=DeviceType.CUDA, device=0):
    return FunctionEvent(id=0, name=name, thread=0, start_us=start, end_us=end, device_type=device_type,
                         device_index=device, activity_type=activity)


def test_kernel_spans_keeps_the_gpu_work_of_one_device():
    # Events as the profiler builds them from a GPU run: kernels, a copy, a memset on GPU 0; what the
    # host did (its ops, its cudaLaunchKernel calls), record_function's range on the GPU, a kernel on GPU 1.
    events = [_event("aten::mm", 0, 9, "cpu_op", DeviceType.CPU),
              _event("cudaLaunchKernel", 1, 3, "cuda_runtime", DeviceType.CPU),
              _event("step", 4, 40, "gpu_user_annotation"), _event("gemm", 20, 30, "kernel"),
              _event("Memcpy HtoD", 4, 6, "gpu_memcpy"), _event("Memset (Device)", 8, 9, "gpu_memset"),
              _event("gemm", 5, 7, "kernel", device=1)]
    prof = type("Profile", (), {"events": lambda self: events})()
    assert nb.kernel_spans(prof) == [("Memcpy HtoD", 4, 6), ("Memset (Device)", 8, 9), ("gemm", 20, 30)]
    assert nb.kernel_spans(prof, device=1) == [("gemm", 5, 7)]


def test_kernel_spans_reads_events_without_an_activity_type():
    # Before torch 2.12 events carry no activity type: it follows from device type, annotation flag and name.
    def old(name, start, end, device_type, annotation=False, device=0):
        return SimpleNamespace(name=name, device_type=device_type, device_index=device, is_user_annotation=annotation,
                               time_range=SimpleNamespace(start=start, end=end))
    events = [old("step", 0, 50, DeviceType.CPU, annotation=True), old("aten::mm", 1, 9, DeviceType.CPU),
              old("step", 4, 40, DeviceType.CUDA, annotation=True), old("gemm", 20, 30, DeviceType.CUDA),
              old("Memcpy HtoD", 4, 6, DeviceType.CUDA), old("Memset (Device)", 8, 9, DeviceType.CUDA),
              old("late", 60, 70, DeviceType.CUDA)]
    prof = SimpleNamespace(events=lambda: events)
    assert nb.kernel_spans(prof, within="step") == [("Memcpy HtoD", 4, 6), ("Memset (Device)", 8, 9),
                                                    ("gemm", 20, 30)]
    assert nb.kernel_spans(prof, device=None, activities=("cpu_op",)) == [("aten::mm", 1, 9)]


def test_kernel_spans_reads_a_real_profile():
    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.sigmoid(x)
        with record_function("step"):
            y = torch.relu(x @ x)
            y.add_(x)
        torch.tanh(x)
    assert nb.kernel_spans(prof) == []  # no GPU here: nothing ran on one
    everything = [n for n, _, _ in nb.kernel_spans(prof, device=None, activities=("cpu_op",))]
    ops = nb.kernel_spans(prof, device=None, within="step", activities=("cpu_op",))
    names = [n for n, _, _ in ops]
    assert {"aten::sigmoid", "aten::tanh"} <= set(everything) and not {"aten::sigmoid", "aten::tanh"} & set(names)
    assert names.index("aten::matmul") < names.index("aten::relu") < names.index("aten::add_")
    assert all(s <= e for _, s, e in ops) and [s for _, s, _ in ops] == sorted(s for _, s, _ in ops)
    # matmul's aten::mm runs inside it: the nested ops add no busy time to the top-level ones'
    top = [o for o in ops if not any(p is not o and p[1] <= o[1] and o[2] <= p[2] for p in ops)]
    assert [n for n, _, _ in top] == ["aten::matmul", "aten::relu", "aten::add_"]
    f, f_top = nb.timeline_figures(ops), nb.timeline_figures(top)
    assert f["busy_us"] == pytest.approx(f_top["busy_us"]) and f["total_us"] == pytest.approx(f_top["total_us"])
    assert f["busy_us"] + f["idle_us"] == pytest.approx(f["total_us"]) and f["gaps"] == 2
    with pytest.raises(ValueError, match="no region 'decode'"):
        nb.kernel_spans(prof, within="decode")


def test_plot_draws_a_bar_per_span_and_per_gap_on_a_shared_axis():
    graph = [(n, s + 1000, e + 1000) for n, s, e in [("nvjet_tst_gemm", 0, 40), ("rmsnorm_kernel", 41, 43)]]
    rows = {"eager, op by op": SPANS, "CUDA graph replay": graph}
    fig = nb.plot_timeline(rows)
    fig.canvas.draw()
    try:
        assert len(fig.axes) == 2
        for ax, (label, spans) in zip(fig.axes, rows.items()):
            bars, gaps = ax.containers
            assert (len(bars), len(gaps)) == (len(spans), len(nb.timeline_gaps(spans)))
            assert min(p.get_x() for p in bars) == 0  # each row counted from its own first span
            assert sum(p.get_width() for p in gaps) == pytest.approx(nb.timeline_figures(spans)["idle_us"])
            assert ax.get_title(loc="left") == nb.timeline_title(label, nb.timeline_figures(spans))
        assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim() and fig.axes[0].get_xlim()[0] == 0
        assert fig.axes[0].get_xlim()[1] >= 100
        # the second row's gap (40 to 41 us) is drawn at 40 to 41
        assert [(p.get_x(), p.get_width()) for p in fig.axes[1].containers[1]] == [(40, 1)]
        # titles, legend and bars apart: nothing written over a row's bars
        renderer = fig.canvas.get_renderer()
        boxes = [ax.get_window_extent(renderer) for ax in fig.axes]
        titles = [t for ax in fig.axes for t in ax.get_children() if isinstance(t, Text) and t.get_text()]
        assert len(titles) == 2
        texts = [t.get_window_extent(renderer) for t in titles] + [fig.legends[0].get_window_extent(renderer)]
        assert not any(t.overlaps(b) for t in texts for b in boxes)
        assert fig.legends[0].get_window_extent(renderer).y1 <= min(b.y0 for b in boxes)
        assert all(0 <= t.x0 and t.x1 <= fig.bbox.x1 for t in texts)  # not cut off at the figure's edges
        # coloured by kind: the GEMM apart from the other kernel, the copies apart from both
        colours = [p.get_facecolor() for p in fig.axes[0].containers[0]]
        assert len({colours[0], colours[1], colours[2]}) == 3 and colours[0] == colours[5]
    finally:
        plt.close(fig)
