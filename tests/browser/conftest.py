"""Browser fixtures: a toy demo (executed notebook + gallery) and headless system Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import chromium_or_skip

DATA = Path(__file__).parents[1] / "runner" / "data"
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def toy_demo(tmp_path_factory):
    """``workbench demo`` over the toy notebook: ``(runs dir, figures dir, DemoResult)``."""
    from workbench.runner.demo import run_demo

    root = tmp_path_factory.mktemp("demo")
    result = run_demo(root / "runs" / "demo", root / "figures", notebooks=DATA)
    assert not result.failed, result.failed
    return root / "runs" / "demo", root / "figures", result


@pytest.fixture(scope="session")
def browser():
    """Headless system Chromium driven by Playwright."""
    from playwright.sync_api import sync_playwright

    executable = chromium_or_skip()
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
