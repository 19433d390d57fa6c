"""Does stopping a grading process whose kernel hangs hold back other processes' calls on its GPU, and for how
long? A: every thread of a full grid spinning for ever on clock64 (the hang mutants' kernel, through torch's
jiterator: no nvcc). B: calls in a loop on a side stream (a 10 ms or a 0.1 s torch.cuda._sleep, then a small
op), each timed. A is SIGKILLed, alone or as class grading does (the outer bwrap of a sandbox with its own PID
namespace; COURSE_BWRAP names bwrap); we watch A's processes until each has exited and B's slowest call around
the kill. `python3 benchmarks/hang_stop/run.py` (one GPU) prints a line per variant, also to $OUT/hang-stop.txt."""
import os, signal, subprocess, sys, time, json
HANG = r"""
import torch, sys
spin = torch.cuda.jiterator._create_jit_fn("template <typename T> T spin(T x) { for (long long t0 = clock64(); clock64() >= t0;) {} return x; }")
x = torch.ones(1 << 24, device='cuda'); torch.cuda.synchronize()
y = spin(x)   # every thread of a full grid spins for ever, as the hang mutant does
print('launched', flush=True); sys.stdin.read()
"""
LOOP = r"""
import torch, time, sys, json
x = torch.ones(1<<20, device='cuda'); torch.cuda.synchronize()
print('ready', flush=True)
out = []; t_end = time.time() + float(sys.argv[1])
while time.time() < t_end:
    t0 = time.time()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(int(sys.argv[2])); y = x * 2
    torch.cuda.synchronize()
    out.append((t0, time.time() - t0))
json.dump(out, open(sys.argv[3], 'w'))
"""
def state(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
def tree(pid):
    kids = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try: kids.setdefault(int(open(f"/proc/{e}/stat").read().rsplit(")",1)[1].split()[1]), []).append(int(e))
            except Exception: pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop(); out.append(p); todo += kids.get(p, [])
    return out
out_dir = os.environ.get("OUT", "/tmp")
log = open(os.path.join(out_dir, "hang-stop.txt"), "w")


def say(line):
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()


for sleep_cycles, label in ((20_000_000, "10 ms spin + tiny op"), (200_000_000, "side-stream 0.1 s spin")):
    for bwrap in (False, True):
        res = f"{out_dir}/loop-{sleep_cycles}-{bwrap}.json"
        b = subprocess.Popen([sys.executable, "-c", LOOP, "14", str(sleep_cycles), res], stdout=subprocess.PIPE, text=True)
        assert b.stdout.readline().strip() == "ready"
        argv = [sys.executable, "-c", HANG]
        if bwrap and os.environ.get("COURSE_BWRAP"):
            argv = [os.environ["COURSE_BWRAP"], "--dev-bind", "/", "/", "--proc", "/proc", "--unshare-pid", "--die-with-parent", "--new-session", *argv]
        a = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert a.stdout.readline().strip() == "launched", "hang did not launch"
        t_launch = time.time()
        time.sleep(3)
        pids = tree(a.pid)
        t_kill = time.time()
        if bwrap:
            a.kill()   # as the grader does: the outer bwrap only
        else:
            for p in pids: os.kill(p, signal.SIGKILL)
        a.wait(); t_wait = time.time()
        while any(state(p) not in (None, "Z", "X") for p in pids): time.sleep(0.005)
        t_gone = time.time()
        b.wait()
        calls = json.load(open(res))
        before = [d for t, d in calls if t < t_launch - 0.5]
        during = sorted(d for t, d in calls if t_launch + 0.2 < t < t_kill - 0.2)
        say(f"  B while A hangs: {len(during)} calls, median {during[len(during)//2] if during else 0:.4f} s, max {max(during) if during else 0:.4f}")
        around = [(t - t_kill, d) for t, d in calls if t_kill - 0.5 <= t <= t_gone + 2]
        worst = max(around, key=lambda c: c[1]) if around else None
        say(f"{label}, {'bwrap, outer killed' if bwrap else 'tree killed'}: pids {len(pids)}; wait() {t_wait - t_kill:.3f} s, "
            f"tree gone {t_gone - t_kill:.3f} s after the kill; B's calls before: median {sorted(before)[len(before)//2] if before else 0:.4f} s "
            f"max {max(before) if before else 0:.4f}; around the kill: slowest {worst[1]:.3f} s starting {worst[0]:+.3f} s; "
            f"calls around {len(around)}")
