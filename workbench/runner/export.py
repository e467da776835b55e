"""A notebook executed in batch and exported as one static HTML page (the site's tour page).

Papermill executes the notebook *without* saving widget state: with widget state in the notebook,
nbconvert renders each widget view (the explorers, transformers' progress bars) through a script
loaded from a CDN instead of the static HTML twin the same output already carries, and the page
is blank offline or with scripts off. Figure snapshots are switched off (the export shows each
card's HTML, never its PNG). The page is written atomically.

Example::

    page = export_html("notebooks/tour.ipynb", "site-src/tour.html", {"n_texts": 16})
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.display.bundle import SNAPSHOT_ENV
from workbench.files import atomic_write_bytes
from workbench.runner.run import environment


def export_html(
    notebook: str | os.PathLike[str],
    page: str | os.PathLike[str],
    parameters: Mapping[str, Any] | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
) -> tuple[Path, float]:
    """Executes ``notebook`` with papermill and writes it as one static HTML page.

    Args:
        notebook: The notebook to execute.
        page: The HTML file to write (its folder is created).
        parameters: Values for the notebook's parameters cell.
        cwd: The kernel's working directory (default: the notebook's folder).
        timeout: Per-cell timeout in seconds (``None``: no limit).

    Returns:
        The page's path and the seconds the execution took.
    """
    import papermill
    from nbconvert import HTMLExporter

    source = Path(notebook).resolve()
    target = Path(page)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="export-") as tmp:
        executed = Path(tmp) / source.name
        t0 = time.perf_counter()
        with environment({SNAPSHOT_ENV: "0"}):
            papermill.execute_notebook(
                str(source),
                str(executed),
                parameters=dict(parameters or {}),
                cwd=str(cwd or source.parent),
                progress_bar=False,
                log_output=False,
                execution_timeout=timeout,
                store_widget_state=False,
            )
        seconds = time.perf_counter() - t0
        body, _ = HTMLExporter(template_name="lab").from_filename(str(executed))
    atomic_write_bytes(target, body.encode())
    return target, seconds
