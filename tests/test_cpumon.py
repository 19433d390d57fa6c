"""The CPU monitor of the class benchmark (grader/maintain/cpumon.py): what it calls each process, and
that the CPU time of a process started while it watches is counted whole under that name."""
import json
import subprocess
import sys
import threading
import time

from grader.maintain import cpumon


def test_processes_are_named_by_what_they_do():
    assert cpumon.category("cicc", "", 0, 1) == "nvcc" and cpumon.category("cc1plus", "", 0, 1).startswith("host")
    worker = "python3 -m grader.check.worker --wait-profiler /tmp/x/config.json"
    assert cpumon.category("python3", worker, 0, 1) == "worker profiler"
    assert cpumon.category("python3", worker.replace("-profiler", ""), 0, 1) == "worker warm"
    spawn = "python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)"
    assert cpumon.category("python3", spawn, 10, 1) == "prep pool process (nice)"
    assert cpumon.category("python3", spawn, 0, 1) == "slot process"
    calib = "python3 -c import json, sys\nfrom grader.check.worker import calibrate"
    assert cpumon.category("python3", calib, 0, 1) == "calibration"
    assert cpumon.category("bash", "bash -c x", 0, 1) == "other: bash"


def test_a_process_started_while_it_watches_is_counted(tmp_path):
    stop = tmp_path / "stop"
    got = {}
    t = threading.Thread(target=lambda: got.update(cpumon.watch(str(stop))))
    t.start()
    time.sleep(0.3)
    spin = "# cpumon-test\nimport time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass\n"
    subprocess.run([sys.executable, "-c", spin], check=True)
    time.sleep(0.3)
    stop.touch()
    t.join(timeout=30)
    mine = {k: v for k, v in got["by_category"].items() if "cpumon-test" in k}
    assert mine and 0.3 <= sum(mine.values()) <= 2.0, got["by_category"]
    assert got["busy_cpu_s"] >= sum(mine.values()) * 0.8 and json.dumps(got)
    print(cpumon.table(got))
