"""The built wheel carries the hook files and the notebooks, and runs outside the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(REPO)],
        check=True,
        timeout=300,
    )  # fmt: skip
    (found,) = out.glob("workbench-*.whl")
    return found


def test_the_wheel_holds_every_notebook_and_hook_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for notebook in (REPO / "notebooks").glob("*.ipynb"):
        assert f"workbench/_notebooks/{notebook.name}" in names
    for family in (REPO / "hooks").glob("*.toml"):
        assert f"workbench/_hooks/{family.name}" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]


@pytest.mark.slow
def test_installed_wheel_lists_models_and_runs_an_analysis(wheel, tmp_path):
    """A fresh venv outside the repo: the wheel itself, dependencies shared with this venv."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # the dependencies come from this test's environment (a path entry, not its .pth files, so
    # this checkout's editable install stays out); workbench itself only from the wheel
    Path(site, "shared_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
        check=True, timeout=300,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_NOTEBOOKS")}
    env |= {"HF_HUB_OFFLINE": "1", "PYTHONNOUSERSITE": "1"}
    where = subprocess.run(
        [python, "-c", "import workbench; print(workbench.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
    ).stdout.strip()  # fmt: skip
    assert where.startswith(site), where  # the installed copy, not the checkout
    cli = venv / "bin" / "workbench"
    models = subprocess.run(
        [cli, "models"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert models.returncode == 0, models.stderr
    assert "minilm" in models.stdout and "llama" in models.stdout
    out = tmp_path / "run"
    run = subprocess.run(
        [cli, "run", "anisotropy", "-p", "model", "minilm", "-p", "checkpoints", "none",
         "-p", "n_texts", "8", "-p", "max_length", "16", "-p", "freq_texts", "8",
         "--formats", "html", "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    record = json.loads((out / "results.json").read_text())
    assert record["analysis"] == "anisotropy" and record["params"]["model"] == "minilm"
    assert len(record["metrics"]["per_layer"]) == 6
    assert (out / "figures" / "by_layer.html").is_file()
    # the capture's progress bar is an ipywidget in the kernel; a batch run saves no widget state
    # (with it, an nbconvert export renders widgets through a CDN script, blank offline)
    executed = json.loads(next(out.glob("*.ipynb")).read_text())
    assert "widgets" not in executed["metadata"]
