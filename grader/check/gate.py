"""One GPU shared by several gradings, each timed with the GPU to itself (class grading's lanes).

Class grading may run several gradings side by side on one GPU (`--lanes`): the correctness cases,
compute-sanitizer and the profilers need the GPU but not a quiet one; the timing needs it alone. The
gate gives every timing that. Before a timing starts, each other process grading on that GPU is paused
between two stretches of its GPU work (it finishes the case it is in, synchronizes, says so and
waits); one still starting (before its first GPU work) is not waited for: its first stretch finds
the pause asked; a process that cannot pause (ncu) is waited for, and none starts until the timing ends. Time a
process spends paused, or waiting for its turn to time, is not charged to its time limit (supervise.py).
A submission that never pauses (a kernel that hangs inside a case) delays the others' timings until its
supervisor stops it, config.GATE_PAUSE_LIMIT_S after the pause was asked (class grading then grades it
again with the GPU to itself), and is never timed against.

Two sides, speaking through small files in each grading process's scratch folder (the one folder a
sandboxed process sees):
- GpuGate, the supervisors' side, outside the sandbox: a folder per GPU holding the registry of the
  processes grading on it, a lock for the registry and a lock per timing (flock: the lanes of a GPU
  are processes of their own);
- WorkerGate, inside the grading process: `busy()` around each stretch of GPU work, `exclusive()`
  around the timing. Without a gate (a learner's check) both do nothing.
A submission's own code cannot write these files to skip a pause: the link checks refuse file I/O
in it (jit/symbols.py).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

from .. import config

PAUSE, PAUSED, WANT, GRANTED = "gate-pause", "gate-paused", "gate-want", "gate-granted"
LISTENING = "gate-listening"  # the grading process answers pauses from now on (it has started)
# The grading process is inside a call of the learner's code since the time written (gate or not): its
# supervisor stops a call that lasts too long (a hang: config.RUN_LIMIT_S, supervise.run_worker).
CALLING = "call-started"
POLL_S = 0.003


def _read(path: Path) -> str | None:
    try:
        return path.read_text() or None
    except OSError:
        return None


def _write(path: Path, text: str) -> None:
    """Whole or not at all: the other side reads it at any moment."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    tmp.replace(path)


def _paused_or_not_started(folder: Path, token: str) -> bool:
    """A pausable process a timing need not wait for: paused for it, or not yet listening (still
    starting: Python, torch's import; it has not touched the GPU, and its first busy() finds the pause
    already asked). Waiting for those cost every timing seconds of other processes' start."""
    return _read(folder / PAUSED) == token or not (folder / LISTENING).exists()


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    return True


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


class GpuGate:
    """The gate of one GPU, at `root` (one folder per GPU, shared by the lanes grading on it)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        (self.root / "registry").mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _lock(self, name: str):
        fd = os.open(self.root / name, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # (closing releases the lock)

    def _entries(self) -> dict[str, dict]:
        """The processes registered here. An entry whose registering supervisor has died (killed with its
        run: nothing unregistered it) is removed: a timing would otherwise wait for its pause for ever."""
        out = {}
        for p in (self.root / "registry").iterdir():
            text = _read(p)
            if text and not p.name.startswith("."):
                entry = json.loads(text)
                if "pid" in entry and not _process_exists(entry["pid"]):
                    _unlink(p)
                    continue
                out[p.name] = entry
        return out

    def register(self, folder: str | Path, pausable: bool = True) -> str:
        """A process that runs on this GPU from now on, its gate files in `folder`. A pausable one is
        paused at once if a timing is running; one that cannot pause waits here until it has ended."""
        entry = uuid.uuid4().hex
        self.clear_if_stale()
        while True:
            with self._lock("registry.lock"):
                token = _read(self.root / "timing")
                if token is None or pausable:
                    _write(self.root / "registry" / entry,
                           json.dumps({"folder": str(folder), "pausable": pausable, "pid": os.getpid()}))
                    if token is not None:
                        _write(Path(folder) / PAUSE, token)
                    return entry
            time.sleep(0.02)

    def clear_if_stale(self) -> bool:
        """A timing whose holder has died (a slot process killed mid-timing: its lock went with it, its
        marker stayed): marker and pauses removed, so that nothing waits on it for ever. True if so."""
        if not (self.root / "timing").exists():
            return False
        fd = os.open(self.root / "turn.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a timing is running
            os.close(fd)
            return False
        try:
            token = _read(self.root / "timing")
            if token is not None:  # (every pause goes: the holder may have asked some with later tokens)
                self.release((os.dup(fd), token, None))
            return token is not None
        finally:
            os.close(fd)

    def others_in_call(self, own: str, at_least_s: float) -> bool:
        """Whether a process registered here other than `own` has been inside one call of the learner's
        code (WorkerGate.calling) for at least `at_least_s` seconds, or one that cannot pause is at work
        (ncu, replaying each kernel of its process many times)."""
        return any(not v["pausable"] or calling_for(v["folder"]) >= at_least_s
                   for e, v in self._entries().items() if e != own)

    def note_stopped(self, entry: str | None = None) -> None:
        """The process registered as `entry` (None: one run alone, not registered) is being stopped inside
        its work (a hang, a time limit): a kernel may still run on the GPU while its CUDA context is torn down."""
        (self.root / "stopped").mkdir(exist_ok=True)
        _write(self.root / "stopped" / (entry or f"alone-{uuid.uuid4().hex}"), repr(time.time()))

    def others_stopped_since(self, own: str, since: float) -> bool:
        """Whether a process on this GPU other than `own` was stopped inside its work at `since`
        (time.time()) or later."""
        folder = self.root / "stopped"
        if not folder.is_dir():
            return False
        for p in folder.iterdir():
            try:
                if p.name != own and not p.name.startswith(".") and float(_read(p) or 0) >= since:
                    return True
            except ValueError:
                continue
        return False

    def unregister(self, entry: str) -> None:
        _unlink(self.root / "registry" / entry)

    def acquire(self, own: str, alive=lambda: True) -> tuple[int, str, tuple[str, ...]]:
        """The GPU for the process registered as `own`: one timing at a time; every other process
        paused (each has said so) or, if it cannot pause, ended. Returns the turn for release().
        Stops waiting if `alive()` turns false (the process asking has ended).
        Those that have not paused after config.GATE_LAG_S (inside a long stretch of GPU work) are
        waited for alone: the ones already paused work on meanwhile, and are asked again once the
        late ones have paused (a new token each time, so that an old "paused" does not count); a
        late one stays paused. Each round leaves one more paused for good: it ends."""
        fd = os.open(self.root / "turn.lock", os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        token = uuid.uuid4().hex
        asked: dict[str, str] = {}  # entry: the token of the pause asked of it
        with self._lock("registry.lock"):
            _write(self.root / "timing", token)
            pending = {e: v for e, v in self._entries().items() if e != own}
            self._ask(pending, token, asked)
        tokens, since = [token], time.monotonic()
        while pending and alive():
            pending = self._not_paused(pending, asked)
            if pending and time.monotonic() - since > config.GATE_LAG_S:
                late = pending
                with self._lock("registry.lock"):
                    paused = {e: v for e, v in self._entries().items()
                              if e in asked and e not in late and v["pausable"]}
                    for e, v in paused.items():  # work on while the late ones finish their stretch
                        if _read(Path(v["folder"]) / PAUSE) == asked[e]:
                            _unlink(Path(v["folder"]) / PAUSE)
                while late and alive():
                    time.sleep(POLL_S)
                    late = self._not_paused(late, asked)
                again = uuid.uuid4().hex
                tokens.append(again)
                with self._lock("registry.lock"):
                    registered = self._entries()
                    pending = {e: registered[e] for e in paused if e in registered}
                    self._ask(pending, again, asked)
                since = time.monotonic()
            time.sleep(POLL_S)
        return fd, token, tuple(tokens)

    @staticmethod
    def _ask(entries: dict, token: str, asked: dict) -> None:
        for e, v in entries.items():
            if v["pausable"]:
                _write(Path(v["folder"]) / PAUSE, token)
                asked[e] = token

    def _not_paused(self, entries: dict, asked: dict) -> dict:
        """Those of `entries` still registered that have neither paused (for the pause asked of them) nor,
        if pausable, yet started."""
        registered = set(self._entries())
        return {e: v for e, v in entries.items() if e in registered and
                not (v["pausable"] and _paused_or_not_started(Path(v["folder"]), asked[e]))}

    def release(self, turn: tuple[int, str, tuple[str, ...] | None]) -> None:
        """The timing has ended: its marker and every pause it asked removed (`turn`'s tokens, as
        acquire() returned them; None: any, for a timing whose holder died)."""
        fd, _, tokens = turn
        with self._lock("registry.lock"):
            _unlink(self.root / "timing")
            for v in self._entries().values():
                asked = _read(Path(v["folder"]) / PAUSE) if v["pausable"] else None
                if asked is not None and (tokens is None or asked in tokens):
                    _unlink(Path(v["folder"]) / PAUSE)
        os.close(fd)

    @contextlib.contextmanager
    def alone(self):
        """The GPU to the caller's processes alone for a while (every registered one paused or ended,
        none started meanwhile without pausing): a grading run again without the others beside it. Yields
        the gate: a grading stopped there says so (note_stopped), as one stopped beside the others does."""
        turn = self.acquire("")
        try:
            yield self
        finally:
            self.release(turn)

    @contextlib.contextmanager
    def holding(self, folder: str | Path):
        """A stretch of GPU work by something that cannot pause (ncu's process): no timing runs
        beside it, and it waits for one that runs."""
        entry = self.register(folder, pausable=False)
        try:
            yield
        finally:
            self.unregister(entry)


class Supervised:
    """The supervisor's side of the gate for one grading process in `folder`: registered while it
    runs; its requests to time granted in turn (a thread waits for the turn); `tick()` says whether
    it is waiting on the gate now (paused, or waiting for its turn), time not charged to its limit."""

    def __init__(self, gate: GpuGate, folder: str | Path):
        self.gate, self.folder = gate, Path(folder)
        self.entry = gate.register(folder)
        self.turn = None
        self.thread = None
        self.token = None
        self.ended = False
        self._asked: tuple[str, float] | None = None  # a pause not yet said: (its token, when first seen)

    def _take_turn(self, token: str) -> None:
        turn = self.gate.acquire(self.entry, alive=lambda: not self.ended)
        self.turn = turn
        _write(self.folder / GRANTED, token)

    def tick(self) -> bool:
        want = _read(self.folder / WANT)
        if self.thread is not None and not self.thread.is_alive() and want != self.token:  # its timing ended
            self._release()
        if want and self.thread is None:
            self.token = want
            self.thread = threading.Thread(target=self._take_turn, args=(want,), daemon=True)
            self.thread.start()
        waiting_turn = self.thread is not None and self.turn is None
        pause = _read(self.folder / PAUSE)
        paused = pause is not None and _read(self.folder / PAUSED) == pause
        if paused and not waiting_turn and self.gate.clear_if_stale():
            return False
        return waiting_turn or paused

    def others_in_call(self, at_least_s: float) -> bool:
        """Another grading on this GPU is inside a call of its learner's code this long (gate.others_in_call)."""
        return self.gate.others_in_call(self.entry, at_least_s)

    def others_stopped_since(self, since: float) -> bool:
        """Another grading on this GPU was stopped inside its work at `since` or later (gate.note_stopped)."""
        return self.gate.others_stopped_since(self.entry, since)

    def stopping(self) -> None:
        """This process is being stopped inside its work: said to the others on its GPU."""
        self.gate.note_stopped(self.entry)

    def unresponsive(self, limit_s: float) -> bool:
        """True once a pause asked of this process has gone unanswered for `limit_s` seconds: it is
        inside one stretch of GPU work that long (a kernel that hangs), and every timing on its GPU
        waits for it. Its supervisor stops it then (supervise.run_worker)."""
        pause = _read(self.folder / PAUSE)
        if pause is None or _read(self.folder / PAUSED) == pause or not (self.folder / LISTENING).exists():
            self._asked = None  # (a process still starting, torch and its CUDA context, is not stopped)
            return False
        now = time.monotonic()
        if self._asked is None or self._asked[0] != pause:
            self._asked = (pause, now)
        return now - self._asked[1] > limit_s

    def _release(self) -> None:
        if self.thread is not None:
            self.thread.join()
        if self.turn is not None:
            self.gate.release(self.turn)
        _unlink(self.folder / GRANTED)
        self.turn, self.thread, self.token = None, None, None

    def close(self) -> None:
        """The process has ended: its turn (if it held one) and its place given back."""
        self.ended = True
        self._release()
        self.gate.unregister(self.entry)


class WorkerGate:
    """The grading process's side (see the module's text); does nothing when not `enabled`."""

    def __init__(self, folder: str | Path, enabled: bool):
        self.folder, self.enabled = Path(folder), enabled
        self._busy = False
        self.slowest_call = 0.0
        self.paused_s = 0.0  # how long busy() has waited, paused while another grading on this GPU timed
        self.waited_s = 0.0  # how long exclusive() has waited for its turn (and for the others to pause)
        if enabled:
            threading.Thread(target=self._acknowledge, daemon=True).start()
            _write(self.folder / LISTENING, "1")

    def _acknowledge(self) -> None:
        """Says "paused" for each pause asked, whenever this process is between two stretches of GPU work."""
        said = None
        while True:
            token = _read(self.folder / PAUSE)
            if token and token != said and not self._busy:
                _write(self.folder / PAUSED, token)
                said = token
            time.sleep(POLL_S)

    def _start_stretch(self) -> None:
        """Busy from now on, once no timing asked for a pause (until it has ended: paused_s)."""
        while True:
            self._busy = True
            if not (self.folder / PAUSE).exists():
                return
            self._busy = False
            t0 = time.perf_counter()
            while (self.folder / PAUSE).exists():
                time.sleep(POLL_S)
            self.paused_s += time.perf_counter() - t0

    @contextlib.contextmanager
    def busy(self):
        """A stretch of GPU work (one run of a case: inputs, reference, the call, the comparison): it
        starts only when no timing runs, and the GPU is idle again when it ends."""
        if not self.enabled:
            yield
            return
        self._start_stretch()
        try:
            yield
        finally:
            _synchronize()
            self._busy = False

    def hold(self) -> None:
        """Busy from now until the process ends (its exit: the CUDA context torn down, its memory given
        back to the driver): a timing asked meanwhile waits until it has gone (its supervisor then takes
        it off the registry)."""
        if self.enabled:
            self._start_stretch()

    @contextlib.contextmanager
    def calling(self):
        """A call of the learner's code, until its kernels have finished (the caller synchronizes):
        gate or not, its start is written down (CALLING) for the supervisor, which stops a call that
        never returns; `slowest_call` keeps the longest since it was last reset."""
        _write(self.folder / CALLING, repr(time.time()))
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.slowest_call = max(self.slowest_call, time.perf_counter() - t0)
            _unlink(self.folder / CALLING)

    @contextlib.contextmanager
    def exclusive(self):
        """The GPU to this process alone (the timing), once its supervisor grants the turn."""
        if not self.enabled:
            yield
            return
        token = uuid.uuid4().hex
        t0 = time.perf_counter()
        _write(self.folder / WANT, token)
        while _read(self.folder / GRANTED) != token:  # (not busy meanwhile: pauses are acknowledged)
            time.sleep(POLL_S)
        self.waited_s += time.perf_counter() - t0
        self._busy = True
        try:
            yield
        finally:
            _synchronize()
            self._busy = False
            _unlink(self.folder / WANT)


def calling_for(folder: str | Path) -> float:
    """How long the grading process in `folder` has been inside its current call of the learner's code
    (WorkerGate.calling); 0 between calls."""
    text = _read(Path(folder) / CALLING)
    try:
        return max(0.0, time.time() - float(text)) if text else 0.0
    except ValueError:
        return 0.0


def _synchronize() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:  # (torch may be still importing in another thread: then it has done no GPU work here)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        except Exception:  # a lost context: the case that lost it says so
            pass


# A grading's stages when a time limit it reached beside other gradings on its GPU was no verdict.
ALONE_PHASE = "graded again with the GPU alone (a time limit reached beside other gradings)"


def first_run_phase(prep) -> str:
    """The timing line's name for a first run beside others that is no verdict (Prepared.judged_alone_only)."""
    why = "not paused for another's timing" if prep.unpaused else "its time limit"
    return f"first run beside other gradings (stopped: {why})"
