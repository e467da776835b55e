"""What produced a run: git commit, package versions, start time (filled in by the runner)."""

from __future__ import annotations

import functools
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

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
