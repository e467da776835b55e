"""JupyterLab smoke test: the anisotropy notebook opened, parameterized and run in Chromium.

A real ``jupyter lab`` server is started on loopback with a random token and its app exposed to the
page (``--expose-app-in-browser``). The test sets the notebook's ``parameters`` cell through Lab's
document model, runs every cell with Lab's own ``notebook:run-all-cells`` command, then checks what
a user would see: plotly figures rendered by the JupyterLab plotly renderer, the tqdm progress bar
rendered as an ipywidget, and no cell with an error (in the page and in the saved notebook).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from browser_helpers import not_blank

pytestmark = pytest.mark.slow  # a browser per test

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = "anisotropy.ipynb"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A headless JupyterLab serving a copy of the anisotropy notebook: ``(url, token, root)``."""
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / NOTEBOOK, root / NOTEBOOK)
    token, port = secrets.token_hex(16), free_port()
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
    }
    log = (tmp_path / "lab.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--expose-app-in-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "lab.log").read_text()
            status = f"{url}/api/status?token={token}"
            with contextlib.suppress(OSError), urllib.request.urlopen(status, timeout=5) as r:
                if r.status == 200:
                    break
            assert time.monotonic() < deadline, "jupyter lab did not start in 120 s"
            time.sleep(0.5)
        yield url, token, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


SET_PARAMETERS_AND_RUN = """
async (source) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  await panel.context.ready;
  await panel.sessionContext.ready;
  const tags = (cell) => cell.model.getMetadata('tags') || [];
  const cell = panel.content.widgets.find(
    (c) => c.model.type === 'code' && tags(c).includes('parameters'));
  if (!cell) { return 'no parameters cell'; }
  cell.model.sharedModel.setSource(source);
  app.commands.execute('notebook:run-all-cells');
  return 'started';
}
"""

STATE = """
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const outputs = panel.content.node.querySelectorAll(
    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
  for (const o of outputs) {
    if (o.textContent.includes('Traceback') || o.textContent.includes('Error')) {
      return 'error: ' + o.textContent.slice(0, 2000);
    }
  }
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.filter((c) => c.model.type === 'code');
  const done = cells.every((c) => c.model.executionCount !== null
    && !c.node.querySelector('.jp-InputPrompt').textContent.includes('*'));
  return (kernel && kernel.status === 'idle' && done) ? 'done' : 'running';
}
"""


def test_anisotropy_notebook_runs_in_jupyterlab(lab, browser, tiny_lm_dir, tmp_path):
    url, token, root = lab
    out = tmp_path / "out"
    parameters = "\n".join(
        [
            f"model = {json.dumps(str(tiny_lm_dir))}",
            'checkpoints = "all"',
            'layers = "all"',
            'site = "resid_post"',
            'text_source = "builtin:pydoc"',
            "n_texts = 12",
            "max_length = 16",
            "seed = 0",
            "max_points = 200",
            "freq_texts = 200",
            "tangent_rank = 4",
            "tangent_fit = 1",
            "tangent_null = 20",
            "batch_size = 16",
            'device = "cpu"',
            f"out_dir = {json.dumps(str(out))}",
        ]
    )
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page_errors: list[str] = []
    page.on("pageerror", lambda e: page_errors.append(str(e)))
    page.goto(f"{url}/lab/tree/{NOTEBOOK}?token={token}", wait_until="load")
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
        " && window.jupyterapp.shell.currentWidget.content"
        " && window.jupyterapp.shell.currentWidget.content.widgets.length > 3",
        timeout=120_000,
    )
    assert page.evaluate(SET_PARAMETERS_AND_RUN, parameters) == "started"

    deadline = time.monotonic() + 480
    state = "running"
    while state == "running" and time.monotonic() < deadline:
        time.sleep(1)
        state = page.evaluate(STATE)
    assert state == "done", state

    # plotly's JupyterLab renderer drew every figure of the run
    plots = page.locator(".jp-OutputArea .js-plotly-plot")
    assert plots.count() == 5  # by layer, heatmaps, curves, frequency, tangent
    for i in range(plots.count()):
        plot = plots.nth(i)
        plot.scroll_into_view_if_needed()
        assert plot.locator(".main-svg").count() > 0
        assert not_blank(plot.screenshot()), f"plotly figure {i} is blank"
    # tqdm.auto rendered its bar as an ipywidget (not the text fallback)
    bars = page.locator(".jp-OutputArea .widget-hprogress .progress-bar")
    assert bars.count() >= 1
    text = page.locator(".jp-Notebook").inner_text()
    for fallback in ("Loading widget", "Error displaying widget", "HBox(children"):
        assert fallback not in text
    assert not page_errors, page_errors

    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )
    page.close()
    saved = json.loads((root / NOTEBOOK).read_text())
    code = [c for c in saved["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] for c in code)
    assert not [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    record = json.loads((out / "results.json").read_text())
    assert record["params"]["n_texts"] == 12 and record["params"]["model"] == str(tiny_lm_dir)
    assert len(record["metrics"]["per_checkpoint"]) == 4 * 2
