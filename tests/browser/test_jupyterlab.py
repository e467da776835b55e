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

from workbench import analyses

pytestmark = pytest.mark.slow  # a browser per test


def small_params(analysis: str, tiny_lm: Path) -> dict:
    """Small parameters for each analysis (seconds to a minute each)."""
    model = str(tiny_lm)
    return {
        "anisotropy": {
            "model": model,
            "n_texts": 12,
            "max_length": 16,
            "max_points": 200,
            "freq_texts": 200,
            "tangent_rank": 4,
            "tangent_fit": 1,
            "device": "cpu",
        },
        "readouts": {
            "model": model,
            "n_texts": 12,
            "tuned_texts": 24,
            "tuned_steps": 30,
            "max_length": 16,
            "probe_cv": 2,
            "probe_seeds": 1,
            "steer_random": 2,
            "device": "cpu",
        },
        "concept_oscillation": {
            "n_cases": 40,
            "toy_steps": 60,
            "toy_target_kl": 0,
            "n_bootstrap": 100,
        },
        # toy_steps is a cap: the AcMAS toy trains until its injected behaviour is learned
        "acmas": {"schedule": "sync", "n_tasks": 4, "n_calib": 4},
        "geometric_memory": {
            "degree": 3,
            "path_length": 2,
            "epochs": 60,
            "path_epochs": 20,
            "incontext_epochs": 0,
            "ingredients": False,
            "umap": False,
            "device": "cpu",
        },
        "depth_ensemble": {
            "model": model,
            "n_texts": 8,
            "max_length": 16,
            "toy_depths": "1,2,3",
            "toy_steps": 20,
            "toy_pool": 512,
            "lens_steps": 5,
            "bootstrap": 10,
            "device": "cpu",
        },
    }[analysis]


ANALYSES = list(analyses.ANALYSES)
"""Every analysis: its notebook is driven in JupyterLab (`small_params` must know it)."""
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
