"""The GPU verification report (grader/maintain/verify.py), on parts the CPU can judge: what it
builds, and that a failed build is a row of the report, not the end of it."""
from grader.maintain import verify


def test_build_jobs_skip_days_without_versions_and_python_module_exercises():
    labels = [j["label"] for j in verify._build_jobs(verify.Scope(["day14"]))]
    # Day 14 has no kernel versions of its own, and its capstone is a Python module: only the
    # RoPE exercise (a .cu file) is built, solution and stub.
    assert labels == ["day14.rope solution", "day14.rope stub"]
    labels = [j["label"] for j in verify._build_jobs(verify.Scope(["day12"]))]
    assert labels == ["day12 kernel versions", "day12.flash_attention solution", "day12.flash_attention stub"]


def test_a_failed_build_is_a_row_of_the_report():
    env = {"date": "today", "commit": "abc", "gpu": "GPU", "sm": "9.0", "sms": 132, "l2_mb": 60.0, "peak_gbps": 4800.0,
           "driver": "1", "torch": "2", "torch_cuda": "13.0", "nvcc": "13.0", "python": "3.12", "cpus": 2}
    failed = {"label": "day12 kernel versions", "ok": False, "error": "boom", "wall_s": 1.0}
    report = {"environment": env, "grading": [], "seconds": 12.0,
              "builds": {"first_build_with_pch_s": 10.0, "pch_existed": True, "cold": [failed], "cached": [failed],
                         "target_cold_s": 20.0, "target_cached_s": 1.0}}
    text = verify._markdown(report)
    assert "| day12 kernel versions | FAILED | - |" in text


def test_a_missed_mutant_says_what_the_grader_reported_instead():
    message = ("AssertionError: day14.decoder/x: expected a correctness failure saying 'differ'\n"
               "  day14.decoder: FAIL   (x.py, gpu mode)\n    PASS  source      entry points\n        use_kernels\n"
               "    FAIL  correctness bf16 batch 1\n        seed 0: RuntimeError: operation not permitted when stream is capturing\n")
    why = verify._missed_why(message)
    assert why.startswith("AssertionError: day14.decoder/x") and "PASS" not in why
    assert "FAIL  correctness bf16 batch 1 / seed 0: RuntimeError: operation not permitted" in why
