"""Helpers shared by test modules: the system Chromium (or a skip CI turns into a failure) and
papermill runs of a notebook."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REQUIRE_BROWSER = "WORKBENCH_REQUIRE_BROWSER"
"""Set (as .ci/run does) to make a missing Chromium fail the browser tests instead of skipping."""


def chromium_or_skip() -> str:
    """The system Chromium, or skip the calling test (fail it when $WORKBENCH_REQUIRE_BROWSER)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    message = "needs Chromium (apt-get install chromium) for browser tests and static figures"
    if os.environ.get(REQUIRE_BROWSER):
        pytest.fail(f"{REQUIRE_BROWSER} is set but no Chromium was found: {message}")
    pytest.skip(message)


def run_notebook(
    notebook: Path, parameters: dict[str, Any], tmp_path: Path, cwd: Path | None = None
) -> tuple[Path, dict[str, Any]]:
    """Executes ``notebook`` under papermill with ``parameters`` and ``out_dir=tmp_path/run``.

    Returns:
        ``(out_dir, record)``: the run folder and its parsed ``results.json``.
    """
    papermill = pytest.importorskip("papermill")
    out = tmp_path / "run"
    papermill.execute_notebook(
        str(notebook),
        str(tmp_path / "executed.ipynb"),
        parameters={**parameters, "out_dir": str(out)},
        cwd=None if cwd is None else str(cwd),
        progress_bar=False,
        kernel_name="python3",
    )
    return out, json.loads((out / "results.json").read_text())


def ensure_default_tiny_lm() -> Path:
    """The default tiny-lm, trained once into ``$WORKBENCH_HOME`` when it is not cached yet.

    The claims tests need it: their claims are the default's, which the session's small tiny-lm
    is too undertrained to show. Tests never train it in-process (``tests/conftest.py`` forbids
    it), so it is trained as ``workbench train tiny-lm`` would be, in a child process; the
    cache's file lock (:func:`workbench.cache.trained`) makes every test worker (and the
    background start of ``conftest.py``) share one training. About 4.5 CPU-minutes on an idle
    core.
    """
    from workbench.cache import RECIPE_FILE
    from workbench.models.tiny_lm import default_path

    path = default_path()
    if not (path / RECIPE_FILE).is_file():
        code = "from workbench.models.tiny_lm import ensure_tiny_lm; ensure_tiny_lm()"
        subprocess.run([sys.executable, "-c", code], check=True)
    return path


def same_series_same_colour(fig) -> dict[str, str]:
    """Name -> colour over every coloured trace, failing on a name drawn in two colours."""
    from workbench.figures.style import series_colour

    colours: dict[str, str] = {}
    for t in fig.data:
        colour = series_colour(t)
        if t.name and colour is not None:
            assert colours.setdefault(t.name, colour) == colour, f"{t.name!r} changes colour"
    return colours
