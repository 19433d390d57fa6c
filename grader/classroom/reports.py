"""What a class run writes: scores, the gradebook (CSV, JSON), each student's Gradescope
results.json and feedback (hidden inputs never shown), and the class summary plot."""
from __future__ import annotations

import csv
import html
import json
from pathlib import Path

from ..check import Result

# Points per part of an exercise (100 in all); see score().
POINTS = {"static": 10, "sass": 10, "correctness": 50, "work": 5, "performance": 25}
HIDDEN = ("Your kernel fails on a hidden input that the public seeds do not cover "
          "(its values are not shown). Check tails, alignment, bounds and races.")


def score(result: Result, ex) -> float:
    """Points out of 100: static 10, SASS 10, correctness 50 (share of the cases run), work 5,
    performance 25 (share of the target reached, per timed case). Nothing if it does not build."""
    items = result.items
    if any(i.status == "fail" and i.group in ("source", "build") for i in items):
        return 0.0
    total = POINTS["static"]
    sass = [i for i in items if i.group == "sass"]
    total += POINTS["sass"] * (sum(i.status == "pass" for i in sass) / len(sass) if sass else 1)
    correct = [i for i in items if i.group == "correctness" and i.status != "skip"]  # (a case this GPU cannot run)
    share = sum(i.status == "pass" for i in correct) / len(correct) if correct else 0
    total += POINTS["correctness"] * share
    work = [i for i in items if i.group == "work" and i.status != "skip"]
    total += POINTS["work"] * (sum(i.status == "pass" for i in work) / len(work) if work else share)
    perf = [i for i in items if i.group == "performance"]
    if perf:  # a case counts only where the worker says its measurement is valid
        parts = [min(1.0, i.metrics["ratio"] / i.metrics["target"]) if i.metrics.get("valid") else 0.0
                 for i in perf]
        total += POINTS["performance"] * sum(parts) / len(parts)
    return round(total, 1)


def _public(item: dict) -> dict:
    """An item as the student may see it: results on the secret seed keep no values."""
    if "seed secret" in item.get("detail", ""):
        return dict(item, detail=HIDDEN)
    return item


# --------------------------------------------------------------------- reports
def _load(out: Path, exs) -> dict[str, dict[str, dict]]:
    data: dict[str, dict[str, dict]] = {}
    for f in sorted((out / "results").glob("*/*.json")):
        rec = json.loads(f.read_text())
        if rec["exercise"] in {e.id for e in exs}:
            data.setdefault(f.parent.name, {})[rec["exercise"]] = rec
    return data


GRADEBOOK_FIELDS = ["student", "exercise", "verdict", "score", "value", "unit", "ratio", "baseline",
                    "ratio_to_target", "build_s", "failure"]


def _best_measurement(rec: dict) -> dict | None:
    """The timed case with the best valid ratio to its baseline (a figure above the GPU's peak
    or taken from wrong results is no measurement: the worker marks it invalid)."""
    perf = [i["metrics"] for i in rec["items"] if i["group"] == "performance" and (i.get("metrics") or {}).get("valid")]
    return max(perf, key=lambda m: m["ratio"], default=None)


def write_reports(out: Path, exs) -> list[dict]:
    data = _load(out, exs)
    rows = []
    for student, recs in data.items():
        for ex_id, rec in recs.items():
            best = _best_measurement(rec)
            failure = next((f"{i['group']} / {i['name']}: {_public(i)['detail']}" for i in rec["items"]
                            if i["status"] == "fail"), "")
            rows.append({"student": student, "exercise": ex_id, "verdict": rec["verdict"], "score": rec["score"],
                         "value": round(best["value"], 1) if best else "", "unit": best["unit"] if best else "",
                         "ratio": round(best["ratio"], 3) if best else "",
                         "baseline": best["baseline"] if best else "",
                         "ratio_to_target": round(best["ratio"] / best["target"], 3) if best else "",
                         "build_s": round(rec["build_seconds"], 1) if rec.get("build_seconds") else "",
                         "failure": failure[:300]})
        _student_files(out / student, student, recs)
    with open(out / "gradebook.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=GRADEBOOK_FIELDS)
        w.writeheader()
        w.writerows(rows)
    (out / "gradebook.json").write_text(json.dumps(rows, indent=1))
    _summary_plot(out, rows, exs)
    return rows


def _student_files(folder: Path, student: str, recs: dict[str, dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tests, lines = [], [f"# Feedback for {student}", ""]
    for ex_id, rec in recs.items():
        items = [_public(i) for i in rec["items"]]
        failures = [i for i in items if i["status"] == "fail"]
        output = "\n".join(f"{i['group']} / {i['name']}: {i['detail']}" for i in failures) or "All checks pass."
        tests.append({"name": ex_id, "score": rec["score"], "max_score": 100,
                      "status": "passed" if rec["verdict"] == "pass" else "failed", "output": output})
        lines += [f"## {ex_id}: {rec['verdict']} ({rec['score']:g} / 100)", ""]
        lines += [f"- **{i['status'].upper()}** {i['group']} / {i['name']}: {i['detail']}" for i in items
                  if i["status"] != "pass" or i["group"] == "performance"] or ["- every check passes"]
        lines.append("")
    (folder / "results.json").write_text(json.dumps(
        {"score": round(sum(t["score"] for t in tests), 1), "tests": tests}, indent=1))
    md = "\n".join(lines) + "\n"
    (folder / "feedback.md").write_text(md)
    body = "".join(f"<p>{html.escape(line)}</p>" for line in lines if line)
    (folder / "feedback.html").write_text(f"<html><body><h1>Feedback for {html.escape(student)}</h1>{body}"
                                          f"</body></html>")


def _summary_plot(out: Path, rows: list[dict], exs) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for ex in exs:
        scores = [r["score"] for r in rows if r["exercise"] == ex.id]
        a.hist(scores, bins=range(0, 105, 5), alpha=0.6, label=ex.id)
        ratios = [r["ratio_to_target"] for r in rows if r["exercise"] == ex.id and r["ratio_to_target"] != ""]
        b.scatter(range(len(ratios)), sorted(ratios), s=12, label=ex.id)
    b.axhline(1.0, ls="--", lw=1, color="k")
    a.set(xlabel="score", ylabel="students", title="scores")
    b.set(xlabel="submissions (sorted)", ylabel="ratio to baseline / target", title="speed against target (dashed = met)")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "class-summary.png", dpi=100)
    plt.close(fig)
