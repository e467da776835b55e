"""The tour in a real browser: live in JupyterLab, and as a static export with scripts off and on.

Live: ``notebooks/tour.ipynb`` opened in a real ``jupyter lab`` (the ``lab`` fixture), run top to
bottom on a small tiny-lm with Lab's own run-all command. Then what a user sees: each card rendered
(titles, site names, table cells), the lens explorer's top-k panel changing when a cell is clicked,
the activation map redrawn when the layer slider moves.

Batch: papermill executes the tour (``store_widget_state=False``: with widget state saved, nbconvert
renders each widget view with a CDN script instead of its twin), nbconvert exports it to HTML, so
each explorer shows its static twin, and headless Chromium opens the export with scripts off, then
on: no output is blank and no script error is logged.

Screenshots go under the test's ``tmp_path/screenshots``; their paths are printed.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from browser_helpers import OPENED, SET_PARAMETERS_AND_RUN, STATE, not_blank

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TOUR = "tour.ipynb"
PANEL = """(el) => {
  const panel = Array.from(el.querySelectorAll('div')).find((d) => d.children.length > 1
    && d.firstElementChild.textContent.includes('lens, layer'));
  return panel ? panel.innerText : '';
}"""
"""The lens explorer's top-k panel text ('' before a cell is clicked)."""
CARDS = ("Subject", "Activations", "ActivationStore", "LensResult", "ProbeSweepResult",
         "PatchingResult")  # fmt: skip


def tour_params(tiny_lm: Path, out: Path) -> dict:
    return {
        "model": str(tiny_lm),
        "device": "cpu",
        "n_texts": 16,
        "max_length": 16,
        "probe_cv": 2,
        "out_dir": str(out),
    }


def _shots(tmp_path: Path) -> Path:
    folder = tmp_path / "screenshots"
    folder.mkdir(exist_ok=True)
    return folder


def _report(capsys, paths: list[Path]) -> None:
    with capsys.disabled():
        print()
        for path in paths:
            print(f"screenshot: {path}")


def test_tour_in_jupyterlab(lab_kernels_shut, browser, tiny_lm_dir, tmp_path, capsys):
    url, token, _ = lab_kernels_shut
    params = tour_params(tiny_lm_dir, tmp_path / "run")
    nb = nbformat.read(REPO / "notebooks" / TOUR, as_version=4)
    defaults = next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    source = defaults + "\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{url}/lab/tree/{TOUR}?reset&token={token}", wait_until="load")
    page.wait_for_function(OPENED, arg=TOUR, timeout=120_000)
    t0 = time.monotonic()
    assert page.evaluate(SET_PARAMETERS_AND_RUN, [TOUR, source]) == "started"
    state, deadline = "running", time.monotonic() + 300
    while state == "running" and time.monotonic() < deadline:
        time.sleep(1)
        state = page.evaluate(STATE, TOUR)
    assert state == "done", state
    seconds = time.monotonic() - t0
    shots = _shots(tmp_path)
    written = []

    # every card rendered as HTML: its title, site names in its tables, table cells
    outputs = page.locator(".jp-Notebook .jp-OutputArea-output")
    text = page.locator(".jp-Notebook").text_content()
    for card in CARDS:
        assert page.locator(".workbench-repr", has_text=card).count() >= 1, card
    assert text.count("CPU kernels") >= len(CARDS)  # each card's provenance footer
    assert page.locator(".workbench-repr td", has_text="resid_post").count() >= 3
    assert page.locator(".workbench-repr td", has_text="resid_post.1").count() >= 2  # probe, grid
    for fallback in ("Loading widget", "Error displaying widget", "Explorer("):
        assert fallback not in text, fallback
    assert outputs.count() >= 9

    # the lens explorer: click a cell, the top-k panel shows it; another cell, it changes
    lens = page.locator(".jp-OutputArea-output").filter(
        has=page.locator("option[value='last_block']")
    )
    assert lens.count() == 1
    lens.scroll_into_view_if_needed()
    assert "click a cell for its top tokens" in lens.inner_text()
    cells = lens.locator("td[title]")
    assert cells.count() >= 8
    cells.nth(1).click()
    shown = "([el, before]) => { const t = (" + PANEL + ")(el); return t && t !== before; }"
    page.wait_for_function(shown, arg=[lens.element_handle(), ""], timeout=10_000)
    first = lens.evaluate(PANEL)
    assert len([line for line in first.splitlines() if line.strip()[:2] == "0."]) >= 3, first
    written.append(shots / "lens-clicked.png")
    lens.screenshot(path=written[-1])
    cells.nth(cells.count() - 1).click()  # the last layer at the text's last position
    page.wait_for_function(shown, arg=[lens.element_handle(), first], timeout=10_000)
    second = lens.evaluate(PANEL)
    assert second.splitlines()[0] != first.splitlines()[0], (first, second)

    # the activations explorer: move the layer slider, the map is redrawn
    acts = page.locator(".jp-OutputArea-output").filter(has=page.locator("input[type=range]"))
    assert acts.count() == 1
    acts.scroll_into_view_if_needed()
    circles = "(el) => Array.from(el.querySelectorAll('circle')).map((c) => c.getAttribute('cx') + ',' + c.getAttribute('cy')).join(' ')"  # noqa: E501
    before = acts.evaluate(circles)
    label_before = acts.locator("div").first.inner_text()
    written.append(shots / "activations-before.png")
    acts.screenshot(path=written[-1])
    slider = acts.locator("input[type=range]")
    assert slider.input_value() == "0"
    box = slider.bounding_box()
    slider.click(position={"x": box["width"] - 2, "y": box["height"] / 2})  # to the last layer
    page.wait_for_function(
        f"([el, before]) => ({circles})(el) !== before",
        arg=[acts.element_handle(), before],
        timeout=10_000,
    )
    assert acts.evaluate(circles).count(",") == before.count(",")  # same points, new places
    assert acts.locator("div").first.inner_text() != label_before  # "layer 1" now
    written.append(shots / "activations-after.png")
    acts.screenshot(path=written[-1])

    # the patching explorer is live too
    grid = page.locator(".jp-OutputArea-output").filter(
        has_text="click a cell for its numbers and tokens"
    )
    assert grid.count() >= 1
    written.append(shots / "notebook.png")
    page.screenshot(path=written[-1], full_page=True)
    assert all(not_blank(p.read_bytes()) for p in written)
    assert not errors, errors
    page.close()
    _report(capsys, written)
    with capsys.disabled():
        print(f"tour ran in JupyterLab in {seconds:.0f} s")


@pytest.fixture(scope="module")
def exported(tiny_lm_dir, tmp_path_factory):
    """The tour executed and exported as the documentation site's page is: ``(html, seconds)``."""
    from workbench.runner.export import export_html

    tmp = tmp_path_factory.mktemp("tour-batch")
    params = tour_params(tiny_lm_dir, tmp / "run")
    return export_html(REPO / "notebooks" / TOUR, tmp / "tour.html", params, cwd=REPO)


def _outputs_not_blank(page) -> list[str]:
    """Each output area's text (an output with neither text nor picture fails)."""
    outputs = page.locator(".jp-OutputArea-output")
    texts = []
    for i in range(outputs.count()):
        out = outputs.nth(i)
        text = out.inner_text().strip()
        pictures = out.locator("img, svg, canvas").count()
        assert text or pictures, f"output {i} is blank: {out.inner_html()[:300]}"
        texts.append(text)
    return texts


@pytest.mark.parametrize("scripts", [False, True], ids=["scripts-off", "scripts-on"])
def test_tour_export_shows_every_output(exported, browser, scripts, tmp_path, capsys):
    path, seconds = exported
    context = browser.new_context(
        java_script_enabled=scripts, viewport={"width": 1200, "height": 900}
    )
    page = context.new_page()
    errors: list[str] = []
    external: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))

    def offline(route):  # the machine is offline; the export's CDN scripts (MathJax) are not ours
        if route.request.url.startswith(("http://", "https://")):
            external.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route("**/*", offline)
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_timeout(500)
    texts = "\n".join(_outputs_not_blank(page))
    for card in (*CARDS, "lens explorer", "activations explorer", "patching explorer"):
        assert card in texts, card
    assert "resid_post.1" in texts and "plain:" in texts
    assert page.locator(".workbench-repr td").count() > 50
    # the only failures are the blocked CDN requests, none from the workbench's own output
    unexpected = [e for e in errors if not e.startswith("Failed to load resource")]
    assert not unexpected, unexpected
    assert len([e for e in errors if e.startswith("Failed to load resource")]) <= len(external)
    assert all("workbench" not in url for url in external), external
    assert not scripts or external  # scripts on: the export did ask for its CDN scripts
    shot = _shots(tmp_path) / f"export-{'scripts' if scripts else 'noscripts'}.png"
    page.screenshot(path=shot, full_page=True)
    assert not_blank(shot.read_bytes())
    context.close()
    _report(capsys, [shot])
    with capsys.disabled():
        print(f"tour ran under papermill in {seconds:.0f} s; export {path}")
