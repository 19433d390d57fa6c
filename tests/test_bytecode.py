"""Grading processes' start: torch's CPU threads, and the bytecode cache used where the install keeps
no bytecode (pyenv.bytecode_prefix; on the course's GPU hosts it took each grading process's start
from 6 to 3 CPU-seconds, and CUPTI's from 6 to 1.3)."""
import subprocess
import sys
from pathlib import Path

import pytest

from grader import config, paths, pyenv
from grader.check import sandbox
from grader.check.supervise import isolate


@pytest.fixture()
def no_bytecode(tmp_path, monkeypatch):
    """An install whose torch has no bytecode next to its sources, and a build cache of the test's own."""
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(pyenv, "torch_dir", lambda: str(fake))
    monkeypatch.setattr(sys, "pycache_prefix", None)
    yield fake


def test_grading_processes_use_the_workers_thread_count_unless_one_is_set(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert pyenv.grading_env()["OMP_NUM_THREADS"] == str(config.WORKER_CPU_THREADS)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert pyenv.grading_env()["OMP_NUM_THREADS"] == "2"
    assert pyenv.grading_env(OMP_NUM_THREADS="1")["OMP_NUM_THREADS"] == "1"


def test_the_bytecode_cache_is_used_only_where_torch_has_no_bytecode(no_bytecode, tmp_path, monkeypatch):
    prefix = pyenv.bytecode_prefix()
    assert prefix == tmp_path / "cache" / "bytecode"
    assert "PYTHONPYCACHEPREFIX" not in pyenv.grading_env()  # not filled yet: nothing to read
    pyc = no_bytecode / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    pyc.parent.mkdir()
    pyc.write_bytes(b"")
    assert pyenv.bytecode_prefix() is None and pyenv.write_bytecode() is None
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "mine"))  # the caller's own, as it is
    assert pyenv.bytecode_prefix() == tmp_path / "mine"


def test_the_bytecode_written_is_what_a_sandboxed_grading_process_reads_and_cannot_change(no_bytecode, tmp_path):
    seconds = pyenv.write_bytecode(paths.ROOT, modules=("grader.config",))
    prefix = pyenv.bytecode_prefix()
    assert seconds is not None and seconds > 0
    source = paths.ROOT / "grader" / "config.py"
    compiled = prefix / source.parent.relative_to("/") / f"config.{sys.implementation.cache_tag}.pyc"
    assert compiled.is_file(), sorted(p.name for p in prefix.rglob("*.pyc"))[:5]
    env = pyenv.grading_env()
    assert env["PYTHONPYCACHEPREFIX"] == str(prefix)
    if sandbox.available() is not None:
        pytest.skip(f"no sandbox here: {sandbox.available()}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = ("import grader.config\n"
            "try:\n    open(grader.config.__cached__, 'ab').close(); print('WROTE')\n"
            "except OSError as e:\n    print('blocked', e.strerror)\n")
    argv, env = isolate([sys.executable, "-v", "-c", code], env, str(scratch))
    proc = subprocess.run(argv, env=env, cwd=scratch, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"code object from '{compiled}'" in proc.stderr  # read from the cache, not compiled again
    assert "blocked" in proc.stdout and "WROTE" not in proc.stdout


def test_a_class_run_waits_for_the_bytecode_only_where_torchs_is_not_written_yet(no_bytecode, tmp_path):
    """torch's bytecode is written once per install: a class run's grading processes wait for it where it is
    missing (each would compile torch's Python afresh), and not where it is there (classroom/grade.py)."""
    import importlib.util

    assert not pyenv.torch_bytecode_written()
    prefix = pyenv.bytecode_prefix()
    sys.pycache_prefix = str(prefix)  # where Python itself reads torch's from, with that prefix
    try:
        written = Path(importlib.util.cache_from_source(str(no_bytecode / "__init__.py")))
    finally:
        sys.pycache_prefix = None
    written.parent.mkdir(parents=True)
    written.write_bytes(b"")
    assert pyenv.torch_bytecode_written()
    pyc = no_bytecode / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    pyc.parent.mkdir()
    pyc.write_bytes(b"")  # an install that keeps its own
    assert pyenv.bytecode_prefix() is None and pyenv.torch_bytecode_written()


def test_the_bytecode_written_beside_a_class_runs_start_touches_no_gpu(no_bytecode, monkeypatch):
    """With gpu=False (torch's bytecode, the profiler's with it, written before) the writer imports the
    modules and starts no CUDA context or profiler: it runs beside the GPUs' calibration."""
    ran = []
    monkeypatch.setattr(pyenv.subprocess, "run", lambda argv, **kw: ran.append(argv[-1]))
    pyenv.write_bytecode(paths.ROOT, gpu=False)
    pyenv.write_bytecode(paths.ROOT)
    assert "import_module('grader.check.worker')" in ran[0] and "warm_up" not in ran[0]
    assert "warm_up(profiler=True)" in ran[1]
