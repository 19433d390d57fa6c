"""Builds: compile errors come back as the first error with file and line; SASS is read without a GPU."""
import pytest

from grader import jit, pyenv
from grader.jit import BuildError, Source, compile_cubin, parse_first_error

GOOD = """#include "course/vec.cuh"
__global__ void twice_kernel(float* __restrict__ x, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}
COURSE_EXPORT cudaError_t twice(float* x, int64_t n, cudaStream_t stream) {
  twice_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, n);
  return cudaGetLastError();
}
"""


def test_compile_only_reports_resources_and_sass():
    report = compile_cubin(Source("tests/twice.cu", GOOD))
    k = report.kernel("twice_kernel")
    assert k.registers > 0 and k.spill_stores == 0 and k.stack_bytes == 0
    assert k.has_opcode("LDG") and k.has_opcode("STG") and k.has_opcode("EXIT")
    assert not k.has_opcode("LDG.E.128")
    assert "twice_kernel" in report.table()


def test_a_cache_hint_does_not_hide_a_16_byte_load_and_a_narrower_load_is_not_one(tmp_path):
    src = tmp_path / "loads.cu"
    src.write_text(
        "__global__ void streaming(float4* o, const float4* i) { o[threadIdx.x] = __ldcs(i + threadIdx.x); }\n"
        "__global__ void last_use(float4* o, const float4* i) { o[threadIdx.x] = __ldlu(i + threadIdx.x); }\n"
        "__global__ void no_allocate(uint4* o, const uint4* i) { uint4 v;\n"
        "  asm volatile(\"ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\"\n"
        "               : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"l\"(i + threadIdx.x));\n"
        "  o[threadIdx.x] = v; }\n"
        "__global__ void pairs(float2* o, const float2* i) { o[threadIdx.x] = __ldcs(i + threadIdx.x); }\n")
    kernels = {k.name: k for k in compile_cubin(src).kernels}
    for name in ("streaming", "last_use", "no_allocate"):
        assert kernels[name].has_opcode("LDG.E.128"), (name, kernels[name].opcodes())
    assert not kernels["pairs"].has_opcode("LDG.E.128") and kernels["pairs"].has_opcode("LDG.E.64")


def test_compile_error_gives_the_first_error_with_file_and_line():
    broken = GOOD.replace("x[i] *= 2.0f;", "x[i] *= 2.0f\n  undeclared_thing = 3;")
    with pytest.raises(BuildError) as err:
        compile_cubin(Source("kernels/day01/broken.cu", broken))
    e = err.value
    assert e.file == "kernels/day01/broken.cu" and e.line == 5
    assert "expected a \";\"" in e.first_error or "expected" in e.first_error
    assert ">    5 |" in e.excerpt
    assert len(e.summary().splitlines()) < 10  # not a wall of output


def test_a_compile_error_in_a_file_named_relative_to_the_course_shows_its_message(tmp_path, monkeypatch):
    """`grader check X --source kernels/dayNN/x.cu`: the file exists under the course, named relatively;
    its own error is shown, not "the compile failed in a file that is not yours"."""
    from grader import paths

    monkeypatch.setattr(paths, "ROOT", tmp_path)
    (tmp_path / "mine").mkdir()
    broken = GOOD.replace("x[i] *= 2.0f;", "x[i] *= 2.0f + undeclared_thing;")
    (tmp_path / "mine" / "broken.cu").write_text(broken)
    with pytest.raises(BuildError) as err:
        compile_cubin(Source("mine/broken.cu", broken))
    assert "undeclared_thing" in err.value.first_error and err.value.line == 4, err.value.summary()


def test_parse_first_error_understands_gcc_and_nvcc():
    src = [Source("a.cu", "l1\nl2\nl3\n")]
    nvcc = "ninja: build stopped\na.cu(2): error: identifier \"foo\" is undefined\na.cu(3): error: later\n"
    e = parse_first_error(nvcc, src, "a")
    assert (e.file, e.line, e.first_error) == ("a.cu", 2, 'identifier "foo" is undefined')
    gcc = "In file included from x\nmain.cpp:7:12: error: 'bar' was not declared in this scope\n"
    e = parse_first_error(gcc, src, "a")
    assert (e.file, e.line) == ("main.cpp", 7) and "bar" in e.first_error
    e = parse_first_error("/usr/bin/ld: undefined reference to `f'\n", src, "a")
    assert "undefined reference" in e.first_error


def test_non_utf8_source_is_a_clear_error(tmp_path):
    p = tmp_path / "k.cu"
    p.write_bytes(b"\xff\xfe__global__")
    with pytest.raises(BuildError, match="not UTF-8"):
        Source.read(p)


def test_module_name_follows_content():
    a = jit.content_hash([Source("a.cu", GOOD)], [])
    assert a == jit.content_hash([Source("a.cu", GOOD)], [])
    assert a != jit.content_hash([Source("a.cu", GOOD + "\n// edit")], [])
    assert a != jit.content_hash([Source("a.cu", GOOD)], ["-O0"])


def test_extension_builds_without_a_gpu_and_reloads_from_cache():
    """The real load_inline build (nvcc + g++), then the cached load."""
    src = Source("tests/twice_ext.cu", GOOD)
    first = jit.build([src], name="test_twice", quiet=True)
    assert hasattr(first.module, "twice") and first.kernels == ["twice_kernel"]
    assert "main.cpp" in {p.name for p in first.directory.iterdir()}
    jit.extension._loaded.clear()
    again = jit.build([src], name="test_twice", quiet=True)
    assert again.cached and again.name == first.name and again.seconds < 5


def test_the_bindings_prelude_is_precompiled_with_flags_that_gcc_takes():
    """A binding includes only its prelude of torch's headers (exports.BINDING_PRELUDE), which the first
    build precompiles with the flags load_inline compiles bindings with: g++ takes it for a binding's
    compile (-H marks a precompiled header it used with '!', -Winvalid-pch says why it would not), and
    the binding works: a CPU tensor is refused with the binding's own message (torch's tensor caster
    and TORCH_CHECK, from the prelude)."""
    import subprocess

    import torch

    built = jit.build([Source("tests/twice_ext.cu", GOOD)], name="test_twice", quiet=True)
    with pytest.raises(RuntimeError, match="'x' must be a CUDA tensor, got one on cpu"):
        built.module.twice(torch.zeros(4), 4)
    if not pyenv.load_inline_features()["no_implicit_headers"]:
        pytest.skip("this torch's load_inline puts torch/extension.h first: its own precompiled header applies")
    gch = jit.precompiled_header()
    assert gch.name == "course_binding_prelude.h.gch" and gch.exists()
    cxx, cflags = jit.extension.compile_command(built.binding_directory)
    proc = subprocess.run([*cxx, "-H", "-Winvalid-pch", "-fsyntax-only", *cflags, str(built.binding_directory / "main.cpp")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"! {gch}" in proc.stderr, proc.stderr[:2000]


def test_an_edit_links_the_cached_binding_and_loads_as_a_module_of_its_own():
    """An edited kernel's build reuses the binding's object (compiled once per set of prototypes);
    in a process that imported the first build, the second is a module of its own (Python would
    hand back the first for the same name), and load_built refuses to mix them up."""
    first = jit.build([Source("tests/binding_reuse.cu", GOOD)], name="test_binding_reuse", quiet=True, load=False)
    edited = jit.build([Source("tests/binding_reuse.cu", GOOD + "\n// edit\n")], name="test_binding_reuse",
                         quiet=True, load=False)
    assert first.library.name == edited.library.name and first.directory != edited.directory
    assert (first.binding_directory / "main.o").exists() and not (edited.directory / "main.cpp").read_text().strip()
    one = jit.build([Source("tests/binding_reuse.cu", GOOD)], name="test_binding_reuse", quiet=True)
    two = jit.build([Source("tests/binding_reuse.cu", GOOD + "\n// edit\n")], name="test_binding_reuse", quiet=True)
    assert one.module is not two.module and one.module.__file__ != two.module.__file__
    with pytest.raises(ImportError, match="same name"):
        jit.load_built(edited.directory, edited.name)


def test_failed_build_leaves_nothing_behind():
    src = Source("tests/bad_ext.cu", GOOD.replace("return cudaGetLastError();", "return nope;"))
    with pytest.raises(BuildError) as err:
        jit.build([src], name="test_bad", quiet=True)
    assert err.value.file == "tests/bad_ext.cu" and err.value.line == 8
    leftovers = [p for p in (pyenv.cache_dir() / "ext").glob("test_bad_*")]
    assert leftovers == []


def test_a_build_waits_while_another_process_writes_the_precompiled_header(tmp_path, monkeypatch):
    """While one build holds the header's lock exclusively (it is writing extension.h.gch), another
    build with use_pch waits for it, even once the file exists (half-written)."""
    import fcntl
    import threading
    import time

    from grader.jit.extension import _pch_lock

    monkeypatch.setattr(pyenv, "cache_dir", lambda: tmp_path)
    (tmp_path / "extension.h.gch").write_bytes(b"half")
    writer = open(tmp_path / "pch.lock", "w")
    fcntl.flock(writer, fcntl.LOCK_EX)
    entered = []

    def other_build():
        with _pch_lock(tmp_path, True):
            entered.append(time.monotonic())

    t = threading.Thread(target=other_build)
    t.start()
    time.sleep(0.5)
    assert not entered, "a build read the header while it was being written"
    released = time.monotonic()
    writer.close()
    t.join(5)
    assert entered and entered[0] >= released
    with _pch_lock(tmp_path, False) as lock:  # no precompiled header: no lock at all
        assert lock.f is None


def test_a_second_builder_of_the_same_module_waits_then_loads_it():
    """Two processes building one module: the second waits on the module's lock, then loads what
    the first built (here the first is this test holding the lock; the module is already built)."""
    import fcntl
    import threading
    import time

    src = Source("tests/twice_ext.cu", GOOD)
    first = jit.build([src], name="test_twice", quiet=True)
    jit.extension._loaded.clear()
    holder = open(first.directory.parent / "locks" / f"{first.name}.lock", "w")
    fcntl.flock(holder, fcntl.LOCK_EX)
    got = []
    t = threading.Thread(target=lambda: got.append(jit.build([src], name="test_twice", quiet=True)))
    t.start()
    time.sleep(0.5)
    assert not got, "a second builder went on while the module's lock was held"
    holder.close()
    t.join(30)
    assert got and got[0].cached and got[0].name == first.name


def test_curand_header_links_left_by_another_environment_are_replaced(tmp_path, monkeypatch):
    """The curand*.h links in the build cache point into one .venv; made again elsewhere (another
    clone, a fresh `make setup`), the old links dangle and must not hide the headers."""
    from grader import toolkit

    if not toolkit.extra_include_dirs():
        pytest.skip("the CUDA toolkit here has curand_kernel.h itself: no links are made")
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "include-extra"
    folder.mkdir()
    (folder / "curand_kernel.h").symlink_to(tmp_path / "gone" / "curand_kernel.h")  # dangling
    toolkit.extra_include_dirs.cache_clear()
    try:
        assert toolkit.extra_include_dirs() == [str(folder)]
        assert (folder / "curand_kernel.h").exists()
        assert "curand" in (folder / "curand_kernel.h").read_text()
    finally:
        toolkit.extra_include_dirs.cache_clear()
