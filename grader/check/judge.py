"""A Python-module submission's outputs judged in a process its code never ran in.

A learner's module runs inside the grading process (worker.py) and can reach what that process
uses: torch's functions, the comparison, the results it writes. So for such an exercise the worker
also hands over each case's outputs as tensors (a file per case and seed in its folder), and after it
ends this process, started by the check (supervise.run_worker), makes each case's inputs again from
its seed, computes the reference and compares, with nothing of the submission's loaded. Its verdict
is a correctness check of its own: the worker's word is not needed for it, and cannot overrule it.

The same process judges a Python-module exercise's timed cases (timed_apart.py): the steps the
check timed, checked, and the baselines timed beside them.

Run as `python -m grader.check.judge CONFIG.json`: CONFIG names the exercise, the folder handed
over, the (case, seed) runs to judge, the timed cases' records and the file to write the verdict to.
"""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import NamedTuple

from .. import config, pyenv
from .gate import GpuGate
from .verdict import compare_outputs
from .worker_config import WorkerConfig, exact_fields

HANDOVER = "handover"  # the folder, in the grading process's own, where it writes each run's outputs
MAX_FILE_BYTES = 2 << 30  # a handed-over file larger than this is refused unread
NAME = "outputs judged apart"  # the check's row
OUT_OF_MEMORY_EXIT = 3  # the judge's exit code when CUDA ran out of memory (judge_apart tries again later)


class UntimedCase(NamedTuple):
    index: int  # in ex.cases (what a handed-over file and a judged run name it by)
    case: object  # spec.Case


class HandedRun(NamedTuple):
    """Where the worker hands one run's outputs over: the handover folder, the case and the seed's label."""
    folder: str
    case_index: int
    seed_label: str


class JudgeRun(NamedTuple):
    """One run the judge judges (its config file holds each as a JSON array)."""
    case_index: int
    seed_label: str
    seed: int


@dataclass(frozen=True)
class JudgeConfig:
    """The judge's work (its CONFIG.json), written as a JSON object with every field as a key (to_json)
    and read back with exactly those keys (from_json)."""
    exercise: str                            # the exercise's id
    verdict: str                             # the file the judge writes its verdict to
    folder: str | None = None                # the handover folder the grading process wrote the outputs to
    runs: list[JudgeRun] = field(default_factory=list)  # the (case, seed) runs to judge
    timed: dict[str, dict] | None = None     # str(case index) -> the check's record of its timed steps
    #                                          (timed_apart.TimingServer); None: no timed cases to judge
    calibrated: dict | None = None           # class grading: each timed case's graded baseline (worker.calibrate)

    def to_json(self) -> str:  # (a JudgeRun as a JSON array)
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_json(cls, text: str) -> "JudgeConfig":
        """The config written by to_json; ValueError where it is not a JSON object with every field as a
        key and no other key."""
        data = exact_fields(cls, text, "a judge config")
        data["runs"] = [JudgeRun(*run) for run in data["runs"]]
        return cls(**data)


def untimed_cases(ex, max_case_bytes: int | None = None) -> list[UntimedCase]:
    """The cases a grading process runs for correctness: every untimed one, only those up to
    `max_case_bytes` where it is given (the small cases, under compute-sanitizer, none of them one that
    needs a large GPU's memory)."""
    return [UntimedCase(i, c) for i, c in enumerate(ex.cases)
            if not c.perf and not (max_case_bytes and (ex.case_bytes(c.params) > max_case_bytes or c.gpu_gib))]


def handover_file(folder: str | Path, case_index: int, seed_label) -> Path:
    return Path(folder) / f"case{case_index}-seed-{seed_label}.pt"


def hand_over(folder: str | Path, case_index: int, seed_label, outputs: dict) -> None:
    """The worker's side: one run's outputs, copied to the host, into the handover folder."""
    import torch

    Path(folder).mkdir(exist_ok=True)
    torch.save({name: t.detach().cpu() for name, t in outputs.items()}, handover_file(folder, case_index, seed_label))


def load_handed(path: Path, device: str) -> dict:
    """A handed-over file as {name: tensor}, or ValueError saying why it cannot be one. Written by the
    submission's process, so read as data alone (torch.load's weights_only: no code runs) and only if it
    is a plain file of a sane size."""
    import torch

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ValueError("no outputs were handed over for this run") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
        raise ValueError("what was handed over for this run is not a plain file of outputs")
    try:
        data = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # (anything torch cannot read as tensors)
        raise ValueError(f"the outputs handed over could not be read as tensors ({type(e).__name__})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in data.items()):
        raise ValueError("the outputs handed over are not a dict of named tensors")
    return data


def judge_run(ex, case, seed: int, handed: dict, device: str = "cuda") -> tuple[bool, str]:
    """One run judged: the case's inputs made again from `seed`, the reference computed here, and the
    outputs handed over compared with it under the exercise's tolerance."""
    import torch

    p = case.params
    gen = torch.Generator(device=device).manual_seed(seed)
    inputs = ex.make_inputs(p, gen)
    expected = ex.reference(p, inputs)
    made = ex.make_outputs(p, inputs)  # (what the outputs are: their shapes and types)
    wrong = []
    for name, exp in expected.items():
        got = handed.get(name)
        if got is None or got.shape != made[name].shape or got.dtype != made[name].dtype:
            wrong.append(f"{name}: not handed over as the output it is ({tuple(made[name].shape)}, {made[name].dtype})")
    if wrong:
        return False, " | ".join(wrong)
    problems, notes = compare_outputs(ex, p, handed, expected)
    return (False, " | ".join(problems)) if problems else (True, "; ".join(notes))


def judge_all(ex, runs: list[JudgeRun], folder: str | Path, device: str = "cuda") -> dict:
    """Every run in `runs` judged from its file in `folder`: {"judged": n, "problems": [...]} (the first
    problem of each case, in case order)."""
    problems, judged = [], 0
    failed_cases = set()
    for run in runs:
        if run.case_index in failed_cases:
            continue
        case = ex.cases[run.case_index]
        try:
            handed = load_handed(handover_file(folder, run.case_index, run.seed_label), device)
            ok, msg = judge_run(ex, case, run.seed, handed, device)
        except ValueError as e:
            ok, msg = False, str(e)
        judged += 1
        if not ok:
            failed_cases.add(run.case_index)
            problems.append(f"{case.label}, seed {run.seed_label}: {msg}")
    return {"judged": judged, "problems": problems}


def with_memory(attempt, waits=None, sleep=time.sleep):
    """attempt() -> its exit code, tried again after each of `waits` (config.OUT_OF_MEMORY_WAITS_S) while
    it ends for want of GPU memory (OUT_OF_MEMORY_EXIT): other gradings on the GPU hold it until their case
    ends, and a grading waiting for its turn to time holds it until the judge, holding the gate, is gone;
    so each wait is outside the gate. The last exit code."""
    for wait in (*(config.OUT_OF_MEMORY_WAITS_S if waits is None else waits), None):
        rc = attempt()
        if rc != OUT_OF_MEMORY_EXIT or wait is None:
            return rc
        sleep(wait)


def waits_said() -> str:
    """config.OUT_OF_MEMORY_WAITS_S as a message says them: "1, 8 and 30"."""
    waits = [f"{w:g}" for w in config.OUT_OF_MEMORY_WAITS_S]
    return waits[0] if len(waits) == 1 else ", ".join(waits[:-1]) + " and " + waits[-1]


def last_error(log: str) -> str:
    """What a failed Python process said last: its exception's line where its traceback has one, else the log's end."""
    lines = [line.strip() for line in log.strip().splitlines()]
    for line in reversed(lines):
        if re.match(r"[\w.]*(Error|Exception|Interrupt)\b", line):
            return line[:600]
    return log.strip()[-500:]


def judge_apart(ex, opts, worker_config: WorkerConfig, result, timed: dict | None = None) -> None:
    """After a grading process that got to its end: every run of every untimed case it did not itself
    fail, and every timed case's steps (`timed`: the check's timings of them, timed_apart.TimingServer's
    records), judged here in a process of its own (the GPU's gate held meanwhile, as a process that
    cannot pause holds it). Its rows: pass, or the first problem of each untimed case; a row per timed
    case (timed_apart.judge_case)."""
    # (a case the worker failed is not judged again, nor one it skipped: its outputs were never handed over)
    failed = {i.name for i in result.items if i.group == "correctness" and i.status in ("fail", "skip")}
    runs = [JudgeRun(u.index, s.label, s.value) for u in untimed_cases(ex, worker_config.max_case_bytes)
            if u.case.label not in failed for s in worker_config.seeds]
    if not runs and timed is None:
        return
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grader-judge-") as own:
        cfg, verdict, log = Path(own) / "config.json", Path(own) / "verdict.json", Path(own) / "output.log"
        cfg.write_text(JudgeConfig(
            exercise=ex.id, verdict=str(verdict), folder=worker_config.handover, runs=runs,
            timed=None if timed is None else {str(i): r for i, r in timed.items()},
            calibrated=opts.calibrated).to_json(), encoding="utf-8")
        limit = opts.timeout or ex.timeout_s
        timed_out = False

        def attempt():
            nonlocal timed_out
            # (its own empty folder as the working directory: the handed-over folder is on no import path)
            with GpuGate(opts.gate).holding(own) if opts.gate else nullcontext(), open(log, "wb") as f:
                try:
                    return subprocess.run([sys.executable, "-m", "grader.check.judge", str(cfg)], cwd=own, stdout=f,
                                          stderr=subprocess.STDOUT, env=pyenv.grading_env(opts.runtime_root),
                                          timeout=limit).returncode
                except subprocess.TimeoutExpired:
                    timed_out = True
                    return None

        rc = with_memory(attempt)
        why = f"the judge did not finish within {limit:g} s" if timed_out else None
        if why is None and (rc != 0 or not verdict.exists()):
            why = f"the judge failed (exit code {rc}): " + last_error(log.read_text(errors="replace"))
            if rc == OUT_OF_MEMORY_EXIT:
                why += f" (run again after waits of {waits_said()} s, each time out of GPU memory)"
        got = json.loads(verdict.read_text(encoding="utf-8")) if why is None else None
    result.add_time("outputs judged apart", time.perf_counter() - t0)
    if timed is not None:
        for index, case in enumerate(ex.cases):
            if case.perf:
                row = (got or {}).get("timed", {}).get(str(index)) or {
                    "group": "performance", "name": case.label, "status": "fail", "detail": why or "not judged"}
                result.add(row["group"], row["name"], row["status"], row["detail"], row.get("metrics"))
    if not runs:
        return
    if got is None:
        result.add("correctness", NAME, "fail", why)
    elif got["problems"]:
        result.add("correctness", NAME, "fail", "; ".join(got["problems"])[:2000])
    else:
        cases = len({run.case_index for run in runs})
        result.add("correctness", NAME, "pass",
                   f"{cases} cases x {len(worker_config.seeds)} seeds: the outputs your code handed over "
                   f"match the reference computed in a process your code never ran in")


def main(config_path: str) -> int:
    import torch

    try:
        return _judge(config_path)
    except torch.cuda.OutOfMemoryError as e:
        print(f"torch.OutOfMemoryError: {e}", flush=True)
        return OUT_OF_MEMORY_EXIT


def _judge(config_path: str) -> int:
    cfg = JudgeConfig.from_json(Path(config_path).read_text(encoding="utf-8"))
    from .. import exercises

    ex = exercises.get(cfg.exercise)
    verdict = judge_all(ex, cfg.runs, cfg.folder)
    if cfg.timed is not None:
        from .timed_apart import judge_case

        calibrated = cfg.calibrated or {}
        verdict["timed"] = {str(index): judge_case(ex, index, cfg.timed.get(str(index)),
                                                   calibrated.get(case.label))
                            for index, case in enumerate(ex.cases) if case.perf}
    Path(cfg.verdict).write_text(json.dumps(verdict), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
