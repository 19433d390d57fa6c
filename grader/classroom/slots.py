"""Grading slots: one process per GPU of the host, each pinned to its GPU.

`resolve_gpus("all" | N | "0,1")` says which GPUs a class run uses (those visible to this process:
CUDA_VISIBLE_DEVICES where it is set, else every device torch sees). `run_on_slots` starts one
process per GPU with CUDA_VISIBLE_DEVICES set to that GPU alone, so everything it starts (the
calibration, the sandboxed grading processes, compute-sanitizer, ncu) sees that GPU and no other;
each slot runs its `setup` once (the calibration of its GPU) and then takes the next item from one
shared queue as soon as it is free, so a slow submission delays only its own GPU. A slot process
that dies is started again and its item given to it once more (then reported as an error).

Without a GPU, "all" is one slot that pins nothing; an explicit count or list still makes that many
slots (nothing runs on a GPU there: the compile-only stages only), which is how the tests see two
slots run side by side on a CPU machine (`probe`).
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import queue
import threading
import time
from typing import Callable

from .. import toolchain


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them for a child ('0', '1', or
    UUIDs): the entries of CUDA_VISIBLE_DEVICES where it is set, else 0 .. device_count - 1."""
    if not toolchain.has_gpu():
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


def _slot_init(device: str | None, sandbox_off: str | None) -> None:
    """A slot process: its GPU alone, and the sandbox decision of the run (made once by the parent)."""
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
    if sandbox_off:
        from ..check import sandbox

        sandbox.disable(sandbox_off)


def _executor(device, sandbox_off):
    return cf.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=_slot_init, initargs=(device, sandbox_off))


def run_on_slots(devices: list[str | None], items: list, work: Callable, on_done: Callable,
                 setup: Callable | None = None, on_setup: Callable | None = None,
                 sandbox_off: str | None = None, attempts: int = 2) -> dict:
    """Run `work(item, context)` for every item, one at a time per slot, a slot per device.
    `setup()` runs first in each slot (its result is the slot's `context`; `on_setup(device,
    context)` sees it); `on_done(item, result, device, seconds, error)` is called in this process,
    one call at a time, as each item finishes (result None and `error` saying why if its slot kept
    dying or `work` raised). `work`, `setup` and the items must pickle (module-level functions).
    Returns {"per_gpu": {device: {"graded": n, "busy_s": seconds on items, "setup_s": seconds of
    its setup}}, "errors": [slots whose setup failed; the others took their items]}."""
    todo: queue.Queue = queue.Queue()
    for item in items:
        todo.put((item, 1))
    lock = threading.Lock()
    stats: dict = {str(d): {"graded": 0, "busy_s": 0.0, "setup_s": 0.0} for d in devices}

    def slot(device):
        try:
            _slot(device)
        except Exception as e:  # its setup failed: the other slots take its items
            errors.append(f"the slot of GPU {device}: {type(e).__name__}: {e}")

    def _slot(device):
        pool = _executor(device, sandbox_off)
        try:
            t0 = time.perf_counter()
            context = pool.submit(setup).result() if setup else None
            stats[str(device)]["setup_s"] = time.perf_counter() - t0
            if on_setup:
                with lock:
                    on_setup(device, context)
            while True:
                try:
                    item, attempt = todo.get_nowait()
                except queue.Empty:
                    return
                t1 = time.perf_counter()
                try:
                    result, error = pool.submit(work, item, context).result(), None
                except cf.process.BrokenProcessPool as e:  # the slot process died: a new one, the item again
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = _executor(device, sandbox_off)
                    if attempt < attempts:
                        todo.put((item, attempt + 1))
                        continue
                    result, error = None, f"the grading slot on GPU {device} died {attempt} times: {e}"
                except Exception as e:  # a bug of the grader's own, not the submission's: said, not written
                    result, error = None, f"{type(e).__name__}: {e}"
                seconds = time.perf_counter() - t1
                with lock:
                    stats[str(device)]["graded"] += 1
                    stats[str(device)]["busy_s"] += seconds
                    on_done(item, result, device, seconds, error)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    errors: list[str] = []
    threads = [threading.Thread(target=slot, args=(d,), daemon=True) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors and not todo.empty():  # every slot failed: nothing could take the items left
        raise RuntimeError("; ".join(errors))
    return {"per_gpu": stats, "errors": errors}


def probe(item, context=None, seconds: float = 0.6) -> dict:
    """Where an item ran: its slot's CUDA_VISIBLE_DEVICES, the process and when (tests use it to see
    two slots work side by side, each on its own GPU)."""
    start = time.time()
    time.sleep(seconds)
    return {"item": item, "device": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(),
            "start": start, "end": time.time()}
