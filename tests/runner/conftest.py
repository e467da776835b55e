"""Runner fixtures: every runner test runs the toy notebook of ``tests/runner/data``."""

from __future__ import annotations

from pathlib import Path

import pytest
from runner_helpers import DATA


@pytest.fixture(autouse=True)
def toy_notebooks(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Points the runner at ``tests/runner/data`` (``toy.ipynb``)."""
    monkeypatch.setenv("WORKBENCH_NOTEBOOKS", str(DATA))
    return DATA
