"""day14.decoder's timed cases, stage by stage (the Decoder built, prefill, one eager step, capture,
decode, the grader's own call twice, its eager and torch.compile baselines, the call again), each
synchronized: which stage faults. On the H200 (2026-11-23) the solution's timed case at batch 1,
context 4096 stopped with an illegal memory access, while every untimed case was correct.
Run from the repository root on a GPU machine, best with CUDA_LAUNCH_BLOCKING=1:
    python3 benchmarks/day14_decoder_stages/run.py [CASE_INDEX]    (index into the spec's perf_cases)"""
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


def main():
    ex = get("day14.decoder")
    module = day14.load_module(ex.solution_path)
    module.use_kernels(day14.course_kernels(solutions=True))
    sub = SimpleNamespace(module=module, kernels=module.KERNELS)
    case = ex.perf_cases[int(sys.argv[1]) if len(sys.argv) > 1 else 0]
    p = case.params
    print("case", case.label, p, "CUDA_LAUNCH_BLOCKING", os.environ.get("CUDA_LAUNCH_BLOCKING"), flush=True)
    inputs = ex.make_inputs(p, torch.Generator(device="cuda").manual_seed(0))
    outputs = ex.make_outputs(p, inputs)
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


if __name__ == "__main__":
    main()
