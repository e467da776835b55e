"""Browser fixtures: a toy demo (executed notebook + gallery) and headless system Chromium."""

from __future__ import annotations

import contextlib
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
from browser_helpers import shutdown_kernels
from support import chromium_or_skip

DATA = Path(__file__).parents[1] / "runner" / "data"
REPO = Path(__file__).resolve().parents[2]
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A headless JupyterLab serving copies of the notebooks: ``(url, token, root)``."""
    tmp_path = tmp_path_factory.mktemp("jupyterlab")
    root = tmp_path / "lab"
    root.mkdir()
    # every cell stays in the page (Lab 4 otherwise drops cells scrolled out of view), so a test
    # can read every output
    tracker = tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    for notebook in (REPO / "notebooks").glob("*.ipynb"):
        shutil.copy(notebook, root / notebook.name)
    token, port = secrets.token_hex(16), free_port()
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        # kernels write HTML figures only, and results draw no PNG snapshot: static export is
        # tested elsewhere, and costs seconds
        "WORKBENCH_FORMATS": "html",
        "WORKBENCH_SNAPSHOTS": "0",
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


@pytest.fixture
def lab_kernels_shut(lab):
    """The Lab server, with every kernel shut down after the test."""
    yield lab
    shutdown_kernels(lab[0], lab[1])
