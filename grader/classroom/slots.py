"""Grading slots: one per GPU of the host, each pinned to its GPU, grading `lanes` submissions at a time.

`resolve_gpus("all" | N | "0,1")` says which GPUs a class run uses (those visible to this process:
CUDA_VISIBLE_DEVICES where it is set, else every device torch sees). `run_on_slots` starts the
processes of a slot with CUDA_VISIBLE_DEVICES set to its GPU alone, so everything they start (the
sandboxed grading processes, compute-sanitizer, ncu) sees that GPU and no other; each slot's `setup`
(the calibration of its GPU, a process the caller pins to it) runs once, in a thread of the caller, when
the slot has an item; then each of its lanes takes the next item from one shared feed as soon as it is
free, so a slow submission delays only its own lane. With
several lanes a GPU grades several submissions side by side, and its gate (check/gate.py) gives each
timing the GPU alone: the others pause between two cases meanwhile. A slot process that dies is
started again and its item given once more (then reported as an error).

Without a GPU, "all" is one slot that pins nothing; an explicit count or list still makes that many
slots (nothing runs on a GPU there: the compile-only stages only), which is how the tests see two
slots run side by side on a CPU machine (`probe`).
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from .. import machine


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them for a child ('0', '1', or
    UUIDs): the entries of CUDA_VISIBLE_DEVICES where it is set, else 0 .. device_count - 1."""
    if not machine.has_gpu():
        return []
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [d.strip() for d in env.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def resolve_gpus(spec: str | int | None = None) -> list[str | None]:
    """The slots of a run, one device each: `spec` "all" (or None), a count N, or a list of
    indices "0,2" into the visible GPUs. Without a GPU: [None] for "all", else that many slots
    named "0", "1", ... (nothing runs on a GPU there). ValueError says what is wrong."""
    visible = visible_gpus()
    text = str(spec).strip() if spec is not None else "all"
    if text in ("", "all"):
        return list(visible) or [None]
    if text.isdigit() and "," not in text:
        n = int(text)
        if n < 1:
            raise ValueError(f"--gpus {text}: at least one GPU")
        if visible and n > len(visible):
            raise ValueError(f"--gpus {n}: only {len(visible)} GPU(s) visible here ({','.join(visible)})")
        return visible[:n] if visible else [str(i) for i in range(n)]
    try:
        picks = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ValueError(f"--gpus {text}: 'all', a count, or indices such as 0,1") from None
    if not picks or len(set(picks)) != len(picks):
        raise ValueError(f"--gpus {text}: each GPU once")
    if visible:
        bad = [p for p in picks if not 0 <= p < len(visible)]
        if bad:
            raise ValueError(f"--gpus {text}: no GPU {bad[0]} here ({len(visible)} visible)")
        return [visible[p] for p in picks]
    return [str(p) for p in picks]


_GATE: str | None = None  # in a slot process with lanes: its GPU's gate folder (check/gate.py)


def slot_gate() -> str | None:
    """The gate folder of the GPU this slot process grades on, where several lanes share it; else None."""
    return _GATE


def _slot_init(device: str | None, sandbox_off: str | None, gate: str | None, prime: Callable | None = None) -> None:
    """A slot process: its GPU alone, the sandbox decision of the run (made once by the parent), and
    its GPU's gate where lanes share the GPU; then `prime()` (class grading: the lane's grading
    processes for its first submission, started now)."""
    global _GATE
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
    if sandbox_off:
        from ..check import sandbox

        sandbox.disable(sandbox_off)
    _GATE = gate
    if prime is not None:
        try:
            prime()
        except Exception:  # (a head start only: the first grading starts its own processes)
            pass


def _executor(device, sandbox_off, lanes, gate, prime=None):
    return cf.ProcessPoolExecutor(max_workers=lanes, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=_slot_init, initargs=(device, sandbox_off, gate, prime))


def _noop() -> None:
    """A task that makes its pool start one more process (slot start: every lane's at once)."""


class Later:
    """What `work` returns for an item to be run once more (`item`, changed as it says: class grading's
    re-run with the GPU alone): with one slot after every other item, when the other lanes have little
    left to do; with several next, so that its GPU's lanes wait for it while the other GPUs grade on (left
    to the end, it would run alone on one GPU while the others had nothing left to do)."""

    def __init__(self, item):
        self.item = item


class _Feed:
    """The items, taken one at a time by every lane of every slot: a list, or an iterable that yields
    each item once it is ready (class grading hands each submission over as soon as it is prepared),
    and the items given back to be run again."""

    def __init__(self, items: Iterable):
        self._items = iter(items)
        self._lock = threading.Lock()
        self._again: collections.deque = collections.deque()
        self._last: collections.deque = collections.deque()
        self.exhausted = False
        self.error: str | None = None
        self.first_at: float | None = None  # time.perf_counter() when the first item was ready

    def take(self):
        with self._lock:
            if self._again:
                return self._again.popleft()
            if not self.exhausted:
                try:
                    item = next(self._items), 1
                    self.first_at = self.first_at or time.perf_counter()
                    return item
                except StopIteration:
                    self.exhausted = True
                except Exception as e:  # the items could not be made (preparation failed): none is lost silently
                    self.exhausted, self.error = True, f"{type(e).__name__}: {e}"
            return self._last.popleft() if self._last else None

    def again(self, item, attempt: int) -> None:
        self._again.append((item, attempt))

    def drained(self) -> bool:
        """Nothing left to take."""
        return self.exhausted and not self._again and not self._last

    def put_back(self, taken) -> None:
        """What take() gave, to be taken first by the next one that asks."""
        self._again.appendleft(taken)

    def last(self, item, attempt: int) -> None:
        """Run once more after every other item."""
        self._last.append((item, attempt))


def run_on_slots(devices: list[str | None], items: Iterable, work: Callable, on_done: Callable,
                 setup: Callable | None = None, on_setup: Callable | None = None,
                 sandbox_off: str | None | Callable[[], str | None] = None, attempts: int = 2, lanes: int = 1,
                 gate_root: str | Path | None = None, prime: Callable | None = None,
                 setup_early: bool = False) -> dict:
    """Run `work(item, context)` for every item, a slot per device, `lanes` items at a time per slot
    (`work` may return Later(item): that item runs again, after every other on one device, next on several).
    `setup(device)` runs first for each slot, in a thread of this process (class grading: the GPU's
    calibration, a process of its own pinned to it; its result is the slot's `context`; `on_setup(device,
    context)` sees it); `on_done(item, result, device, seconds, error)` is called in this process,
    one call at a time, as each item finishes (result None and `error` saying why if its slot kept
    dying or `work` raised). `work` and the items must pickle (module-level functions). `sandbox_off`
    goes to each slot process (sandbox.disable); where it is a callable (the run's sandbox check, still
    under way), the slot's processes start at once as if it returns None, and it is called before the
    slot's first item: where it returns a reason, they are started again with it.
    With lanes > 1 each slot's processes get its GPU's gate folder under `gate_root` (slot_gate()):
    the gradings sharing a GPU time one at a time (check/gate.py). `prime()` runs as each slot process
    starts (all `lanes` of a slot start with it, beside its setup). A slot runs its setup once it has
    an item, or (`setup_early`: items are sure to come) at once, while the first item is being made.
    Returns {"per_gpu": {device: {"graded": n, "busy_s": seconds in which at least one item ran,
    "lane_s": the items' seconds added up, "setup_s": seconds of its setup, "setup_ready_s": when it had
    ended, "ready_s": when its lanes' processes had started (with `prime`), "first_s"/"end_s": when its
    first item started and its last ended, seconds since the call}}, "errors": [slots whose setup
    failed; the others took their items], "first_item_s": when the first item was ready}."""
    feed = _Feed(items)
    lock = threading.Lock()
    stats: dict = {str(d): {"graded": 0, "busy_s": 0.0, "lane_s": 0.0, "setup_s": 0.0, "lanes": lanes,
                            "setup_ready_s": None, "ready_s": None, "first_s": None, "end_s": None} for d in devices}
    t_origin = time.perf_counter()
    errors: list[str] = []
    setups = cf.ThreadPoolExecutor(max_workers=len(devices), thread_name_prefix="setup") if setup else None

    def slot(device):
        try:
            _slot(device)
        except Exception as e:  # its setup failed: the other slots take its items
            errors.append(f"the slot of GPU {device}: {type(e).__name__}: {e}")

    def timed_setup(device, mine):
        t0 = time.perf_counter()
        try:
            return setup(device)
        finally:
            mine["setup_s"] = time.perf_counter() - t0
            mine["setup_ready_s"] = time.perf_counter() - t_origin

    def _slot(device):
        gate = None
        if lanes > 1 and gate_root is not None:
            gate = str(Path(gate_root) / f"gpu-{device}")
            Path(gate).mkdir(parents=True, exist_ok=True)
        mine = stats[str(device)]
        started: dict = {}

        def begin_setup():
            if setups is not None and "setup" not in started:
                started["setup"] = setups.submit(timed_setup, device, mine)

        if setup_early:  # (the first item may take long to come: the first builds)
            begin_setup()
        # The sandbox's GPU check may still be under way (`sandbox_off` callable): the slot's processes start
        # now as if it will pass (inside the sandbox, as nearly always), not after it (3-5 s, then their
        # Python, torch and CUDA context: seconds the first gradings would wait), and start again outside
        # the sandbox where it fails, before any item runs.
        decide = sandbox_off if callable(sandbox_off) else None
        state = {"pool": _executor(device, None if decide else sandbox_off, lanes, gate, prime), "active": 0,
                 "since": 0.0, "off": None if decide else sandbox_off}
        pool_lock = threading.Lock()

        def start():
            """The setup, and every lane's process (each submit that finds no idle process starts
            one: prime() runs in each now, beside the setup, not when its first item comes)."""
            pool = state["pool"]
            started["spawned"] = [pool.submit(_noop) for _ in range(lanes)] if prime else []
            for f in started["spawned"]:  # (the last one's end: every lane's processes started)
                f.add_done_callback(lambda _: mine.__setitem__(
                    "ready_s", max(mine["ready_s"] or 0.0, time.perf_counter() - t_origin)))
            begin_setup()

        try:
            if setup_early:
                start()
            first = feed.take()  # a slot with nothing to grade measures nothing (a resumed run, all done)
            if first is None:
                return
            feed.put_back(first)
            if "spawned" not in started:
                start()
            if decide is not None:
                state["off"] = decide()  # (no item has run yet in this slot's processes)
                if state["off"] is not None:  # CUDA fails inside the sandbox: the same processes, outside it
                    for f in started["spawned"]:
                        f.result()
                    state["pool"].shutdown(wait=True, cancel_futures=True)
                    state["pool"] = _executor(device, state["off"], lanes, gate, prime)
                    mine["ready_s"] = None
                    start()
            context = started["setup"].result() if "setup" in started else None
            for f in started["spawned"]:
                f.result()
            if on_setup:
                with lock:
                    on_setup(device, context)

            def lane():
                while True:
                    got = feed.take()
                    if got is None:
                        return
                    item, attempt = got
                    with pool_lock:
                        pool = state["pool"]
                        if state["active"] == 0:
                            state["since"] = time.perf_counter()
                        if mine["first_s"] is None:
                            mine["first_s"] = state["since"] - t_origin
                        state["active"] += 1
                    t1 = time.perf_counter()
                    try:
                        result, error = pool.submit(work, item, context).result(), None
                    except cf.process.BrokenProcessPool as e:  # a slot process died: new ones, the item again
                        with pool_lock:
                            if state["pool"] is pool:
                                pool.shutdown(wait=False, cancel_futures=True)
                                state["pool"] = _executor(device, state["off"], lanes, gate, prime)
                        result, error = None, f"the grading slot on GPU {device} died {attempt} times: {e}"
                    except Exception as e:  # a bug of the grader's own, not the submission's: said, not written
                        result, error = None, f"{type(e).__name__}: {e}"
                    seconds = time.perf_counter() - t1
                    with pool_lock:
                        state["active"] -= 1
                        if state["active"] == 0:
                            mine["busy_s"] += time.perf_counter() - state["since"]
                            mine["end_s"] = time.perf_counter() - t_origin
                    if result is None and error.startswith("the grading slot") and attempt < attempts:
                        feed.again(item, attempt + 1)
                        continue
                    if isinstance(result, Later):
                        (feed.again if len(devices) > 1 else feed.last)(result.item, attempt)
                        continue
                    with lock:
                        mine["graded"] += 1
                        mine["lane_s"] += seconds
                        on_done(item, result, device, seconds, error)

            threads = [threading.Thread(target=lane, daemon=True) for _ in range(lanes)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            state["pool"].shutdown(wait=True, cancel_futures=True)

    threads = [threading.Thread(target=slot, args=(d,), daemon=True) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if setups is not None:
        setups.shutdown(wait=True)
    if errors and not feed.drained():  # every slot failed: nothing could take the items left
        raise RuntimeError("; ".join(errors))
    if feed.error:
        errors.append(f"the items left could not be made: {feed.error}")
    return {"per_gpu": stats, "errors": errors,
            "first_item_s": feed.first_at - t_origin if feed.first_at is not None else None}


def probe(item, context=None, seconds: float = 0.6) -> dict:
    """Where an item ran: its slot's CUDA_VISIBLE_DEVICES, the process and when, whether the sandbox is
    used there (tests use it to see two slots work side by side, each on its own GPU)."""
    from ..check import sandbox

    start = time.time()
    time.sleep(seconds)
    return {"item": item, "device": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(),
            "start": start, "end": time.time(), "gate": slot_gate(), "sandbox": sandbox.available()}
