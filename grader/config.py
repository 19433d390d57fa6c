"""The values the grader decides once: check groups, seeds, time and memory limits.

Every module reads them from here (the CLI's and the pytest plugin's defaults included),
so a limit or a seed count is never decided in two places.
"""

# The checks of an exercise, in the order they run and are shown.
GROUPS = ("source", "sass", "build", "correctness", "work", "performance")

# Seeds: each correctness case runs on seeds 0 .. PUBLIC_SEEDS - 1, plus a secret seed in a
# graded run; the self-test runs every solution over FALSE_FAILURE_SEEDS seeds.
PUBLIC_SEEDS = 3
FALSE_FAILURE_SEEDS = 20
PROFILE_SEED = 0              # the profiled call and the untimed ncu run

# Device memory a kernel file may keep of its own (`__device__` variables, counted by ptxas as "gmem"):
# the only state a kernel can carry from one call to the next, so a cache of earlier results could
# live there. Counters, flags, printf's strings and small tables fit; an exercise whose reference
# needs more (a split-K workspace, curand's tables) says so in its spec (Exercise.device_globals_limit).
DEVICE_GLOBALS_LIMIT = 64 * 1024
DEVICE_GLOBALS_WITH_CURAND = 1024 * 1024  # curand_kernel.h alone brings ~213 KB of precomputed tables

# Time limits (seconds) of one grading process.
CHECK_TIMEOUT_S = 180.0       # a learner's check (an exercise may set its own)
CLASS_TIMEOUT_S = 60.0        # one submission in class grading: right ones take 5-20 s on an H200
SANITIZER_TIMEOUT_FACTOR = 4  # compute-sanitizer runs kernels 10-100x slower, on small cases only
# A process started before its work (the grading processes and ncu's, started beside the build) gives
# up after this long without it; it also ends when the check that started it is gone.
IDLE_WAIT_S = 3600.0
# The cases small enough to run under compute-sanitizer, per tool (racecheck instruments every
# shared-memory access: 22 s for Day 6's cases up to 4 MB on an H200; races show in small blocks too).
SANITIZE_MAX_BYTES = {"memcheck": 4 << 20, "racecheck": 1 << 20}
# Class grading (and the self-test) run every clean submission's small cases under these too
# (racecheck only where the SASS has shared memory or barriers); cached per build.
CLASS_SANITIZERS = ("memcheck", "racecheck")
# A learner's check runs its small cases under these too, where compute-sanitizer is installed: a read
# past the end of an input leaves the outputs right, and only memcheck sees it; a race between warps
# can leave them right on every seed, and only racecheck sees it (where the SASS has shared memory).
CHECK_SANITIZERS = ("memcheck", "racecheck")
# ... on its cases up to this size: the tails and misaligned rows where reads past the end happen, in
# seconds (memcheck on all of Day 5's cases up to 4 MB took over a minute)
CHECK_SANITIZE_MAX_BYTES = 256 << 10
# PyTorch's own kernels (the grader's input generation, references and comparisons) run under
# compute-sanitizer without its instrumentation: `--kernel-name-exclude kns=...` on these
# substrings of their names (at::native::..., at_cuda_detail::cub::...). Fail-safe: a filter
# that matched nothing would only check more. A submission's kernel may not use these names
# (the SASS checks refuse it), so no learner kernel escapes the check.
SANITIZER_SKIP_KERNELS = ("native", "at_cuda_detail")

# One call of the learner's code (the entry point, until its kernels have finished) that has not returned
# after this long is a hang: its grading process is stopped there, instead of at the whole check's time
# limit (under compute-sanitizer, SANITIZER_TIMEOUT_FACTOR times this). A right answer's slowest call is
# far below it (the self-test's report lists each solution's slowest, over 20 seeds). An exercise whose
# calls may run longer sets its own (spec.Exercise.run_limit_s). The grader's own work in a case (inputs,
# reference, comparison) is not counted: a statistical test over a 256k vocabulary took over 10 s on a
# host grading 24 checks at once.
RUN_LIMIT_S = 10.0
# torch's CPU threads in a grading process (its own work on the host: day08's statistics): checks
# grade side by side (class grading's lanes, the self-test's 24 on a 4-GPU host), and torch's default
# of a thread per core in each would have them all spin on every core. Given to the grading processes
# as OMP_NUM_THREADS too (pyenv.grading_env), where unset: OpenMP's threads, one per core, spin
# while torch is imported (2.2 of 6.0 CPU-s per import on a 16-core H100 host).
WORKER_CPU_THREADS = 4
# A folder set in this variable is the gate (check/gate.py) of every check_sharing_gpu() (check/shared_gpu.py)
# in processes that see it: the self-test runs its checks side by side on one GPU, each timing with it alone.
GATE_ENV = "COURSE_GPU_GATE"

# GPU memory a grading process keeps in torch's allocator from one case to the next (more is given back
# to the driver after the case: check/worker.release_case_memory). Allocating from the driver and
# freeing to it serialise across the GPUs of a host: on 2 x H200, 4 processes doing so on GPU 1 made a
# 256 MB cudaMalloc/cudaFree on GPU 0 take 3.9 ms instead of 1.4 and a case 6.1 ms instead of 3.2
# (reports/gpu-neighbours-2xh200.log). Class grading's lanes keep at most this much each on their GPU
# (4 x 4 GiB of an 80 GiB H100); day02's largest case stays under it. A check() keeps none (RunOptions.
# case_memory_kept): the self-test runs up to 20 grading processes on one GPU, a learner's shares the GPU
# with a notebook (blocks kept there gave the self-test a false failure: reports/gpu-self-test-45a95ef-cut-at-540s.log).
CASE_MEMORY_KEPT_BYTES = 4 << 30
# Out of GPU memory, a correctness case (check/worker._case_run) and a Python module's judge (check/judge.py)
# run again after each of these waits, their own cached memory given back: the other processes on the GPU
# hold theirs until their case ends (seven day14.decoder checks side by side in the self-test hold ~17 GiB
# each), and the judge waits outside the gate, so that a grading waiting for its turn to time can end.
OUT_OF_MEMORY_WAITS_S = (1.0, 8.0, 30.0)
# Host memory of one grading process in class grading.
CLASS_MEMORY_GB = 16.0
# Class grading: submissions graded side by side on each GPU, each timed with the GPU to itself
# (check/gate.py). Cases, compute-sanitizer and process starts fill the GPU's time between timings.
CLASS_LANES = 4
# (A kernel that hangs holds every timing on its GPU back until its run limit; no spare lanes are started
# beside it: the GPU shares its time with the spinning kernel, and they graded no faster: reports/spare-lanes/.)
# A grading asked to pause for another's timing that has not paused after this many seconds (a kernel
# running that long without returning: a hang, or a case far too slow) is stopped and graded again at
# the end with the GPU to itself, instead of holding every timing on its GPU until its time limit.
GATE_PAUSE_LIMIT_S = 10.0
# ... unless it is inside a call of the learner's code that RUN_LIMIT_S stops within this many seconds: a
# call begun just after the pause was asked, judged by its run limit as with no neighbour (supervise.overdue_pause).
PAUSE_RACE_S = 1.0
# A grading process stopped (a hang, a time or memory limit) is waited for this long at most until it and
# every process under it (bwrap's sandboxed worker, compute-sanitizer's target) have exited and let go of
# the GPU (supervise.stop_tree); its lane and its GPU's gate wait meanwhile.
STOP_WAIT_S = 30.0
# A grading whose call of the learner's code has lasted this long while another on its GPU was this long
# inside a call of its own (or ncu was at work there) is "contended": a kernel that hangs in one process can hold the calls of the
# others on its GPU back past their limit. A check that reaches a time limit so is graded again with
# the GPU to itself. Class grading does so with every time limit reached beside others, but a call
# stopped past the run limit (a hang) only if contended: beside calls shorter than this the GPU was
# its own but for their kernels. Kept short, so that a neighbour's long kernels count as contention.
CONTENDED_CALL_S = 0.5
# A timing whose pauses are not all said after this many seconds (a grading inside a long stretch of GPU
# work: a hang, a case under compute-sanitizer, a module loading) lets those already paused work on
# while it waits for the late ones alone, and asks them again after.
GATE_LAG_S = 0.25
# The class run's preparation processes (source and SASS checks, nvcc builds) run this much nicer than the
# lanes, which grade on the GPUs meanwhile: a GPU's pace is its lanes' (cases, compute-sanitizer), the
# builds only need to keep ahead of them (builds beside the lanes at full priority slowed each grading's
# cases and memcheck). Each from its second submission on: the first ones are what every lane waits for
# (classroom/grade.py, _below_the_gradings).
PREPARE_NICE = 10
# How often processes started ahead of a grading (supervise.WarmWorker) are checked against the host-memory
# limit while they wait (nothing supervises them then).
WAITING_WATCH_S = 1.0

# The GPU architectures the course is built and checked for (compute capability -> the GPUs learners
# have). CI compiles every kernel, solution and stub for each, with each exercise's SASS and spill
# checks; only Hopper (9.0) runs them here. An exercise runs from its spec's min_arch on (Days 1-6
# from Turing, 7.5; later days need Ampere's cp.async and bf16 mma, 8.0).
ARCHS = {
    "7.5": "Turing: T4",
    "8.0": "Ampere: A100",
    "8.6": "Ampere: RTX 30xx, A10, A40",
    "8.9": "Ada: RTX 40xx, L4, L40S",
    "9.0": "Hopper: H100, H200",
    "12.0": "Blackwell: RTX 50xx",
}
