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


def test_a_grading_processs_stage_is_read_from_what_it_wrote(tmp_path):
    """The stage a wait is counted under: from the grading process's folder (its command line names its
    config there) and what its results file says so far."""
    worker = f"python3 -m grader.check.worker --wait {tmp_path}/config.json --after"
    assert cpumon._worker_folder(worker) == str(tmp_path)
    assert cpumon._worker_folder(f"python3 -m grader.check.worker {tmp_path}/config.json") == str(tmp_path)
    assert cpumon.grading_stage(str(tmp_path)) == "starting"
    (tmp_path / "warm-ready").write_text("{}")
    assert cpumon.grading_stage(str(tmp_path)) == "waiting for its submission"
    results = tmp_path / "results.jsonl"
    stages = []
    for line in ['{"event": "start", "name": "module checks"}', '{"event": "ready", "t": 1}',
                 '{"event": "phase", "name": "44 cases x 4 seeds", "seconds": 1}',
                 '{"event": "phase", "name": "paused while another grading on this GPU timed", "seconds": 1}',
                 'not json', '{"event": "done", "t": 2}']:
        with open(results, "a") as f:
            f.write(line + "\n")
        stages.append(cpumon.grading_stage(str(tmp_path)))
    assert stages == ["module loading", "cases", "after 44 cases x 4 seeds", "after 44 cases x 4 seeds",
                      "after 44 cases x 4 seeds", "exiting"]
    assert [cpumon._wait_kind(d) for d in ("R", "D ioctl os_acquire_rwlock_write", "D ioctl uvm_gpu_release",
                                           "S syscall 270 poll_schedule_timeout")] == \
        ["running", "driver lock", "driver, other", "asleep"]
