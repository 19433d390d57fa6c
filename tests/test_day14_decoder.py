"""Day 14's capstone on the CPU: the eager reference model, the solution's Decoder run with PyTorch
stand-ins for the kernels (its paging, plan buffers, positions and cache writes checked against the
reference), the module checks on the solution, the stub and variants of known-wrong code (each
imported under its own op namespace, so that one process can hold them all), release's Python stub,
and one check through the grader's isolated worker."""
import math

import pytest
import torch
import torch.nn.functional as F

from grader import machine, release, stubs
from conftest import check
from grader.exercises import day14

SOLUTION = day14.DECODER.solution_path


def _variant(text, ns, tmp_path, name):
    """The module's text with its ops in namespace `ns`, imported once."""
    path = tmp_path / f"{name}.py"
    path.write_text(text.replace('"course::', f'"{ns}::').replace("torch.ops.course.", f"torch.ops.{ns}."))
    return day14.load_module(path)


def _rows(module, ns):
    from types import SimpleNamespace

    return day14.decoder_module_checks(SimpleNamespace(module=module, kernels={}), False, ns)


# ------------------------------------------------------------------ kernels' stand-ins (CPU, PyTorch)
class _Kernels:
    """What each entry point computes, in PyTorch, writing into its output arguments as the kernels do."""

    @staticmethod
    def _norm(x, w, eps):
        x = x.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(w.dtype)

    def rmsnorm_bf16(self, out, x, w, rows, hidden, eps):
        out.copy_(self._norm(x, w, eps))

    def fused_add_rmsnorm_bf16(self, x, r, w, rows, hidden, eps):
        r.copy_((x.float() + r.float()).to(r.dtype))
        x.copy_(self._norm(r, w, eps))

    def rope_bf16(self, q, k, positions, tokens, qo, kv, d, q_stride, k_stride, theta):
        q.copy_(day14.rope_reference(q, positions, theta).to(q.dtype))
        k.copy_(day14.rope_reference(k, positions, theta).to(k.dtype))

    def silu_and_mul_bf16(self, out, x, n, d):
        out.copy_((F.silu(x[:, :d].float()) * x[:, d:].float()).to(out.dtype))

    def flash_attention_bf16(self, o, lse, q, k, v, b, sq, skv, qo, kv, d, q_stride, kv_stride, causal, scale):
        assert causal and sq == skv
        out = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                             v.transpose(1, 2).float(), is_causal=True, scale=scale, enable_gqa=True)
        o.copy_(out.transpose(1, 2).to(o.dtype))

    def batch_decode_bf16(self, o, lse, q, cache, indptr, indices, last, ws, wsf, b, qo, kv, d, ps, scale):
        for r in range(b):
            pages = indices[int(indptr[r]):int(indptr[r + 1])].long()
            n = (len(pages) - 1) * ps + int(last[r])
            keys = cache[pages, 0].reshape(-1, kv, d)[:n].float()
            vals = cache[pages, 1].reshape(-1, kv, d)[:n].float()
            qr = q[r].float().view(kv, qo // kv, d)
            p = torch.softmax(torch.einsum("hgd,nhd->hgn", qr, keys) * scale, -1)
            o[r].copy_(torch.einsum("hgn,nhd->hgd", p, vals).reshape(qo, d).to(o.dtype))

    def top_p_sampling(self, tokens, probs, top_p, b, vocab, seed, offset):
        tokens.copy_(probs.argmax(-1))


def _kernels():
    k = _Kernels()
    return {dep: k for dep in day14.DEPENDS_ON}


def _generate(model, prompt, forced, plan_shift=0):
    """The decoder's teacher-forced logits, decode steps run eagerly (plan, then step: what a replay does)."""
    out = [model.prefill(prompt)]
    for t in range(forced.shape[1]):
        model.plan([n + plan_shift for n in model.lens])
        out.append(model.step(forced[:, t]).clone())
        model.lens = [n + 1 for n in model.lens]
    return torch.stack(out)


# ------------------------------------------------------------------------------------------ tests
def test_eager_reference_decode_matches_its_prefill():
    """The static-cache decode step and the prefill are the same model: the logits of a prompt's last token
    equal those reached by decoding the prompt's tokens one by one (fp32)."""
    cfg = day14.TINY
    w = day14.make_weights(cfg, torch.Generator().manual_seed(0), device="cpu")
    tokens = torch.randint(0, cfg["vocab"], (2, 9), generator=torch.Generator().manual_seed(1))
    full = day14.EagerLlama(w, cfg, 2, 9, torch.float32).prefill(tokens)
    stepped = day14.teacher_forced_logits(day14.EagerLlama(w, cfg, 2, 9, torch.float32), tokens[:, :1], tokens[:, 1:])
    assert torch.allclose(stepped[-1], full, atol=1e-5)


@pytest.fixture(scope="module")
def solution():
    return day14.load_module(SOLUTION)


def test_solution_decoder_on_stand_in_kernels_matches_the_reference(solution):
    cfg = dict(day14.TINY)
    g = torch.Generator().manual_seed(3)
    w = day14.make_weights(cfg, g, device="cpu")
    b, n, steps = 3, 21, 14  # pages of 16: the prompt ends in page 2, decoding crosses into page 3
    prompt = torch.randint(0, cfg["vocab"], (b, n), generator=g)
    forced = torch.randint(0, cfg["vocab"], (b, steps), generator=g)
    ref = day14.teacher_forced_logits(day14.EagerLlama(w, cfg, b, n + steps, torch.float32), prompt, forced)
    solution.use_kernels(_kernels())
    got = _generate(solution.Decoder(w, cfg, b, n + steps, day14.PAGE_SIZE), prompt, forced)
    err = (got - ref).abs().max().item()
    assert err < day14.decoder_tolerance({"layers": cfg["layers"]}).atol, err
    wrong = _generate(solution.Decoder(w, cfg, b, n + steps, day14.PAGE_SIZE), prompt, forced, plan_shift=1)
    assert (wrong[1:] - ref[1:]).abs().max() > 0.3  # a plan one position ahead is far outside the tolerance


def test_solution_passes_the_module_checks(solution):
    rows = _rows(solution, "course")
    assert all(r[2] in ("pass", "skip") for r in rows), [r for r in rows if r[2] == "fail"]
    assert sum(r[2] == "pass" for r in rows) == 2 * len(day14.OPS) + 1


@pytest.mark.parametrize("name, old, new, says", [
    ("fake_dtype", "def _(x, weight, eps):\n    return torch.empty_like(x)",
     "def _(x, weight, eps):\n    return torch.empty_like(x, dtype=torch.float32)", "expected (7, 4096) torch.bfloat16"),
    ("print_in_step", '        h = F.embedding(tokens, self.w["embed"])  ',
     '        print("step")\n        h = F.embedding(tokens, self.w["embed"])  ', "fullgraph"),
    ("rope_mutates_q_only", 'mutates_args=("q", "k"))', 'mutates_args=("q",))', "mutates_args"),
    ("tolist_in_step", "        pos, k_rows, v_rows, indptr, indices, last = self._planned()\n",
     "        pos, k_rows, v_rows, indptr, indices, last = self._planned()\n        assert max(pos.tolist()) < 10 ** 6\n",
     "fullgraph"),
])
def test_known_wrong_modules_fail_the_module_checks(tmp_path, name, old, new, says):
    text = SOLUTION.read_text()
    assert text.count(old) == 1, name
    rows = _rows(_variant(text.replace(old, new), f"wrong_{name}", tmp_path, name), f"wrong_{name}")
    failed = [r for r in rows if r[2] == "fail"]
    assert failed and any(says in f"{r[1]} {r[3]}" for r in failed), rows


def test_stub_fails_the_module_checks(tmp_path):
    rows = _rows(_variant(day14.DECODER.stub_path.read_text(), "stub_course", tmp_path, "stub"), "stub_course")
    failed = {r[1] for r in rows if r[2] == "fail"}
    assert "op course::fused_add_rmsnorm" in failed and "op course::decode_attention" in failed
    assert "op course::top_p_sampling" in failed and "torch.compile(fullgraph=True) of Decoder.step" in failed
    # the stub's worked examples: the plain op, an op that mutates its inputs, and one on strided slices
    assert not {"op course::rmsnorm", "op course::rope", "op course::silu_and_mul",
                "op course::prefill_attention"} & failed


def test_release_writes_the_python_stub():
    stub = stubs.make_stub(SOLUTION.read_text(), str(SOLUTION))
    compile(stub, "decoder.py", "exec")
    given = stub.split("# TODO")[0].split("KERNELS = {}")[1]  # the ops the stub gives, before its first TODO
    assert "BEGIN SOLUTION" not in stub and "course::rope" in given and "course::decode_attention" not in given
    assert 'raise NotImplementedError("Decoder.step")' in stub
    planned = [p for p in release.plan() if p.solution == SOLUTION]
    assert planned and planned[0].text.startswith("# Your exercise:") and planned[0].state == "up to date"


def test_spec_counts():
    shapes = day14.weight_shapes(day14.LLAMA3_8B)
    per_layer = sum(math.prod(s) for k, s in shapes.items() if k.startswith("layers.0."))
    assert per_layer == 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096  # Llama 3 8B: 218 M per layer
    assert day14._decoder_bytes({"batch": 64, "prompt": 4096}) > 2 * 1.07e9
    assert all(day14.DECODER.tolerance(c.params).why for c in day14.DECODER.cases)


@pytest.mark.skipif(machine.has_gpu(), reason="on a GPU the check runs every case: the GPU verification does that")
def test_solution_through_the_grader_without_a_gpu():
    res = check("day14.decoder", source=SOLUTION, quiet=True, perf=False)
    assert not res.failures, str(res)
    names = [i.name for i in res.items if i.status == "pass"]
    assert "torch.compile(fullgraph=True) of Decoder.step" in names and "op course::decode_attention" in names


def test_module_checks_hand_the_kernels_over_before_opcheck(solution, tmp_path, monkeypatch):
    """On a GPU the worker's module checks give the module the extensions the grader built
    (use_kernels), before opcheck and the cases call its ops: seen missing on the H200, where
    every op then failed with KeyError 'day06.rmsnorm'."""
    from types import SimpleNamespace

    seen = []
    monkeypatch.setattr(day14, "_opcheck_rows", lambda ops: seen.append(dict(solution.KERNELS)) or [])
    monkeypatch.setattr(day14, "_sampling_row", lambda ops: ("correctness", "sampling", "pass", ""))
    kernels = {dep: object() for dep in day14.DEPENDS_ON}
    rows = day14.decoder_module_checks(SimpleNamespace(module=solution, kernels=kernels), True, "course")
    assert seen == [kernels] and not [r for r in rows if r[2] == "fail"]
    broken = _variant(SOLUTION.read_text().replace("    KERNELS.clear()\n", "    raise ValueError('no')\n"),
                      "wrong_use_kernels", tmp_path, "use_kernels")
    rows = day14.decoder_module_checks(SimpleNamespace(module=broken, kernels=kernels), True, "wrong_use_kernels")
    assert [r[1] for r in rows if r[2] == "fail"] == ["use_kernels(kernels)"]


@pytest.mark.parametrize("line, says", [
    ("import grader", "imports grader"), ("import grader.check.compare as judge", "imports grader"),
    ("from grader.exercises import day14 as spec", "imports grader"),
    ("judge = torch.sys.modules['grader.check.compare']", "reaches sys through another module"),
    ("shell = torch.os", "reaches os through another module")])
def test_a_module_may_not_import_the_grader(line, says):
    """The module is imported into the grading process: with the grader in reach it could replace
    the reference or the comparison that judge it (`judge.compare = ...`)."""
    import types

    from grader.check.result import Result
    from grader.check.static import python_checks

    source = types.SimpleNamespace(path="kernels/day14/decoder.py", text=line + "\n" + SOLUTION.read_text())
    result = Result("day14.decoder", source.path, "cpu")
    assert not python_checks(day14.DECODER, source, result)
    assert any(says in i.detail for i in result.failures), result.items


@pytest.mark.parametrize("line, says", [
    ("__builtins__['open']('notes.txt')", "uses __builtins__"),
    ("spec = __spec__", "uses __spec__"),
    ("torch.allclose = lambda *a, **k: True", "assigns to torch.allclose"),
    ("t = torch\nt.allclose = lambda *a, **k: True", "assigns to t.allclose"),
    ("def patch(mod=torch.testing):\n    mod.assert_close = print", "assigns to mod.assert_close"),
    ("for m in (torch, F):\n    m.softmax = None", "assigns to m.softmax"),
    ("del torch.nn.functional.softmax", "deletes torch.nn.functional.softmax"),
    ("Tensor.sub = Tensor.add", "assigns to Tensor.sub"),
    ("type(torch.zeros(1)).sub = None", "set attributes only on your own objects"),
    ("torch.backends.cuda.matmul.allow_tf32 = True", "assigns to torch.backends.cuda.matmul.allow_tf32"),
    ("_lib = torch.library.Library('aten', 'IMPL')", "register only the course's ops"),
    ("torch.library.impl(torch.ops.aten.mm.default, 'CUDA')(lambda a, b: a)", "register only the course's ops"),
    ("from torch.utils.cpp_extension import load_inline", "imports torch.utils.cpp_extension"),
    ("import torch.utils.cpp_extension as ext", "imports torch.utils.cpp_extension"),
    ("from torch.utils import cpp_extension", "imports cpp_extension from torch.utils"),
    ("ext = torch.utils.cpp_extension", "reaches native code through torch.utils.cpp_extension"),
    ("torch.ops.load_library('/tmp/x.so')", "reaches native code through torch.ops.load_library"),
    ("import operator\ng = operator.attrgetter('__glob' + 'als__')", "imports operator"),
    ("import string\nf = string.Formatter().get_field", "imports string"),
    ("import pydoc\nsystem = pydoc.locate('os.system')", "imports pydoc"),
    ("import numpy as np\nnp.savetxt('results.jsonl', [])", "imports numpy"),
    ("torch.save({}, 'results.jsonl')", "reaches files or code from elsewhere through torch.save"),
    ("from torch import save", "imports save from torch"),
    ("hub = torch.hub", "reaches files or code from elsewhere through torch.hub")])
def test_a_module_may_not_reach_around_the_import_checks(line, says):
    """What the learner's Python can touch in the process that judges it: the interpreter's builtins, the
    attributes of torch (a patched comparison or timer judges it), aten's kernels (replaced through
    torch.library). Each refused with where and what."""
    import types

    from grader.check.result import Result
    from grader.check.static import python_checks

    source = types.SimpleNamespace(path="kernels/day14/decoder.py", text=SOLUTION.read_text() + "\n" + line + "\n")
    result = Result("day14.decoder", source.path, "cpu")
    assert not python_checks(day14.DECODER, source, result)
    assert any(says in i.detail for i in result.failures), result.items


@pytest.mark.parametrize("line", [
    "if __name__ == '__main__':\n    print(__doc__)",
    "class Cache:\n    def __init__(self):\n        self.pages = torch.zeros(4)\n        self.pages.data = torch.ones(4)",
    "act = F.silu\ny = act(torch.ones(2))",
    "cfg = dict(layers=2)\ncfg['layers'] = 3",
    "@torch.library.custom_op('course::scale2', mutates_args=())\ndef scale2(x: Tensor) -> Tensor:\n"
    "    return x * 2\n\n\n@scale2.register_fake\ndef _(x):\n    return torch.empty_like(x)"])
def test_right_python_is_not_refused(line):
    """Attributes of the module's own objects, its own ops in the course namespace, aliases that are only
    read: the reach check refuses none of them."""
    import types

    from grader.check.result import Result
    from grader.check.static import python_checks

    source = types.SimpleNamespace(path="kernels/day14/decoder.py", text=SOLUTION.read_text() + "\n" + line + "\n")
    result = Result("day14.decoder", source.path, "cpu")
    assert python_checks(day14.DECODER, source, result), result.items


# ------------------------------------------------------------------------------ the timed baselines
def test_graded_baseline_is_the_eager_step_replayed_as_a_cuda_graph():
    """The graded ratio is against work the GPU alone decides (the eager step replayed from a CUDA graph);
    torch.compile's step stays graded beside it; the eager step launched from Python, bound by the host,
    is not timed."""
    t = day14.DECODER.target
    assert t.kind == "latency" and t.baseline is day14.EAGER_GRAPH and t.ratio == day14.DECODER_SPEEDUP
    assert [(b, b.required) for b in t.also if b.required is not None] == [(day14.COMPILED, 1.0)]
    assert day14.EAGER not in t.also
    names = [b.name for b in (t.baseline, *t.also)]
    assert len(set(names)) == len(names)  # each its own `<name>_ratio` in the report
    assert f"{t.ratio:g}x faster than the eager model's step replayed as a CUDA graph" in day14.DECODER.summary


# Ops that read a tensor's value on the host (a sync: not allowed while a CUDA graph is captured) or make
# a shape from data
_SYNCING_OPS = ("aten._local_scalar_dense", "aten.item", "aten.nonzero", "aten.masked_select", "aten.unique",
                "aten._unique", "aten.repeat_interleave.Tensor", "aten.is_nonzero", "aten.equal")


def test_eager_step_is_capturable_at_the_timed_shapes():
    """The eager step at the timed case's shapes (batch 64, context 4096; meta tensors: shapes only) reads
    no value back to the host, makes no shape from data and touches no tensor off its device: what a
    CUDA graph capture of it needs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen, devices = [], set()

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen.append(str(func))
            flat = [*args, *(kwargs or {}).values(), *(out if isinstance(out, (tuple, list)) else (out,))]
            devices.update(str(a.device) for a in flat if isinstance(a, torch.Tensor))
            return out

    cfg, b, n = day14.LLAMA3_8B, 64, 4096
    model = day14.EagerLlama(day14.make_weights(cfg, None, device="meta"), dict(cfg), b, n + 1)
    with Log():
        logits = model.step(torch.zeros(b, dtype=torch.int64, device="meta"),
                            torch.full((b,), n, dtype=torch.int64, device="meta"))
    assert tuple(logits.shape) == (b, cfg["vocab"]) and logits.dtype == torch.float32
    assert "aten.index_put_.default" in seen and "aten.mm.default" in seen  # the step was seen whole
    assert not [op for op in seen if op.startswith(_SYNCING_OPS)]
    assert devices == {"meta"}


def _baseline_case(b=2, n=10, seed=5):
    cfg = dict(day14.TINY)
    g = torch.Generator().manual_seed(seed)
    w = day14.make_weights(cfg, g, device="cpu")
    inputs = {**{f"w.{k}": v for k, v in w.items()}, "prompt": torch.randint(0, cfg["vocab"], (b, n), generator=g),
              "forced": torch.randint(0, cfg["vocab"], (b, 1), generator=g)}
    return cfg, w, {"batch": b, "prompt": n}, inputs


def _caches(base):
    return [t.clone() for name, t in base.model.mod.named_buffers() if "cache" in name]


def test_baseline_step_repeats_the_cases_step():
    """A replay redoes the step recorded at the static token and position: each call must write the same
    cache row with the same K and V and give the same logits, those of the case's first decode step."""
    cfg, w, p, inputs = _baseline_case()
    base = day14._Baseline(p, inputs, "eager", cfg)
    first, caches = base().clone(), _caches(base)
    assert torch.equal(base(), first)
    assert all(torch.equal(a, b) for a, b in zip(caches, _caches(base)))
    want = day14.teacher_forced_logits(day14.EagerLlama(w, cfg, p["batch"], p["prompt"] + 1), inputs["prompt"],
                                       inputs["forced"])[1]
    assert torch.equal(first, want)


def test_graph_baseline_captures_once_then_only_replays(monkeypatch):
    """The graph baseline's order of work, torch.cuda's stream and graph API stood in for on the CPU:
    the step warmed up, then recorded once inside the capture; each call after that a replay alone,
    returning the recorded logits."""
    import contextlib

    events = []

    class Stream:
        def wait_stream(self, other):
            pass

    class Graph:
        def replay(self):
            events.append("replay")

    @contextlib.contextmanager
    def graph(g, *args, **kwargs):
        events.append("capture")
        yield
        events.append("captured")

    step = day14.EagerLlama.step
    monkeypatch.setattr(day14.EagerLlama, "step", lambda self, *a: events.append("step") or step(self, *a))
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    cfg, w, p, inputs = _baseline_case()
    base = day14._Baseline(p, inputs, "graph", cfg)
    start = events.index("capture")
    assert "step" in events[:start] and events[start:] == ["capture", "step", "captured"]
    del events[:]
    got = [base() for _ in range(3)]
    assert events == ["replay"] * 3 and all(g is base.logits for g in got)
    monkeypatch.undo()
    assert torch.equal(base.logits, day14._Baseline(p, inputs, "eager", cfg)())


def test_a_submitted_module_builds_on_the_kernels_beside_it(tmp_path):
    """In a class submission (STUDENT/day14/decoder.py) the module builds on that student's own kernels,
    STUDENT/dayNN/..., where the submission has them (a learner's own are beside kernels/day14/ in the same
    way): a broken one there fails the module, saying which file."""
    from grader import exercises

    student = tmp_path / "alice"
    (student / "day14").mkdir(parents=True)
    (student / "day14" / "decoder.py").write_text(SOLUTION.read_text())
    for dep in day14.DEPENDS_ON:
        ex = exercises.get(dep)
        (student / ex.day).mkdir(exist_ok=True)
        text = ex.solution_path.read_text()
        if dep == "day02.silu_and_mul":
            text += "\nvoid helper() { system(\"true\"); }\n"
        (student / ex.day / ex.stub_path.name).write_text(text)
    result = check("day14.decoder", source=student / "day14" / "decoder.py", perf=False, seeds=1, quiet=True)
    failed = [i for i in result.failures if i.name.startswith("uses day02.silu_and_mul")]
    assert failed and "alice/day02/silu_and_mul.cu" in failed[0].name, str(result)


def _nucleus_sampler(ignore=None):
    """A sampling op on the CPU: inverse-CDF draws from each row's nucleus (Day 8's), the uniform from
    (seed, offset, row); `ignore` one of its arguments as a wrong wrapper would."""
    import torch

    from grader.exercises.day08 import nucleus

    def op(probs, top_p, seed, offset):
        if ignore == "tokens":  # never written: what the allocation held
            return torch.full((probs.shape[0],), 0x0101010101010101, dtype=torch.int64)
        if ignore == "top_p":
            top_p = torch.ones_like(top_p)
        if ignore == "offset":
            offset = 0
        out = []
        for r, (row, t) in enumerate(zip(probs, top_p.tolist())):
            gen = torch.Generator().manual_seed(seed * 1_000_003 + offset * 101 + r)
            u = torch.rand((), generator=gen, dtype=torch.float64)
            cdf = torch.cumsum(nucleus(row, t), 0)
            out.append(min(int(torch.searchsorted(cdf, u)), len(row) - 1))
        return torch.tensor(out, dtype=torch.int64)
    return op


@pytest.mark.parametrize("ignore, says", [(None, None), ("top_p", "outside its nucleus"), ("offset", "drew the same token"),
                                          ("tokens", "not a token of the row")])
def test_the_sampling_op_is_checked_by_its_draws(ignore, says):
    """The decoder's logits never pass through course::top_p_sampling: its own row judges its draws."""
    from types import SimpleNamespace

    group, _, status, detail = day14._sampling_row(SimpleNamespace(top_p_sampling=_nucleus_sampler(ignore)), "cpu")
    assert group == "correctness" and (status == "pass" if says is None else status == "fail" and says in detail), detail
