"""day14.decoder's timed cases, stage by stage (the Decoder built, prefill, one eager step, capture,
decode, the grader's own call twice, its eager and torch.compile baselines, the call again), each
synchronized: which stage faults. On the H200 (2026-11-23) the solution's timed case at batch 1,
context 4096 stopped with an illegal memory access, while every untimed case was correct.
Run from the repository root on a GPU machine, best with CUDA_LAUNCH_BLOCKING=1:
    python3 benchmarks/day14_decoder_stages/run.py [CASE_INDEX] [MODE]
CASE_INDEX indexes the spec's perf_cases. MODE: `stages` (default, each stage once, synchronized);
`measure` (the worker's own measure(), as the grader times the case); `cases` (the module checks, every untimed
case x 4 seeds and the side-stream run, as the worker runs them first, then measure()); `bench-yours`, `bench-torch`, `bench-compiled` (the
grader's interleaved timing loop on yours alone or beside one baseline); `perf` (every timed case in turn);
`cases:p` (the preamble, then every timed case: the worker's whole path). One mode per process: a fault
ends the CUDA context.
On the H200 (2026-11-24) every stage passed once, synchronized, at batch 1 and 64, and `measure` alone
passed; `cases:s` (one Decoder captured and freed before) faulted in the first timed replay, also with
gc.collect() between stages (DECODER_FIX=gc) and with a capture stream of the Decoder's own (=stream);
with torch's cuBLAS workspaces cleared before each capture (=clear) or none at all
(CUBLAS_WORKSPACE_CONFIG=:0:0) every mode passed: pytorch/pytorch#193402. The harness now clears them
before every capture (day14.clear_cublas_workspaces)."""
import os
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `grader`
import torch  # noqa: E402

from grader.exercises import day14, get  # noqa: E402


def stage(name, fn):
    if os.environ.get("DECODER_FIX") == "gc":
        import gc
        gc.collect()
    t = time.time()
    try:
        r = fn()
        torch.cuda.synchronize()
        print(f"ok   {name} {time.time() - t:.1f} s", flush=True)
        return r
    except Exception as e:  # noqa: BLE001 - the point is to see which stage fails
        print(f"FAIL {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        traceback.print_exc(limit=8)
        sys.exit(1)


def _try_fix(module, fix):
    """Experiments (DECODER_FIX): `clear` drops torch's cached cuBLAS workspaces before each capture;
    `stream` captures on the Decoder's own stream, warmed up on it; `gc` (see timing) collects garbage
    after every stage."""
    if fix == "clear":
        capture = module.Decoder.capture

        def cleared(self):
            torch._C._cuda_clearCublasWorkspaces()
            capture(self)
        module.Decoder.capture = cleared
    elif fix == "stream":
        def own_stream(self):
            self.plan(self.lens)
            tokens = self.static_tokens[:self.batch]
            self.stream = torch.cuda.Stream()
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                self.step(tokens)
            torch.cuda.current_stream().wait_stream(self.stream)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=self.stream):
                self.static_logits = self.step(tokens)
        module.Decoder.capture = own_stream


def main():
    mode = sys.argv[2] if len(sys.argv) > 2 else "stages"
    ex = get("day14.decoder")
    module = day14.load_module(ex.solution_path)
    module.use_kernels(day14.course_kernels(solutions=True))
    _try_fix(module, os.environ.get("DECODER_FIX", ""))
    sub = SimpleNamespace(module=module, kernels=module.KERNELS)
    case = ex.perf_cases[int(sys.argv[1]) if len(sys.argv) > 1 else 0]
    p = case.params
    print("case", case.label, p, "CUDA_LAUNCH_BLOCKING", os.environ.get("CUDA_LAUNCH_BLOCKING"), flush=True)
    inputs = ex.make_inputs(p, torch.Generator(device="cuda").manual_seed(0))
    outputs = ex.make_outputs(p, inputs)
    if mode != "stages":
        return timing(mode, ex, sub, case, inputs, outputs)
    m = stage("Decoder()", lambda: module.Decoder(day14._weights(inputs), dict(day14.LLAMA3_8B), p["batch"],
                                                  p["prompt"] + p["steps"], day14.PAGE_SIZE))
    stage("prefill", lambda: m.prefill(inputs["prompt"]))
    stage("one step, eager (no graph)", lambda: (m.plan(m.lens), m.step(m.static_tokens[:m.batch])))
    stage("capture", m.capture)
    stage("decode (replay)", lambda: m.decode(inputs["forced"][:, 0]))
    stage("the grader's call", lambda: ex.call(sub, p, inputs, outputs))
    stage("the grader's call, timed form", lambda: ex.call(sub, p, inputs, outputs))
    for b in [ex.target.baseline, *ex.target.also]:
        if b.run:
            stage(f"baseline {b.name}", lambda b=b: b.run(p, inputs, ex.make_outputs(p, inputs)))
    stage("the grader's call after the baselines", lambda: ex.call(sub, p, inputs, outputs))


def timing(mode, ex, sub, case, inputs, outputs, measure=True):
    from grader.bench import L2Flusher, bench_interleaved
    from grader.check import worker

    flusher = L2Flusher()
    if mode.startswith("cases") and mode.endswith("p"):  # the preamble, then every timed case
        timing(mode[:-1] if mode[:-1] != "cases:" else "cases", ex, sub, case, inputs, outputs, measure=False)
        mode = "perf"
    if mode == "perf":  # every timed case in turn, as the worker times them (case 0 before case 1)
        if os.environ.get("DECODER_FIX") == "nocompiled":
            import dataclasses
            ex = dataclasses.replace(ex, target=dataclasses.replace(ex.target, also=()))
        for c in ex.perf_cases:
            r = stage(f"worker.measure() {c.label}", lambda c=c: worker.measure(ex, sub, c, flusher))
            print(r[0], r[1], flush=True)
            worker.release_case_memory()
        return
    if mode == "measure" or mode.startswith("cases"):
        # what the worker does before timing: (m) module checks, (c) every case x 4 seeds, (s) side stream;
        # `cases` all three, `cases:m` (say) only those named
        parts = mode.split(":")[1] if ":" in mode else ("" if mode == "measure" else "mcs")
        untimed = [c for c in ex.cases if not c.perf]
        if "m" in parts:
            stage("module checks", lambda: print("  ", [r[:3] for r in ex.module_checks(sub, True)]))
        if "c" in parts:
            for c in untimed:
                stage(f"untimed case {c.label}",
                      lambda c=c: print("  ", [worker.run_case(ex, sub, c, s)[:2] for s in range(4)]))
        if "s" in parts:
            stage("side stream", lambda: print("  ", worker.run_on_side_stream(ex, sub, max(
                untimed, key=lambda c: ex.case_bytes(c.params)), 0)))
        if measure:
            r = stage("worker.measure()", lambda: worker.measure(ex, sub, case, flusher))
            print(r[0], r[1], flush=True)
        return
    p = case.params
    stage("the grader's call", lambda: ex.call(sub, p, inputs, outputs))
    fns = {"yours": lambda: ex.call(sub, p, inputs, outputs)}
    name = mode.split("-", 1)[1]
    for b in [ex.target.baseline, *ex.target.also]:
        if b.name == name:
            fns[b.name] = lambda b=b: b.run(p, inputs, ex.make_outputs(p, inputs))
    t = stage(f"bench_interleaved({', '.join(fns)})", lambda: bench_interleaved(fns, flusher))
    print({k: round(v.median_ms * 1e3, 1) for k, v in t.items()}, "us", flush=True)


if __name__ == "__main__":
    main()
