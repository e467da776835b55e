"""The executed notebook (as HTML via nbconvert) and figures/index.html render in Chromium."""

from __future__ import annotations

import pytest
from browser_helpers import not_blank, open_page

pytestmark = pytest.mark.slow  # a browser per test


def test_executed_notebook_as_html_renders_its_plotly_figure(toy_demo, browser, tmp_path):
    import nbformat
    from nbconvert import HTMLExporter

    runs, _, _ = toy_demo
    nb = nbformat.read(runs / "toy" / "toy.ipynb", as_version=4)
    body, _ = HTMLExporter().from_notebook_node(nb)
    page_file = tmp_path / "toy.html"
    page_file.write_text(body)
    page, errors = open_page(browser, page_file.as_uri())
    plot = page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
    assert not_blank(plot.screenshot())
    assert page.locator(".js-plotly-plot").count() == 1
    assert "Traceback" not in page.content()
    assert not [e for e in errors if "plotly" in e.lower() or "uncaught" in e.lower()], errors
    page.close()


def test_figure_index_links_figures_to_runs_and_renders_them(toy_demo, browser):
    _, figures, _ = toy_demo
    index = figures / "index.html"
    assert sorted(p.name for p in (figures / "toy").iterdir()) == [
        "plotly.min.js",
        *(f"squares.{f}" for f in ("html", "pdf", "png", "svg")),
    ]
    page, errors = open_page(browser, index.as_uri())
    hrefs = page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")
    assert "../runs/demo/toy/toy.ipynb" in hrefs and "../runs/demo/toy/results.json" in hrefs
    assert all(not h.startswith(("/", "file:")) for h in hrefs)  # relative links only
    assert all((figures / h).resolve().exists() for h in hrefs)
    frame = page.frame_locator("iframe").first
    frame.locator(".main-svg").first.wait_for(timeout=60_000)
    assert not_blank(page.locator("iframe").first.screenshot())
    assert not errors, errors
    page.close()
    for link in ("toy/squares.png", "toy/squares.svg"):
        sub, sub_errors = open_page(browser, (figures / link).as_uri())
        assert not_blank(sub.screenshot()) and not sub_errors, link
        sub.close()
