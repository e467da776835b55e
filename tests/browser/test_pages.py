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
        "figures.json",
        "plotly.min.js",
        *(f"squares.{f}" for f in ("html", "pdf", "png", "svg")),
    ]
    page, errors = open_page(browser, index.as_uri())
    hrefs = page.eval_on_selector_all("a", "els => els.map(e => e.getAttribute('href'))")
    assert "../runs/demo/toy/toy.ipynb" in hrefs and "../runs/demo/toy/results.json" in hrefs
    assert all(not h.startswith(("/", "file:")) for h in hrefs)  # relative links only
    assert all((figures / h).resolve().exists() for h in hrefs)
    # the run's parameters and commit stand beside the analysis
    summary = page.locator("section#toy .run").inner_text()
    assert "commit" in summary and "n=8" in summary and "out_dir" not in summary
    # the PNG links to the interactive page
    link = page.locator("figure[data-figure=squares] a").first
    assert link.get_attribute("href") == "toy/squares.html"
    assert not errors, errors
    page.close()
    for name in ("toy/squares.png", "toy/squares.svg", "toy/squares.html"):
        sub, sub_errors = open_page(browser, (figures / name).as_uri())
        if name.endswith(".html"):
            sub.locator(".main-svg").first.wait_for(timeout=60_000)
        assert not_blank(sub.screenshot()) and not sub_errors, name
        sub.close()


WHOLE = """
() => Array.from(document.querySelectorAll('figure.figure')).map(f => {
  const inner = f.querySelector('img, iframe');
  const box = inner.getBoundingClientRect();
  const out = {name: f.dataset.figure, right: box.right, width: box.width, view: innerWidth};
  if (inner.tagName === 'IMG') {
    out.loaded = inner.complete && inner.naturalWidth > 0;
    out.ratio = box.width / box.height;
    out.natural = inner.naturalWidth / inner.naturalHeight;
  }
  return out;
})
"""


@pytest.mark.parametrize("static", [True, False], ids=["png", "html-only"])
def test_gallery_shows_every_figure_whole(toy_demo, browser, tmp_path, static):
    """Each figure fits the 1400 px page: images keep their aspect, iframes never scroll."""
    import json
    import shutil

    import plotly.graph_objects as go

    from workbench.figures import style
    from workbench.figures.export import write_html
    from workbench.runner.demo import index_page

    _, figures, result = toy_demo
    folder = tmp_path / "gallery"
    shutil.copytree(figures / "toy", folder / "toy")
    manifest = json.loads((folder / "toy" / "figures.json").read_text())
    # a second, two-column-wide figure: the size a paper's full-width panel has
    wide = dict(manifest["figures"][0], name="wide", width=980, height=320, files=["wide.html"])
    manifest["figures"].append(wide)
    (folder / "toy" / "figures.json").write_text(json.dumps(manifest))
    panel = go.Figure(go.Heatmap(z=[[1, 2, 3], [3, 1, 2]]))
    write_html(style(panel, title="Wide", width=980, height=320), folder / "toy" / "wide.html")
    kept = (".pdf", ".svg", ".png", ".html") if static else (".html",)
    files = [f for f in sorted((folder / "toy").iterdir()) if f.suffix in kept]
    (folder / "index.html").write_text(index_page(folder, result.runs, {"toy": files}))
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto((folder / "index.html").as_uri(), wait_until="load")
    page.wait_for_timeout(1500)  # iframes draw their plots after load
    page.screenshot(path=str(tmp_path / "gallery.png"), full_page=True)
    shown = page.evaluate(WHOLE)
    assert [f["name"] for f in shown] == ["squares", "wide"]
    for fig in shown:
        assert fig["right"] <= fig["view"], fig  # inside the page, no horizontal scrolling
        if "natural" in fig:
            assert fig["loaded"] and abs(fig["ratio"] - fig["natural"]) < 0.02, fig  # not cropped
    frames = page.query_selector_all("figure.figure iframe")
    assert len(frames) == (1 if static else 2)
    for handle in frames:
        frame = handle.content_frame()
        frame.wait_for_selector(".main-svg", timeout=60_000)
        scroll_w, scroll_h, view_w, view_h = frame.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.scrollHeight,"
            " innerWidth, innerHeight]"
        )
        assert scroll_w <= view_w and scroll_h <= view_h, (scroll_w, scroll_h, view_w, view_h)
    page.close()
