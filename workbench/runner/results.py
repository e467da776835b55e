"""``results.json`` for the runner: the record format lives in :mod:`workbench.records`.

Kept so that ``from workbench.runner.results import save_results`` (older notebooks, scripts)
goes on working; new code imports from :mod:`workbench.records`.
"""

from __future__ import annotations

from workbench.records import (
    COMPLETE,
    REQUIRED,
    RESULTS,
    complete_provenance,
    read_results,
    save_results,
)

__all__ = ["COMPLETE", "REQUIRED", "RESULTS", "complete_provenance", "read_results", "save_results"]
