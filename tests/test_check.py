"""`grader.check` turns every kind of bad submission into a result with a reason, never an exception."""
import pytest

import grader
from grader import config, machine, paths, pyenv, toolkit
from conftest import check
from conftest import gpu

SOLUTION = grader.paths.SOLUTIONS / "day01" / "scale_add.cu"


def _submit(tmp_path, text, name="scale_add.cu"):
    p = tmp_path / name
    p.write_text(text) if isinstance(text, str) else p.write_bytes(text)
    return p


def _reason(result):
    assert not result.ok, str(result)
    return result.first_failure()


def test_missing_empty_and_binary_files(tmp_path):
    assert "no such file" in _reason(check("day01.scale_add", source=tmp_path / "nope.cu"))
    assert "empty" in _reason(check("day01.scale_add", source=_submit(tmp_path, "  \n")))
    assert "UTF-8" in _reason(check("day01.scale_add", source=_submit(tmp_path, b"\x80\x81\xff")))


def test_compile_error_points_at_file_and_line(tmp_path):
    text = SOLUTION.read_text().replace("out[i] = alpha * x[i] + y[i];", "out[i] = alpha * x[i] + z[i];")
    reason = _reason(check("day01.scale_add", source=_submit(tmp_path, text)))
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "z[i]" in l)
    assert f"scale_add.cu:{line}:" in reason and "undefined" in reason


@pytest.mark.parametrize("change, why", [
    ('#include "course/common.cuh"', '#include "course/common.cuh"\n#include <torch/extension.h>'),
    ("return cudaGetLastError();", "cudaMemcpyAsync(out, y, n * 4, cudaMemcpyDeviceToDevice, stream);\n  return cudaGetLastError();"),
    ("return cudaGetLastError();", "cublasSaxpy(0, n, &alpha, x, 1, out, 1);\n  return cudaGetLastError();"),
])
def test_work_done_elsewhere_is_refused(tmp_path, change, why):
    text = SOLUTION.read_text().replace(change, why)
    reason = _reason(check("day01.scale_add", source=_submit(tmp_path, text)))
    assert "does its own work" in reason


def test_wrong_entry_point_signature(tmp_path):
    text = SOLUTION.read_text().replace("float alpha,", "double alpha,")
    reason = _reason(check("day01.scale_add", source=_submit(tmp_path, text)))
    assert "does not match the fixed entry point" in reason
    text = SOLUTION.read_text().replace("COURSE_EXPORT cudaError_t scale_add(", "COURSE_EXPORT cudaError_t scaleadd(")
    assert "missing" in _reason(check("day01.scale_add", source=_submit(tmp_path, text)))
    # out and x swapped: same types, but the output is no longer the non-const pointer
    text = SOLUTION.read_text().replace("scale_add(float* out, const float* x,", "scale_add(const float* x, float* out,")
    assert "does not match the fixed entry point" in _reason(check("day01.scale_add", source=_submit(tmp_path, text)))


def test_device_memory_kept_between_calls_is_refused_past_the_limit(tmp_path):
    """`__device__` arrays are the only place a kernel can keep results from one call to the next: a cache
    of them is refused; a counter and a small table are not."""
    body = "out[i] = alpha * x[i] + y[i];"
    cache = SOLUTION.read_text().replace("namespace {\n", "namespace {\n__device__ float g_last[1 << 16];\n", 1)
    cache = cache.replace(body, body + "\n    if (i < (1 << 16)) g_last[i] = out[i];")
    result = check("day01.scale_add", source=_submit(tmp_path, cache))
    row = next(i for i in result.items if i.name == "device memory of its own")
    assert row.status == "fail" and "262144 B" in row.detail and "64 KB" in row.detail, str(result)
    small = SOLUTION.read_text().replace("namespace {\n", "namespace {\n__device__ unsigned g_calls;\n", 1)
    small = small.replace(body, body + "\n    if (i == 0) atomicAdd(&g_calls, 1u);")
    result = check("day01.scale_add", source=_submit(tmp_path, small, "small.cu"))
    row = next(i for i in result.items if i.name == "device memory of its own")
    assert row.status == "pass" and row.detail.startswith("4 B"), str(result)


def test_no_kernel_at_all(tmp_path):
    reason = _reason(check("day01.scale_add", source=_submit(tmp_path, "int main() { return 0; }\n")))
    assert "no __global__" in reason


def test_scalar_loads_fail_the_vector_requirement():
    """The untouched Day 2 stub has no 16-byte loads: the SASS check says so."""
    result = check("day02.silu_and_mul", solutions=False, perf=False)
    assert any(i.name == "LDG.E.128" and i.status == "fail" for i in result.items), str(result)


def test_result_renders_as_text_html_and_dict():
    result = check("day01.scale_add", solutions=True, perf=False, seeds=1)
    assert "day01.scale_add" in str(result) and "<table>" in result._repr_html_()
    assert result.as_dict()["verdict"] == ("pass" if machine.has_gpu() else "not graded")


def test_a_check_says_where_its_time_went():
    """The learner's loop: the result ends with one line of stage times (the checks and, on a
    GPU, the build, the grading process's start, the cases and the timing), also in the dict."""
    result = check("day01.scale_add", solutions=True, perf=machine.has_gpu(), seeds=1)
    stages = result.as_dict()["timings"]
    assert "source and SASS checks" in stages and all(s >= 0 for s in stages.values())
    if machine.has_gpu():
        assert {"grading process start", "timing (1 case)"} <= set(stages), stages
        assert any(k.startswith("build") for k in stages) and any(" cases x 1 seed" in k for k in stages), stages
        assert sum(stages.values()) <= result.seconds * 1.05 + 0.5, (stages, result.seconds)
    line = str(result).splitlines()[-1]
    assert line.startswith("time: source and SASS checks ") and line.endswith(f"total {result.seconds:.1f} s")
    assert "time: source and SASS checks" in result._repr_html_()


def test_compile_only_verdict_is_no_pass():
    """Without a GPU an unedited stub must not read PASS: only its static checks ran."""
    from grader.check.result import Result

    r = Result("day01.scale_add", "kernels/day01/scale_add.cu", "compile-only")
    r.add("source", "does its own work", "pass")
    r.add("correctness", "run on a GPU", "skip", "skipped: no CUDA GPU here (compile-only mode)")
    assert r.ok and r.verdict == "not graded" and "PASS" not in str(r).splitlines()[0]
    assert "NOT GRADED" in r._repr_html_() and "need a GPU" in str(r)
    r.items[-1].status = "pass"
    r.add("work", "bank conflicts (ncu)", "skip")
    assert r.verdict == "pass (some checks skipped)"


def test_html_table_keeps_kernel_names_whole():
    from grader.check.result import Result

    r = Result("day01.scale_add", "x.cu", "gpu")
    r.add("work", "kernels launched", "pass", "only your kernels ran: (anonymous namespace)::scale_add_kernel(float*, long)")
    page = r._repr_html_()
    assert "<code style='white-space:nowrap;word-break:keep-all'>(anonymous namespace)::scale_add_kernel(float*, long)</code>" in page
    assert "word-break:normal" in page


@gpu
def test_stub_fails_correctness_cleanly(tmp_path):
    # A stub the learner has touched (an untouched one is refused before it runs: NOT STARTED)
    # builds, runs and fails its correctness check, with nothing else broken.
    stub = (paths.KERNELS / "day01" / "scale_add.cu").read_text() + "\n// started\n"
    result = check("day01.scale_add", source=_submit(tmp_path, stub), perf=False, seeds=1)
    assert not result.not_started and "never written" in _reason(result)


@gpu
@pytest.mark.parametrize("body, expected", [
    ("for (long long t0 = clock64(); clock64() >= t0;) { }", "no result within"),  # clock64 cannot be optimised away
    ("out[i + (int64_t(1) << 40)] = 1.0f;", "illegal memory access"),
    ("if (i + 1 < n) out[i] = alpha * x[i] + y[i];", "differ"),
])
def test_crashing_hanging_and_wrong_kernels_fail_their_own_check(tmp_path, body, expected):
    text = SOLUTION.read_text().replace("out[i] = alpha * x[i] + y[i];  // one FFMA per 12 bytes moved", body)
    # 20 s stops the hang; the others get room for a busy GPU (the self-test runs tests side by
    # side, hanging mutants included, and a crash or a wrong answer must not read as a hang).
    hang = expected == "no result within"
    result = check("day01.scale_add", source=_submit(tmp_path, text), perf=False, seeds=1, timeout=20 if hang else 120)
    assert expected in str(result), str(result)


@gpu
def test_memcheck_finds_a_write_one_past_the_end(tmp_path):
    """A write one element past the output does not crash, but memcheck sees it."""
    text = SOLUTION.read_text().replace("i < n;\n       i += stride)", "i <= n;\n       i += stride)")
    assert "i <= n" in text
    result = check("day01.scale_add", source=_submit(tmp_path, text), sanitize="memcheck", seeds=1)
    item = next(i for i in result.items if i.name == "compute-sanitizer memcheck")
    assert item.status == "fail" and "Invalid" in item.detail, str(result)


@gpu
def test_racecheck_finds_a_missing_syncthreads(tmp_path):
    solution = grader.paths.SOLUTIONS / "day04" / "transpose.cu"
    text = solution.read_text().replace("  __syncthreads();\n", "\n")
    assert "__syncthreads();" not in text
    result = check("day04.transpose", source=_submit(tmp_path, text, "transpose.cu"), sanitize="racecheck",
                   seeds=1)
    item = next(i for i in result.items if i.name == "compute-sanitizer racecheck")
    assert item.status == "fail", str(result)


@gpu
def test_solution_is_clean_under_memcheck():
    result = check("day02.silu_and_mul", solutions=True, sanitize="memcheck", seeds=1)
    item = next(i for i in result.items if i.name == "compute-sanitizer memcheck")
    assert item.status == "pass" and result.ok, str(result)


@gpu
def test_a_kernel_printing_megabytes_is_still_graded(tmp_path):
    text = SOLUTION.read_text().replace("out[i] = alpha * x[i] + y[i];  // one FFMA per 12 bytes moved",
                                        'printf("element %lld of %lld\\n", (long long)i, (long long)n);\n'
                                        "    out[i] = alpha * x[i] + y[i];")
    text = text.replace('#include "course/common.cuh"', '#include <cstdio>\n#include "course/common.cuh"')
    result = check("day01.scale_add", source=_submit(tmp_path, text), perf=False, seeds=1, timeout=120)
    assert sum(i.group == "correctness" for i in result.items) > 3, str(result)


def test_a_kernel_named_like_pytorchs_is_refused(tmp_path):
    """compute-sanitizer skips PyTorch's kernels by name (config.SANITIZER_SKIP_KERNELS): a
    submission's kernel may not carry such a name, or it would escape the sanitizer stage."""
    text = SOLUTION.read_text().replace("scale_add_kernel", "native_scale_add_kernel")
    result = check("day01.scale_add", source=_submit(tmp_path, text), perf=False, seeds=1)
    item = next(i for i in result.items if i.name == "kernel names")
    assert item.status == "fail" and "native_scale_add_kernel" in item.detail, str(result)
    assert not result.ok


def test_a_grading_process_started_early_loads_the_module_from_its_own_folder(tmp_path):
    """The learner's loop starts the grading process beside the static checks and the build
    (supervise.WarmWorker): it gets ready, waits for its config, and loads the module from a copy
    in the one folder it can see. Here the "module" is no library, so it fails to load: from the
    copy, reported as the failure of the run, and the process's folder is gone afterwards."""
    from grader import exercises
    from grader.check.result import Result
    from grader.check.supervise import Prepared, RunOptions, WarmWorker, run_worker

    ex = exercises.get("day01.scale_add")
    built = tmp_path / "built"
    built.mkdir()
    (built / "day01_scale_add_b0.so").write_bytes(b"not a shared library")
    prep = Prepared(Result(ex.id, "scale_add.cu", "gpu"), module_dir=str(built), module_name="day01_scale_add_b0",
                    kernels=["scale_add_kernel"])
    opts = RunOptions(seeds=[["0", 0]], perf=False, timeout=120)
    warm = WarmWorker(opts)
    folder = warm.tmp
    try:
        run_worker(ex, prep, opts, warm=warm)
    finally:
        warm.discard()
    fail = prep.result.first_failure()
    assert "could not load the built module" in fail, str(prep.result)
    assert str(folder / "module" / "day01_scale_add_b0.so") in fail, fail
    assert not folder.exists()


def test_a_grading_process_started_early_ends_when_its_check_is_gone(tmp_path):
    """A check killed before it hands its early-started grading process any work (a learner's
    Ctrl-C, a closed terminal) leaves no process behind waiting for ever."""
    import os
    import subprocess
    import sys
    import time

    code = ("from grader.check.supervise import RunOptions, WarmWorker\n"
            "w = WarmWorker(RunOptions())\nprint(w.proc.pid, flush=True)\nimport os\nos._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=pyenv.subprocess_env())
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, 9)
    raise AssertionError("the early-started grading process outlived its check by a minute")


def test_the_launch_checks_process_starts_its_gpu_part_after_the_first_process_is_ready(tmp_path):
    """A learner's check starts two grading processes; the second (the "kernels launched" check's,
    CUPTI started) makes its CUDA context only once the first has made its own (WARM_READY), or has
    ended: side by side they held the first one back. Here the first is held stopped (SIGSTOP): the
    second imports torch but goes no further; let go, the first says it is ready, then the second."""
    import contextlib
    import os
    import signal
    import time

    from grader.check.supervise import RunOptions, WarmWorker, descendants
    from grader.check.worker import WARM_GO, WARM_READY

    def signal_tree(warm, sig):  # the process and what runs under it (bubblewrap's sandbox, where used)
        for pid in descendants(warm.proc.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def wait(cond, what, limit=90):
        deadline = time.monotonic() + limit
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    @contextlib.contextmanager
    def pair(stop_first=False):  # the two processes of a check, the first held stopped where asked
        first = WarmWorker(RunOptions())
        time.sleep(0.3)  # (bubblewrap's child started)
        if stop_first:
            signal_tree(first, signal.SIGSTOP)
        second = WarmWorker(RunOptions(), profiler=True, after=first)
        try:
            yield first, second
        finally:
            signal_tree(first, signal.SIGCONT)
            first.discard()
            second.discard()

    with pair(stop_first=True) as (first, second):
        time.sleep(8)  # (its torch imported meanwhile, on a slow host most of it)
        assert not (second.tmp / WARM_GO).exists() and not (second.tmp / WARM_READY).exists()
        assert second.proc.poll() is None
        signal_tree(first, signal.SIGCONT)
        wait(lambda: (second.tmp / WARM_READY).exists(), "the second process never got ready")
        assert (first.tmp / WARM_READY).stat().st_mtime <= (second.tmp / WARM_GO).stat().st_mtime
        assert (second.tmp / WARM_GO).stat().st_mtime <= (second.tmp / WARM_READY).stat().st_mtime
        # each says when its stages ended (the check's account of what ran beside it), in order
        mine, theirs = first.stages(), second.stages()
        assert list(theirs)[:2] == ["torch imported", "told to go on"] and "told to go on" not in mine
        assert theirs["torch imported"] <= theirs["told to go on"] and mine["torch imported"] <= theirs["told to go on"]
    # A first process that ends before it is ready (killed, crashed) lets the second go on.
    with pair() as (first, second):
        signal_tree(first, signal.SIGKILL)
        wait(lambda: (second.tmp / WARM_READY).exists(), "the second process waited on a first one that had ended")
        assert not (first.tmp / WARM_READY).exists()


def test_a_learner_checks_launch_check_runs_last_after_the_bank_conflict_count(monkeypatch):
    """With two grading processes (a learner's check), the "kernels launched" check's process, the last
    one ready (CUPTI's start), is used last: after the first process's cases and timing and after ncu's
    bank-conflict count; not at all where the first did not get to its end. The check's account says
    when each process's start ended (Result.background), under the timing line."""
    from grader import exercises
    from grader.check import Prepared, Result, RunOptions, pipeline

    ex = exercises.get("day04.transpose")
    order = []

    def fake_run_worker(ex, prep, opts, result=None, warm=None, part="all"):
        order.append(part)
        return warm != "dies"

    class Pending:
        folder = "/nowhere"

        def cancel(self):
            order.append("ncu cancelled")

    monkeypatch.setattr(pipeline, "run_worker", fake_run_worker)
    monkeypatch.setattr(pipeline, "_bank_conflict_check", lambda *a: order.append("ncu"))
    prep = Prepared(Result(ex.id, "t.cu", "gpu"), module_dir="/m", module_name="m")
    pipeline.run(ex, prep, RunOptions(), warm=("first", "second"), ncu_run=Pending())
    assert order == ["no launches", "ncu", "launches"]
    order.clear()
    pipeline.run(ex, prep, RunOptions(), warm=("dies", "second"), ncu_run=Pending())
    assert order == ["no launches", "ncu"]  # (its cases passed: this fake adds no failure)
    order.clear()
    pipeline.run(ex, prep, RunOptions(), warm=("first",), ncu_run=Pending())
    assert order == ["all", "ncu"]
    result = Result(ex.id, "t.cu", "gpu", timings={"timing (2 cases)": 0.4}, seconds=9.0,
                    background={"launch check's process": {"torch imported": 3.2, "profiler started (CUPTI)": 8.1}})
    assert result.timing_line().splitlines()[1] == \
        "  beside it, launch check's process: torch imported at 3.2 s · profiler started (CUPTI) at 8.1 s"
    assert result.as_dict()["background"] == result.background


def test_a_grading_processs_account_of_its_start_is_read_as_data_or_not_at_all(tmp_path):
    """WARM_READY lies in the folder the learner's code may write once it runs there: what the check
    reads from it (Result.background) is a few stage names with numbers, or nothing."""
    from grader.check.supervise import WarmWorker
    from grader.check.worker import WARM_READY

    w = object.__new__(WarmWorker)  # (its folder alone: no process)
    w.tmp = tmp_path
    assert w.stages() == {}
    for text, expected in [('{"torch imported": 1.5, "CUDA context made": 2}', {"torch imported": 1.5, "CUDA context made": 2.0}),
                           ('{"a": "1", "b": true, "c": [1], "d": 3}', {"d": 3.0}),
                           ("[1, 2]", {}), ("{not json", {}), ('{"x": ' + "1" * 5000 + "}", {}),
                           (str({f"s{i}": i for i in range(20)}).replace("'", '"'), {})]:
        (tmp_path / WARM_READY).write_text(text)
        assert w.stages() == expected, text


def test_the_kernels_a_call_launched_come_from_the_light_session_or_else_torch_profiler(monkeypatch):
    """worker.kernels_launched: from torch.autograd.profiler's CUDA session (no torch._inductor import)
    where it saw kernels; where it saw none or could not run, the call goes once more under
    torch.profiler.profile, whose answer counts; an error of the call itself comes from there."""
    import contextlib
    import types

    import torch
    import torch.profiler

    from grader.check import worker

    def events(*names):
        return [types.SimpleNamespace(name=n, device_type="DeviceType.CUDA") for n in names] + \
            [types.SimpleNamespace(name="aten::empty", device_type="DeviceType.CPU")]

    light, full, runs = [], [], []

    @contextlib.contextmanager
    def light_session():
        if light and isinstance(light[0], Exception):
            raise light[0]
        yield types.SimpleNamespace(function_events=events(*light))

    class FullSession:
        def __init__(self, activities):
            assert activities == [torch.profiler.ProfilerActivity.CUDA]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def events(self):
            return events(*full)

    monkeypatch.setattr(worker, "_cuda_session", light_session)
    monkeypatch.setattr(torch.profiler, "profile", FullSession)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    light[:], full[:] = ["my_kernel<float>"], ["never asked"]
    assert worker.kernels_launched(lambda: runs.append(1)) == ["my_kernel<float>"] and runs == [1]
    light[:], full[:], runs[:] = [], ["Memcpy DtoD"], []
    assert worker.kernels_launched(lambda: runs.append(1)) == ["Memcpy DtoD"] and runs == [1, 1]
    light[:], full[:] = [TypeError("an older torch")], ["my_kernel<float>"]
    assert worker.kernels_launched(lambda: None) == ["my_kernel<float>"]
    light[:], full[:] = ["my_kernel<float>"], []

    def crashes():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        worker.kernels_launched(crashes)
    light[:], full[:] = [], []
    assert worker.kernels_launched(lambda: None) == []


def test_a_grading_process_waiting_past_its_memory_limit_is_stopped(tmp_path):
    """Processes started ahead wait unsupervised (a class run's sanitizer processes may wait a whole
    run): one that grows past the host-memory limit meanwhile is stopped and its log says so; one
    within its limit waits on."""
    import time

    from grader.check.supervise import RunOptions, WarmWorker

    small = WarmWorker(RunOptions(memory_limit_gb=1e-6))  # 1 KB: any Python is past it
    roomy = WarmWorker(RunOptions(memory_limit_gb=64))
    try:
        deadline = time.monotonic() + 60
        while small.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert small.proc.poll() is not None, "the process past its limit was not stopped"
        assert small.over_memory > 1024
        assert "stopped while waiting for a grading" in (small.tmp / "output.log").read_text()
        time.sleep(3 * config.WAITING_WATCH_S)
        assert roomy.proc.poll() is None and not roomy.over_memory
    finally:
        small.discard()
        roomy.discard()


def test_the_sass_checks_need_no_torch_import_and_the_mode_is_known_at_the_end(tmp_path):
    """torch's import (seconds) runs in a thread beside the static and SASS checks: nothing they
    call imports it (the arch comes from the driver, torch's headers from its package's location),
    and the result still says which mode it ran in."""
    import subprocess
    import sys

    code = (
        "import sys, threading\n"
        "from grader import machine\n"
        "from grader.jit import sass\n"
        "from grader.exercises import get\n"
        "from grader.check import sandbox\n"
        "sass._torch_include_dirs(); machine.arch(); sandbox._needed()\n"
        "assert 'torch' not in sys.modules, 'the include folder, the arch or the sandbox mounts imported torch'\n"
        "from grader.check import pipeline\n"
        "ex = get('day01.scale_add')\n"
        "machine._probe = threading.Thread()  # no probe: the checks alone must not import torch\n"
        "prep = pipeline._prepare(ex, ex.solution_path, True, None)\n"
        "assert 'torch' not in sys.modules, 'the static or SASS checks imported torch'\n"
        "assert not prep.result.failures, prep.result\n"
        "prep = pipeline.prepare(ex, ex.solution_path)\n"
        "assert prep.result.mode == 'compile-only', prep.result.mode\n"
    )
    env = dict(pyenv.subprocess_env(), COURSE_FORCE_CPU="1", PYTHONPATH=str(paths.ROOT))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_call_that_never_returns_is_stopped_at_the_run_limit(tmp_path):
    """A hang is stopped when one call of the learner's code (gate.CALLING) passes the exercise's run
    limit, not at the whole check's limit: here a process that enters a call and never leaves it,
    stopped after about 1 s of a 120 s limit, with the reason on the case it was in."""
    import dataclasses
    import subprocess
    import sys
    import time

    from grader import exercises
    from grader.check.result import Result
    from grader.check.supervise import Prepared, RunOptions, run_limit_s, run_worker

    ex = dataclasses.replace(exercises.get("day01.scale_add"), run_limit_s=1.0)
    code = ("import json, time\nfrom grader.check.gate import WorkerGate\n"
            "f = open('results.jsonl', 'a')\n"
            "f.write(json.dumps({'event': 'start', 'name': 'fp32 n=1'}) + '\\n'); f.flush()\n"
            "with WorkerGate('.', False).calling():\n    time.sleep(120)\n")

    class Stuck:  # a grading process already started (as supervise.WarmWorker), here in a call for ever
        tmp = tmp_path
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=pyenv.subprocess_env())

    prep = Prepared(Result(ex.id, "scale_add.cu", "gpu"))
    opts = RunOptions(seeds=[["0", 0]], perf=False, timeout=120)
    t0 = time.monotonic()
    assert not run_worker(ex, prep, opts, warm=Stuck())
    assert time.monotonic() - t0 < 30 and Stuck.proc.poll() is not None
    (item,) = prep.result.failures
    assert (item.group, item.name) == ("correctness", "fp32 n=1") and prep.timed_out
    assert "no result within 1 s from one call of your code" in item.detail
    # longer under compute-sanitizer, never past the whole process's limit; none for an exercise without one
    assert run_limit_s(ex, dataclasses.replace(opts, sanitize="memcheck")) == 4.0
    assert run_limit_s(ex, dataclasses.replace(opts, timeout=0.5)) == 0.5
    assert run_limit_s(exercises.get("day14.decoder"), opts) is None


def test_a_stopped_grading_process_is_waited_for_with_everything_under_it():
    """supervise.stop_tree: the process stopped and each one under it (bwrap's sandboxed worker,
    compute-sanitizer's target) killed and waited for until it has exited, its GPU context gone; the
    child here would otherwise sleep on for a minute, orphaned."""
    import subprocess
    import sys

    import time

    from grader.check.supervise import _running, descendants, stop_tree

    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    while len(descendants(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    tree = descendants(proc.pid)
    assert len(tree) == 2 and all(_running(pid) for pid in tree)
    stop_tree(proc, wait_s=20)
    assert proc.poll() is not None and not _running(tree[1])


def test_the_shared_memory_poison_assembles_for_sm90():
    """The kernel that fills shared memory with NaN before each graded call (check/poison.py) is PTX
    the driver compiles in the grading process: it must assemble for sm_90, into 16-byte stores."""
    import subprocess

    from grader.check import poison

    home = toolkit.cuda_home()
    ptxas = home / "bin" / "ptxas" if home else None
    if not ptxas or not ptxas.exists():
        pytest.skip("no ptxas here (the CUDA toolkit)")
    out = subprocess.run([str(ptxas), "-arch=sm_90", "-o", "/dev/null", "-"], input=poison._PTX, text=True,
                         capture_output=True)
    assert out.returncode == 0, out.stderr
    assert f"{poison.PATTERN:#x}" in poison._PTX.lower() and "st.shared.v4.u32" in poison._PTX



def test_the_side_stream_spin_waits_on_the_gpus_global_clock(tmp_path):
    """The side-stream case's busy wait (check/ptx.py) is PTX the driver compiles in the grading process,
    for any GPU from sm_70 on. It must wait on %globaltimer, one clock for the whole GPU: torch's _sleep
    counts an SM's own cycles (clock64), and a spin preempted for another process's kernels may resume
    on an SM whose counter is behind (the side-stream case stopped as a hang beside other gradings)."""
    import subprocess

    from grader.check import ptx

    home = toolkit.cuda_home()
    ptxas = home / "bin" / "ptxas" if home else None
    cuobjdump = toolkit.binary_tool("cuobjdump")
    if not ptxas or not ptxas.exists() or not cuobjdump:
        pytest.skip("no ptxas or cuobjdump here (the CUDA toolkit)")
    for arch in ("sm_75", "sm_80", "sm_90"):  # (CUDA 13's ptxas has no sm_70; the driver JIT-compiles sm_70 PTX)
        cubin = tmp_path / f"spin-{arch}.cubin"
        out = subprocess.run([str(ptxas), f"-arch={arch}", "-o", str(cubin), "-"], input=ptx.SPIN_PTX, text=True,
                             capture_output=True)
        assert out.returncode == 0, out.stderr
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True,
                              env=toolkit.tool_env()).stdout
        assert "course_spin_ns" in sass and "GLOBALTIMER" in sass.upper(), sass
        assert "CLOCK" not in sass.upper(), sass


def test_the_waiting_memory_watch_goes_on_when_a_process_is_watched_while_it_looks(monkeypatch):
    """_WaitingWatch: a WarmWorker started (watch()) while the watch's thread goes over the ones it
    watches neither stops that thread (it must not die of 'dictionary changed size during iteration',
    leaving no waiting process watched after) nor is lost."""
    import types

    from grader.check import supervise

    class Waiting:  # (hashable, as a WarmWorker is)
        def __init__(self, pid):
            self.used, self.proc = False, types.SimpleNamespace(pid=pid, poll=lambda: None)

    watch = supervise._WaitingWatch()
    watch._thread = types.SimpleNamespace(is_alive=lambda: True)  # (this test runs the thread's loop itself)
    first, late = Waiting(1), Waiting(2)
    watch.watch(first, 1 << 40)
    looked = []

    def rss(pid, children):
        looked.append(pid)
        if len(looked) == 1:  # a process started while the thread looks at the first
            watch.watch(late, 1 << 40)
        return 0

    class Done(Exception):
        pass

    def sleep(seconds):
        if len(looked) >= 3:
            raise Done

    monkeypatch.setattr(supervise, "_tree_rss_bytes", rss)
    monkeypatch.setattr(supervise, "children_by_parent", lambda: {})
    monkeypatch.setattr(supervise.time, "sleep", sleep)
    try:
        watch._run()
    except Done:
        pass
    assert looked[:3] == [1, 1, 2]  # the second look saw both


def test_a_worker_config_is_read_back_with_exactly_its_keys():
    """WorkerConfig (the grading process's config file): what to_json writes, from_json reads back the same;
    a key it does not know, or one of its fields missing (a writer and a reader out of step), is a ValueError."""
    import json

    from grader.check.worker_config import BuiltModule, Seed, WorkerConfig

    cfg = WorkerConfig(exercise="day01.scale_add", module_dir="/m", module_name="m", seeds=[Seed("0", 0)],
                       deps={"day01.scale_add": BuiltModule("/d", "n")}, max_case_bytes=1 << 20, part="no launches")
    assert WorkerConfig.from_json(cfg.to_json()) == cfg
    written = json.loads(cfg.to_json())
    for wrong in ({**written, "seed": 1}, {k: v for k, v in written.items() if k != "part"}):
        with pytest.raises(ValueError, match="unknown keys: seed|missing keys: part"):
            WorkerConfig.from_json(json.dumps(wrong))
    with pytest.raises(ValueError, match="JSON object"):
        WorkerConfig.from_json("[]")


def test_a_judge_config_is_read_back_with_exactly_its_keys():
    """JudgeConfig (the judge's config file): what to_json writes, from_json reads back the same; a key it
    does not know, or one of its fields missing, is a ValueError."""
    import json

    from grader.check.judge import JudgeConfig, JudgeRun

    cfg = JudgeConfig(exercise="day14.decoder", verdict="/v/verdict.json", folder="/h", runs=[JudgeRun(0, "0", 0)],
                      timed={"3": {"batches": [], "error": None}}, calibrated={"big": {"ratio": 1.0}})
    assert JudgeConfig.from_json(cfg.to_json()) == cfg
    written = json.loads(cfg.to_json())
    assert set(written) == {"exercise", "folder", "runs", "timed", "calibrated", "verdict"}
    for wrong in ({**written, "seed": 1}, {k: v for k, v in written.items() if k != "runs"}):
        with pytest.raises(ValueError, match="unknown keys: seed|missing keys: runs"):
            JudgeConfig.from_json(json.dumps(wrong))
    with pytest.raises(ValueError, match="JSON object"):
        JudgeConfig.from_json("[]")
