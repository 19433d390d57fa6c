"""reports/README.md, the index of reports/: one row per run (its .md, .json and .log together) or per
folder of like files, saying what it shows (PATTERNS below, first match wins), the GPU, date and
commit it came from where the files say so (else from the file name, marked so), and which docs and
code cite it (a `reports/...` path, a glob, or a folder) or read it (READ_BY).

    python -m grader.maintain.reports_index           # rewrite reports/README.md
    python -m grader.maintain.reports_index --check   # only compare (tests/test_reports_index.py)

reports/ holds the latest report of each kind and the reports cited as evidence; older runs live in
git's history. Raw run outputs (CPU-monitor records, a class benchmark's graded folder) go to
reports/raw/ and reports/class/, which git ignores and this index leaves out.
"""
from __future__ import annotations

import fnmatch
import json
import re
import sys
from pathlib import Path

from .. import paths

COMMAND = "python -m grader.maintain.reports_index"
ROOT = paths.ROOT
REPORTS = ROOT / "reports"
INDEX = "README.md"
RUN_OUTPUTS = ("raw", "class")  # folders of reports/ that git ignores (.gitignore): not indexed
GROUPED = ("browser", "spare-lanes")  # folders of like files: one row for the folder
# pytest's output of a run goes in the run's row: (its name's prefix, the run's)
PYTEST_LOGS = (("pytest-notebooks", "gpu-notebooks"), ("notebooks-executed", "gpu-notebooks"),
               ("pytest-gpu-tests", "gpu-self-test"))
# Where citations are looked for, and in which files.
CITING = ("README.md", "docs", "grader", "tests", "kernels", "solutions", "notebooks", "benchmarks")
CITING_SUFFIXES = {".py", ".md", ".ipynb", ".cu", ".cuh", ".j2", ".toml", ".txt", ".sh", ".cfg", ".yml", ".yaml"}
SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}
# Not citations: this module and its test name report paths as examples.
NOT_CITING = ("grader/maintain/reports_index.py", "tests/test_reports_index.py")
CITATION = re.compile(r"reports/[A-Za-z0-9_.*<>/-]*[A-Za-z0-9_*>/]")
# Code that reads reports through names of its own (not a `reports/...` path).
READ_BY = {
    "gpu-verification*.json": "grader/nb.py",  # each exercise's newest solution row: plots without a GPU
    "gpu-verification.json": "grader/nb.py",
    "gpu-notebooks*.json": "grader/nb.py",  # the notebooks' measurements, the newest run's per label
    "class-grading.json": "grader/maintain/class_benchmark.py",  # a class benchmark keeps the earlier runs in it
}

SECTIONS = [
    ("verification", "GPU verification (`python -m grader verify --no-notebooks`)"),
    ("notebooks", "Notebook runs (`python -m grader verify --notebooks-only`)"),
    ("self-test", "Grader self-test (`python -m grader self-test`)"),
    ("class", "Class grading (`python -m grader class-benchmark N`, `grader.maintain.ray_check`)"),
    ("cpu", "CPU monitor of the class benchmarks (`python -m grader.maintain.cpumon`)"),
    ("loop", "The learner's loop (`benchmarks/learner_loop`)"),
    ("checks", "One-off checks on the GPU (`python -m grader check`, mutants)"),
    ("benchmarks", "Benchmarks and probes (`benchmarks/`, see benchmarks/README.md)"),
    ("browser", "Browser"),
]

# (section, regex on the path under reports/ without its suffix, what it shows). {what} is the name's
# qualifier: its words once the kind's prefix, commit hashes and GPU tags are taken out.
PATTERNS = [
    ("verification", r"gpu-verification",
     "The latest full verification on the H100: each day's kernels built cold and from the cache, every "
     "solution graded (must pass and meet its target) and every stub (must fail cleanly)"),
    ("verification", r"gpu-verification-[0-9a-f]{7}-\w+",
     "The latest full verification on another GPU (the same run as gpu-verification)"),
    ("verification", r"gpu-verification-(?P<what>.+)",
     "A verification of part of the course (`--only`): {what}"),
    ("notebooks", r"gpu-notebooks",
     "Every notebook executed with the solutions (nbval; nbclient with `--executed`), and what the notebooks "
     "measured: the numbers and plots a notebook shows where there is no GPU"),
    ("notebooks", r"gpu-notebooks-(?P<what>.+)",
     "The notebooks of {what} executed (nbval; nbclient with `--executed`); for each measurement the newest run is the one shown "
     "without a GPU"),
    ("notebooks", r"pytest-notebooks(-(?P<what>.+))?", "nbval's output of the notebook run of that name"),
    ("notebooks", r"gpu-ncu-jupyter",
     "`%%ncu` in a kernel that a Jupyter server started, run headless (`python -m grader ncu-jupyter`)"),
    ("self-test", r"gpu-self-test",
     "The latest full self-test: every known-wrong submission of tests/mutants caught, the grader's GPU "
     "tests, every solution's correctness over 20 seeds"),
    ("self-test", r"gpu-self-test-[0-9a-f]{7}-cut-at-540s",
     "A self-test cut short at its command's limit: the one false failure on record (day06.rmsnorm)"),
    ("self-test", r"gpu-self-test-(?P<what>.+)", "A self-test of part of the course (`--only`): {what}"),
    ("self-test", r"pytest-gpu-tests(-(?P<what>.+))?",
     "pytest's output of the self-test's GPU tests (the run of that name)"),
    ("self-test", r"gpu-rmsnorm-20-seeds-.+",
     "day06.rmsnorm's solution over 20 seeds, alone and six at once (after the false failure)"),
    ("class", r"class-grading",
     "The latest class benchmark: a synthetic class graded as an instructor would, on one GPU and two, "
     "and the projection to a class of 300 over every exercise; the .json keeps each configuration's "
     "latest run"),
    ("class", r"class-summary", "The latest class benchmark's score histogram (class grading draws it)"),
    ("class", r"class-grading-(?P<what>.+)", "A class benchmark's report: {what}"),
    ("class", r"class-benchmark-(?P<n>\d+)-lanes(?P<lanes>\d+)-(?P<g>\d)gpu(-(?P<what>.+))?",
     "The log of a class benchmark: {n} students, {lanes} lanes a GPU, {gpus}; {what}"),
    ("class", r"spare-lanes",
     "Spare lanes started beside a hang (reverted: graded no faster): class-benchmark logs and gradebooks"),
    ("class", r"ray-class-2gpu", "A class graded on a local Ray cluster of two GPUs against the host's own lanes"),
    ("class", r"ray-class-2gpu-oom-.+",
     "A Ray class run whose compute-sanitizer memcheck process ran out of host memory"),
    ("cpu", r"cpu/class-(?P<n>\d+)-(?P<g>\d)gpu-(?P<what>.+?)(-cpumon)?",
     "Where the host's CPU time went in a class benchmark of {n} students on {gpus}, and where the "
     "grading processes waited (.txt: the table; .json, where kept: the record); {what}"),
    ("cpu", r"cpu/host-.+-lscpu-.+", "lscpu of the host of the latest class benchmark"),
    ("cpu", r"cpu/topology-.+", "A host's CPU topology, and a CPU-bound loop on 32 busy CPUs against one"),
    ("loop", r"learner-loop-ab-.+",
     "A learner's check with its launch check in a second process (A) against one process (B)"),
    ("loop", r"learner-loop-.+",
     "Each Day 1-6 exercise checked as a learner does (first check, then after an edit), each stage's seconds"),
    ("loop", r"warm-start-.+",
     "`benchmarks/learner_loop/warm_start.py`: a grading process's torch import, CUDA context and profiler start"),
    ("loop", r"cupti-start-.+",
     "`benchmarks/learner_loop/cupti_start.py`: the launch check's profiler session's first start, variants"),
    ("checks", r"gpu-check-(?P<what>.+)", "`python -m grader check` on the GPU: {what}"),
    ("checks", r"gpu-mutants-(?P<what>.+)", "Known-wrong submissions graded on the GPU: {what}"),
    ("checks", r"gpu-device-state-.+", "`tests/test_device_state.py` on the GPU: a kernel file's variables found and put back"),
    ("checks", r"gpu-corpus-speed-.+",
     "Known-right submissions that missed a speed target in the self-test, checked one at a time beside the "
     "references (and a variant of one without its kernel printf)"),
    ("benchmarks", r"day07-skinny-sweep",
     "`benchmarks/day07_skinny_sweep`: stream-K and split-K variants of Day 7's skinny GEMM, the solution's design"),
    ("benchmarks", r"day07-no-math",
     "`benchmarks/day07_skinny_sweep/no_math.py`: Day 7's reads without the math, against the read ceiling"),
    ("benchmarks", r"day11-decode-sweep", "`benchmarks/day11_decode_sweep`: variants of Day 11's decode kernel"),
    ("benchmarks", r"day11-splits", "`benchmarks/day11_decode_sweep/splits.py`: Day 11's split counts and merge"),
    ("benchmarks", r"day11-ceiling",
     "`benchmarks/day11_decode_sweep/ceiling.py`: a page-by-page read of Day 11's KV cache against the read ceiling"),
    ("benchmarks", r"day11-candidate-(?P<what>.+)", "A candidate design of Day 11's kernel, timed: {what}"),
    ("benchmarks", r"day11-ladder", "`benchmarks/day11_ladder`: Day 11's versions, each against the read ceiling"),
    ("benchmarks", r"day10-hopper-(?P<gpu>h100|h200)",
     "`benchmarks/day10_hopper`: Day 10's Hopper versions, the wgmma exercise's solution and the cluster candidate, each against torch.matmul"),
    ("benchmarks", r"gemm-clocks", "`benchmarks/gemm_clocks`: clocks and power of the GEMM and cuBLAS"),
    ("benchmarks", r"l2-flush", "`benchmarks/l2_flush`: the L2 flush modes before a timed call"),
    ("benchmarks", r"mma-rate", "`benchmarks/mma_rate`: mma.sync's rate by warps and blocks"),
    ("benchmarks", r"ncu-stalls", "`benchmarks/ncu_stalls`: Nsight Compute's stall reasons, solutions against libraries"),
    ("benchmarks", r"one-wave-.+", "`benchmarks/one_wave`: traces of one-wave kernels (Days 7 and 11)"),
    ("benchmarks", r"read-bound-(?P<what>.+)", "A read-bound exercise's versions against the read ceiling: {what}"),
    ("benchmarks", r"read-ceiling", "`benchmarks/read_ceiling`: the read ceiling kernel's shape sweep"),
    ("benchmarks", r"smem-switch", "`benchmarks/smem_switch`: the shared-memory carve-out's effect"),
    ("benchmarks", r"variant-sweep-(?P<what>.+)", "`benchmarks/variant_sweep`: a solution's knobs swept: {what}"),
    ("benchmarks", r"racecheck-probe", "`benchmarks/racecheck_probe`: which shared-memory races racecheck reports"),
    ("benchmarks", r"gpu-neighbours-.+", "`benchmarks/gpu_neighbours`: one GPU's work slowing another's"),
    ("benchmarks", r"hang-stop-.+", "`benchmarks/hang_stop`: a stopped hang's process letting go of the GPU"),
    ("browser", r"browser", "Day 1 in JupyterLab, screenshots from tests/test_browser.py"),
]
UNDESCRIBED = "(no description: add a pattern to grader/maintain/reports_index.py)"

HASH = re.compile(r"^[0-9a-f]{7,40}$")
GPU_TAG = re.compile(r"^(\d+x)?[hab]\d{2,3}$")
ENV_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d UTC)(?:, commit ([0-9a-f]{7,40}))?: (NVIDIA [^,;(\n]+)")
GPU_TEXT = re.compile(r"NVIDIA (?:[A-Z]+ ?)?[A-Z]\d{2,3}[A-Za-z0-9 ]*")
READ_LIMIT = 400_000


def _is_hash(token: str) -> bool:
    return bool(HASH.match(token)) and any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _files() -> list[Path]:
    """Every file under reports/ but the index and the ignored run outputs."""
    out = []
    for p in sorted(REPORTS.rglob("*")):
        rel = p.relative_to(REPORTS)
        if not p.is_file() or rel.parts[0] in RUN_OUTPUTS or str(rel) == INDEX or rel.name.startswith("."):
            continue
        out.append(p)
    return out


def _groups(files: list[Path]) -> dict[str, list[Path]]:
    """{key: files}: a folder of GROUPED, else the path without its suffix (a run's .md, .json, .log)."""
    groups: dict[str, list[Path]] = {}
    for p in files:
        rel = p.relative_to(REPORTS)
        key = rel.parts[0] if rel.parts[0] in GROUPED else str(rel.with_suffix(""))
        for prefix, run in PYTEST_LOGS:
            if key == prefix or key.startswith(prefix + "-"):
                key = run + key[len(prefix):]
        groups.setdefault(key, []).append(p)
    return groups


def _describe(key: str) -> tuple[int, str, str]:
    """(its pattern's place in PATTERNS, section, what it shows) for a group's key."""
    for i, (section, pattern, text) in enumerate(PATTERNS):
        m = re.fullmatch(pattern, key)
        if m:
            fields = {k: v or "" for k, v in m.groupdict().items()}
            words = [t for t in fields.get("what", "").split("-") if t and not _is_hash(t) and not GPU_TAG.match(t)]
            fields["what"] = " ".join(words) or "-"
            g = fields.get("g", "")
            fields["gpus"] = f"{g} GPU" + ("" if g == "1" else "s")
            return i, section, text.format(**fields).replace("; -", "").replace(": -", "")
    return len(PATTERNS), "", UNDESCRIBED


def _read(p: Path) -> str:
    if p.suffix in (".png", ".jpg"):
        return ""
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            return f.read(READ_LIMIT)
    except OSError:
        return ""


def _from_json(text: str) -> dict:
    try:
        d = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(d, dict):
        return {}
    env = d.get("environment") if isinstance(d.get("environment"), dict) else {}
    gpu = env.get("gpu") or next((d[k] for k in ("gpu", "device") if isinstance(d.get(k), str)), None)
    return {"gpu": gpu, "date": env.get("date") or d.get("date"), "commit": env.get("commit") or d.get("commit")}


def _from_text(text: str) -> dict:
    first = text.split("\n", 1)[0]
    if first.startswith("{"):
        found = _from_json(first)
        if any(found.values()):
            return found
    m = ENV_LINE.search(text)
    if m:
        return {"date": m.group(1), "commit": m.group(2), "gpu": m.group(3).strip()}
    g = GPU_TEXT.search(text)
    return {"gpu": g.group(0).strip() if g else None}


def _run(paths: list[Path]) -> dict:
    """{gpu, date, commit} from the files (a .json's environment first, then a .md's line, a .log's),
    each filled from the file name where the files do not say (marked "(name)")."""
    info: dict = {}
    for p in sorted(paths, key=lambda p: ({".json": 0, ".md": 1, ".log": 2}.get(p.suffix, 3), p.name)):
        text = _read(p)
        found = _from_json(text) if p.suffix == ".json" else _from_text(text)
        for k, v in found.items():
            if v and v != "unknown" and not info.get(k):
                info[k] = str(v)
    tokens = [t for p in paths for t in re.split(r"[-.]", p.stem)]
    if not info.get("commit"):
        hashes = sorted({t for t in tokens if _is_hash(t)})
        if len(hashes) == 1:
            info["commit"] = f"{hashes[0]} (name)"
    if not info.get("gpu"):
        tags = sorted({t.upper().replace("X", " x ") for t in tokens if GPU_TAG.match(t)})
        if len(tags) == 1:
            info["gpu"] = f"{tags[0]} (name)"
    return info


def _runs(paths: list[Path]) -> dict:
    """A folder's runs: each one's GPU and commit, the first and last date."""
    each = [_run([p]) for p in paths]
    out = {k: ", ".join(sorted({r[k].replace(" (name)", "") for r in each if r.get(k)})) for k in ("gpu", "commit")}
    dates = sorted(r["date"] for r in each if r.get("date"))
    out["date"] = dates[0] if dates and dates[0] == dates[-1] else (f"{dates[0]} to {dates[-1]}" if dates else "")
    return {k: v for k, v in out.items() if v}


def _citing_files() -> list[Path]:
    out = []
    for top in CITING:
        base = ROOT / top
        if base.is_file():
            out.append(base)
            continue
        for p in sorted(base.rglob("*")):
            rel = p.relative_to(ROOT)
            if (p.is_file() and (p.suffix in CITING_SUFFIXES or p.name == "Makefile")
                    and not SKIP_DIRS.intersection(rel.parts) and str(rel) not in NOT_CITING):
                out.append(p)
    return out


def citations() -> dict[str, set[str]]:
    """{`reports/...` as written (a path, a glob, a folder ending in /): the files citing it}."""
    found: dict[str, set[str]] = {}
    for p in _citing_files():
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for c in CITATION.findall(text):
            c = c.rstrip(".")
            if c != "reports/":
                found.setdefault(c, set()).add(str(p.relative_to(ROOT)))
    return found


def matches(citation: str, rel_paths: list[str]) -> list[str]:
    """The files (paths under reports/) that a citation names: a path, a glob (`<hash>` counts as *),
    or a folder."""
    pattern = re.sub(r"<[^>]*>", "*", citation.removeprefix("reports/"))
    if pattern.endswith("/"):
        return [r for r in rel_paths if r.startswith(pattern)]
    return [r for r in rel_paths if fnmatch.fnmatchcase(r, pattern)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    files = _files()
    rels = [str(p.relative_to(REPORTS)) for p in files]
    cited_by: dict[str, set[str]] = {r: set() for r in rels}
    for c, sources in citations().items():
        for r in matches(c, rels):
            cited_by[r] |= sources
    for pattern, reader in READ_BY.items():
        for r in rels:
            if fnmatch.fnmatchcase(r, pattern):
                cited_by[r] = (cited_by[r] - {reader}) | {f"{reader} (reads it)"}
    rows: dict[str, list[str]] = {s: [] for s, _ in SECTIONS}
    rows[""] = []
    described = sorted((_describe(key), key, group) for key, group in _groups(files).items())
    for (_, section, what), key, group in described:
        run = _run(group) if key not in GROUPED else _runs(group)
        names = [str(p.relative_to(REPORTS)) for p in group]
        if key in GROUPED:
            links = f"[{key}/]({key}/) ({len(group)} files)"
        else:
            links = ", ".join(f"[{n}]({n})" for n in names)
        cites = sorted(set().union(*(cited_by[n] for n in names)))
        size = sum(p.stat().st_size for p in group)
        rows[section].append(
            f"| {links} | {_cell(what)} | {_cell(run.get('gpu', '-'))} | {_cell(run.get('date', '-'))} | "
            f"{_cell(run.get('commit', '-'))} | {_kb(size)} | {', '.join(f'`{c}`' for c in cites) or '-'} |")
    total = sum(p.stat().st_size for p in files)
    out = [
        "# reports/",
        "",
        f"Generated by `{COMMAND}`; do not edit. `tests/test_reports_index.py` checks that it is current,",
        "that it lists every file here, and that every `reports/...` path the docs and code cite exists.",
        "",
        "What the GPU runs and the benchmarks wrote: the latest report of each kind, and the older ones that",
        "docs or code cite as evidence. Older runs are in git's history (`git log -- reports/`). Raw run",
        "outputs (CPU-monitor records, a class benchmark's graded folder) go to `reports/raw/` and",
        "`reports/class/`, which git ignores. GPU, date and commit are what the files say; \"(name)\" marks",
        "one taken from the file's name. A report older than the last change to what it covers is stale.",
        "",
        f"{len(files)} files, {total / 1e6:.1f} MB.",
    ]
    header = ["| File | What it shows | GPU | Date | Commit | Size | Cited by |", "|---|---|---|---|---|---|---|"]
    for section, title in SECTIONS + [("", "Not described yet")]:
        if rows[section]:
            out += ["", f"## {title}", "", *header, *rows[section]]
    return "\n".join(out) + "\n"


def _kb(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{max(1, round(size / 1e3))} KB"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = REPORTS / INDEX
    text = render()
    if "--check" in argv:
        held = path.read_text(encoding="utf-8") if path.exists() else ""
        if held != text:
            print(f"DRIFT: {path.relative_to(ROOT)} is not what `{COMMAND}` writes now: run it and commit it")
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
