"""Hostile submissions: refused before anything runs, in a single check and in class grading;
and the sandbox the grading processes run in, tested for real where bubblewrap works here.

tests/hostile/day02.silu_and_mul.toml keeps each one as edits to the day02.silu_and_mul
solution that add one attack (`what` says which), spelled so that the source patterns
(check/static.py's DENY) do not see it, and the words its refusal must name (`expect`). Each
targets /tmp/course-hostile-canary-NAME (or a listener on 127.0.0.1:47321), so a test can
tell whether it ran; include_other_files and incbin instead read that file at compile time,
and a test puts a secret there that must show nowhere. None of this needs a GPU; on a GPU the same tests also prove that the
honest submission still runs in the sandbox.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from grader import exercises, machine, paths, pyenv
from grader.jit import build, symbols
from grader.check import sandbox
from conftest import check
from grader.check.supervise import isolate
from grader.classroom import grade_class
from grader.maintain import corpus

# Run everywhere; `-m gpu` (the GPU verification's self-test) selects them too, so that the
# corpus is proven on the GPU machine, with its sandbox, in the same run as the mutants.
# One xdist worker for them all where the self-test runs tests side by side: they share canary files
# and a port.
pytestmark = [pytest.mark.gpu, pytest.mark.xdist_group("hostile")]

SUBMISSIONS = corpus.hostile_submissions()
EXERCISE = "day02.silu_and_mul"
CANARY = "/tmp/course-hostile-canary-"
PORT = 47321
# The rows the link checks add: each hostile file must be caught by one of them (the source
# patterns miss every one of these spellings; that is the point of the corpus).
LINK_ROWS = ("no code at load time", "no system calls", "links only to allowed functions")
COMPILE_ROW = "compiles (nvcc, sm_90)"  # where a compile that read other files is refused
READS = ("include_other_files", "incbin")  # the ones whose canary is read, not written
SECRET = "alice,97,SECRET-GRADEBOOK-LINE"


def written(name: str) -> Path:
    """The submission's source, written to one stable place (its build is cached there)."""
    return SUBMISSIONS[name].write(corpus.written_dir() / "hostile")


def test_the_corpus_applies_to_the_current_solution_and_names_its_canary():
    assert len(SUBMISSIONS) >= 15 and all(m.exercise == EXERCISE for m in SUBMISSIONS.values())
    for name, m in SUBMISSIONS.items():
        text = m.source()
        assert text.startswith("// HOSTILE "), name
        assert f"{CANARY}{name}" in text or name == "network", name  # network: a listener instead


class Listener:
    """A TCP listener on 127.0.0.1:PORT that counts the connections it gets."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind(("127.0.0.1", PORT))
            self.sock.listen(8)
            self.sock.setblocking(False)
            self.bound = True
        except OSError:
            self.bound = False

    def connections(self) -> int:
        n = 0
        while self.bound:
            try:
                conn, _ = self.sock.accept()
                conn.close()
                n += 1
            except BlockingIOError:
                return n
        return n

    def close(self):
        self.sock.close()


@pytest.fixture()
def listener():
    lst = Listener()
    yield lst
    lst.close()


def _clear_canaries():
    for name in SUBMISSIONS:
        if name not in READS:
            Path(CANARY + name).unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def secret():
    """The files include_other_files and incbin read at compile time (left in place: tests run in parallel)."""
    for name in READS:
        Path(CANARY + name).write_text(SECRET + "\n")


def _untouched_canaries():
    return [name for name in SUBMISSIONS if name not in READS and os.path.exists(CANARY + name)] == []


@pytest.mark.parametrize("name", sorted(SUBMISSIONS))
def test_a_hostile_submission_is_refused_before_it_runs(name, listener):
    if name not in READS:
        Path(CANARY + name).unlink(missing_ok=True)
    result = check(EXERCISE, source=written(name), perf=False, seeds=1, quiet=True)
    assert not result.ok, str(result)
    first = result.failures[0]
    assert first.group in ("source", "build") and first.name in LINK_ROWS + (COMPILE_ROW,), str(result)
    assert "SECRET-GRADEBOOK" not in json.dumps(result.as_dict())
    reason = result.first_failure()
    for word in SUBMISSIONS[name].expect:
        assert word in reason or any(word in f.detail for f in result.failures), (word, str(result))
    assert not any(i.group in ("correctness", "work", "performance") and i.status == "pass" for i in result.items)
    assert name in READS or not os.path.exists(CANARY + name), "the attack ran"
    assert listener.connections() == 0


# The course's own host code passes the link checks: the solutions in tests/test_kernels.py's
# static checks, the kernel versions (and their exemptions) in its version test.


@pytest.mark.parametrize("symbol, kind", [
    ("cudaMemcpyAsync", "copies"), ("cudaMemsetAsync", "copies"), ("cudaMalloc", "allocates"),
    ("cudaMallocAsync", "allocates"), ("cudaStreamCreateWithFlags", "streams"), ("cudaGraphLaunch", "graphs"),
    ("cudaEventRecord", "events"), ("cuLaunchKernel", "driver"), ("cublasSgemm_v2", "library"),
    ("fopen64", "files"), ("open", "files"), ("socket", "network"), ("fork", "processes"),
    ("getenv", "environment"), ("dlopen", "loads code"), ("syscall", "system call"), ("pthread_create", "threads"),
    ("_ZN2at6Tensor5emptyEv", "PyTorch"), ("__cxa_atexit", "exit"), ("strcpy", "not a function"),
])
def test_the_allow_list_refuses_what_a_launcher_does_not_need(symbol, kind):
    assert kind in symbols.kind_of(symbol)


@pytest.mark.parametrize("symbol", ["cudaLaunchKernel", "cudaGetLastError", "cudaFuncSetAttribute",
                                    "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaGetDeviceProperties_v2",
                                    "__cudaPushCallConfiguration", "__cudaRegisterFunction", "expf", "sqrt",
                                    "memcpy", "__stack_chk_fail", "printf", "_Znwm", "cudaStreamIsCapturing",
                                    "_ZSt21ios_base_library_initv"])
def test_the_allow_list_keeps_what_a_launcher_needs(symbol):
    assert symbols.kind_of(symbol) is None


CONDITIONAL = r"""
#include "course/common.cuh"
#define HEADER(path) <path>
#ifdef TORCH_EXTENSION_NAME  // defined by the extension's nvcc command only, not by the checked compile
#include HEADER(FILE)
asm(".pushsection .rodata\n" "." "inc" "bin \"SECRET\"\n" ".byte 0\n" ".popsection");
#endif
__global__ void conditional_kernel(float* x) { x[0] = 1.0f; }
COURSE_EXPORT cudaError_t conditional(float* x, cudaStream_t stream) {
  conditional_kernel<<<1, 1, 0, stream>>>(x);
  return cudaGetLastError();
}
"""


def test_grading_links_the_checked_object_so_a_branch_for_another_compile_never_runs(tmp_path):
    """Grading compiles a submission once: the extension is linked from the object whose SASS and
    symbols were checked (jit.build_checked). A branch that only another nvcc command would compile
    (#ifdef TORCH_EXTENSION_NAME, defined by torch's extension build) is not in what runs."""
    from grader.jit import build_checked, compile_cubin

    secret = Path(CANARY + "incbin")
    secret.write_text(SECRET)
    header = tmp_path / "stolen.h"
    header.write_text("static int stolen_solution = 1;\n")
    src = tmp_path / "conditional.cu"
    src.write_text(CONDITIONAL.replace("FILE", str(header)).replace("SECRET", str(secret)))
    report = compile_cubin(src, host_object=True)
    assert symbols.inspect(report.host_object).ok
    built = build_checked(src, report.host_object, "hostile_conditional")
    assert (built.directory / "kernels.o").read_bytes() == Path(report.host_object).read_bytes()
    assert built.library.exists() and SECRET.encode() not in built.library.read_bytes()
    assert build_checked(src, report.host_object, "hostile_conditional").cached


def test_what_the_extension_build_read_is_checked_too(tmp_path):
    """A notebook's build (jit.build: torch's extension build compiles the .cu itself, with its own
    macros and include folders): what it read is listed, and a failing build does not quote a file
    that is not the submission's."""
    from grader.jit import BuildError
    from grader.jit.extension import foreign_reads

    secret = Path(CANARY + "incbin")
    header = tmp_path / "stolen.h"
    header.write_text("static int stolen_solution = 1;\n")
    src = tmp_path / "conditional.cu"
    src.write_text(CONDITIONAL.replace("FILE", str(header)).replace("SECRET", str(secret)))
    assert symbols.inspect(__import__("grader").jit.compile_cubin(src, host_object=True).host_object).ok
    built = build([src], name="hostile_conditional", quiet=True, load=False)
    assert sorted(foreign_reads(built.directory, str(src))) == sorted([str(header), str(secret)])
    broken = tmp_path / "conditional_broken.cu"
    broken.write_text(CONDITIONAL.replace("FILE", str(secret)).replace("SECRET", str(secret)))
    with pytest.raises(BuildError) as err:
        build([broken], name="hostile_conditional", quiet=True, load=False)
    assert "SECRET-GRADEBOOK" not in err.value.summary() and "not shown" in err.value.summary()
    clean = build([paths.SOLUTIONS / "day01" / "scale_add.cu"], name="clean_reads", quiet=True, load=False)
    assert foreign_reads(clean.directory, "solutions/day01/scale_add.cu") == []


def test_building_does_not_load_the_module():
    """build(load=False), as grading builds, runs none of the module's code (here: a constructor
    that the link checks would refuse; built directly to prove the build alone runs nothing)."""
    source = written("load_time_constructor")
    Path(CANARY + "load_time_constructor").unlink(missing_ok=True)
    built = build([source], name="hostile_build_only", quiet=True, load=False)
    assert built.module is None and built.library.exists()
    assert not os.path.exists(CANARY + "load_time_constructor")
    again = build([source], name="hostile_build_only", quiet=True, load=False)
    assert again.cached and again.module is None
    assert not os.path.exists(CANARY + "load_time_constructor")


# ------------------------------------------------------------------ class grading
def test_class_grading_refuses_every_hostile_submission_and_keeps_the_gradebook(tmp_path, listener):
    subs, out = tmp_path / "subs", tmp_path / "out"
    (subs / "honest" / "day02").mkdir(parents=True)
    shutil.copy(paths.SOLUTIONS / "day02" / "silu_and_mul.cu", subs / "honest" / "day02" / "silu_and_mul.cu")
    assert grade_class(subs, out, only=[EXERCISE], jobs=4, echo=lambda s: None) == 0
    honest = out / "results" / "honest" / f"{EXERCISE}.json"
    before = honest.read_bytes()
    honest_row = next(r for r in json.loads((out / "gradebook.json").read_text()) if r["student"] == "honest")
    assert honest_row["score"] > 0

    for name in SUBMISSIONS:
        (subs / name / "day02").mkdir(parents=True)
        shutil.copy(written(name), subs / name / "day02" / "silu_and_mul.cu")
    _clear_canaries()
    outside_before = sorted(p for p in tmp_path.rglob("*") if out not in p.parents and p != out)
    lines = []
    assert grade_class(subs, out, only=[EXERCISE], jobs=4, echo=lines.append) == 0
    assert f"{len(SUBMISSIONS)} to grade" in lines[0]
    # where the submissions' code runs, said once, before any submission's row (with a GPU: once the
    # sandbox's GPU check, run beside the start, has ended; without, at once)
    said = [i for i, line in enumerate(lines) if line.startswith("sandbox: ")]
    assert len(said) == 1 and ("NOT available" in lines[said[0]]) == (sandbox.available() is not None)
    assert said[0] < min(i for i, line in enumerate(lines) if line.split()[:1] and line.split()[0] in SUBMISSIONS)
    assert said[0] == 1 or machine.has_gpu()
    rows = {r["student"]: r for r in json.loads((out / "gradebook.json").read_text())}
    for name, m in SUBMISSIONS.items():
        row = rows[name]
        assert row["score"] == 0 and row["verdict"] == "fail", row
        assert any(name in row["failure"] for name in LINK_ROWS + (COMPILE_ROW,)), row
        assert m.expect[0] in row["failure"] or m.expect[0] in json.dumps(
            json.loads((out / "results" / name / f"{EXERCISE}.json").read_text())["items"]), row
    assert honest.read_bytes() == before, "another student's results changed"
    assert rows["honest"] == honest_row
    assert _untouched_canaries() and listener.connections() == 0
    for f in out.rglob("*"):  # the secret a compile could have quoted shows nowhere
        assert not f.is_file() or "SECRET-GRADEBOOK" not in f.read_text(errors="replace"), f
    outside_after = sorted(p for p in tmp_path.rglob("*") if out not in p.parents and p != out)
    assert outside_after == outside_before, "something was written outside the output folder"


# A Python module and a template are code too: a module that patches the judge's comparison, one that
# reaches open() through __builtins__, a template that climbs to Python's internals, one that builds a
# value of 1.5 GB. (python line, or template line) -> what the row says.
HOSTILE_PYTHON = {
    "patched_judge": ("import torch\ntorch.testing.assert_close = lambda *a, **k: None", "assigns to torch.testing.assert_close"),
    "builtins_open": (f"__builtins__['open']('{CANARY}python', 'w')", "uses __builtins__"),
}
HOSTILE_TEMPLATES = {
    "python_internals": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "SecurityError"),
    "huge_value": ("{% set s = 'x' * 1500000000 %}", "needed more than"),
}


def test_class_grading_of_hostile_python_and_templates_keeps_the_gradebook_honest(tmp_path):
    """A class run (in the sandbox where it works) over Day 14's module and Day 13's template: each hostile
    submission gets 0 points for the reason it deserves, the honest student's rows are as the solution's,
    and nothing is written outside the output folder."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    decoder = (paths.SOLUTIONS / "day14" / "decoder.py").read_text()
    template = (paths.SOLUTIONS / "day13" / "act_and_mul_template.cu.j2").read_text()
    include = '#include "course/vec.cuh"\n'
    assert include in template

    def put(student, day, name, text):
        path = subs / student / day / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    put("honest", "day14", "decoder.py", decoder)
    put("honest", "day13", "act_and_mul_template.cu.j2", template)
    for dep in exercises.get("day14.decoder").depends_on:  # the kernels the module builds on: the student's own
        dep_ex = exercises.get(dep)
        put("honest", dep_ex.day, dep_ex.stub_path.name, dep_ex.solution_path.read_text())
    for name, (line, _) in HOSTILE_PYTHON.items():
        put(name, "day14", "decoder.py", decoder + "\n" + line + "\n")
    for name, (line, _) in HOSTILE_TEMPLATES.items():
        put(name, "day13", "act_and_mul_template.cu.j2", template.replace(include, f"{include}// {line}\n", 1))
    Path(f"{CANARY}python").unlink(missing_ok=True)
    before = sorted(p for p in tmp_path.rglob("*") if out not in p.parents and p != out)
    exercises_ = ["day13.act_and_mul_template", "day14.decoder"]
    assert grade_class(subs, out, only=exercises_, jobs=2, echo=lambda s: None) == 0
    rows = {(r["student"], r["exercise"]): r for r in json.loads((out / "gradebook.json").read_text())}
    for name, (_, says) in {**HOSTILE_PYTHON, **HOSTILE_TEMPLATES}.items():
        ex_id = "day14.decoder" if name in HOSTILE_PYTHON else "day13.act_and_mul_template"
        row = rows[(name, ex_id)]
        assert row["score"] == 0 and row["verdict"] == "fail" and says in row["failure"], row
    for ex_id in exercises_:
        assert rows[("honest", ex_id)]["score"] > 0 and rows[("honest", ex_id)]["verdict"] != "fail", rows[("honest", ex_id)]
    assert not Path(f"{CANARY}python").exists()
    after = sorted(p for p in tmp_path.rglob("*") if out not in p.parents and p != out)
    assert after == before, "something was written outside the output folder"


# ------------------------------------------------------------------ the sandbox itself
needs_sandbox = pytest.mark.skipif(sandbox.available() is not None,
                                   reason=f"no sandbox here: {sandbox.available()}")

SNIPPET = textwrap.dedent("""
    import json, os, socket, sys
    outside, hidden, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    report = {}
    def attempt(name, fn):
        try:
            fn()
            report[name] = "allowed"
        except OSError as e:
            report[name] = f"blocked: {e.strerror}"
    def write(path):
        with open(path, "w") as f:
            f.write("sandboxed code was here")
    attempt("write scratch", lambda: write("in-scratch.txt"))
    attempt("write outside", lambda: write(outside))
    attempt("write course", lambda: write(os.path.join(sys.argv[4], "sandbox-was-here.txt")))
    attempt("read hidden", lambda: open(os.path.join(hidden, "secret.txt")).read())
    report["hidden listing"] = sorted(os.listdir(hidden)) if os.path.isdir(hidden) else None
    attempt("write hidden", lambda: write(os.path.join(hidden, "planted.txt")))
    def connect():
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        s.sendall(b"hello")
    attempt("connect", connect)
    report["cwd"], report["home"] = os.getcwd(), os.environ.get("HOME")
    report["secret env"] = os.environ.get("GRADER_SECRET_SEED")
    print(json.dumps(report))
""")


@pytest.fixture()
def places():
    """A scratch folder, a hidden folder with a secret and a file that must not change: outside
    /tmp (the sandbox's /tmp is a fresh one anyway), in a folder of the user's home."""
    base = Path(tempfile.mkdtemp(prefix=".course-sandbox-test-", dir=Path.home()))
    scratch, hidden = base / "scratch", base / "hidden"
    scratch.mkdir()
    hidden.mkdir()
    (hidden / "secret.txt").write_text("the gradebook")
    outside = base / "outside.txt"
    outside.write_text("unchanged")
    yield scratch, hidden, outside
    shutil.rmtree(base, ignore_errors=True)


@needs_sandbox
def test_sandbox_blocks_writes_hidden_files_and_the_network(places, listener):
    scratch, hidden, outside = places
    argv = sandbox.wrap([sys.executable, "-c", SNIPPET, str(outside), str(hidden), str(PORT), str(paths.ROOT)],
                        scratch, hidden=[hidden])
    env = sandbox.environment(dict(os.environ, GRADER_SECRET_SEED="1234"))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["write scratch"] == "allowed" and (scratch / "in-scratch.txt").exists()
    assert report["write outside"].startswith("blocked") and outside.read_text() == "unchanged"
    assert report["write course"].startswith("blocked") and not (paths.ROOT / "sandbox-was-here.txt").exists()
    assert report["read hidden"].startswith("blocked") and report["hidden listing"] == []
    assert report["write hidden"].startswith("blocked") and sorted(p.name for p in hidden.iterdir()) == ["secret.txt"]
    assert report["connect"].startswith("blocked") and listener.connections() == 0
    assert report["cwd"] == str(scratch.resolve()) and report["home"] == str(scratch.resolve())
    assert report["secret env"] is None


PROBE = r"""
#include "course/common.cuh"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <dirent.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>

// Built directly (not through the checks, which refuse it): a load-time constructor that tries
// what the hostile corpus tries, and notes each outcome in probe.log in its working directory.
static void note(FILE* log, const char* what, bool done) { fprintf(log, "%s %s\n", what, done ? "DONE" : "failed"); }

__attribute__((constructor)) static void probe() {
  FILE* log = fopen("probe.log", "w");
  if (!log) return;
  const char* outside = getenv("COURSE_PROBE_OUTSIDE");   // a file outside the scratch folder
  const char* hidden = getenv("COURSE_PROBE_HIDDEN");     // a hidden folder (a gradebook's)
  if (FILE* f = outside ? fopen(outside, "w") : nullptr) { fputs("overwritten", f); fclose(f); note(log, "write-outside", true); }
  else note(log, "write-outside", false);
  char path[4096];
  snprintf(path, sizeof path, "%s/secret.txt", hidden ? hidden : "/nonexistent");
  FILE* s = fopen(path, "r");
  note(log, "read-hidden", s != nullptr);
  if (s) fclose(s);
  snprintf(path, sizeof path, "%s/planted.txt", hidden ? hidden : "/nonexistent");
  FILE* p = fopen(path, "w");
  note(log, "write-hidden", p != nullptr);
  if (p) fclose(p);
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to;
  memset(&to, 0, sizeof to);
  to.sin_family = AF_INET;
  to.sin_port = htons(atoi(getenv("COURSE_PROBE_PORT") ? getenv("COURSE_PROBE_PORT") : "0"));
  to.sin_addr.s_addr = htonl(0x7f000001);
  note(log, "connect", sock >= 0 && connect(sock, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  char sh[] = "/bin/sh", c[] = "-c", cmd[8192];
  snprintf(cmd, sizeof cmd, "echo spawned > '%s'", outside ? outside : "/nonexistent");
  char* argv[] = {sh, c, cmd, nullptr};
  pid_t pid;
  int status = 0;
  bool spawned = posix_spawn(&pid, sh, nullptr, nullptr, argv, nullptr) == 0 && waitpid(pid, &status, 0) == pid;
  note(log, "spawn-writes-outside", spawned && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  note(log, "ran", true);
  fclose(log);
}

__global__ void probe_kernel(float* x) { x[0] = 1.0f; }
COURSE_EXPORT cudaError_t probe_call(float* x, cudaStream_t stream) {
  probe_kernel<<<1, 1, 0, stream>>>(x);
  return cudaGetLastError();
}
"""


@needs_sandbox
def test_sandbox_contains_hostile_code_the_worker_loads(tmp_path, places, listener):
    """The grading process's own setup (supervise.isolate, as run_worker uses it) around a module
    whose constructor attacks: it runs, and every attempt is blocked or lands nowhere."""
    scratch, hidden, outside = places
    src = tmp_path / "probe.cu"
    src.write_text(PROBE)
    built = build([src], name="hostile_probe", quiet=True, load=False)
    loader = f"from grader.jit import load_built; load_built({str(built.directory)!r}, {built.name!r})"
    env = pyenv.subprocess_env(COURSE_PROBE_OUTSIDE=str(outside), COURSE_PROBE_HIDDEN=str(hidden),
                                   COURSE_PROBE_PORT=str(PORT))
    argv, env = isolate([sys.executable, "-c", loader], env, str(scratch), readable=[str(built.directory)],
                        hide=[str(hidden)])
    assert argv[0] == sandbox.bwrap_path()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=scratch)
    log = dict(line.split() for line in (scratch / "probe.log").read_text().splitlines())
    assert log["ran"] == "DONE", (proc.stdout, proc.stderr)
    assert log["write-outside"] == "failed" and log["write-hidden"] == "failed" and log["read-hidden"] == "failed"
    assert log["connect"] == "failed" and listener.connections() == 0
    assert log["spawn-writes-outside"] == "failed"  # a shell starts, but cannot write outside either
    assert outside.read_text() == "unchanged" and sorted(p.name for p in hidden.iterdir()) == ["secret.txt"]


def test_the_sandbox_says_why_it_is_not_available(monkeypatch):
    monkeypatch.setenv("COURSE_SANDBOX", "off")
    sandbox._probe.cache_clear()
    try:
        assert "COURSE_SANDBOX=off" in sandbox.available()
        assert sandbox.banner().startswith("sandbox: NOT available here (turned off by COURSE_SANDBOX=off)")
        argv, env = isolate(["true"], {"A": "1"}, "/tmp")
        assert argv == ["true"] and env == {"A": "1"}
    finally:
        monkeypatch.delenv("COURSE_SANDBOX")
        sandbox._probe.cache_clear()


def test_the_sandbox_gpu_probe_accepts_a_right_result():
    """check_gpu's probe, run on the CPU: it must print its OK mark for a right result (it once
    expected 48.0 for a sum that is 56.0, and every class run on a GPU went without the sandbox)."""
    import subprocess
    import sys

    from grader.check.sandbox import GPU_PROBE, GPU_PROBE_OK

    out = subprocess.run([sys.executable, "-c", f"DEVICE = 'cpu'; {GPU_PROBE}"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == GPU_PROBE_OK, (out.stdout, out.stderr)
