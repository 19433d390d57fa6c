"""How a case is judged, the same wherever it runs (the grading process, the separate judge,
timed_apart): outputs against the exercise's tolerance, and a timed case's metrics and verdict
against its target and baselines."""
from __future__ import annotations


def tolerances(ex, p, names):
    tol = ex.tolerance(p)
    return tol if isinstance(tol, dict) else {name: tol for name in names}


def compare_outputs(ex, p, outputs, expected) -> tuple[list[str], list[str]]:
    """Each expected output against the exercise's tolerance: (problems, notes).
    Also the separate judge's comparison (judge.py)."""
    from .compare import compare
    from .stats import compare_distribution

    tols = tolerances(ex, p, expected)
    problems, notes = [], []
    for name, exp in expected.items():
        tol = tols[name]
        if tol.kind == "distribution":
            c = compare_distribution(name, outputs[name], exp, tol.alpha, tol.pairs)
            notes.append(c.message())
        else:
            exact = tol.kind == "exact"
            c = compare(name, outputs[name], exp, 0.0 if exact else tol.rtol, 0.0 if exact else tol.atol)
            notes.append(f"{name} exact" if exact else
                         f"{name} max abs err {c.max_abs_err:.2g} (rtol {tol.rtol:g}, atol {tol.atol:g})")
        if not c.ok:
            problems.append(c.message())
    return problems, notes


def ratio_of(target, yours: float, theirs: float) -> float:
    """How many times the baseline: more is better for every kind (latency: x faster)."""
    if target.kind == "latency":
        return theirs / yours if yours else float("inf")
    return yours / theirs if theirs else float("inf")


def in_unit(value: float, unit: str) -> str:
    return f"{value:.0f} {unit}" if unit == "GB/s" else f"{value:.1f} {unit}"


def timed_baselines(t, calibrated: dict | None) -> list:
    """The baselines timed beside a timed case: the target's every one, none where a class run
    calibrated the graded one (`calibrated`)."""
    return [t.baseline, *t.also] if calibrated is None else []


def timed_metrics(t, yours: float, values: dict, calibrated: dict | None, sizes: dict, more: dict) -> dict:
    """A timed case's metrics, from its value (`yours`) and the baselines' timed beside it (`values`:
    name -> value), in the target's unit, or the graded one's calibration (`calibrated`); `sizes` (bytes,
    GB/s) follow the target, `more` (how it was timed) the baselines. Every way of timing a case (measure,
    timed_apart.judge_case) builds its row here and in timed_verdict: the scores, gradebook and reports
    read the same fields from each."""
    graded = values[t.baseline.name] if calibrated is None else calibrated["value"]
    ratio = ratio_of(t, yours, graded)
    metrics = {"kind": t.kind, "unit": t.unit, "value": yours, "baseline": t.baseline.name,
               "baseline_label": t.baseline.label, "baseline_value": graded, "ratio": ratio, "target": t.ratio,
               **sizes, "calibrated": calibrated is not None, f"{t.baseline.name}ratio_of": ratio,
               "baselines": {b.name: {"label": b.label, "value": values[b.name], "ratio": ratio_of(t, yours, values[b.name])}
                             for b in timed_baselines(t, calibrated)},
               **more}
    for b in t.also:
        if b.name in values:
            metrics[f"{b.name}ratio_of"] = ratio_of(t, yours, values[b.name])
    return metrics


def timed_verdict(ex, metrics: dict, how: str) -> tuple[str, str]:
    """A timed case's status and detail from its metrics (timed_metrics): its value against the graded
    baseline and the target, each `also` baseline timed beside it, `how` it was timed (the detail's
    middle), and the required `also` baselines it falls short of (verdict)."""
    t = ex.target
    yours, graded, ratio, timed = metrics["value"], metrics["baseline_value"], metrics["ratio"], metrics["baselines"]
    base = f"{t.baseline.label} ({in_unit(graded, t.unit)}" + (", measured once for this grading run)"
                                                            if metrics["calibrated"] else ")")
    head = (f"{yours:.1f} us = {ratio:.2f}x faster than {base}, target {t.ratio:g}x" if t.kind == "latency"
            else f"{in_unit(yours, t.unit)} = {ratio:.3f}x {base}, target {t.ratio:.2f}x")
    also = [b for b in t.also if b.name in timed]
    detail = head + "".join(f"; {timed[b.name]['ratio']:.2f}x {b.label} ({in_unit(timed[b.name]['value'], t.unit)})"
                            for b in also) + how
    # `also` baselines with a required ratio are graded too (measured in this run only)
    short = [b for b in also if b.required is not None and timed[b.name]["ratio"] < b.required]
    if short:
        detail += "; below " + ", ".join(f"{b.required:g}x {b.label}" for b in short)
    return verdict(ex, ratio, short, detail)


def verdict(ex, ratio: float, short: list, detail: str) -> tuple[str, str]:
    """A timed case's status: its ratio at the target and every required `also` baseline met (`short`:
    those not met). Falling short, the detail ends with the spec's note on its target."""
    passed = ratio >= ex.target.ratio and not short
    if not passed and ex.target_note:
        detail += f". About the target: {ex.target_note}"
    return ("pass" if passed else "fail"), detail
