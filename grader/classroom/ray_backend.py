"""Class grading on a Ray cluster: `python -m grader grade SUBMISSIONS --out OUT --ray [ADDRESS]`.

Each grading is a Ray task holding one GPU (`num_gpus=1`): Ray pins the task's process to that GPU
(CUDA_VISIBLE_DEVICES), and the task runs the submission exactly as a local slot does
(lane.grade_one): in the isolated, sandboxed grading process, with that GPU's baseline measured
once for the run (cached on the node per GPU and exercise). ADDRESS is an existing cluster's
(`ray start --head` on the instructor's machines; "auto" finds the one this host belongs to);
without it a local cluster is started for the run, with the GPUs of `--gpus`, and stopped after.

Where what runs, and why:
- The driver (this process) finds the submissions, prepares them in its process pool as a local
  run does (source and SASS checks, link checks, the build: CPU work that needs no GPU and whose
  content-hashed cache makes identical submissions free), and writes every result, the run file,
  the gradebook and the feedback, exactly as a local run, as each task's result comes back: a
  stopped run resumes, the same as ever.
- A built submission travels in its task as the bytes of its extension (a few MB; Ray keeps them
  in its object store), unpacked on the worker into a folder named by the module's content hash
  (written once per node). The driver must build for the workers' GPU: run it on a node with the
  same GPU model (on Slurm, the first node of the job). Where the driver has no GPU, it checks the
  source only, and the task prepares (checks and builds) the submission on its worker, with the
  worker's build cache: slower (the GPU waits for the build) but the same verdict.
- Students' code runs only in the grading process on the worker, sandboxed as on one host
  (bubblewrap where it works on that node; each task says which). The node's work folder (other
  students' extensions and sources) is hidden from it.
- Nothing is lost when a worker dies mid-run: a task whose process or node dies is run again
  elsewhere by Ray (`max_retries`, also for an exception raised in the task); a task that still
  fails is reported and left ungraded, so the same command grades it on the next run.

Ray is an optional extra (`pip install -e '.[ray]'`), imported only here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from .. import machine, paths

INSTALL = "pip install -e '.[ray]'"
CONNECT_TIMEOUT_S = 180.0   # a local cluster's start on a loaded 2-core machine took 25-60 s
IN_FLIGHT_PER_GPU = 4       # tasks submitted ahead per GPU of the cluster


def unavailable() -> str | None:
    """None when Ray can be imported here; else how to install it."""
    if importlib.util.find_spec("ray") is None:
        return (f"--ray needs Ray, an optional extra of the course: {Path(sys.executable).parent / 'pip'} "
                f"install -e '.[ray]' (in the course folder; or pip install 'ray>=2.9'). Ray must be installed, "
                "with the same version, on every node of the cluster.")
    return None


# ------------------------------------------------------------------ the task (on a worker)
def _node_dir(run_id: str) -> Path:
    """This node's folder for the run: the grader copy, the extensions, the per-GPU figures."""
    d = Path(tempfile.gettempdir()) / f"grader-ray-{os.getuid()}" / run_id
    d.mkdir(parents=True, exist_ok=True)
    return d


def _write_once(dest: Path, fill) -> Path:
    """`dest` made by `fill(tmp)` in a temporary folder beside it and renamed into place: whole
    or not at all, once per node however many tasks race for it."""
    if dest.exists():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    fill(tmp)
    try:
        tmp.rename(dest)
    except OSError:  # another task made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _runtime_on_node(node: Path) -> str:
    def fill(tmp):
        shutil.copytree(paths.ROOT / "grader", tmp / "grader",
                        ignore=shutil.ignore_patterns("__pycache__", "maintain"))
    return str(_write_once(node / "runtime", fill))


def _module_on_node(node: Path, module: dict) -> str:
    def fill(tmp):
        for name, data in module["files"].items():
            (tmp / name).write_bytes(data)
    (node / "modules").mkdir(exist_ok=True)
    return str(_write_once(node / "modules" / module["name"], fill))


def _cached_json(path: Path, make):
    """A figure measured once per node (and GPU) for the run: read back, or measured and kept."""
    if path.exists():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass
    value = make()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)
    return value


def ray_grade(payload: dict) -> dict:
    """One grading, in a Ray task holding one GPU (Ray has set CUDA_VISIBLE_DEVICES to it)."""
    from .. import exercises
    from ..check import prepare, sandbox
    from .lane import GradingItem, grade_one, graded_on, measure_baselines

    t0 = time.perf_counter()
    node = _node_dir(payload["run_id"])
    runtime = _runtime_on_node(node)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    has_gpu = machine.has_gpu()
    if has_gpu and sandbox.available() is None:  # does CUDA work in the sandbox on this node? once per node
        why = _cached_json(node / "sandbox.json", lambda: {"problem": sandbox.check_gpu()})["problem"]
        if why:
            sandbox.disable(why)
    ex_id = payload["exercise"]
    prep = payload["prepared"]
    if payload.get("module"):
        prep.module_dir = _module_on_node(node, payload["module"])
    elif payload.get("source") is not None:  # the driver could not build: check and build here
        src = node / "sources" / payload["student"] / Path(payload["display"]).name
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(payload["source"], encoding="utf-8")
        prep = prepare(exercises.get(ex_id), src, display=payload["display"])
    calibration = {}
    if has_gpu and prep.module_dir:
        key = "".join(c if c.isalnum() else "-" for c in gpu)
        calibration = {ex_id: _cached_json(node / f"calibration-gpu{key}-{ex_id}.json",
                                           lambda: measure_baselines(runtime, [ex_id])[ex_id])}
    opts = replace(payload["opts"], runtime_root=runtime, hide=(*payload["opts"].hide, str(node)))
    setup_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    record = grade_one(GradingItem(payload["student"], ex_id, prep, opts), calibration)
    return {"record": record, "where": graded_on(), "calibration": calibration.get(ex_id),
            "sandbox": sandbox.available(), "seconds": time.perf_counter() - t1, "setup_s": setup_s}


# ------------------------------------------------------------------ the driver
def _module_payload(prep) -> dict | None:
    """The built extension's files (the .so, or a Python exercise's .py), to travel in the task."""
    if not prep.module_dir:
        return None
    # (a build's library is named after its binding, not the build: jit/extension.py)
    files = {p.name: p.read_bytes() for p in Path(prep.module_dir).iterdir()
             if p.suffix == ".so" or p.name == f"{prep.module_name}.py"}
    return {"name": prep.module_name, "files": files}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# `ray start`, waiting up to 150 s (not Ray's fixed 30 s) for its raylet to register: on a loaded
# 2-core machine (CI) it took 30-75 s, and the start failed. Ray's own CLI where that hook is gone.
RAY_START = """
import sys, time
try:
    import ray._private.services as services
    _get_node = services.get_node
    def get_node(*args, **kwargs):
        deadline = time.monotonic() + 150
        while True:
            try:
                return _get_node(*args, **kwargs)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
    services.get_node = get_node
except (ImportError, AttributeError):
    pass
from ray.scripts.scripts import main
sys.argv[0] = "ray"
sys.exit(main())
"""


class LocalCluster:
    """A one-node Ray cluster started for the run (`ray start --head --block` as a child of this
    process, its ports chosen here so that no start waits on port files; a token of its own, so
    that only this run may use it) and stopped after. A start that fails (Ray gives its processes
    30 s, which a loaded 2-core machine can miss) is tried again, `starts` times in all."""

    def __init__(self, num_gpus: int, num_cpus: int | None = None, env: dict | None = None, starts: int = 3):
        self.tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths
        self.port = _free_port()
        self.token = secrets.token_hex(32)
        self.cmd = [sys.executable, "-c", RAY_START, "start", "--head", "--block",
                    "--node-ip-address", "127.0.0.1", "--port", str(self.port),
                    "--num-gpus", str(num_gpus), "--include-dashboard", "false", "--disable-usage-stats",
                    "--temp-dir", str(self.tmp)]
        if num_cpus:
            self.cmd += ["--num-cpus", str(num_cpus)]
        self.env = dict(env or os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token)
        self.address = f"127.0.0.1:{self.port}"
        self.starts_left = starts
        self.log = open(self.tmp / "ray-start.log", "ab")
        self.proc = None
        self.start()

    def start(self) -> None:
        self.starts_left -= 1
        ports = []
        for flag in ("--dashboard-agent-grpc-port", "--dashboard-agent-listen-port", "--runtime-env-agent-port",
                     "--metrics-export-port"):
            ports += [flag, str(_free_port())]
        self.proc = subprocess.Popen(self.cmd + ports, stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)

    def restart(self) -> bool:
        """After a failed start: start again if tries are left."""
        if self.starts_left <= 0:
            return False
        self._end()
        self.start()
        return True

    def client_env(self) -> dict:
        """What the driver needs in its environment to connect: this cluster's token."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    def tail(self) -> str:
        return (self.tmp / "ray-start.log").read_bytes()[-1500:].decode(errors="replace")

    def _end(self) -> None:
        import signal

        if self.proc.poll() is None:
            self.proc.terminate()  # ray start --block stops what it started
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:  # anything of its session left over (its own process group, started here)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def stop(self) -> None:
        self._end()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _connect(ray, address: str, runtime_env: dict, cluster: LocalCluster | None) -> None:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            ray.init(address=address, runtime_env=runtime_env, logging_level="warning", log_to_driver=False)
            return
        except Exception as e:  # not up yet, or its start failed
            if cluster is None or time.monotonic() > deadline:
                tail = f"; its log ends: {cluster.tail()}" if cluster else ""
                raise RuntimeError(f"cannot connect to the Ray cluster at {address}: {e}{tail}") from e
            if cluster.proc.poll() is not None and not cluster.restart():
                raise RuntimeError(f"the local Ray cluster did not start; its log ends: {cluster.tail()}") from e
            time.sleep(2)


class RaySession:
    """The Ray side of a class run. Made before the preparation starts, so that a local cluster
    starts while the submissions are checked and built; `grade` connects and runs the tasks;
    `close` disconnects and stops a local cluster. `address`: an existing cluster's, or None for
    a local one with `num_gpus` GPUs (by default those of `devices`; on a machine without a GPU that
    many pretend ones, whose tasks run the compile-only stages) and `num_cpus` CPUs. `task`
    replaces ray_grade (the tests: a task that dies once)."""

    def __init__(self, address: str | None, devices: list, echo, num_cpus: int | None = None,
                 num_gpus: int | None = None, max_retries: int = 3, task=None):
        self.echo, self.max_retries, self.task = echo, max_retries, task or ray_grade
        pythonpath = os.pathsep.join(p for p in (str(paths.ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}}  # the workers import the grader
        self.cluster, self.saved, self.address = None, {}, address
        if address is None:
            real = [d for d in devices if d is not None] if machine.has_gpu() else []
            gpus = num_gpus or len(devices)
            env = dict(os.environ, PYTHONPATH=pythonpath, RAY_USAGE_STATS_ENABLED="0")
            if real:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(real)
            self.cluster = LocalCluster(gpus, num_cpus, env)
            self.address = self.cluster.address
            self.saved = {k: os.environ.get(k) for k in self.cluster.client_env()}
            os.environ.update(self.cluster.client_env())  # Ray reads them once, when first imported: before that
            echo(f"ray: starting a local cluster for this run at {self.address} with {gpus} "
                 f"GPU{'s' if gpus > 1 else ''}" + ("" if real else " (none real here: the tasks run the "
                                                               "compile-only stages)"))

    def grade(self, items: list, runtime_exercises: list[str], on_done, run_info: dict, save_run) -> dict:
        """Grade `items` (lane.GradingItem, from grade_class) as Ray tasks of one GPU each, calling
        `on_done(student, exercise, record, where)` here as each comes back. Returns {"per_gpu": {host/GPU: {"graded", "busy_s", "setup_s"}}, "errors": [...]}."""
        import ray

        from .. import exercises

        t0 = time.perf_counter()
        _connect(ray, self.address, self.runtime_env, self.cluster)
        res = ray.cluster_resources()
        self.echo(f"ray: connected to {self.address} after {time.perf_counter() - t0:.0f} s: {len(ray.nodes())} "
                  f"node(s), {res.get('GPU', 0):g} GPUs, {res.get('CPU', 0):g} CPUs")
        if not res.get("GPU"):
            raise RuntimeError(f"the Ray cluster at {self.address} has no GPU: every grading task holds one")
        ex_by_id = {e: exercises.get(e) for e in runtime_exercises}
        return _run_tasks(ray, items, ex_by_id, on_done, self.echo, run_info, save_run, self.max_retries, self.task)

    def close(self) -> None:
        if "ray" in sys.modules:
            import ray

            if ray.is_initialized():
                ray.shutdown()
        if self.cluster:
            self.cluster.stop()
            self.cluster = None
            for k, v in self.saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _clean_node(run_id: str) -> None:
    shutil.rmtree(Path(tempfile.gettempdir()) / f"grader-ray-{os.getuid()}" / run_id, ignore_errors=True)


def _clean_nodes(ray, run_id: str) -> None:
    """Each node's folder for the run (grader copy, extensions, sources, figures) removed."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    clean = ray.remote(_clean_node)
    refs = [clean.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
            .remote(run_id) for n in ray.nodes() if n.get("Alive")]
    try:
        ray.wait(refs, num_returns=len(refs), timeout=60)
    except Exception:  # a node gone meanwhile: its /tmp goes with it
        pass


def _run_tasks(ray, items, ex_by_id, on_done, echo, run_info, save_run, max_retries, task) -> dict:
    run_id = secrets.token_hex(6)
    try:
        return _run_tasks_of(ray, run_id, items, ex_by_id, on_done, echo, run_info, save_run, max_retries, task)
    finally:
        _clean_nodes(ray, run_id)


def _run_tasks_of(ray, run_id, items, ex_by_id, on_done, echo, run_info, save_run, max_retries, task) -> dict:
    remote = ray.remote(task).options(num_gpus=1, max_retries=max_retries, retry_exceptions=True)
    built_here = machine.has_gpu()
    rebuilt = sum(1 for it in items if not it.prepared.module_dir and not it.prepared.result.failures and it.path)
    # A window of tasks in flight (a few per GPU of the cluster), not all of them: each carries its
    # extension's bytes, which Ray keeps in the object store until the task is done.
    window = max(4, IN_FLIGHT_PER_GPU * int(ray.cluster_resources().get("GPU", 1)))
    queue = list(items)
    pending: dict = {}

    def submit():
        while queue and len(pending) < window:
            item = queue.pop(0)
            prep = item.prepared
            payload = {"run_id": run_id, "student": item.student, "exercise": item.exercise, "display": item.display,
                       "prepared": prep, "opts": item.opts, "module": _module_payload(prep), "source": None}
            if not prep.module_dir and not prep.result.failures and item.path:
                # it passed its checks here: built there
                payload["source"] = Path(item.path).read_text(encoding="utf-8")
            pending[remote.remote(payload)] = (item.student, item.exercise)

    echo(f"ray: {len(items)} grading tasks of one GPU each, up to {window} in flight"
         + (f"; {rebuilt} to be built on their workers (this host has no GPU to build for)"
            if rebuilt and not built_here else ""))
    submit()
    per_gpu: dict = {}
    errors, no_sandbox = [], set()
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            student, ex_id = pending.pop(ref)
            submit()
            try:
                out = ray.get(ref)
            except Exception as e:  # retries spent: left ungraded, so that the next run grades it
                errors.append(f"{student} {ex_id}: {type(e).__name__}: {str(e).strip().splitlines()[0][:300]}")
                continue
            where = out["where"]
            key = f"{where['host']}/{where['gpu']}"
            g = per_gpu.setdefault(key, {"graded": 0, "busy_s": 0.0, "setup_s": 0.0})
            g["graded"] += 1
            g["busy_s"] += out["seconds"]
            g["setup_s"] += out["setup_s"]
            if out["calibration"] and key not in run_info["calibration"]:
                run_info["calibration"][key] = {}
            if out["calibration"]:
                run_info["calibration"][key][ex_id] = out["calibration"]
                save_run()
            if out["sandbox"] and where["host"] not in no_sandbox:
                no_sandbox.add(where["host"])
                echo(f"sandbox: NOT available on {where['host']} ({out['sandbox']}): submissions run there as "
                     "the Ray worker's user")
            on_done(student, ex_by_id[ex_id], out["record"], f"[{key}] ")
    return {"per_gpu": per_gpu, "errors": errors}
