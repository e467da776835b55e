"""JupyterLab smoke test: every analysis notebook opened, parameterized and run in Chromium.

One real ``jupyter lab`` server is started on loopback with a random token and its app exposed to
the page (``--expose-app-in-browser``), serving copies of the notebooks. For each analysis the test
sets the notebook's ``parameters`` cell through Lab's document model (small parameters), runs every
cell with Lab's own ``notebook:run-all-cells`` command, then checks what a user would see: one
plotly figure per figure the run wrote, drawn by the JupyterLab plotly renderer and not blank, no
cell with an error (in the page and in the saved notebook), and, where the study shows progress, the
tqdm bar rendered as an ipywidget.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from browser_helpers import (
    OPENED,
    SAVED,
    SET_PARAMETERS_AND_RUN,
    STATE,
    not_blank,
)

pytestmark = pytest.mark.slow  # a browser per test


def small_params(analysis: str, tiny_lm: Path) -> dict:
    """Small parameters of the study driven here (seconds)."""
    assert analysis == "anisotropy", analysis
    return {
        "model": str(tiny_lm),
        "n_texts": 12,
        "max_length": 16,
        "max_points": 200,
        "freq_texts": 200,
        "tangent_rank": 4,
        "tangent_fit": 1,
        "device": "cpu",
    }


ANALYSES = ["anisotropy"]
"""The study notebook driven in JupyterLab: anisotropy's, whose progress bars are ipywidgets and
whose figures cover plotly's traces (lines, heatmaps, scatter). Every study's notebook runs under
papermill in its own tests and every figure kind of every study is drawn there; the tour, driven
here too (tests/browser/test_tour.py), covers the explorers. Running each study again in Lab cost
about 100 s of the suite and checked the same renderer."""
WIDGET_BARS = {"anisotropy"}


@pytest.mark.parametrize("analysis", ANALYSES)
def test_notebook_runs_in_jupyterlab(analysis, lab_kernels_shut, browser, tiny_lm_dir, tmp_path):
    url, token, root = lab_kernels_shut
    notebook = f"{analysis}.ipynb"
    out = tmp_path / "out"
    values = {**small_params(analysis, tiny_lm_dir), "out_dir": str(out)}
    parameters = "\n".join(f"{name} = {value!r}" for name, value in values.items())
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page_errors: list[str] = []
    page.on("pageerror", lambda e: page_errors.append(str(e)))
    # ?reset: a fresh workspace, so the previous test's notebook is not restored beside this one
    # (it was: the parameters went to whichever notebook Lab showed first)
    page.goto(f"{url}/lab/tree/{notebook}?reset&token={token}", wait_until="load")
    page.wait_for_function(OPENED, arg=notebook, timeout=120_000)
    assert page.evaluate(SET_PARAMETERS_AND_RUN, [notebook, parameters]) == "started"

    deadline = time.monotonic() + 480
    state = "running"
    while state == "running" and time.monotonic() < deadline:
        time.sleep(1)
        state = page.evaluate(STATE, notebook)
    assert state == "done", state

    record = json.loads((out / "results.json").read_text())
    assert record["analysis"] == analysis
    assert all(record["params"][k] == v for k, v in values.items() if k != "out_dir")
    assert all(f.endswith(".html") for f in record["figures"])  # the server's WORKBENCH_FORMATS
    shown = {Path(f).stem for f in record["figures"]}
    # plotly's JupyterLab renderer drew every figure of the run
    plots = page.locator(".jp-OutputArea .js-plotly-plot")
    assert plots.count() == len(shown), (plots.count(), sorted(shown))
    for i in range(plots.count()):
        plot = plots.nth(i)
        plot.scroll_into_view_if_needed()
        assert plot.locator(".main-svg").count() > 0
        assert not_blank(plot.screenshot()), f"plotly figure {i} is blank"
    if analysis in WIDGET_BARS:  # tqdm.auto rendered its bar as an ipywidget, not as text
        bars = page.locator(".jp-OutputArea .widget-hprogress .progress-bar")
        assert bars.count() >= 1
    text = page.locator(".jp-Notebook").inner_text()
    for fallback in ("Loading widget", "Error displaying widget", "HBox(children"):
        assert fallback not in text
    assert not page_errors, page_errors

    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function(SAVED, arg=notebook, timeout=30_000)
    page.close()
    saved = json.loads((root / notebook).read_text())
    code = [c for c in saved["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] for c in code)
    assert not [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
