"""Helpers for the browser tests: pages with their errors, blank checks, driving JupyterLab."""

from __future__ import annotations

import contextlib
import io
import json
import urllib.request

import numpy as np
from PIL import Image


def open_page(browser, url: str):
    """A page at ``url`` with its console errors and page errors collected."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="load")
    return page, errors


def not_blank(png: bytes) -> bool:
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=float)
    return pixels.var() > 10


SET_PARAMETERS_AND_RUN = """
async ([name, source]) => {
  const app = window.jupyterapp;
  const panel = Array.from(app.shell.widgets('main')).find(
    (w) => w.context && w.context.path === name);
  if (!panel) { return 'notebook not open'; }
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

OPENED = """
(name) => {
  const app = window.jupyterapp;
  if (!app || !app.shell) { return false; }
  const panel = Array.from(app.shell.widgets('main')).find(
    (w) => w.context && w.context.path === name);
  return Boolean(panel && panel.content && panel.content.widgets.length > 3);
}
"""

SAVED = """
(name) => {
  const panel = Array.from(window.jupyterapp.shell.widgets('main')).find(
    (w) => w.context && w.context.path === name);
  return Boolean(panel && !panel.context.model.dirty);
}
"""

STATE = """
(name) => {
  const panel = Array.from(window.jupyterapp.shell.widgets('main')).find(
    (w) => w.context && w.context.path === name);
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


def shutdown_kernels(url: str, token: str) -> None:
    """Shuts down every kernel of the Lab server (a timed-out notebook would keep computing)."""
    with urllib.request.urlopen(f"{url}/api/kernels?token={token}", timeout=30) as r:
        kernels = json.loads(r.read())
    for kernel in kernels:
        request = urllib.request.Request(
            f"{url}/api/kernels/{kernel['id']}?token={token}", method="DELETE"
        )
        with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=30):
            pass
