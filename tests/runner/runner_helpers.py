"""Helpers for the runner tests: the toy notebook folder, the CLI in a subprocess, run counting."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"


def cli_env() -> dict[str, str]:
    """The environment for a ``workbench`` subprocess that runs the toy notebook."""
    return {**os.environ, "WORKBENCH_NOTEBOOKS": str(DATA), "PYTHONUNBUFFERED": "1"}


def cli(*args: str) -> list[str]:
    """The command line of ``workbench ARGS`` with this interpreter."""
    return [sys.executable, "-m", "workbench.cli", *args]


def workbench(*args: str) -> subprocess.CompletedProcess:
    """Runs ``workbench ARGS`` in a subprocess to completion."""
    return subprocess.run(cli(*args), capture_output=True, text=True, env=cli_env(), timeout=400)


def write_grid(path: Path, text: str) -> Path:
    """Writes a grid YAML file; returns its path."""
    path.write_text(text)
    return path


def executions(marker: Path) -> collections.Counter:
    """How many times each ``n`` point executed (the toy notebook appends a line per run)."""
    if not marker.exists():
        return collections.Counter()
    return collections.Counter(line.split()[0] for line in marker.read_text().splitlines())


def table(out: Path) -> list[dict]:
    """A sweep's tidy table: ``results.parquet`` rows (``results.csv`` has as many lines)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "results.parquet").to_pylist()
    csv_lines = (out / "results.csv").read_text().strip().splitlines()
    assert len(csv_lines) == len(rows) + 1
    return rows
