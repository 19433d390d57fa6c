"""The course as people first meet it: its notebooks executed, with their outputs, as a static site.

`python -m grader.maintain.site execute [--only day07 ...]` runs each notebook top to bottom with the
reference solutions (nbclient, as `jupyter nbconvert --execute` does) and writes the executed copy to
site/executed/, stamped in its metadata with the machine, GPU, date and commit it ran on. On a GPU
machine that is the GPU's outputs; without one, the compile-only run's (kernels built and their SASS
checked, GPU steps skipped with the reason, plots redrawn from the committed GPU reports). The copies
are regenerated, never edited.

`python -m grader.maintain.site build [--out site/_build]` (`make site`) turns the executed copies into
HTML with nbconvert (outputs, plots embedded) and writes an index: the table of days, each day's stamp,
and how to run the day yourself. It needs no GPU and runs in seconds.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import html
import os
import sys
import time
from pathlib import Path

from .. import machine, paths

EXECUTED = paths.ROOT / "site" / "executed"
BUILD = paths.ROOT / "site" / "_build"
CELL_TIMEOUT_S = 1800  # a cell may compile a day's kernels from a cold cache on 2 cores


def notebooks(only: list[str] | None = None) -> list[Path]:
    books = sorted(paths.NOTEBOOKS.glob("day*.ipynb"))
    return [p for p in books if not only or p.name[:5] in only]


def _gpu() -> str:
    if not machine.has_gpu():
        return ""
    import torch

    return torch.cuda.get_device_name()


def stamp() -> dict:
    """Where and when a notebook was executed: GPU ('' without one), mode, date, commit (as the GPU reports
    name it: runs.commit)."""
    from .runs import commit

    return {"gpu": _gpu(), "mode": machine.mode(), "commit": commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def execute(only: list[str] | None = None, out: Path = EXECUTED, echo=functools.partial(print, flush=True)) -> int:
    """Each notebook executed with the solutions into `out`; 1 if one of them stopped on an error."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    out.mkdir(parents=True, exist_ok=True)
    os.environ["COURSE_USE_SOLUTIONS"] = "1"
    failed = 0
    books = notebooks(only)
    for path in books:
        t0 = time.perf_counter()
        book = nbformat.read(path, as_version=4)
        client = NotebookClient(book, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        status = "ok"
        try:
            client.execute()
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:  # the copy keeps what ran, up to it
            status = f"stopped on an error: {(str(e).strip().splitlines() or [type(e).__name__])[-1][:200]}"
            failed += 1
        book.metadata["course_run"] = dict(stamp(), status=status)
        nbformat.write(book, out / path.name)
        echo(f"{path.name}: {status} in {time.perf_counter() - t0:.0f} s")
    gpu = _gpu()
    echo(f"{len(books) - failed} of {len(books)} notebooks ran top to bottom "
         f"{'on an ' + gpu if gpu else 'without a GPU (compile-only)'}; copies in {out}")
    return 1 if failed else 0


def _stamp_line(run: dict) -> str:
    where = f"on an {run['gpu']}" if run.get("gpu") else "without a GPU (compile-only: GPU steps skipped, plots from the committed GPU reports)"
    return f"executed {where}, {run.get('date', '?')}, commit {run.get('commit', '?')}"


INDEX = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; }
table { border-collapse: collapse; width: 100%; } td, th { border: 1px solid #ccc; padding: .4rem .6rem; vertical-align: top; }
th { background: #f4f4f4; text-align: left; } code { background: #f4f4f4; padding: 0 .2rem; } .stamp { color: #555; font-size: .9em; }
</style></head><body>
<h1>{{ title }}</h1>
<p>Fourteen days of CUDA toward kernels like FlashInfer's, as executable Jupyter notebooks, each with an exercise
that a grader checks for correctness, speed against a baseline timed in the same run, and the lesson's technique
in the SASS. These pages are the notebooks as they ran, outputs included.</p>
<p>Run a day yourself: clone {% if repo %}<a href="{{ repo }}">the repository</a>{% else %}the repository{% endif %},
then <code>make lab</code> (it sets up the course and opens JupyterLab), and open the day's notebook from
<code>notebooks/</code>.</p>
<table><tr><th>day</th><th>topic</th><th>exercise</th><th>notebook</th></tr>
{% for d in days %}<tr><td><a href="{{ d.page }}">{{ d.number }}</a></td><td>{{ d.topic }}</td><td>{{ d.exercises }}</td>
<td><a href="{{ d.page }}">{{ d.title }}</a><div class="stamp">{{ d.stamp }}</div>
<div><a href="{{ d.notebook }}">the notebook, to run yourself</a></div></td></tr>
{% endfor %}</table>
</body></html>
"""


def _title(book) -> str:
    for cell in book.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def repository_url() -> str:
    """Where the site's "run it yourself" links point: the repository on its host when the site is built by
    the publishing workflow (GitHub Actions sets GITHUB_SERVER_URL and GITHUB_REPOSITORY), else "" (the
    checkout the site was built from: _notebook_link)."""
    host, repo = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    return f"{host}/{repo}" if host and repo else ""


def _notebook_link(repo: str, name: str, out: Path = BUILD) -> str:
    """A notebook on the repository's host, or in the checkout, relative to the site's folder `out`."""
    if repo:
        return f"{repo}/blob/main/notebooks/{name}"
    return Path(os.path.relpath(paths.NOTEBOOKS / name, out.resolve())).as_posix()


def build(out: Path = BUILD, source: Path = EXECUTED, echo=print) -> int:
    """The site from the executed notebooks in `source`: one page per day and index.html."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor

    from .. import exercises
    from .days_table import TOPICS

    books = sorted(source.glob("day*.ipynb"))
    if not books:
        echo(f"no executed notebooks in {source}: run `python -m grader.maintain.site execute` first")
        return 1
    out.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="lab")
    # a progress line rewritten in place ("Building ...\r... built in 3.5 s.") shows once, as JupyterLab shows it
    exporter.register_preprocessor(CoalesceStreamsPreprocessor, enabled=True)
    by_day: dict[int, list] = {}
    for ex in exercises.all_exercises().values():
        by_day.setdefault(int(ex.day.removeprefix("day")), []).append(ex)
    days, repo = [], repository_url()
    for path in books:
        book = nbformat.read(path, as_version=4)
        body, _ = exporter.from_notebook_node(book)
        page = path.with_suffix(".html").name
        (out / page).write_text(body, encoding="utf-8")
        number = int(path.name[3:5])
        exs = by_day.get(number, [])
        days.append({"number": number, "page": page, "notebook": _notebook_link(repo, path.name, out), "title": _title(book) or path.stem,
                     "topic": html.unescape(TOPICS.get(number, "")).replace("`", ""),
                     "exercises": ", ".join(f"{ex.id} ({ex.title})" for ex in exs),
                     "stamp": _stamp_line(book.metadata.get("course_run", {}))})
    index = jinja2.Environment(autoescape=True).from_string(INDEX).render(
        title="A 14-day CUDA course, executed", repo=repo, days=days)
    (out / "index.html").write_text(index, encoding="utf-8")
    echo(f"wrote {out}: index.html and {len(days)} days")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.maintain.site", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("execute", help="execute the notebooks with the solutions into site/executed/")
    p.add_argument("--only", action="append", metavar="dayNN", help="a day; repeatable (default: all)")
    p.add_argument("--out", default=str(EXECUTED))
    p = sub.add_parser("build", help="build the static site from site/executed/ (make site)")
    p.add_argument("--out", default=str(BUILD))
    p.add_argument("--source", default=str(EXECUTED))
    args = parser.parse_args(argv)
    if args.command == "execute":
        return execute(args.only, Path(args.out))
    return build(Path(args.out), Path(args.source))


if __name__ == "__main__":
    sys.exit(main())
