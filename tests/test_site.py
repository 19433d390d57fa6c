"""The executed notebooks (site/executed/) and the static site built from them (`make site`): one executed
copy per notebook, of the notebook as it is now, that ran to the end; the site built from them without a
GPU, and in headless Chromium its pages show their plots and its links lead somewhere."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

from grader import paths
from grader.maintain import site

NOTEBOOKS = sorted((paths.ROOT / "notebooks").glob("day*.ipynb"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    assert site.build(out, echo=lambda s: None) == 0
    return out


def _sources(book) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in book.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_each_notebook_has_an_executed_copy_of_itself_that_ran_to_the_end(path):
    copy = site.EXECUTED / path.name
    assert copy.exists(), f"no executed copy of {path.name}: python -m grader.maintain.site execute --only {path.name[:5]}"
    book, ran = nbformat.read(path, as_version=4), nbformat.read(copy, as_version=4)
    assert _sources(ran) == _sources(book), (
        f"site/executed/{path.name} is not the notebook as it is now: regenerate it with "
        f"`python -m grader.maintain.site execute --only {path.name[:5]}` (on a GPU machine where you can)")
    run = ran.metadata.get("course_run", {})
    assert run.get("status") == "ok" and run.get("commit") and run.get("date"), run
    code = [c for c in ran.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "a code cell did not run"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)


def test_the_site_has_an_index_and_a_page_per_day_with_its_plots(built):
    index = (built / "index.html").read_text()
    for path in NOTEBOOKS:
        page = built / path.with_suffix(".html").name
        assert page.exists() and f'href="{page.name}"' in index
    for day in ("day02", "day10"):  # days that plot what they measured (or what the GPU report holds)
        page = next(built.glob(f"{day}_*.html")).read_text()
        assert page.count("data:image/png;base64,") >= 1, f"{day}: no plot on its page"
    # a progress line rewritten in place shows once, finished, as JupyterLab shows it
    for page in built.glob("day*.html"):
        text = page.read_text()
        assert "cached afterwards)...</pre>" not in text, f"{page.name}: a build line shown unfinished, then again"


def test_run_it_yourself_links_point_at_the_repository_where_it_is_published(monkeypatch):
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "someone/course")
    assert site._notebook_link(site.repository_url(), "day01_x.ipynb") == \
        "https://github.com/someone/course/blob/main/notebooks/day01_x.ipynb"
    monkeypatch.delenv("GITHUB_REPOSITORY")
    assert site._notebook_link(site.repository_url(), "day01_x.ipynb") == "../../notebooks/day01_x.ipynb"  # from site/_build


def _browser_why_not() -> str | None:
    from test_browser import _chromium

    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None if _chromium() else "no Chromium here (Debian/Ubuntu: apt-get install chromium; or set COURSE_CHROMIUM)"


@pytest.mark.browser
@pytest.mark.skipif(_browser_why_not() is not None, reason=str(_browser_why_not()))
def test_two_days_of_the_site_render_their_plots_and_every_link_resolves_in_a_browser(built):
    from playwright.sync_api import sync_playwright
    from test_browser import _chromium

    def local_links(page) -> list[str]:
        hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
        return [h for h in hrefs if h.startswith("file://")]

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), headless=True,
                              args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        page = b.new_page()
        page.goto((built / "index.html").as_uri())
        days = page.eval_on_selector_all("table tr td:first-child a", "els => els.map(e => e.href)")
        assert len(days) == len(NOTEBOOKS)
        for href in local_links(page):
            target = Path(unquote(urlparse(href).path))
            assert target.exists(), f"index.html links to {target}, which is not there"
        for day in ("day02", "day10"):
            page.goto(next(built.glob(f"{day}_*.html")).as_uri())
            page.wait_for_load_state("load")
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => ({done: e.complete, width: e.naturalWidth}))")
            assert images and all(i["done"] and i["width"] > 0 for i in images), json.dumps(images)[:500]
            for href in local_links(page):
                target = Path(unquote(urlparse(href).path))
                assert target.exists() or urlparse(href).fragment, f"{day}: a link to {target}, which is not there"
        b.close()
