"""The GPU gate of class grading's lanes (grader/check/gate.py), on a CPU: the supervisors' side and
the grading processes' side, each process here a thread with its own folder. A timing starts only when
every other process on the GPU has paused between two stretches of GPU work (or, if it cannot pause,
ended); nothing runs beside it; paused time is said, so that it is not charged to a time limit."""
import json
import os
import threading
import time

import pytest

from grader.check.gate import ALONE_PHASE, CALLING, LISTENING, PAUSE, GpuGate, Supervised, WorkerGate


class Process:
    """A grading process and its supervisor: `log` records when its stretches of work ran."""

    def __init__(self, gate, folder, log, name):
        folder.mkdir()
        self.sup = Supervised(gate, folder)
        self.worker = WorkerGate(folder, True)
        self.log, self.name = log, name
        self.stop = False
        self.waited = 0.0
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        self.ticker.start()

    def _tick(self):
        while not self.stop:
            if self.sup.tick():
                self.waited += 0.005
            time.sleep(0.005)

    def work(self, label, seconds, exclusive=False):
        with self.worker.exclusive() if exclusive else self.worker.busy():
            start = time.monotonic()
            time.sleep(seconds)
            self.log.append((self.name, label, start, time.monotonic()))

    def close(self):
        self.stop = True
        self.ticker.join()
        self.sup.close()


def _overlaps(a, b):
    return a[2] < b[3] and b[2] < a[3]


def test_a_timing_runs_alone_and_the_others_resume_after_it(tmp_path):
    gate, log = GpuGate(tmp_path / "gpu-0"), []
    a = Process(gate, tmp_path / "a", log, "a")
    b = Process(gate, tmp_path / "b", log, "b")
    c = Process(gate, tmp_path / "c", log, "c")

    def cases(p):
        for i in range(12):
            p.work(f"case {i}", 0.03)

    threads = [threading.Thread(target=cases, args=(p,)) for p in (b, c)]
    for t in threads:
        t.start()
    time.sleep(0.05)  # b and c are in the middle of their cases
    a.work("timing", 0.2, exclusive=True)
    for t in threads:
        t.join()
    for p in (a, b, c):
        p.close()
    timing = next(e for e in log if e[1] == "timing")
    beside = [e for e in log if e is not timing and _overlaps(e, timing)]
    assert not beside, f"ran beside the timing: {beside}"
    assert len(log) == 25  # every case ran, before or after the timing
    assert any(e[2] > timing[3] for e in log if e[0] == "b") and any(e[3] < timing[2] for e in log if e[0] == "b")
    assert b.waited > 0.1 and c.waited > 0.1  # paused for most of the timing: not charged to their limits
    # ... and said in their timing lines (a class report's "where the time went"), apart from their cases
    assert 0.1 < b.worker.paused_s < 1.0 and 0.1 < c.worker.paused_s < 1.0 and a.worker.paused_s == 0.0
    assert not any(p.exists() for p in (tmp_path / n / PAUSE for n in "abc"))


def test_two_timings_take_turns_and_something_that_cannot_pause_is_waited_for(tmp_path):
    gate, log = GpuGate(tmp_path / "gpu-0"), []
    a = Process(gate, tmp_path / "a", log, "a")
    b = Process(gate, tmp_path / "b", log, "b")
    ncu = tmp_path / "ncu"
    ncu.mkdir()

    def profile():
        with gate.holding(ncu):  # cannot pause: no timing until it ends
            start = time.monotonic()
            time.sleep(0.25)
            log.append(("ncu", "profile", start, time.monotonic()))

    t_ncu = threading.Thread(target=profile)
    t_ncu.start()
    time.sleep(0.05)
    threads = [threading.Thread(target=p.work, args=("timing", 0.1, True)) for p in (a, b)]
    for t in threads:
        t.start()
    for t in threads + [t_ncu]:
        t.join()
    a.close()
    b.close()
    assert len(log) == 3
    for i, x in enumerate(log):
        for y in log[i + 1:]:
            assert not _overlaps(x, y), f"{x} ran beside {y}"
    assert log[0][0] == "ncu"


def test_a_process_that_never_pauses_holds_the_timing_until_it_ends(tmp_path):
    """A kernel that hangs inside a case never says "paused": the timing waits until its supervisor
    stops it (its time limit; here, close()), and that wait is charged to the hanging one's limit."""
    gate, log = GpuGate(tmp_path / "gpu-0"), []
    a = Process(gate, tmp_path / "a", log, "a")
    hang = Process(gate, tmp_path / "hang", log, "hang")
    t = threading.Thread(target=hang.work, args=("stuck case", 0.4))
    t.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    timer = threading.Timer(0.2, hang.close)  # its supervisor stops it
    timer.start()
    a.work("timing", 0.01, exclusive=True)
    assert time.monotonic() - t0 >= 0.15
    assert hang.waited == 0.0  # it never paused: its own time limit keeps running
    t.join()
    a.close()


def test_a_timing_whose_holder_died_holds_nothing_up(tmp_path):
    """A slot process killed mid-timing leaves its marker and the pauses it asked for, but not its
    lock: the next registration, and a paused process's supervisor, see it stale and clear it."""
    gate, log = GpuGate(tmp_path / "gpu-0"), []
    b = Process(gate, tmp_path / "b", log, "b")
    (tmp_path / "gpu-0" / "timing").write_text("dead-token")  # as a died holder leaves them
    (tmp_path / "b" / PAUSE).write_text("dead-token")
    t0 = time.monotonic()
    b.work("case", 0.01)  # paused at first; its supervisor finds the timing stale and lets it go
    assert time.monotonic() - t0 < 2.0
    assert not (tmp_path / "gpu-0" / "timing").exists() and not (tmp_path / "b" / PAUSE).exists()
    b.close()
    (tmp_path / "gpu-0" / "timing").write_text("dead-token")
    ncu = tmp_path / "ncu"
    ncu.mkdir()
    with gate.holding(ncu):  # one that cannot pause would otherwise wait for it for ever
        pass


def test_a_process_whose_supervisor_died_holds_no_timing_up(tmp_path):
    """A run killed whole (its supervisors too) leaves its registry entries, listening and never to pause:
    the next timing on that GPU finds their supervisors gone and does not wait for them."""
    import subprocess
    import sys

    gate = GpuGate(tmp_path / "gpu-0")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    folder = tmp_path / "killed"
    folder.mkdir()
    entry = gate.register(folder)
    (folder / LISTENING).write_text("1")
    path = tmp_path / "gpu-0" / "registry" / entry
    path.write_text(json.dumps(dict(json.loads(path.read_text()), pid=int(dead.stdout))))
    alive = tmp_path / "alive"
    alive.mkdir()
    own = gate.register(alive)
    t0 = time.monotonic()
    turn = gate.acquire(own, alive=lambda: time.monotonic() - t0 < 5.0)  # (gives up after 5 s: a failure)
    assert time.monotonic() - t0 < 2.0 and not path.exists()
    gate.release(turn)


def test_a_process_that_does_not_pause_in_time_is_said_unresponsive_once_it_listens(tmp_path):
    """Its supervisor stops a grading that has not paused `limit` seconds after a timing asked (a
    hanging kernel would hold every timing on the GPU until its time limit): unresponsive() turns true
    then, and not before; not for one that pauses, nor for one still starting (not yet listening),
    which the timing does not wait for."""
    gate = GpuGate(tmp_path / "gpu-0")
    (tmp_path / "hang").mkdir()
    hang = Supervised(gate, tmp_path / "hang")
    # Its worker listens (it would say "paused" between two stretches of GPU work), but it is inside
    # one that does not end.
    (tmp_path / "hang" / LISTENING).write_text("1")
    (tmp_path / "starting").mkdir()
    starting = Supervised(gate, tmp_path / "starting")  # launched; Python and torch still loading
    ok = Process(gate, tmp_path / "ok", [], "ok")
    timing = Process(gate, tmp_path / "t", [], "t")
    t = threading.Thread(target=timing.work, args=("timing", 0.01), kwargs={"exclusive": True})
    t.start()
    time.sleep(0.1)
    assert not hang.unresponsive(0.15)  # asked just now
    time.sleep(0.2)
    assert hang.unresponsive(0.15)
    assert not starting.unresponsive(0.05)  # still starting: no worker listens yet
    assert not ok.sup.unresponsive(0.15)  # it paused
    assert t.is_alive()  # held by the one that does not pause
    hang.close()  # its supervisor stops it: the timing goes on (the starting one does not hold it)
    t.join(timeout=2)
    assert not t.is_alive()
    starting.close()
    ok.close()
    timing.close()


def test_a_process_still_starting_does_not_hold_a_timing_up_and_pauses_at_its_first_gpu_work(tmp_path):
    """A grading process is registered when it is launched, seconds before it can answer a pause
    (Python, torch's import). It has not touched the GPU then, so a timing does not wait for it; the
    pause is asked in its folder all the same, and its first stretch of GPU work waits for the timing."""
    gate, log = GpuGate(tmp_path / "gpu-0"), []
    (tmp_path / "late").mkdir()
    late_sup = Supervised(gate, tmp_path / "late")
    a = Process(gate, tmp_path / "a", log, "a")
    t0 = time.monotonic()
    t = threading.Thread(target=a.work, args=("timing", 0.5, True))
    t.start()
    time.sleep(0.25)
    late = WorkerGate(tmp_path / "late", True)  # its worker starts, the timing running
    with late.busy():  # its first stretch of GPU work (the CUDA context)
        log.append(("late", "first work", time.monotonic(), time.monotonic()))
    t.join()
    timing = next(e for e in log if e[1] == "timing")
    first = next(e for e in log if e[0] == "late")
    assert timing[2] - t0 < 0.15, "the timing waited for a process that had not started"
    assert first[2] >= timing[3], "a process's first GPU work ran beside a timing"
    assert late.paused_s > 0.1
    late_sup.close()
    a.close()


def test_a_call_of_the_learners_code_is_written_down_for_its_supervisor_gate_or_not(tmp_path):
    """The supervisor stops a call that never returns (config.RUN_LIMIT_S): it reads how long the process
    has been inside the learner's current call, with or without a gate, and 0 between calls; the worker
    keeps the slowest call for the case's result."""
    from grader.check.gate import calling_for

    for enabled in (False, True):
        folder = tmp_path / str(enabled)
        folder.mkdir()
        worker = WorkerGate(folder, enabled)
        assert calling_for(folder) == 0.0
        with worker.busy():
            assert calling_for(folder) == 0.0  # the grader's own work in a case (inputs, reference) is not a call
            with worker.calling():
                time.sleep(0.2)
                assert 0.15 < calling_for(folder) < 5
        assert calling_for(folder) == 0.0 and 0.15 < worker.slowest_call < 5


def test_a_grading_sees_when_another_on_its_gpu_is_inside_a_long_call(tmp_path):
    """What makes a time limit reached beside others no verdict: another grading on the GPU inside a
    call of its learner's code for a long time (a kernel that hangs there holds the others back)."""
    gate = GpuGate(tmp_path / "gpu-0")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = Supervised(gate, tmp_path / "a"), Supervised(gate, tmp_path / "b")
    assert not a.others_in_call(1.0) and not b.others_in_call(1.0)
    (tmp_path / "b" / CALLING).write_text(repr(time.time() - 0.5))  # b: in a call for half a second
    assert not a.others_in_call(1.0)
    (tmp_path / "b" / CALLING).write_text(repr(time.time() - 3.0))  # ... for three
    assert a.others_in_call(1.0) and not b.others_in_call(1.0)  # (its own call is not another's)
    b.close()
    assert not a.others_in_call(1.0)  # (ended: no longer registered)
    (tmp_path / "ncu").mkdir()
    with gate.holding(tmp_path / "ncu"):  # ncu at work on this GPU (it cannot pause)
        assert a.others_in_call(1.0)
    assert not a.others_in_call(1.0)
    a.close()


def test_a_check_whose_time_limit_beside_others_is_no_verdict_is_graded_again_alone(tmp_path, monkeypatch):
    """A check beside other checks on its GPU (shared_gpu.check_sharing_gpu, the self-test's gate): a time limit reached while another
    grading was inside a long call, or a stop for not pausing while another waited to time, is no verdict;
    the check runs again with the GPU to itself, and only that run counts (Prepared.judged_alone_only, as
    in class grading). A call of its own stopped past the run limit beside short calls stands."""
    from grader.check import Prepared, Result, pipeline, shared_gpu

    gate_root = tmp_path / "gpu-0"
    GpuGate(gate_root)
    runs = []
    stops = {"beside a long call": dict(stuck=True, contended=True), "not paused": dict(unpaused=True),
             "hang of its own": dict(stuck=True)}

    def fake_run(ex, prep, opts, *rest, **kw):
        alone = (gate_root / "timing").exists()  # GpuGate.alone() holds the turn
        runs.append((opts.gate, alone))
        if len(runs) == 1:
            prep.timed_out = True
            for k, v in stops[stop].items():
                setattr(prep, k, v)
            prep.result.add("correctness", "case", "fail", "no result within 10 s from one call of your code")
        else:
            prep.result.add("correctness", "case", "pass", "matches")
        return prep.result

    monkeypatch.setattr(pipeline, "prepare", lambda ex, path, quiet=False: Prepared(Result(ex.id, str(path), "gpu")))
    monkeypatch.setattr(pipeline, "run", fake_run)
    monkeypatch.setattr(shared_gpu, "run", fake_run)
    monkeypatch.setattr(pipeline.machine, "gpu_present", lambda: False)
    monkeypatch.setattr(pipeline.machine, "start_gpu_probe", lambda: None)  # (no torch import in the background)
    for stop in stops:
        runs.clear()
        result = shared_gpu.check_sharing_gpu("day01.scale_add", source=tmp_path / "x.cu", gate=str(gate_root))
        if stop != "hang of its own":
            assert runs == [(str(gate_root), False), (None, True)] and result.ok, stop
            first = [k for k in result.timings if k.startswith("first run beside other gradings")]
            assert ALONE_PHASE in result.timings and len(first) == 1
            assert ("not paused" in first[0]) == (stop == "not paused")
        else:
            assert runs == [(str(gate_root), False)] and not result.ok
    runs.clear()
    result = pipeline.check("day01.scale_add", source=tmp_path / "x.cu")  # a learner's check: no gate, no re-run
    assert runs == [(None, False)]


def test_while_a_timing_waits_for_one_inside_a_long_stretch_the_others_work_on(tmp_path):
    """One grading inside a long stretch of GPU work (a case under compute-sanitizer, a kernel that
    hangs until its supervisor stops it) does not stop the others for as long: after
    config.GATE_LAG_S they work on, the timing waiting for the late one alone; then they are asked
    again, and nothing runs beside the timing. The late one stays paused until the timing ends."""
    from grader import config

    gate, log = GpuGate(tmp_path / "gpu-0"), []
    a = Process(gate, tmp_path / "a", log, "a")
    slow = Process(gate, tmp_path / "slow", log, "slow")
    b = Process(gate, tmp_path / "b", log, "b")
    stop = threading.Event()

    def cases(p):
        i = 0
        while not stop.is_set():
            p.work(f"case {i}", 0.02)
            i += 1

    def slow_cases():
        slow.work("long stretch", 1.0)
        slow.work("after", 0.01)

    threads = [threading.Thread(target=cases, args=(b,)), threading.Thread(target=slow_cases)]
    for t in threads:
        t.start()
    time.sleep(0.1)  # the slow one is inside its long stretch
    asked = time.monotonic()
    a.work("timing", 0.2, exclusive=True)
    stop.set()
    for t in threads:
        t.join()
    for p in (a, slow, b):
        p.close()
    timing = next(e for e in log if e[1] == "timing")
    long = next(e for e in log if e[1] == "long stretch")
    assert not [e for e in log if e is not timing and _overlaps(e, timing)]
    assert timing[2] >= long[3]  # the timing waited for the long stretch to end
    worked = [e for e in log if e[0] == "b" and e[2] > asked + config.GATE_LAG_S + 0.05 and e[3] < long[3]]
    assert len(worked) >= 10, "the others stood still while the timing waited for the late one"
    after = next(e for e in log if e[1] == "after")
    assert after[2] >= timing[3]  # the late one paused once its stretch ended, until the timing was over
    assert not any((tmp_path / n / PAUSE).exists() for n in ("a", "slow", "b"))


def test_a_grading_sees_when_another_on_its_gpu_was_stopped_inside_its_work(tmp_path):
    """A hang's process stopped by its supervisor: its kernel may hold the GPU while its context is torn
    down, so the others on that GPU are told when (GpuGate.note_stopped)."""
    gate = GpuGate(tmp_path / "gpu-0")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = Supervised(gate, tmp_path / "a"), Supervised(gate, tmp_path / "b")
    t0 = time.time()
    assert not a.others_stopped_since(t0 - 60)
    b.stopping()
    assert a.others_stopped_since(t0 - 1) and not b.others_stopped_since(t0 - 1)  # (its own stop is not another's)
    assert not a.others_stopped_since(time.time() + 1)  # stopped before the window
    b.close()
    assert a.others_stopped_since(t0 - 1)  # (said after it ended too: the teardown comes then)
    a.close()


STUCK_WORKER = "import os, time\nopen('{calling}', 'w').write(repr(time.time()))\ntime.sleep(60)\n"


@pytest.mark.parametrize("neighbour_stopped", ["no", "before the call", "during the call"])
def test_a_call_past_the_run_limit_while_a_neighbour_was_stopped_is_contended(tmp_path, monkeypatch,
                                                                              neighbour_stopped):
    """supervise.run_worker: a call past the run limit is a hang (stopped there); it is no verdict where
    another grading on its GPU was stopped inside its work while the call ran (a grading right after a
    hang's stop on its GPU would lose its later checks so). A stop said before the call began is over
    (else hang mutants are graded twice for a neighbour's hang stopped seconds before their call)."""
    import sys
    import threading

    from grader.check import Prepared, Result, RunOptions, supervise
    from grader.exercises import get

    gate_root = tmp_path / "gpu-0"
    gate = GpuGate(gate_root)
    neighbour = tmp_path / "n"
    neighbour.mkdir()
    other = Supervised(gate, neighbour)
    if neighbour_stopped == "before the call":
        other.stopping()
        time.sleep(0.05)
    elif neighbour_stopped == "during the call":
        threading.Timer(0.3, other.stopping).start()

    def stuck(argv, env, scratch, **kw):  # the grading process: inside one call of its code, for ever
        code = STUCK_WORKER.format(calling=os.path.join(scratch, CALLING))
        return [sys.executable, "-c", code], env

    monkeypatch.setattr(supervise, "isolate", stuck)
    monkeypatch.setattr(supervise, "run_limit_s", lambda ex, opts: 1.0)
    ex = get("day01.scale_add")
    prep = Prepared(Result(ex.id, "x.cu", "gpu"), module_dir=str(tmp_path), module_name="m")
    t0 = time.monotonic()
    done = supervise.run_worker(ex, prep, RunOptions(timeout=30, gate=str(gate_root)))
    other.close()
    assert not done and prep.stuck and time.monotonic() - t0 < 20
    assert prep.contended == (neighbour_stopped == "during the call")
    assert "from one call of your code" in prep.result.failures[0].detail
    assert Supervised(gate, tmp_path / "a").others_stopped_since(time.time() - 30)  # it said it was stopped


def test_a_call_that_began_just_after_the_pause_was_asked_is_left_to_its_run_limit():
    """A grading that has not paused in time is stopped (and graded again alone), unless it is inside a call of
    the learner's code that its run limit ends within config.PAUSE_RACE_S: that call began right after the
    pause was asked, and the run limit judges it as a hang, as with no neighbour on its GPU."""
    from grader import config
    from grader.check.supervise import overdue_pause

    class Asked:  # a pause unanswered for `waited` seconds
        def __init__(self, waited):
            self.waited = waited

        def unresponsive(self, limit_s):
            return self.waited > limit_s

    late, limit = Asked(config.GATE_PAUSE_LIMIT_S + 0.01), config.RUN_LIMIT_S
    assert not overdue_pause(Asked(1.0), 0.0, limit)  # not overdue yet
    assert overdue_pause(late, 0.0, limit)  # between calls: its own work does not end
    assert overdue_pause(late, limit - config.PAUSE_RACE_S - 0.5, limit)  # its run limit is far
    assert not overdue_pause(late, limit - config.PAUSE_RACE_S / 2, limit)  # its run limit is near: that decides
    assert overdue_pause(late, limit - config.PAUSE_RACE_S / 2, None)  # (no run limit: the pause limit decides)


def test_only_class_grading_keeps_gpu_memory_between_cases(tmp_path, monkeypatch):
    """The grading process gives each case's GPU memory back after it unless told to keep some
    (RunOptions.case_memory_kept: class grading's lanes keep config.CASE_MEMORY_KEPT_BYTES; a check, whose
    neighbours on the GPU are unknown, up to 20 in the self-test, keeps none)."""
    import sys

    from grader import config
    from grader.check import Prepared, Result, RunOptions, supervise
    from grader.exercises import get

    seen = tmp_path / "seen.json"

    def copying(argv, env, scratch, **kw):  # the grading process: keeps the config it was given, and ends
        return [sys.executable, "-c", f"import shutil; shutil.copy('config.json', {str(seen)!r})"], env

    monkeypatch.setattr(supervise, "isolate", copying)
    ex = get("day01.scale_add")
    for opts, kept in ((RunOptions(timeout=30), 0),
                       (RunOptions(timeout=30, case_memory_kept=config.CASE_MEMORY_KEPT_BYTES), 4 << 30)):
        prep = Prepared(Result(ex.id, "x.cu", "gpu"), module_dir=str(tmp_path), module_name="m")
        supervise.run_worker(ex, prep, opts)
        assert json.loads(seen.read_text())["case_memory_kept"] == kept


@pytest.mark.parametrize("runs_out", [1, 3, 4])
def test_a_case_that_ran_out_of_gpu_memory_runs_again(monkeypatch, runs_out):
    """worker._case_run: CUDA out of memory in a correctness case (the grader's own inputs, reference and
    comparison; neighbours on the GPU may hold the memory until their case ends) gives the process's cached
    memory back, waits and runs the case again, after each of config.OUT_OF_MEMORY_WAITS_S; out of memory
    every time fails it, saying why."""
    import torch

    from grader import config
    from grader.check import worker

    tries, released = [], []

    def run_case(ex, mod, case, seed, handover=None):
        tries.append(seed)
        if len(tries) <= runs_out:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return True, "matches", None, None, None, None

    monkeypatch.setattr(worker, "run_case", run_case)
    monkeypatch.setattr(worker, "release_case_memory", lambda kept=None: released.append(kept))
    monkeypatch.setattr(config, "OUT_OF_MEMORY_WAITS_S", (0.01, 0.02, 0.03))
    gate = WorkerGate("/nonexistent", enabled=False)
    if runs_out <= 3:
        assert worker._case_run(None, None, None, 7, gate) == (True, "matches")
        assert tries == [7] * (runs_out + 1) and released == [0] * runs_out
    else:
        with pytest.raises(RuntimeError, match=r"CUDA out of memory, and again after waits of 0.01, 0.02 and 0.03 s .*2.00 GiB"):
            worker._case_run(None, None, None, 7, gate)
        assert tries == [7] * 4 and released == [0] * 3


def test_one_process_times_twice_each_time_alone_its_work_between_beside_the_others(tmp_path):
    """worker.measure asks for the GPU alone once per performance case, its correctness run and
    re-check between the timings beside the others: each turn is granted in its turn (a second WANT
    after the first one's end), nothing of the others runs inside one, and the waits are counted."""
    gate, log = GpuGate(tmp_path / "gpu-0"), []
    a = Process(gate, tmp_path / "a", log, "a")
    b = Process(gate, tmp_path / "b", log, "b")

    def cases():
        for i in range(20):
            b.work(f"case {i}", 0.02)

    t = threading.Thread(target=cases)
    t.start()
    time.sleep(0.03)
    done = threading.Event()

    def timings():
        for case in ("fp16", "bf16"):
            a.work(f"inputs {case}", 0.03)
            a.work(f"timing {case}", 0.08, exclusive=True)
            a.work(f"re-check {case}", 0.03)
        done.set()

    threading.Thread(target=timings, daemon=True).start()
    assert done.wait(10), "a second turn to time was never granted"
    t.join()
    for p in (a, b):
        p.close()
    alone = [e for e in log if e[1].startswith("timing")]
    assert len(alone) == 2 and len(log) == 26
    assert not [e for e in log if e[0] == "b" and any(_overlaps(e, x) for x in alone)]
    between = [e for e in log if e[0] == "a" and not e[1].startswith("timing")]
    assert any(e[0] == "b" and any(_overlaps(e, x) for x in between) for e in log)  # beside the others
    assert 0.0 < a.worker.waited_s < 1.0 and b.worker.waited_s == 0.0


def test_a_performance_case_has_only_its_timed_calls_with_the_gpu_alone(monkeypatch):
    """worker.measure under a gate: the case's inputs and correctness run, then its re-check after the
    timing, each a stretch of work beside the other gradings (busy); only bench_interleaved inside
    exclusive()."""
    import contextlib

    import torch

    from grader import bench, exercises
    from grader.check import worker

    ex = exercises.get("day02.silu_and_mul")
    case = ex.perf_cases[0]
    ran = []  # (what, the gate's state while it ran)

    class Recording:
        state = "none"

        @contextlib.contextmanager
        def _in(self, state):
            before, self.state = self.state, state
            try:
                yield
            finally:
                self.state = before

        def busy(self):
            return self._in("busy")

        def exclusive(self):
            return self._in("alone")

    gate = Recording()
    monkeypatch.setattr(worker, "run_on_side_stream", lambda *a, **k: (ran.append(("case", gate.state)), (True, "ok", {}, {}, {}, {}))[1])
    monkeypatch.setattr(worker, "_timed_calls", lambda *a: None)
    monkeypatch.setattr(worker, "_rerun", lambda *a, **k: (ran.append(("re-check", gate.state)), (True, "ok"))[1])
    timing = bench.Timing(0.3, 0.29, 0.31, 0.3, 0.001, 10)
    monkeypatch.setattr(bench, "bench_interleaved", lambda fns, flush, **around: (ran.append(("timed", gate.state)), {k: timing for k in fns})[1])
    monkeypatch.setattr(bench, "theoretical_bandwidth", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    status, detail, metrics = worker.measure(ex, None, case, None, calibrated={"value": 3000.0, "clocks": None}, gate=gate)
    assert ran == [("case", "busy"), ("timed", "alone"), ("re-check", "busy")]
    assert metrics["valid"] and status in ("pass", "fail") and "target" in detail


def test_a_process_ending_holds_any_timing_until_it_has_gone(tmp_path):
    """WorkerGate.hold at a grading process's end: its exit (the CUDA context torn down, memory given
    back) is a stretch of work no timing runs beside; the timing starts once its supervisor has taken
    it off the registry (the process has ended)."""
    gate, log = GpuGate(tmp_path / "gpu-0"), []
    a = Process(gate, tmp_path / "a", log, "a")
    b = Process(gate, tmp_path / "b", log, "b")
    b.worker.hold()
    t = threading.Thread(target=a.work, args=("timing", 0.01), kwargs={"exclusive": True})
    t0 = time.monotonic()
    t.start()
    time.sleep(0.4)
    assert not log, "the timing ran beside a process still ending"
    b.close()  # (its supervisor: the process has exited)
    t.join(5)
    a.close()
    assert [e[1] for e in log] == ["timing"] and log[0][2] - t0 >= 0.4


def test_memory_given_back_between_cases_is_a_stretch_of_work(monkeypatch):
    """worker.release_case_memory: the blocks given back to the driver (cudaFree) inside busy(), never
    beside another grading's timing (a right answer timed beside one reads slow)."""
    import contextlib

    import torch

    from grader.check import worker

    state, seen = ["idle"], []

    class Recording:
        @contextlib.contextmanager
        def busy(self):
            state[0] = "busy"
            try:
                yield
            finally:
                state[0] = "idle"

    monkeypatch.setattr(worker, "_GATE", Recording())
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: 8 << 30)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: seen.append(state[0]))
    worker.release_case_memory(0)
    assert seen == ["busy"]
