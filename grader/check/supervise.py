"""The isolated grading process, supervised: its time and host-memory limits, the results it
streams back (one JSON line each, so a crash loses nothing already written), and
compute-sanitizer's verdict when it runs under one."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import config, paths, pyenv, toolkit
from ..spec import Exercise
from . import judge, sandbox, timed_apart
from .gate import GpuGate, Supervised, _write, calling_for
from .result import Result
from .worker_config import BuiltModule, DeviceVariable, Seed, WorkerConfig

OUTPUT_TAIL = 2000  # bytes of a dead grading process's output shown with its failure


@dataclass
class RunOptions:
    """How the grading subprocess runs: seeds, timing, limits and where its code comes from."""
    seeds: list[Seed] = field(default_factory=lambda: [Seed(str(s), s) for s in range(config.PUBLIC_SEEDS)])
    perf: bool = True
    timeout: float | None = None
    memory_limit_gb: float | None = None    # host memory (RSS) of the grading process
    runtime_root: str | None = None         # a copy of the grader without solutions/ (class grading)
    # class grading: each timed case's graded baseline (e.g. the copy's GB/s), measured once per run
    calibrated: dict | None = None
    sanitize: str | None = None             # "memcheck" or "racecheck": run under compute-sanitizer
    # after a clean run, the small cases again under these compute-sanitizer tools (class grading and
    # the self-test): racecheck only where the SASS shows shared memory or barriers
    sanitizers: tuple[str, ...] = ()
    # the largest case run under compute-sanitizer (bytes; None: config.SANITIZE_MAX_BYTES per tool)
    sanitize_max_bytes: int | None = None
    # folders the grading process may not see, besides the solutions and the build cache (class
    # grading: the submissions and the output folder); applies where the sandbox works
    hide: tuple[str, ...] = ()
    # class grading's lanes: the folder of the GPU's gate (gate.py), where several gradings share a GPU
    gate: str | None = None
    # GPU memory the grading process keeps in torch's allocator from one case to the next (class grading:
    # config.CASE_MEMORY_KEPT_BYTES); 0: each case's is given back after it
    case_memory_kept: int = 0


def sanitize_max_bytes(opts: RunOptions) -> int | None:
    """The largest case a run under compute-sanitizer takes (None: not under one)."""
    if not opts.sanitize:
        return None
    return opts.sanitize_max_bytes or config.SANITIZE_MAX_BYTES[opts.sanitize]


@dataclass
class Prepared:
    """What `prepare` hands to `run`: the result so far and, if it built, the module's location."""
    result: Result
    module_dir: str | None = None
    module_name: str | None = None
    kernels: list = field(default_factory=list)
    shared_access_bytes: tuple = (4, 4)  # widest shared load and store per thread (from the SASS)
    uses_shared_memory: bool = False     # the SASS has shared loads, stores or block barriers
    deps: dict[str, BuiltModule] = field(default_factory=dict)  # Python-module exercises: the kernels they use
    variables: list[DeviceVariable] = field(default_factory=list)  # the kernel file's own (device_state.py)
    cpu_only: bool = False               # no GPU: the worker runs only a Python module's module_checks
    timed_out: bool = False              # a grading process of it was stopped at its time limit
    stuck: bool = False                  # ... there, one call of its code past the run limit (a hang)
    unpaused: bool = False               # ... or, beside other gradings, for not pausing (gate.py)
    # ... while another grading on its GPU was inside a long call of its own, or ncu was at work there, or
    # another was stopped there while the call ran (a kernel that hangs there can hold this
    # one's calls back for seconds, also while its context is torn down: its time limit then is no verdict)
    contended: bool = False

    def judged_alone_only(self) -> bool:
        """Stopped at a time limit beside other gradings on its GPU in a way that is no verdict, to be
        graded again with the GPU to itself (class grading, the self-test's checks): beside a long call of
        another (contended), for not pausing while another waited to time, or at the whole grading's limit.
        Not a call of its own stopped past the run limit beside calls shorter than config.CONTENDED_CALL_S:
        the GPU was its own but for their kernels' microseconds, and that call hangs on its own."""
        return self.timed_out and (self.contended or not self.stuck)


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def children_by_parent() -> dict[int, list[int]]:
    """Every process's children, by the parent's pid (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """`root` and every process under it (`children`: children_by_parent(), read now if not given)."""
    children = children_by_parent() if children is None else children
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def process_state(pid: int) -> str | None:
    """Its state letter from /proc ("R", "S", "Z" for a zombie, ...); None where it does not exist."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _running(pid: int) -> bool:
    """Whether `pid` exists and has not yet exited (a zombie has: its files, the GPU's among them, are closed)."""
    return process_state(pid) not in (None, "Z", "X")


def kill_all(pids: list[int]) -> None:
    """SIGKILL to each of `pids` (those gone already are passed over)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def stop_tree(proc: subprocess.Popen, wait_s: float = config.STOP_WAIT_S) -> None:
    """`proc` and every process under it killed, and waited for (up to `wait_s`) until each has exited:
    a grading process's GPU context is gone only then. Killing bwrap alone, its sandboxed worker exits
    ~80 ms after bwrap is reaped (measured on an H100); with no sandbox, compute-sanitizer's target would
    outlive its tool. Their GPU neighbours and the next grading on the lane wait that long."""
    tree = descendants(proc.pid)
    kill_all(tree)
    proc.wait()
    deadline = time.monotonic() + wait_s
    while any(_running(pid) for pid in tree[1:]) and time.monotonic() < deadline:
        time.sleep(0.01)


def _tree_rss_bytes(root: int, children: dict[int, list[int]] | None = None) -> int:
    """Resident memory of a process and all its descendants: the process started is bwrap (and
    maybe compute-sanitizer), the one that uses the memory is the worker under it."""
    return sum(_rss_bytes(pid) for pid in descendants(root, children))


def isolate(argv: list[str], env: dict, scratch: str, readable=(), hide=()) -> tuple[list[str], dict]:
    """`argv` and `env` for a process that runs submitted code: in the sandbox where it works
    (sandbox.py), with the solutions, the build cache and `hide` out of sight, `readable` bound
    back read-only, `scratch` the only writable folder; unchanged where it does not."""
    if sandbox.available() is not None:
        return argv, env
    hidden = [paths.SOLUTIONS, pyenv.cache_dir(), *hide]
    # (the bytecode cache, inside the build cache where the install has none: read-only, like torch)
    readable = [*readable, env.get("PYTHONPYCACHEPREFIX")]
    return (sandbox.wrap(argv, scratch, readable=[r for r in readable if r], hidden=hidden),
            sandbox.environment(env))


class _WaitingWatch:
    """The host-memory limit for processes started ahead (WarmWorker) while they wait for a grading:
    no supervisor watches them then, and a class run keeps several per lane, some (the sanitizers')
    waiting a whole run when their stage's verdict is cached. One thread per process checks them all
    every config.WAITING_WATCH_S; one past its limit is stopped and says so in its log (a grading
    that finds it ended starts its own). Unwatched, a compute-sanitizer memcheck process grew to 241 GB of
    host memory (reports/ray-class-2gpu-oom-d2354f5.log)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._watched: dict = {}  # WarmWorker: its limit in bytes
        self._thread: threading.Thread | None = None

    def watch(self, warm: "WarmWorker", limit: float) -> None:
        with self._lock:
            self._watched[warm] = limit
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name="warm-memory-watch")
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(config.WAITING_WATCH_S)
            with self._lock:
                waiting = {w: lim for w, lim in self._watched.items() if not w.used and w.proc.poll() is None}
                self._watched = dict(waiting)  # (watch() adds to that one while this thread reads its own copy)
            children = children_by_parent() if waiting else {}  # (one look at /proc for them all)
            for w, limit in waiting.items():
                used = _tree_rss_bytes(w.proc.pid, children)
                if used > limit and not w.used:
                    w.over_memory = used  # (said before it ends: whoever sees it ended reads why)
                    try:
                        w.log.write(f"\n[grader] stopped while waiting for a grading: {used / 2**30:.1f} GB of "
                                    f"host memory, past the {limit / 2**30:g} GB limit\n".encode())
                        w.log.flush()
                    except ValueError:  # (discarded meanwhile: its log is closed)
                        pass
                    w.proc.kill()


_WAITING = _WaitingWatch()


def copy_module(module_dir: str, folder: Path) -> str:
    """The built module copied into `folder`/module, for a process that sees only `folder`."""
    into = folder / "module"
    into.mkdir()
    for so in Path(module_dir).glob("*.so"):
        shutil.copy2(so, into)
    return str(into)


def _put(folder: Path, name: str) -> None:
    """An empty file `name` in `folder`, whole (the process there polls for it); nothing where the
    folder is gone (its process discarded)."""
    try:
        _write(folder / name, "")
    except OSError:
        pass


class WarmWorker:
    """A grading process started before its submission is built: it imports torch and makes its CUDA
    context (seconds) while the parent runs the static checks and the build, then waits for its config
    file. Nothing submitted exists when it starts; it gets the built module as a copy in its own
    scratch folder, the one folder it may write (sandbox.py). `profiler`: it also runs the profiler's
    first session (kineto's and CUPTI's start), for the "kernels launched" check alone: CUPTI, once started,
    stays in the process and slows every later launch (the cases ran 2-3x slower after it).
    `sanitize`: it runs under that compute-sanitizer tool, for the small cases' run under it (class
    grading's lanes start one while the submission before is graded). `after`: another one started
    with it, which comes first: this one imports torch at once but makes its CUDA context (and starts
    CUPTI) only once that one has made its own (or ended, or this one's grading has come). `used`:
    run_worker took it. stages(): when each stage of its start ended."""

    def __init__(self, opts: RunOptions, profiler: bool = False, sanitize: str | None = None,
                 after: "WarmWorker | None" = None):
        self.tmp = Path(tempfile.mkdtemp(prefix="grader-"))
        self.config = self.tmp / "config.json"
        self.log = open(self.tmp / "output.log", "wb")
        self.sanitize, self.used = sanitize, False
        self.over_memory = 0  # bytes, where it was stopped while waiting (_WaitingWatch)
        wait = ["--wait-profiler" if profiler else "--wait", str(self.config), *(["--after"] if after else [])]
        env = pyenv.grading_env(opts.runtime_root)
        prefix = []
        if sanitize:
            env.update(SANITIZER_ENV)
            prefix = _sanitizer_prefix(sanitize)
        argv, env = isolate([*prefix, sys.executable, "-m", "grader.check.worker", *wait], env, str(self.tmp),
                            readable=[opts.runtime_root], hide=opts.hide)
        # stdin: a pipe this process holds open; the worker ends at its end of file (worker.wait_for)
        self.proc = subprocess.Popen(argv, cwd=self.tmp, env=env, stdin=subprocess.PIPE, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        if opts.memory_limit_gb:  # (once a grading takes it, run_worker's own watch applies)
            _WAITING.watch(self, opts.memory_limit_gb * 2**30)
        if after is not None:
            threading.Thread(target=self._go_after, args=(after,), daemon=True, name="warm-after").start()

    def _go_after(self, first: "WarmWorker") -> None:
        """WARM_GO into this one's folder once `first` has its CUDA context (WARM_READY), has ended, or
        this one is gone (its grading writes the config, which it also takes as the go)."""
        from .worker import WARM_GO, WARM_READY

        while not (first.tmp / WARM_READY).exists() and first.proc.poll() is None and self._waiting():
            time.sleep(0.01)
        _put(self.tmp, WARM_GO)

    def stages(self) -> dict[str, float]:
        """Stage -> when it ended (wall clock; worker.warm_up), as far as it got. The file is in the
        folder the learner's code may write once it runs there: anything but a few stage names with
        their times reads as nothing."""
        from .worker import WARM_READY

        try:
            with open(self.tmp / WARM_READY, encoding="utf-8") as f:
                when = json.loads(f.read(4096))
        except (OSError, ValueError):
            return {}
        if not isinstance(when, dict) or len(when) > 8:
            return {}
        return {k: float(v) for k, v in when.items()
                if isinstance(k, str) and len(k) < 64 and isinstance(v, (int, float)) and not isinstance(v, bool)}

    def _waiting(self) -> bool:
        return self.proc.poll() is None and self.tmp.exists()

    def discard(self) -> None:
        """Stop it if it is still waiting (nothing to grade, or it was used) and remove its folder."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def overdue_pause(gate: Supervised, in_call: float, run_limit: float | None) -> bool:
    """Whether a grading is to be stopped for not pausing: a pause asked of it unanswered for
    config.GATE_PAUSE_LIMIT_S (class grading then grades it again with the GPU alone). Not while it is in
    a call of the learner's code that its own run limit ends within config.PAUSE_RACE_S: that call began
    right after the pause was asked, in the same stretch of GPU work (the inputs made, then the call), and
    the run limit stops it as a hang, the verdict it gets with no neighbour; stopped for not pausing, it
    would be run again alone, a whole run limit more with its neighbours paused."""
    if not gate.unresponsive(config.GATE_PAUSE_LIMIT_S):
        return False
    return not (run_limit and in_call > 0 and run_limit - in_call <= config.PAUSE_RACE_S)


RESULTS_FILE = "results.jsonl"  # in a grading process's folder: what it reports, a JSON record a line


def run_worker(ex: Exercise, prep: Prepared, opts: RunOptions, result: Result | None = None,
               warm: WarmWorker | None = None, part: str = "all") -> bool:
    """Run the worker on a prepared submission, adding what it reports to `result`
    (the submission's own by default); in `warm`, a process already started, when given. `part`:
    "all", "no launches" (everything but the "kernels launched" check) or "launches" (only that
    check). True if the worker got to its end."""
    result = prep.result if result is None else result
    with tempfile.TemporaryDirectory(prefix="grader-") as own_tmp:
        tmp = str(warm.tmp) if warm else own_tmp
        module_dir = prep.module_dir
        if warm and module_dir:  # the warm process can only see its own folder: the module goes there
            t_copy = time.perf_counter()
            module_dir = copy_module(module_dir, warm.tmp)
            result.add_time("module copied to the grading process", time.perf_counter() - t_copy)
        results = Path(tmp) / RESULTS_FILE
        results.touch()
        # a Python module's timed cases, timed from here (timed_apart.py)
        server = (timed_apart.TimingServer(tmp) if ex.timed_apart is not None and opts.perf and ex.perf_cases
                  and not prep.cpu_only and not opts.sanitize and part != "launches" else None)
        worker_config = WorkerConfig(
            exercise=ex.id, module_dir=module_dir, module_name=prep.module_name, kernels=prep.kernels,
            seeds=[Seed(*s) for s in opts.seeds], perf=opts.perf, results=str(results), calibrated=opts.calibrated,
            deps=prep.deps, cpu_only=prep.cpu_only, max_case_bytes=sanitize_max_bytes(opts), part=part,
            gate=bool(opts.gate), case_memory_kept=opts.case_memory_kept,
            # a Python module's outputs, judged after it in a process of their own (judge.py)
            handover=(str(Path(tmp) / judge.HANDOVER) if ex.learner_file == "python" and not prep.cpu_only
                      and not opts.sanitize and part != "launches" else None),
            timed_apart=server is not None, variables=prep.variables)
        cfg = Path(tmp) / "config.json"
        cfg.with_suffix(".part").write_text(worker_config.to_json())
        log = Path(tmp) / "output.log"
        env = pyenv.grading_env(opts.runtime_root)
        if opts.sanitize:
            env.update(SANITIZER_ENV)
        if warm is not None:
            warm.used = True  # (the caller discards it afterwards)
        limit = opts.timeout or ex.timeout_s
        run_limit = run_limit_s(ex, opts)
        timed_out = over_memory = unpaused = stuck = False
        with open(log, "ab") as logf:
            if not warm:  # (a warm process was isolated when it started)
                prefix = _sanitizer_prefix(opts.sanitize) if opts.sanitize else []
                argv, env = isolate([*prefix, sys.executable, "-m", "grader.check.worker", str(cfg)], env, tmp,
                                    readable=[prep.module_dir, opts.runtime_root,
                                              *(m.folder for m in prep.deps.values())],
                                    hide=opts.hide)
            started = time.time()  # wall clock: the worker's "ready" event says when it was, from its side
            cfg.with_suffix(".part").replace(cfg)  # whole: a waiting worker starts the moment it appears
            # registered before it starts: a timing running now pauses it before its first case
            gate = Supervised(GpuGate(opts.gate), tmp) if opts.gate else None
            try:
                proc = warm.proc if warm else subprocess.Popen(argv, cwd=tmp, env=env, stdout=logf,
                                                               stderr=subprocess.STDOUT)
                deadline = time.monotonic() + limit
                next_rss = 0.0
                last = time.monotonic()
                while proc.poll() is None:
                    now = time.monotonic()
                    if gate is not None and gate.tick():  # paused for another's timing, or waiting to time:
                        deadline += now - last            # not charged to its time limit
                    last = now
                    in_call = calling_for(tmp)
                    if gate is not None and in_call > config.CONTENDED_CALL_S and not prep.contended:
                        prep.contended = gate.others_in_call(config.CONTENDED_CALL_S)
                    if now > deadline:
                        timed_out = True
                    elif run_limit and in_call > run_limit:
                        timed_out = stuck = True
                        # a neighbour stopped inside its work while this call ran: its hung kernel may have
                        # held the GPU until its processes had exited, when its stop is said again. A stop said
                        # before the call began is over and does not count: a class's hang mutants come to one
                        # GPU close together, and each would be graded twice for the one stopped before it.
                        if gate is not None and not prep.contended:
                            prep.contended = gate.others_stopped_since(time.time() - in_call)
                    elif gate is not None and overdue_pause(gate, in_call, run_limit):
                        timed_out = unpaused = True  # (graded again with the GPU alone: classroom)
                    elif opts.memory_limit_gb and time.monotonic() > next_rss:
                        next_rss = time.monotonic() + 0.25
                        over_memory = _tree_rss_bytes(proc.pid) > opts.memory_limit_gb * 2**30
                    if timed_out or over_memory:
                        if gate is not None:
                            gate.stopping()
                        stop_tree(proc)
                        if gate is not None:  # (again: its GPU work has ended only now)
                            gate.stopping()
                        break
                    time.sleep(0.05 if gate is None else 0.01)
                rc = proc.wait()
                ended = time.time()
            finally:  # (a process left registered would hold up every timing on its GPU)
                if gate is not None:
                    gate.close()
                timed = server.finish() if server is not None else None
        running, done, fatal = None, False, None
        for line in results.read_text(encoding="utf-8", errors="replace").splitlines():
            rec = json.loads(line)
            if rec.get("event") == "start":
                running = rec["name"]
            elif rec.get("event") == "done":
                done = True
                if "t" in rec:  # from its last result to its end, as this process saw it
                    result.add_time("grading process exit", max(0.0, ended - rec["t"]))
            elif rec.get("event") == "fatal":
                fatal = rec["detail"]
            elif rec.get("event") == "ready":  # interpreter, torch, CUDA and the module loaded
                result.add_time("grading process start", max(0.0, rec["t"] - started))
            elif rec.get("event") == "phase":
                result.add_time(rec["name"], rec["seconds"])
            elif "group" in rec:
                running = None
                if server is not None and rec["group"] == "performance":
                    continue  # (timed cases are judged apart: a row from that process is no verdict)
                result.add(rec["group"], rec["name"], rec["status"], rec.get("detail", ""), rec.get("metrics"))
        group = {c.label: "performance" for c in ex.perf_cases}.get(running, "correctness")
        group = "work" if running == "kernels launched" else group
        if unpaused:
            prep.timed_out = prep.unpaused = True
            result.add(group, running or "run", "fail",
                       f"no result within {config.GATE_PAUSE_LIMIT_S:.0f} s from one run of this case while another "
                       f"grading on this GPU waited to time: the kernel hangs or is far too slow (the grading "
                       f"process was stopped)")
        elif stuck:
            prep.timed_out = prep.stuck = True
            result.add(group, running or "run", "fail",
                       f"no result within {run_limit:.0f} s from one call of your code (one seed of this case): "
                       f"the kernel hangs or is far too slow (the grading process was stopped)")
        elif timed_out:
            prep.timed_out = True
            result.add(group, running or "run", "fail",
                       f"no result within {limit:.0f} s: the kernel hangs or is far too slow "
                       f"(the grading process was stopped)")
        elif over_memory:
            result.add(group, running or "run", "fail",
                       f"the grading process used more than {opts.memory_limit_gb:g} GB of host memory "
                       f"and was stopped")
        elif not done:
            tail = log.read_bytes()[-OUTPUT_TAIL:].decode("utf-8", errors="replace").strip()
            where = f" while running '{running}'" if running else ""
            why = fatal or f"the grading process died{where} (exit code {rc})"
            if not fatal or "crashed" not in fatal:
                result.add("correctness", running or "run", "fail", why + (f"\n{tail}" if tail else ""))
        if opts.sanitize and not timed_out:
            _sanitizer_report(opts.sanitize, log.read_text(errors="replace"), result)
        if server is not None and server.problem:
            result.add("performance", "timed steps", "fail", server.problem)
            timed = None
        if done and (worker_config.handover or timed is not None):
            judge.judge_apart(ex, opts, worker_config, result, timed)
        return done


def run_limit_s(ex: Exercise, opts: RunOptions) -> float | None:
    """How long one call of the learner's code (until its kernels finish: gate.CALLING) may take before
    its grading process is stopped as hung: the exercise's limit, longer under compute-sanitizer, never
    past the whole process's limit."""
    if not ex.run_limit_s:
        return None
    limit = ex.run_limit_s * (config.SANITIZER_TIMEOUT_FACTOR if opts.sanitize else 1)
    return min(limit, opts.timeout or ex.timeout_s)


# One cudaMalloc per tensor under compute-sanitizer, so memcheck sees every overrun (the caching
# allocator hides them inside its blocks).
SANITIZER_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}


def _sanitizer_prefix(tool: str) -> list[str]:
    exe = toolkit.compute_sanitizer() or "compute-sanitizer"
    skip = ",".join(f"kns={name}" for name in config.SANITIZER_SKIP_KERNELS)
    return [exe, "--tool", tool, "--print-limit", "5", "--kernel-name-exclude", skip]


def _sanitizer_report(tool: str, log: str, result: Result) -> None:
    """compute-sanitizer's verdict on the learner's kernels: its error summary and first error."""
    # memcheck ends with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: N hazards".
    summary = re.search(r"(?:ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: (\d+) hazard)", log)
    name = f"compute-sanitizer {tool}"
    if not summary:
        result.add("work", name, "skip", "skipped: compute-sanitizer did not run or reported nothing here "
                   "(it needs a GPU it supports)")
        return
    errors = int(summary.group(1) or summary.group(2))
    first = next((line.strip("= ").strip() for line in log.splitlines()
                  if line.startswith("=========") and ("Invalid" in line or "hazard" in line.lower()
                                                      or "Race" in line or "error" in line.lower())
                  and "ERROR SUMMARY" not in line), "")
    result.add("work", name, "pass" if errors == 0 else "fail",
               "no errors on the small cases" if errors == 0 else f"{errors} errors; first: {first}")
