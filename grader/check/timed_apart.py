"""A Python-module exercise's timed cases, timed where its code cannot reach the clock.

A learner's Python module runs inside the grading process (worker.py), where the timer, the
statistics and the rows written back could all be its own. So for such an exercise (spec.TimedApart)
that process only runs steps, a batch at a time, when the check's own process asks for one, and the
check's process keeps the time: it sends a batch's seed down a pipe, reads the batch's answer back,
and the time between the two is the batch's.

The answer is every step's output projected on a random vector, and each step's request is made from
the seed and the projection of the step before it (spec.TimedApart.chain): no step can be skipped, kept
from an earlier call, batched with the next ones, or finished after the answer. Once the grading
process has ended (its GPU context gone with it), the judge (judge.py, a process the submission never
ran in) makes every batch's requests and vector again from its seed and the answers, steps the
reference through them and compares, then times the baselines through the same batches in its own
process (or takes a class run's calibration of the graded one).
"""
from __future__ import annotations

import array
import json
import os
import secrets
import select
import statistics
import threading
import time
from pathlib import Path

from .verdict import timed_baselines, timed_metrics, timed_verdict, tolerances

CALLS = 32  # steps per batch: a batch of the fastest timed step lasts ~10 ms, the pipe's round trip ~0.1 ms
BATCHES = 8  # per timed case, the first a warm-up
DIGEST_SIGMAS = 6.0  # a step's projection off by more than this x its tolerance's projection is wrong
TO_WORKER, FROM_WORKER = "timing-requests", "timing-answers"  # the pipes, in the grading process's folder
MAX_HEADER = 4096  # bytes of an answer's header line
MAX_PAYLOAD = 64 << 20  # bytes of an answer's projections
DEVICE = "cuda"  # where steps, requests and projections live (the grader's tests run them on the CPU)


def _synchronize() -> None:
    import torch

    if torch.device(DEVICE).type == "cuda":
        torch.cuda.synchronize()


# ------------------------------------------------------------------ both sides: one batch of steps
def batch_inputs(ta, p: dict, seed: int, calls: int):
    """A batch's base requests [calls, ...] and projection vector [width], drawn from `seed`."""
    import torch

    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    base = ta.requests(p, gen, calls)
    r = torch.randn(ta.width(p), generator=gen, device=DEVICE)
    return base, r


def project(y, r):
    """A step's output [rows, width] on the vector r: [rows] fp32."""
    return y.float() @ r


def run_batch(ta, p: dict, step, seed: int, calls: int):
    """`calls` steps in turn, each request chained to the step before's projection; the projections
    [calls, rows] fp32 on the host, once the GPU has finished them."""
    import torch

    base, r = batch_inputs(ta, p, seed, calls)
    out, request = [], base[0]
    for k in range(calls):
        d = project(step(request), r)
        out.append(d)
        if k + 1 < calls:
            request = ta.chain(p, base[k + 1], d)
    digests = torch.stack(out).cpu()
    _synchronize()
    return digests


def time_steps(ta, p: dict, step, batches: int | None = None, calls: int | None = None) -> float:
    """Seconds per step of `step` (a baseline's, in a process of the grader's own): the median batch
    over `calls`, as the learner's steps are timed, the first batch a warm-up."""
    batches, calls = batches or BATCHES, calls or CALLS
    seconds = []
    for _ in range(batches):
        _synchronize()
        t0 = time.perf_counter()
        run_batch(ta, p, step, secrets.randbits(62), calls)
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds[1:]) / calls


def per_step_seconds(record: dict) -> float:
    """The learner's seconds per step from the batches timed by the check's process (warm-up left out)."""
    return statistics.median(b["seconds"] for b in record["batches"][1:]) / record["batches"][0]["calls"]


# ------------------------------------------------------------------ the pipes
def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 0.05)
            continue
        view = view[n:]


class _Reader:
    """Messages from a pipe: a JSON header line, then as many bytes as its "bytes" says. `message()`
    waits until `give_up()` is true (None then); anything malformed raises ValueError."""

    def __init__(self, fd: int, give_up):
        self.fd, self.give_up, self.buf = fd, give_up, b""

    def _fill(self) -> bool:
        readable, _, _ = select.select([self.fd], [], [], 0.05)
        if not readable:
            return not self.give_up()
        try:
            chunk = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return True
        if not chunk:  # (every writer gone)
            return not self.give_up()
        self.buf += chunk
        return True

    def message(self):
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_HEADER:
                raise ValueError("an answer's header is too long")
            if not self._fill():
                return None
        line, self.buf = self.buf.split(b"\n", 1)
        head = json.loads(line)
        if not isinstance(head, dict):
            raise ValueError("an answer's header is not a JSON object")
        n = head.get("bytes", 0)
        if not isinstance(n, int) or not 0 <= n <= MAX_PAYLOAD:
            raise ValueError("an answer's size is not a sane number of bytes")
        while len(self.buf) < n:
            if not self._fill():
                return None
        payload, self.buf = self.buf[:n], self.buf[n:]
        return head, payload


class WorkerChannel:
    """The grading process's side of the pipes (opened once the supervisor made them)."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        self.requests = open(folder / TO_WORKER, "rb", buffering=0)
        self.answers = open(folder / FROM_WORKER, "wb", buffering=0)
        self._reader = _Reader(self.requests.fileno(), lambda: False)  # (the supervisor ends it, or its process)

    def send(self, head: dict, payload: bytes = b"") -> None:
        _write_all(self.answers.fileno(), (json.dumps({**head, "bytes": len(payload)}) + "\n").encode() + payload)

    def receive(self) -> dict:
        got = self._reader.message()
        return got[0] if got else {"end": True}


def serve(ex, mod, folder: str | Path, emit, gate, short_error, release, alive) -> bool:
    """The grading process's part: for every timed case, its step built from the learner's module
    (untimed), then batches run as the supervisor asks, until it says "end". False if the CUDA
    context was lost. `short_error` (an exception -> one line), `release` (frees a case's memory),
    `alive` (whether the CUDA context outlived an error): the worker's, passed in as this runs in the
    worker's process, where that module is __main__."""
    import torch

    from .. import config

    ta = ex.timed_apart
    chan = WorkerChannel(folder)
    for index, case in enumerate(ex.cases):
        if not case.perf:
            continue
        emit(event="start", name=case.label)
        p = case.params
        try:
            with gate.busy():
                inputs = ex.make_inputs(p, torch.Generator(device=DEVICE).manual_seed(config.PROFILE_SEED))
                step = ta.learner(mod, p, inputs)
                _synchronize()
        except Exception as e:
            chan.send({"case": index, "error": f"your step could not be set up: {short_error(e)}"})
            if not alive():
                return False
            continue
        chan.send({"case": index, "ready": True})
        with gate.exclusive():
            while True:
                req = chan.receive()
                if "seed" not in req:
                    break
                try:
                    digests = run_batch(ta, p, step, int(req["seed"]), int(req["calls"]))
                except Exception as e:
                    chan.send({"case": index, "error": short_error(e)})
                    if not alive():
                        return False
                    break
                chan.send({"case": index, "rows": int(digests.shape[1])},
                          digests.to(torch.float32).contiguous().numpy().tobytes())
        del step, inputs
        release()
    return True


# ------------------------------------------------------------------ the supervisor's side
class TimingServer:
    """In a thread of the check's process while the grading process runs: the pipes made in its
    folder, and each timed case's batches asked for and timed as that process gets to them.
    `records`: case index -> {"batches": [{"seed", "calls", "seconds", "digests"}], "error"}."""

    def __init__(self, folder: str | Path, batches: int | None = None, calls: int | None = None):
        folder = Path(folder)
        for name in (TO_WORKER, FROM_WORKER):
            os.mkfifo(folder / name, 0o600)
        self.batches, self.calls = batches or BATCHES, calls or CALLS
        self.records: dict[int, dict] = {}
        self.problem: str | None = None  # what was wrong with the answers, where something was
        self._ended = threading.Event()
        # (read and write ends held here from the start: neither side's open waits for the other)
        self._to = os.open(folder / TO_WORKER, os.O_RDWR | os.O_NONBLOCK)
        self._from = os.open(folder / FROM_WORKER, os.O_RDWR | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._serve, daemon=True, name="timing-server")
        self._thread.start()

    def _serve(self) -> None:
        reader = _Reader(self._from, self._ended.is_set)
        try:
            while True:
                got = reader.message()
                if got is None:
                    return
                head, _ = got
                index = head.get("case")
                if not isinstance(index, int):
                    raise ValueError("an answer names no case")
                record = self.records.setdefault(index, {"batches": [], "error": None})
                if "error" in head:
                    record["error"] = str(head["error"])[:1000]
                    continue
                if head.get("ready"):
                    self._time_case(reader, record)
        except (ValueError, OSError) as e:
            self.problem = f"the grading process's answers while timed could not be read ({e})"

    def _time_case(self, reader: _Reader, record: dict) -> None:
        for _ in range(self.batches):
            seed = secrets.randbits(62)
            t0 = time.perf_counter()
            _write_all(self._to, (json.dumps({"seed": seed, "calls": self.calls}) + "\n").encode())
            got = reader.message()
            seconds = time.perf_counter() - t0
            if got is None:
                return
            head, payload = got
            if "error" in head:
                record["error"] = str(head["error"])[:1000]
                break
            rows = head.get("rows")
            if not isinstance(rows, int) or rows <= 0 or len(payload) != 4 * rows * self.calls:
                raise ValueError("an answer is not one projection per row of every step")
            digests = array.array("f")
            digests.frombytes(payload)
            record["batches"].append({"seed": seed, "calls": self.calls, "seconds": seconds, "rows": rows,
                                      "digests": digests.tolist()})
        _write_all(self._to, b'{"end": true}\n')

    def finish(self) -> dict[int, dict]:
        """Once the grading process has ended: the records (the thread stopped, the pipes closed)."""
        self._ended.set()
        self._thread.join(timeout=5)
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        return self.records


# ------------------------------------------------------------------ the judge's side
def check_projections(ex, p: dict, inputs: dict, record: dict) -> str | None:
    """Every timed step's projections against the reference stepped through the same requests (made
    again from each batch's seed and the projections handed over): None, or what is wrong. A right
    output errs by at most its tolerance t_v in each element v, so its projection on a vector of
    independent N(0, 1) elements errs with a spread of at most ||t||; one off by more than
    DIGEST_SIGMAS x that, or all of them by more than 1 x in RMS, is not the step's output."""
    import math

    import torch

    ta = ex.timed_apart
    tol = next(iter(tolerances(ex, p, ["out"]).values()))
    step = ta.reference(p, inputs)
    zs = []
    for b, batch in enumerate(record["batches"]):
        calls, rows = batch["calls"], batch["rows"]
        got = torch.tensor(batch["digests"], dtype=torch.float32, device=DEVICE).view(calls, rows)
        base, r = batch_inputs(ta, p, batch["seed"], calls)
        request = base[0]
        for k in range(calls):
            y = step(request).float()
            if y.shape[0] != rows:
                return f"{rows} rows handed over for each step, where the step has {y.shape[0]}"
            spread = (tol.atol + tol.rtol * y.abs()).norm(dim=-1)
            z = (got[k] - project(y, r)) / spread
            bad = ~torch.isfinite(z) | (z.abs() > DIGEST_SIGMAS)
            if bool(bad.any()):
                j = int(bad.nonzero()[0, 0])
                return (f"step {k + 1} of timed batch {b + 1}, row {j}: the output is not the step's (its projection "
                        f"is off by {float(z[j].abs()):.1f} x the tolerance's spread, at most {DIGEST_SIGMAS:g}). Each "
                        "timed step has new tokens, chained to the step before's output: does the step skip work, "
                        "keep an earlier step's result, or finish after it returns?")
            zs.append(z)
            if k + 1 < calls:
                request = ta.chain(p, base[k + 1], got[k])
    z = torch.cat(zs)
    rms, limit = float(z.pow(2).mean().sqrt()), 1 + 3 / math.sqrt(2 * z.numel())
    if rms > limit:
        return (f"the timed steps' outputs err by {rms:.2f} x their tolerance in RMS over {z.numel()} projections (at "
                f"most {limit:.2f}), where the untimed steps are within it: are the timed steps computed at lower "
                "precision?")
    return None


def judge_case(ex, index: int, record: dict | None, calibrated: dict | None) -> dict:
    """A timed case's row (group "performance"), from the check's timings of the learner's batches:
    the outputs checked (check_projections), then the baselines timed here through the same batches
    (the graded one taken from `calibrated` in a class run, as worker.measure does). Its metrics and
    detail are built as worker.measure's (worker.timed_metrics, timed_verdict), a step's time in us."""
    import torch

    from .. import config
    from ..bench import theoretical_bandwidth
    ta, case, t = ex.timed_apart, ex.cases[index], ex.target
    p = case.params

    def row(status, detail, metrics=None):
        return {"group": "performance", "name": case.label, "status": status, "detail": detail,
                "metrics": metrics or {"valid": False}}

    if record is None:
        return row("fail", "not timed: your code never got to its timed steps")
    if record.get("error"):
        return row("fail", "not timed: " + record["error"])
    if len(record["batches"]) < BATCHES:
        return row("fail", f"not timed: the grading process answered {len(record['batches'])} of {BATCHES} batches")
    inputs = ex.make_inputs(p, torch.Generator(device=DEVICE).manual_seed(config.PROFILE_SEED))
    wrong = check_projections(ex, p, inputs, record)
    _release()
    if wrong:
        return row("fail", "not the work it was judged on: " + wrong)
    yours = per_step_seconds(record) * 1e6
    values = {}
    for b in timed_baselines(t, calibrated):
        values[b.name] = time_steps(ta, p, ta.baseline(b, p, inputs)) * 1e6
        _release()
    nbytes = int(t.bytes(p))
    gbps = nbytes / (yours * 1e-6) / 1e9
    peak = theoretical_bandwidth() if torch.device(DEVICE).type == "cuda" else None
    metrics = timed_metrics(t, yours, values, calibrated,
                            {"bytes": nbytes, "gbps": gbps, "peak_gbps": peak / 1e9 if peak else None},
                            {"timed_apart": {"batches": BATCHES - 1, "steps": CALLS}, "valid": True})
    if peak and gbps * 1e9 > peak * 1.01:
        metrics["valid"] = False
        return row("fail", f"{gbps:.0f} GB/s for the bytes a step must read is above the theoretical peak "
                           f"{peak / 1e9:.0f} GB/s: the step cannot have done the work it had to", metrics)
    status, detail = timed_verdict(ex, metrics, f"; a step's time is the median of {BATCHES - 1} batches of "
                                                f"{CALLS} steps, each batch timed by the grader's own process, "
                                                "every step's output checked in a process your code never ran in")
    return row(status, detail, metrics)


def _release() -> None:
    """A model's memory given back between the reference and each baseline (objects in cycles too)."""
    import gc

    import torch

    gc.collect()
    if torch.device(DEVICE).type == "cuda":
        torch.cuda.empty_cache()
