"""What produced a run: git commit, package versions, start time.

A leaf module (standard library only) shared by :mod:`workbench.figures`, which embeds provenance in
every exported figure, and :mod:`workbench.runner`, which completes ``results.json``. The runner
tells the notebook's kernel which run it is executing through the environment variable
:data:`PROVENANCE_ENV` (a JSON record: analysis, parameters, commit, start time);
:func:`run_record` reads it back on the kernel's side.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

PROVENANCE_ENV = "WORKBENCH_PROVENANCE"
"""Environment variable through which the kernel (and ``figures.export``) learns its run."""
PACKAGES = ("workbench", "torch", "transformers", "numpy", "plotly", "kaleido", "papermill")
"""Packages whose versions every ``results.json`` records."""


def now_iso() -> str:
    """The current time as ISO-8601 with the UTC offset."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@functools.cache
def versions() -> dict[str, str | None]:
    """Installed versions of :data:`PACKAGES` (``None`` where absent) and of Python."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    return out


@functools.cache
def git_state(root: str | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the workbench code's git repository, or ``(None, None)``."""
    where = root or str(Path(__file__).resolve().parent)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=20,
        )
        return commit.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def run_record() -> dict[str, object]:
    """The run this process executes for ``workbench run`` (empty outside a run).

    Returns:
        The JSON record the runner put in :data:`PROVENANCE_ENV`, or ``{"run": text}`` when the
        variable is not JSON.
    """
    text = os.environ.get(PROVENANCE_ENV)
    if not text:
        return {}
    try:
        record = json.loads(text)
    except ValueError:
        return {"run": text}
    return record if isinstance(record, dict) else {"run": text}
