"""Right code the grader must accept: tests/correct/<exercise>/<name>.cu, each a correct submission
written as learners write it, not as the reference is (its first line, `// CORRECT ...`, says how:
plain __device__ helpers, a scalar kernel beside the vectorized one, `half` for `__half`, quoted
toolkit headers, assert and printing in the launcher, a debug printf in a kernel, a __constant__
table, a struct of arguments, lambdas). The mutants prove that wrong code is refused; these, that
the refusals are for harm, not for style.

Without a GPU every file must pass every check that needs none (source, entry points, build, SASS,
link check); on a GPU the whole check, speed included (the GPU self-test runs these with each day's
mutants: self_test.py's _self_test_pytest_args).
"""
import pytest

from conftest import check, gpu
from grader import exercises, machine
from grader.check import Result, link_checks, sass_checks, static_checks
from grader.maintain import corpus

CORRECT = corpus.correct_submissions()


def test_every_correct_submission_names_its_exercise_and_what_it_does_differently():
    ids = set(exercises.all_exercises())
    assert len(CORRECT) >= 20
    for key, c in CORRECT.items():
        assert c.exercise in ids, f"tests/correct/{c.exercise}: no such exercise"
        assert c.what and len(c.what) > 20, f"{key}: the first line must be `// CORRECT <what is different>`"
        assert c.source() != exercises.get(c.exercise).solution_path.read_text(), f"{key} is the reference itself"
    days = {c.exercise.split(".")[0] for c in CORRECT.values()}
    assert {f"day{d:02d}" for d in range(1, 8)} <= days


@pytest.mark.parametrize("key", sorted(CORRECT))
def test_a_correct_submission_passes_every_check_that_needs_no_gpu(key, monkeypatch):
    c = CORRECT[key]
    ex = exercises.get(c.exercise)
    if ex.learner_file == "python":  # its source checks and module checks, on the reference kernels
        monkeypatch.setenv("COURSE_USE_SOLUTIONS", "1")
        monkeypatch.setattr(machine, "start_gpu_probe", lambda: None)  # compile-only, on any machine
        monkeypatch.setattr(machine, "has_gpu", lambda: False)
        result = check(c.exercise, source=c.path, quiet=True)
        assert not result.failures and any(i.status == "pass" for i in result.items), \
            f"{key} ({c.what}) was refused:\n{result}"
        return
    src = ex.graded_source(c.path)
    result = Result(ex.id, str(c.path), "compile-only")
    ok = static_checks(ex, src, result)
    report = sass_checks(ex, src, result) if ok else None
    ok = ok and report is not None and link_checks(ex, src, result, report)
    if ok and ex.template_checks:  # a template exercise's own checks of the template (Day 13)
        ok = ex.template_checks(c.source(), result)
    assert ok and result.ok, f"{key} ({c.what}) was refused:\n{result}"
    assert all(op in [i.name for i in result.items] for op in ex.required_sass)


@gpu
@pytest.mark.parametrize("key", sorted(CORRECT))
def test_a_correct_submission_passes_on_the_gpu(key, monkeypatch):
    c = CORRECT[key]
    if exercises.get(c.exercise).learner_file == "python":  # a module graded on the reference kernels
        monkeypatch.setenv("COURSE_USE_SOLUTIONS", "1")
    result = check(c.exercise, source=c.path, quiet=True)
    assert result.ok, f"{key} ({c.what}) did not pass:\n{result}"


# What the relaxations above still refuse: each test pairs the accepted form with the harmful or
# really different one beside it, on Day 1's exercise.
SCALE_ADD = exercises.get("day01.scale_add")


def _static(text, tmp_path, name="scale_add.cu"):
    """static_checks of `text`, and the Result with its message."""
    from grader.jit import Source

    result = Result(SCALE_ADD.id, name, "compile-only")
    return static_checks(SCALE_ADD, Source(name, text), result), result


def _solution_with(old, new):
    text = SCALE_ADD.solution_path.read_text()
    assert text.count(old) == 1, old
    return text.replace(old, new)


ENTRY = "COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha,\n" \
        "                                    int64_t n, cudaStream_t stream) {"


@pytest.mark.parametrize("prototype", [
    "COURSE_EXPORT cudaError_t scale_add(float* o, float const* a, const float* b, float s, long n, CUstream_st* st) {",
    "COURSE_EXPORT cudaError_t scale_add(float* __restrict__ out, const float* const x, const float* y, const float alpha,"
    " std::int64_t n, struct CUstream_st* stream) {",
    "COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha, long int n,"
    " cudaStream_t stream) {",
    # a default argument, and a prototype declared before the definition
    "COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha, int64_t n,"
    " cudaStream_t stream = nullptr) {",
    "COURSE_EXPORT cudaError_t scale_add(float* out, const float* x, const float* y, float alpha, int64_t n,"
    " cudaStream_t stream);\n" + ENTRY,
])
def test_an_entry_point_may_spell_the_same_types_otherwise(prototype, tmp_path):
    ok, result = _static(_solution_with(ENTRY, prototype), tmp_path)
    assert ok, str(result)


@pytest.mark.parametrize("prototype, says", [
    ("(float* out, const float* x, const float* y, float alpha, int n, cudaStream_t stream) {",
     "parameter 5 (`n`) is int where the entry point has int64_t"),
    ("(float* out, const float* x, const float* y, float alpha, long long n, cudaStream_t stream) {",
     "not int64_t on Linux (int64_t is `long`): write int64_t"),
    ("(float* out, float* x, const float* y, float alpha, int64_t n, cudaStream_t stream) {",
     "parameter 2 (`x`) must point to const"),
    ("(const float* x, float* out, const float* y, float alpha, int64_t n, cudaStream_t stream) {",
     "in another order"),
    ("(float* out, const double* x, const float* y, float alpha, int64_t n, cudaStream_t stream) {",
     "parameter 2 (`x`) is a pointer to double where the entry point has a pointer to float"),
])
def test_an_entry_point_of_other_types_is_refused_with_what_to_change(prototype, says, tmp_path):
    ok, result = _static(_solution_with(ENTRY, "COURSE_EXPORT cudaError_t scale_add" + prototype), tmp_path)
    assert not ok and says in result.first_failure(), str(result)


def test_a_row_stride_keeps_a_name_the_binding_reads_as_one():
    from grader.jit import Source

    rope = exercises.get("day14.rope")
    text = rope.solution_path.read_text().replace("int64_t q_stride,", "int64_t q_pitch,")
    result = Result(rope.id, "rope.cu", "compile-only")
    assert not static_checks(rope, Source("rope.cu", text), result)
    assert "`q_pitch` is the entry point's `q_stride`: name it `...stride`" in result.first_failure()


@pytest.mark.parametrize("include, refused", [
    ('#include "cuda_fp16.h"', False), ('#include "cub/cub.cuh"', False), ('#include "cuda/barrier"', False),
    ('#include "curand_kernel.h"', False), ('#include "cstdio"', False),
    ('#include "torch/extension.h"', "includes torch"), ('#include "solution.cuh"', "neither a course header"),
    ('#include "../solutions/day01/scale_add.cu"', "includes a file by path"),
    ('#include "/etc/passwd"', "includes a file by path"),
])
def test_quoted_includes_of_toolkit_and_standard_headers_are_allowed(include, refused, tmp_path):
    ok, result = _static(_solution_with('#include "course/common.cuh"\n', f'#include "course/common.cuh"\n{include}\n'),
                         tmp_path)
    assert ok == (not refused), str(result)
    assert not refused or refused in result.first_failure()


def _linked(tmp_path, text, name):
    """The link check's verdict on `text` (compiled as the grader compiles it)."""
    from grader.jit import compile_cubin
    from grader.jit import symbols

    src = tmp_path / f"{name}.cu"
    src.write_text(text)
    return symbols.inspect(compile_cubin(src, host_object=True).host_object)


def test_compiler_written_exit_and_iostream_init_pass_and_a_learners_own_do_not(tmp_path):
    from grader.jit import symbols

    # nvcc's stub of a plain __device__ function calls exit(1); <iostream> constructs std::ios_base::Init
    good = _linked(tmp_path, _solution_with('namespace {\n', '#include <cassert>\n#include <cstdio>\n#include <iostream>\n'
                                            '__device__ float twice(float v) { return 2.0f * v; }\nnamespace {\n')
                   .replace("out[i] = alpha * x[i] + y[i];", "out[i] = alpha * x[i] + y[i] + 0.0f * twice(x[i]);")
                   .replace("if (n == 0) return cudaSuccess;",
                            'assert(n >= 0);\n  if (n == 0) { fprintf(stderr, "empty\\n"); return cudaSuccess; }'),
                   "good")
    assert good.ok, symbols.summary(good.calls + good.load_time)
    assert {"exit", "_ZNSt8ios_base4InitC1Ev", "__cxa_atexit", "__assert_fail"} <= set(good.undefined)
    # the same exit(1) called from the launcher, atexit of its own, a global's constructor beside <iostream>
    bad = _linked(tmp_path, _solution_with('namespace {\n', '#include <cstdlib>\n#include <iostream>\n#include <string>\n'
                                           'static std::string tag = std::to_string(7);\n'
                                           '__attribute__((noinline)) void die() { volatile int s = 1; exit(s); }\n'
                                           'namespace {\n')
                  .replace("if (n == 0) return cudaSuccess;", "if (n < 0) die();\n  if (n == 0) return cudaSuccess;"),
                  "bad")
    assert {"exit", "__cxa_atexit"} <= {f.what for f in bad.calls}, symbols.summary(bad.calls)
    assert any("global object" in f.what for f in bad.load_time)


def test_a_cached_static_local_and_formatted_messages_pass_and_a_static_global_does_not(tmp_path):
    from grader.jit import symbols

    # a function-local static with a destructor (constructed on the first call, its destructor registered
    # with __cxa_atexit under the guard), snprintf into a buffer, a std::string message
    good = _linked(tmp_path, _solution_with('namespace {\n', '#include <cstdio>\n#include <string>\n#include <vector>\n'
                                            'namespace {\n')
                   .replace("if (n == 0) return cudaSuccess;",
                            'static std::vector<int> seen(4, 0);\n  seen[0] += 1;\n'
                            '  if (n < 0) { char m[32]; snprintf(m, sizeof m, "n = %ld", (long)n);\n'
                            '    std::string s = std::string("scale_add: ") + m; fputs(s.c_str(), stderr);\n'
                            '    return cudaErrorInvalidValue; }\n  if (n == 0) return cudaSuccess;'),
                   "static_local")
    assert good.ok, symbols.summary(good.calls + good.load_time)
    assert {"__cxa_atexit", "__cxa_guard_acquire", "snprintf"} <= set(good.undefined)
    # the same vector at namespace scope: constructed when the module loads, before any check of what it does
    bad = _linked(tmp_path, _solution_with('namespace {\n', '#include <vector>\nstatic std::vector<int> seen(4, 0);\n'
                                           'namespace {\n')
                  .replace("if (n == 0) return cudaSuccess;", "seen[0] += 1;\n  if (n == 0) return cudaSuccess;"),
                  "static_global")
    assert not bad.ok and (any(f.what == "__cxa_atexit" for f in bad.calls) or bad.load_time)


def test_a_cache_filled_under_a_lock_or_once_passes_and_a_thread_of_its_own_does_not(tmp_path):
    from grader.jit import symbols

    good = _linked(tmp_path, _solution_with('namespace {\n', '#include <mutex>\nnamespace {\n')
                   .replace("if (n == 0) return cudaSuccess;",
                            "static std::mutex mu;\n  static std::once_flag once;\n  static int sms = 0;\n"
                            "  std::call_once(once, [] { int d = 0; cudaGetDevice(&d);\n"
                            "    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d); });\n"
                            "  { std::lock_guard<std::mutex> g(mu); }\n  thread_local int calls = 0;\n  ++calls;\n"
                            "  if (n == 0) return cudaSuccess;"),
                   "once")
    assert good.ok, symbols.summary(good.calls + good.load_time)
    bad = _linked(tmp_path, _solution_with('namespace {\n', '#include <thread>\nnamespace {\n')
                  .replace("if (n == 0) return cudaSuccess;",
                           "std::thread t([] {});\n  t.join();\n  if (n == 0) return cudaSuccess;"),
                  "thread")
    assert any(f.why == "starts threads" for f in bad.calls), symbols.summary(bad.calls)


def test_a_constant_table_may_be_uploaded_and_a_buffer_may_not_be_copied(tmp_path):
    table = _solution_with("namespace {\n", "__constant__ float c_scale[4];\nnamespace {\n").replace(
        "if (n == 0) return cudaSuccess;",
        "if (n == 0) return cudaSuccess;\n  const float s[4] = {alpha, 1, 1, 1};\n"
        "  cudaError_t e = cudaMemcpyToSymbolAsync(c_scale, s, sizeof(s), 0, cudaMemcpyHostToDevice, stream);\n"
        "  if (e != cudaSuccess) return e;")
    ok, result = _static(table, tmp_path)
    assert ok, str(result)
    assert _linked(tmp_path, table, "table").ok
    copy = _solution_with("if (n == 0) return cudaSuccess;",
                          "if (n == 0) return cudaSuccess;\n  cudaMemcpyAsync(out, y, n * 4, cudaMemcpyDeviceToDevice, stream);")
    ok, result = _static(copy, tmp_path)
    assert not ok and "cudaMemcpyToSymbolAsync" in result.first_failure()


def test_a_stack_frame_is_excused_only_when_it_holds_just_printfs_arguments(tmp_path):
    from grader.jit import compile_cubin

    src = tmp_path / "frames.cu"
    src.write_text('#include <cstdio>\n'
                   '__global__ void printing(float* p, int n) {\n'
                   '  if (n < 0) printf("n = %d\\n", n);\n'
                   '  p[threadIdx.x] *= 2.0f;\n}\n'
                   '__global__ void local_array(float* p, int n, int j) {\n'
                   '  float a[16];\n'
                   '  for (int i = 0; i < 16; ++i) a[i] = p[i * n];\n'
                   '  if (n < 0) printf("n = %d\\n", n);\n'
                   '  p[threadIdx.x] = a[j & 15];\n}\n')
    kernels = {k.name: k for k in compile_cubin(src).kernels}
    assert kernels["printing"].stack_bytes and kernels["printing"].printf_frame_only
    assert not kernels["printing"].local_memory
    assert kernels["local_array"].stack_bytes and kernels["local_array"].local_memory


def test_local_memory_is_reported_not_refused_and_the_register_limit_still_refuses(monkeypatch):
    """A spill or a run-time-indexed array where it costs nothing (a fallback kernel, a never-taken printf's
    register pressure, sincosf's slow path) is right code: the speed check measures what local memory costs."""
    from grader.jit import Source

    text = SCALE_ADD.solution_path.read_text() + (
        "\n__global__ void local_array(float* p, int n, int j) {\n"
        "  float a[64];\n  for (int i = 0; i < 64; ++i) a[i] = p[i * n];\n  a[j & 63] += 1.0f;\n"
        "  p[threadIdx.x] = a[(j * 7) & 63];\n}\n")
    result = Result(SCALE_ADD.id, "local.cu", "compile-only")
    assert sass_checks(SCALE_ADD, Source("local.cu", text), result)
    item = next(i for i in result.items if i.name == "registers")
    assert item.status == "pass" and "local memory (not refused) in local_array" in item.detail, item.detail
    monkeypatch.setattr(type(SCALE_ADD), "register_limit", lambda self, arch: 8)
    result = Result(SCALE_ADD.id, "local.cu", "compile-only")
    sass_checks(SCALE_ADD, Source("local.cu", text), result)
    item = next(i for i in result.items if i.name == "registers")
    assert item.status == "fail" and "over the limit of 8" in item.detail


def test_a_required_instruction_must_be_in_some_kernel_and_the_check_says_which(tmp_path):
    from grader.jit import Source

    silu = exercises.get("day02.silu_and_mul")
    path = CORRECT["day02.silu_and_mul/scalar_kernel_and_helpers"].path
    result = Result(silu.id, str(path), "compile-only")
    assert sass_checks(silu, silu.graded_source(path), result)
    item = next(i for i in result.items if i.name == "LDG.E.128")
    assert item.status == "pass" and "silu_and_mul_vec_kernel" in item.detail and "not in the other 2" in item.detail
    text = path.read_text().replace("if (aligned) {", "if (false) {")
    scalar_only = text[:text.index("// Rows of d elements")] + text[text.index("// Any d, any alignment"):]
    scalar_only = scalar_only.replace("    silu_and_mul_vec_kernel<T><<<rows, threads_for(d / VEC), 0, stream>>>(out, input, d);\n", "")
    result = Result(silu.id, "scalar.cu", "compile-only")
    sass_checks(silu, Source("scalar.cu", scalar_only), result)
    item = next(i for i in result.items if i.name == "LDG.E.128")
    assert item.status == "fail" and "no LDG.E.128 in any kernel" in item.detail
