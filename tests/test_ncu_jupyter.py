"""`python -m grader ncu-jupyter` (grader/maintain/ncu_jupyter.py) where it can run here: a Jupyter server with
jupyterlab-nvidia-nsight, a kernel started through its REST API, the extension's magics injected into
it, the notebooks' nb.ncu_ready() and a %%ncu cell that, without a GPU and ncu, skips and runs nothing.
On the H200 the same command enables Nsight Compute, restarts the kernel under ncu and profiles."""
import importlib.util

import pytest

from grader import machine

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("jupyter_server") is None or importlib.util.find_spec("jupyterlab_nvidia_nsight") is None,
    reason="the lab extra (jupyter_server, jupyterlab-nvidia-nsight) is not installed")


@pytest.mark.skipif(machine.has_gpu(), reason="the GPU path is the verification's (it profiles for minutes)")
def test_a_kernel_started_by_the_server_gets_the_magics_and_skips_cleanly(tmp_path):
    from grader.maintain import ncu_jupyter

    run = ncu_jupyter.prove()
    assert run.error == "", run.error
    steps = {c.step: c for c in run.cells}
    assert "magics True" in steps["the extension's magics in a kernel the server started"].output
    ready = steps["nb.ncu_ready() and Day 6's kernels"]
    assert ready.error == "" and "ready False" in ready.output and "Skipped:" in ready.output
    profiled = steps["a %%ncu cell: Day 6's rmsnorm v1 and v2"]
    assert profiled.error == "" and profiled.output.startswith("Skipped %%ncu")
    assert not run.profiled and "no CUDA GPU" in run.skipped_why
    text = ncu_jupyter.markdown(run, {"date": "today", "commit": "abc"})
    assert "**not profiled** (no CUDA GPU" in text and "```python\n%%ncu" in text
