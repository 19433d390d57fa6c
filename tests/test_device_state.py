"""check/device_state.py: a kernel file's own variables put back as loaded before every timed call, so
that nothing (a cache of results under an input fingerprint, a call counter) carries from one timed call
to the next; `__managed__` variables, which the host code could refill, are refused."""
from pathlib import Path

import pytest
import torch

import grader
from grader import jit
from grader.check.timed import TimedCalls, other_content
from grader.check.worker_config import DeviceVariable, WorkerConfig
from grader.spec import Tolerance, poison

from conftest import check, gpu

# Every kind of variable a file can keep: at namespace scope, static, in an anonymous or a named namespace,
# initialised, a template, __constant__, and a kernel's static local (which has no host-side name).
VARIABLES = r"""
#include "course/common.cuh"
__device__ float g_plain[1024];
static __device__ float g_static[512];
namespace { __device__ int g_anon[256]; }
namespace ns { __device__ double g_ns[128]; }
__device__ int g_init[4] = {1, 2, 3, 4};
__constant__ float c_table[64];
template <typename T> __device__ T g_tmpl[16];

namespace {
__global__ void bump_kernel(float* y, int64_t n) {
  static __device__ int s_calls;
  const int i = threadIdx.x;
  __syncthreads();
  const int calls = s_calls;
  __syncthreads();
  if (i == 0) s_calls = calls + 1;
  if (i < n) {
    g_plain[i] += 1.f; g_static[i] += 2.f; g_anon[i] += 3; ns::g_ns[i] += 4.0; g_tmpl<float>[i % 16] += 0.f;
    y[i] = g_plain[i] + g_static[i] + g_anon[i] + static_cast<float>(ns::g_ns[i]) + g_init[i % 4] + c_table[i % 64]
           + 1000.f * calls;
  }
  if (i < 4) g_init[i] += 10;
}
}  // namespace

COURSE_EXPORT cudaError_t bump(float* y, int64_t n, cudaStream_t stream) {
  bump_kernel<<<1, 128, 0, stream>>>(y, n);
  return cudaGetLastError();
}
"""


def _source(tmp_path) -> Path:
    p = tmp_path / "variables.cu"
    p.write_text(VARIABLES)
    return p


def test_every_kind_of_variable_is_read_from_the_cubin(tmp_path):
    report = jit.compile_cubin(_source(tmp_path), host_object=True)
    found = {DeviceVariable(*v).name: DeviceVariable(*v) for v in report.variables}
    names = " ".join(found)
    for part in ("g_plain", "g_static", "g_anon", "g_ns", "g_init", "c_table", "g_tmpl", "s_calls"):
        assert part in names, names
    by_part = {part: next(v for n, v in found.items() if part in n) for part in ("g_plain", "g_init", "c_table")}
    assert by_part["g_plain"].section == ".nv.global" and by_part["g_plain"].size == 4096
    assert by_part["g_init"].section == ".nv.global.init" and by_part["g_init"].size == 16
    assert by_part["c_table"].section.startswith(".nv.constant") and by_part["c_table"].size == 256
    # ... and they travel to the grading process as they are
    cfg = WorkerConfig(exercise="day01.scale_add", variables=list(found.values()))
    assert WorkerConfig.from_json(cfg.to_json()).variables == list(found.values())


def test_the_driver_places_each_variable_and_the_unnamed_ones_follow_their_section():
    """Named variables go where the driver says, wherever that is; a kernel's static local (no name the
    driver knows) only where its section's named variables agree on one base."""
    from grader.check.device_state import DeviceStateError, placed

    a, b = DeviceVariable("a", ".nv.global", 0, 4), DeviceVariable("b", ".nv.global", 8, 4)
    local = DeviceVariable("_ZZ4kernE1s", ".nv.global", 16, 4)
    c = DeviceVariable("c", ".nv.constant3", 0, 64)
    together = placed([a, b, local, c], {a: 1000, b: 1008, c: 5000})
    assert together == {a: 1000, b: 1008, local: 1016, c: 5000}
    scattered = {a: 1000, b: 7000, c: 5000}
    assert placed([a, b, c], scattered) == scattered  # all named: where the driver put them
    for variables, named in (([a, b, local, c], scattered), ([local, c], {c: 5000})):  # no one base, or none
        with pytest.raises(DeviceStateError, match="_ZZ4kernE1s"):
            placed(variables, named)


class _State:
    """A stand-in for DeviceState: the kernel's own memory, and how often it was put back."""

    def __init__(self):
        self.cache: dict = {}
        self.restored = 0

    def restore(self):
        self.cache.clear()
        self.restored += 1


def _replaying(state: _State, replays: list):
    """A right kernel that keeps each result under a fingerprint of its inputs and replays it when the same
    inputs come back (no work done)."""
    def kernel(inputs, outputs):
        key = (float(inputs["x"][0, 0]), float(inputs["w"][-1, -1]))
        if key in state.cache:
            replays.append(key)
            outputs["y"].copy_(state.cache[key])
            return
        outputs["y"].copy_(inputs["x"] * inputs["w"])
        state.cache[key] = outputs["y"].clone()
    return kernel


class _Ex:
    inplace = ()
    call_varies = ()

    def __init__(self, kernel):
        self.kernel = kernel

    def call(self, mod, p, inputs, outputs):
        self.kernel(inputs, outputs)


def _timed(state, calls=10):
    g = torch.Generator().manual_seed(3)
    inputs = {"x": torch.randn(8, 16, generator=g), "w": torch.randn(8, 16, generator=g)}
    before = {k: v.clone() for k, v in inputs.items()}
    other = other_content(before)
    contents = [(before, {"y": before["x"] * before["w"]}), (other, {"y": other["x"] * other["w"]})]
    replays: list = []
    own = _State()
    t = TimedCalls(_Ex(_replaying(own, replays)), None, {}, inputs, {"y": torch.empty(8, 16)}, contents,
                   {"y": Tolerance(1e-6, 1e-6, "")}, poison, own if state else None)
    for _ in range(calls):
        t.prepare()
        t.call()
        t.verify()
    return t, own, replays


def test_a_result_cached_under_an_input_fingerprint_is_gone_before_every_timed_call():
    # Without the state put back, the two contents are computed once each and then replayed: right
    # answers every time, and no work done (the exploit this closes)...
    t, _, replays = _timed(state=False)
    assert t.failure() is None and len(replays) == 8
    # ... with it, every timed call starts from the memory as loaded, and computes.
    t, own, replays = _timed(state=True)
    assert t.failure() is None and replays == [] and own.restored == 10


def test_a_managed_variable_is_refused(tmp_path):
    text = (grader.paths.SOLUTIONS / "day01" / "scale_add.cu").read_text()
    text = text.replace("namespace {\n", "namespace {\n__managed__ float g_seen[256];\n", 1)
    text = text.replace("out[i] = alpha * x[i] + y[i];", "out[i] = alpha * x[i] + y[i];\n    if (i < 256) g_seen[i] = out[i];")
    p = tmp_path / "scale_add.cu"
    p.write_text(text)
    result = check("day01.scale_add", source=p, perf=False)
    assert not result.ok and "__managed__" in result.first_failure(), str(result)


def _checked(tmp_path):
    """The file as a check builds it: its variables from the checked compile, its extension linked from
    that compile's object (jit.build_checked), so that the variables' names are those the module has."""
    src = _source(tmp_path)
    report = jit.compile_cubin(src, host_object=True)
    return [DeviceVariable(*v) for v in report.variables], jit.build_checked(src, report.host_object, "variables")


def test_the_extension_names_its_variables_as_the_checked_cubin_does(tmp_path):
    """The names looked up in the loaded module are the checked cubin's. An anonymous namespace's (and so a
    kernel's static local's) name holds a hash of the whole translation unit, so it is another name in a
    module compiled from another file (jit.build's binding beside the kernels): the check links its
    extension from the checked object, whose embedded cubin is the one the names were read from."""
    import subprocess

    from grader import toolkit
    from grader.jit.sass import device_variables

    variables, built = _checked(tmp_path)
    cuobjdump = toolkit.binary_tool("cuobjdump")
    if not cuobjdump:
        pytest.skip("cuobjdump was not found")
    out = tmp_path / "elf"
    out.mkdir()
    subprocess.run([cuobjdump, "-xelf", "all", str(built.library)], cwd=out, check=True, capture_output=True,
                   env=toolkit.tool_env())
    embedded = {name for cubin in out.glob("*.cubin") for name, *_ in device_variables(cubin)}
    local = [v.name for v in variables if "_GLOBAL__N_" in v.name]
    assert len(local) == 2, local  # the anonymous namespace's variable and the kernel's static local
    assert {v.name for v in variables} <= embedded, embedded


@gpu
def test_every_variable_is_put_back_as_loaded(tmp_path):
    from grader.check.device_state import DeviceState

    variables, checked = _checked(tmp_path)
    built = jit.load_built(checked.directory, checked.name)
    state = DeviceState(built.__file__, variables)
    assert state.bytes >= 4096 + 2048 + 1024 + 1024 + 16 + 64 + 4, state.bytes
    y = torch.zeros(128, device="cuda")
    built.bump(y, 128)
    first = y.clone()
    for _ in range(3):
        built.bump(y, 128)
    assert not torch.equal(y, first)  # it keeps state of its own...
    state.restore()
    built.bump(y, 128)
    assert torch.equal(y, first)  # ... every bit of which was put back (the static local's call count included)


def test_the_extensions_symbol_table_has_its_entry_and_the_kernels_host_stubs(tmp_path):
    """What the lookup reads without a GPU: the built extension keeps its symbol table, with the module's
    entry and the host stub of the file's kernel (in an anonymous namespace) among its functions."""
    from grader.check.device_state import host_functions
    from grader.jit.symbols import read_object

    built = jit.build([_source(tmp_path)], name="variables", quiet=True, load=False)
    init, offset, functions = host_functions(str(built.library))
    assert init.startswith("PyInit_") and offset
    stubs = [s.value for s in read_object(built.library, relocations=False).symbols
             if "bump_kernel" in s.name and s.type == 2 and s.shndx]
    assert stubs and set(stubs) <= set(functions)
