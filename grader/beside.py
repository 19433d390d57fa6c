"""FlashInfer beside the course: the exercises whose kernel FlashInfer has, the same work done by
FlashInfer's own function on the exercise's inputs, timed beside the learner's kernel and the
reference solution in one interleaved run (the notebooks' "FlashInfer beside yours" cells, and the
GPU verification, which records what they measure).

FlashInfer is an optional extra (`make flashinfer`, or `pip install -e '.[flashinfer]'`): about
120 MB on disk, and its first call of each kernel compiles it (its JIT, minutes the first time,
cached under ~/.cache/flashinfer). Without it, or without a GPU, every function here says so and
returns None: nothing in the course depends on it.
"""
from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from typing import Callable

from . import machine

INSTALL = "make flashinfer   (or: .venv/bin/python -m pip install -e '.[flashinfer]')"


@dataclass(frozen=True)
class Adapter:
    """FlashInfer's function for one exercise. `prepare(fi, p, inputs)` runs once, untimed (a
    wrapper's plan); `run(fi, state, p, inputs, outputs)` does the exercise's work into `outputs`
    (the exercise's own output tensors); `compare`: the outputs to check against the solution's."""
    function: str
    run: Callable
    prepare: Callable | None = None
    compare: tuple[str, ...] = ("out",)


def _act(name):
    return Adapter(f"flashinfer.{name}", lambda fi, s, p, i, o: getattr(fi, name)(i["input"], out=o["out"]))


def _rmsnorm(fi, s, p, i, o):
    fi.rmsnorm(i["input"], i["weight"], p["eps"], out=o["out"])


def _fused_add_rmsnorm(fi, s, p, i, o):
    fi.fused_add_rmsnorm(i["input"], i["residual"], i["weight"], p["eps"])  # in place, as the exercise


def _top_p(fi, s, p, i, o):
    rows = i["probs"].shape[0]
    o["tokens"][:rows].copy_(fi.sampling.top_p_sampling_from_probs(i["probs"], i["top_p"]))


def _workspace():
    """The scratch buffer FlashInfer's attention wrappers plan into (128 MB, as its examples use)."""
    import torch

    return torch.empty(128 * 2 ** 20, dtype=torch.uint8, device="cuda")


def _decode_plan(fi, p, i):
    from .exercises.day11 import sm_scale

    w = fi.BatchDecodeWithPagedKVCacheWrapper(_workspace(), "NHD", use_tensor_cores=p["qo_heads"] > p["kv_heads"])
    dt = i["q"].dtype
    w.plan(i["kv_indptr"], i["kv_indices"], i["kv_last_page_len"], p["qo_heads"], p["kv_heads"], p["head_dim"],
           p["page_size"], q_data_type=dt, kv_data_type=dt, sm_scale=sm_scale(p))
    return w


def _decode(fi, w, p, i, o):
    w.run(i["q"], i["kv_cache"], out=o["o"])


def _prefill_plan(fi, p, i):
    import torch

    from .exercises.day12 import sm_scale

    # backend="fa2": FlashInfer's FlashAttention-2 template (mma.sync, as the day's kernel). On Hopper
    # "auto" takes its FA3 kernels (wgmma + TMA): 575-741 TFLOP/s on an H100, another class of kernel.
    w = fi.BatchPrefillWithRaggedKVCacheWrapper(_workspace(), "NHD", backend="fa2")
    b, sq, sk = p["batch"], p["seq_q"], p["seq_kv"]
    qo_indptr = torch.arange(b + 1, dtype=torch.int32, device="cuda") * sq
    kv_indptr = torch.arange(b + 1, dtype=torch.int32, device="cuda") * sk
    w.plan(qo_indptr, kv_indptr, p["qo_heads"], p["kv_heads"], p["head_dim"], causal=p["causal"],
           sm_scale=sm_scale(p), q_data_type=i["q"].dtype, kv_data_type=i["k"].dtype)
    return w


def _prefill(fi, w, p, i, o):
    w.run(i["q"].flatten(0, 1), i["k"].flatten(0, 1), i["v"].flatten(0, 1), out=o["o"].flatten(0, 1))


def _rope(fi, s, p, i, o):
    fi.apply_rope_pos_ids_inplace(i["q"], i["k"], i["positions"], rope_theta=p["theta"])


ADAPTERS = {
    "day02.silu_and_mul": _act("silu_and_mul"),
    "day03.gelu_tanh_and_mul": _act("gelu_tanh_and_mul"),
    "day06.rmsnorm": Adapter("flashinfer.rmsnorm", _rmsnorm),
    "day06.fused_add_rmsnorm": Adapter("flashinfer.fused_add_rmsnorm", _fused_add_rmsnorm,
                                       compare=("input", "residual")),
    "day08.top_p_sampling": Adapter("flashinfer.sampling.top_p_sampling_from_probs", _top_p, compare=()),
    "day11.batch_decode": Adapter("flashinfer.BatchDecodeWithPagedKVCacheWrapper", _decode, _decode_plan,
                                  compare=("o",)),
    "day12.flash_attention": Adapter("flashinfer.BatchPrefillWithRaggedKVCacheWrapper", _prefill, _prefill_plan,
                                     compare=("o",)),
    "day14.rope": Adapter("flashinfer.apply_rope_pos_ids_inplace", _rope, compare=("q", "k")),
}


LABEL_SEP = " beside FlashInfer: "


def label(exercise_id: str, case_label: str) -> str:
    """The name of one measurement in the GPU verification report."""
    return f"{exercise_id}{LABEL_SEP}{case_label}"


def load(what: str = "FlashInfer beside the course"):
    """The flashinfer module, or None after saying plainly why not (no GPU, or the extra not installed).
    Its JIT builds for this GPU only (FLASHINFER_CUDA_ARCH_LIST, unless already set)."""
    if not machine.has_gpu():
        print(f"Skipped: {what} needs a CUDA GPU, and this machine has none (compile-only mode).")
        return None
    import torch

    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", f"{major}.{minor}")  # FlashInfer adds the suffix (9.0 -> 90a)
    try:
        import flashinfer
    except ImportError as e:
        print(f"Skipped: {what} needs FlashInfer, the course's optional extra, which is not installed here "
              f"({e}). To add it: {INSTALL}")
        return None
    return flashinfer


def jit_cache_dir() -> str | None:
    """Where FlashInfer keeps what its JIT compiled (None if FlashInfer cannot be imported)."""
    try:
        from flashinfer.jit import env
    except ImportError:
        return None
    return str(env.FLASHINFER_JIT_DIR)


def _max_rel_diff(a, b) -> float:
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def modules(exercise_id: str, result=None) -> dict:
    """{"solution": module, "yours": module}: the solution, and the file `result` (the grader's check
    above) judged. Yours runs here in the notebook's own process, where a crash would end it, so it is
    left out (and the reason said) unless that check ran every correctness case and passed; and when
    the check judged the solution itself (COURSE_USE_SOLUTIONS=1, as the GPU verification runs the
    notebooks), there is no file of yours to time: the untouched exercise file would be timed as
    "yours" (an unfinished sampler returns at once, 20x "faster" than FlashInfer)."""
    from . import exercises
    from .jit import BuildError, build
    from .paths import ROOT

    ex = exercises.get(exercise_id)
    mods = {"solution": build([ex.solution_path], name=f"{ex.day}_{ex.name}_solution", quiet=True).module}
    correct = [i for i in getattr(result, "items", []) if i.group == "correctness"]
    if not correct or any(i.status != "pass" for i in correct):
        why = "no check of it was given" if result is None else "the check above did not pass all its correctness cases"
        print(f"Your {ex.stub_path.name} is left out ({why}): only the solution runs beside FlashInfer.")
        return mods
    judged = (ROOT / result.source).resolve()  # (display_path: relative to the course, or absolute)
    if judged == ex.solution_path.resolve():
        print(f"The check above judged the reference solution ({result.source}), not a file of yours: "
              "only the solution runs beside FlashInfer.")
        return mods
    try:
        mods["yours"] = build([judged], name=f"{ex.day}_{ex.name}", quiet=True).module
    except BuildError as e:
        print(f"Your {judged.name} does not build, so only the solution runs beside FlashInfer: {e}")
    return mods


def measure(exercise_id: str, mods: dict, fi=None, cases: int | None = None) -> dict | None:
    """Time `mods` (e.g. modules(exercise_id): the solution, then yours) and FlashInfer's function on
    the exercise's timed cases (the first `cases` of them), interleaved in one run, each case recorded
    under label(exercise_id, case) for the GPU report. Returns {case label: {name: metrics}}:
    bandwidth exercises in GB/s and <ceiling>_ratio (copy_ratio, read_ratio), compute-bound in TFLOP/s, latency in us. Every output
    is first compared with the first module's (the solution's): `max_rel_diff` is the largest
    difference relative to the output's largest entry; one above 2% means other work or wrong results,
    and that module (or FlashInfer) is not timed. None (after saying why) without a GPU or FlashInfer."""
    import torch

    from . import exercises, nb

    ex = exercises.get(exercise_id)
    adapter = ADAPTERS[exercise_id]
    fi = fi or load(f"{exercise_id} beside FlashInfer")
    if fi is None:
        return None
    results = {}
    for case in ex.perf_cases[:cases]:
        p = case.params
        inputs = ex.make_inputs(p, torch.Generator(device="cuda").manual_seed(0))
        fns = {name: (lambda mod=mod, o=ex.make_outputs(p, inputs): ex.call(mod, p, inputs, o))
               for name, mod in mods.items()}
        # One untimed call each on copies of the inputs (in-place exercises write into them).
        got = {name: _fresh_call(ex, p, inputs, mod, None, None) for name, mod in mods.items()}
        state = fi_out = None
        try:  # FlashInfer's own API may reject a case: a row of the output, not the end of the notebook
            state = adapter.prepare(fi, p, inputs) if adapter.prepare else None
            got["flashinfer"] = _fresh_call(ex, p, inputs, None, state, fi)
            fi_out = ex.make_outputs(p, inputs)
            fns["flashinfer"] = lambda: adapter.run(fi, state, p, inputs, fi_out)
        except Exception as e:  # noqa: BLE001 (any error of FlashInfer's is reported the same way)
            print(f"{case.label}: FlashInfer not timed: {adapter.function} raised {type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''}")
        ref = got[next(iter(mods))]
        diffs = {name: max((_max_rel_diff(out[k], ref[k]) for k in adapter.compare), default=None)
                 for name, out in got.items()}
        for name, d in diffs.items():
            if d is not None and not d <= 0.02:
                print(f"{case.label}: {name} not timed: its output differs from the solution's by {d:.2g} of "
                      "the largest entry")
                del fns[name]
        tag = label(exercise_id, case.label)
        if ex.target.kind == "memory":
            row = nb.measure_bandwidth(fns, int(ex.target.bytes(p)), label=tag, ceiling=ex.target.baseline.name)
        elif ex.target.kind == "compute":
            row = nb.measure_tflops(fns, ex.target.flops(p), label=tag)
        else:
            row = nb.measure_latency(fns, baseline="flashinfer" if "flashinfer" in fns else next(iter(fns)), label=tag)
        for name in row:
            if name in diffs:
                row[name]["max_rel_diff"] = diffs[name]
        nb.record(tag, "flashinfer function", function=adapter.function, max_rel_diff=diffs.get("flashinfer"))
        results[case.label] = row
        del inputs, fns, state, fi_out, got
        torch.cuda.empty_cache()
    return results


def _fresh_call(ex, p, inputs, mod, state, fi) -> dict:
    """One call (of `mod`, or with `fi` of FlashInfer's function) on copies of the inputs and into
    fresh outputs; the outputs, in-place results included, keyed as the exercise names them."""
    import torch

    fresh = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    outputs = ex.make_outputs(p, fresh)
    if fi is None:
        ex.call(mod, p, fresh, outputs)
    else:
        ADAPTERS[ex.id].run(fi, state, p, fresh, outputs)
    torch.cuda.synchronize()
    return {**{k: v for k, v in fresh.items() if k in ex.inplace}, **outputs}


METRICS = {"memory": ("{ceiling}_ratio", "fraction of the {label}'s bandwidth"),
           "compute": ("tflops", "TFLOP/s"),
           "latency": ("us", "us per call (lower is faster)")}


def plot(exercise_id: str, results: dict | None = None, ax=None):
    """Bars per timed case: yours, the solution and FlashInfer (what `measure` returned); without
    them (no GPU, or no FlashInfer), the same bars from the committed GPU report, labelled as such.
    Returns the Axes, or None (after saying why) when there is nothing to draw."""
    from . import exercises, nb

    ex = exercises.get(exercise_id)
    metric, axis_label = (m.format(ceiling=ex.target.baseline.name, label=ex.target.baseline.label)
                          for m in METRICS[ex.target.kind])
    caption = ""
    if not results:
        # (never a "yours" row of the report's machine: that was not your kernel)
        # (only rows measured against this exercise's baseline: a report older than a change of it has none)
        results = {c.label: {n: m for n, m in found.items() if n != "yours" and m.get(metric) is not None}
                   for c in ex.perf_cases if (found := nb.reported(label(exercise_id, c.label)))}
        results = {k: v for k, v in results.items() if v}
        if not results:
            print(f"Skipped: the plot needs this machine's measurement, and the committed GPU report has no "
                  f"FlashInfer measurement of {exercise_id} against its {ex.target.baseline.label} to show instead.")
            return None
        caption = nb.label_caption(label(exercise_id, next(iter(results))))
        print(f"Not measured here: the bars are {caption}.")
    import matplotlib.pyplot as plt

    names = [n for n in dict.fromkeys(n for row in results.values() for n in row) if n != ex.target.baseline.name]
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 + 1.9 * len(results), 3.4))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        # a case this series has no measurement of gets no bar (not a bar of 0), and says so
        at = [(i + (j - (len(names) - 1) / 2) * width, row[name][metric])
              for i, row in enumerate(results.values()) if (row.get(name) or {}).get(metric) is not None]
        missing = [i + (j - (len(names) - 1) / 2) * width for i, row in enumerate(results.values())
                   if (row.get(name) or {}).get(metric) is None]
        bars = ax.bar([x for x, _ in at], [v for _, v in at], width, label=name, color=f"C{j}")
        ax.bar_label(bars, fmt="%.2f" if metric.endswith("_ratio") else "%.0f", fontsize=7)
        for x in missing:
            ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=6, rotation=90, color=f"C{j}")
    if ex.target.kind == "memory":
        ax.axhline(ex.target.ratio, color="gray", ls="--", lw=1,
                   label=f"target {ex.target.ratio:.2f}x {ex.target.baseline.name}")
    ax.set_xticks(range(len(results)), [textwrap.fill(lbl.replace(" (past L2)", ""), 24) for lbl in results], fontsize=7)
    ax.set_ylabel(axis_label)
    ax.set_title(f"{exercise_id} beside FlashInfer" + (f"\n{caption}" if caption else ""), fontsize=9)
    ax.margins(y=0.15)  # room above the tallest bar's label
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside the bars
    ax.figure.tight_layout()
    return ax
