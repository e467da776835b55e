"""Where the analysis notebooks live and which ones exist.

The notebooks are ``notebooks/<analysis>.ipynb`` at the repository root in a source checkout, and
``workbench/_notebooks/`` inside an installed wheel (the build copies them there as package data,
like the hook files). Tests and users with their own notebooks can point the runner elsewhere with
the ``WORKBENCH_NOTEBOOKS`` environment variable (or the ``notebooks_dir`` argument of the Python
API); any ``<name>.ipynb`` there can then be run.
"""

from __future__ import annotations

import os
from pathlib import Path

from workbench.analyses import ANALYSES, registry
from workbench.runner.errors import NotBuiltError, UnknownAnalysisError

ENV = "WORKBENCH_NOTEBOOKS"


def notebooks_dir(override: str | Path | None = None) -> Path:
    """The folder holding the analysis notebooks (argument, env or the repo's)."""
    if override is not None:
        return Path(override)
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent / "notebooks"
    return checkout if checkout.is_dir() else package / "_notebooks"


def _custom(override: str | Path | None) -> bool:
    return override is not None or bool(os.environ.get(ENV))


def available(override: str | Path | None = None) -> list[str]:
    """The analyses that can run now: those whose notebook exists, in demo order."""
    folder = notebooks_dir(override)
    if _custom(override):
        return sorted(p.stem for p in folder.glob("*.ipynb") if not p.stem.startswith("."))
    bundled = [name for name in ANALYSES if (folder / f"{name}.ipynb").is_file()]
    extra = [
        n for n in registry.extra_names() if (registry.registered_notebook(n) or folder).is_file()
    ]
    return bundled + extra


def find_notebook(analysis: str, override: str | Path | None = None) -> Path:
    """The notebook of ``analysis``.

    Raises:
        UnknownAnalysisError: ``analysis`` is not an analysis (nor an override's notebook).
        NotBuiltError: ``analysis`` is known but its notebook does not exist yet.
    """
    folder = notebooks_dir(override)
    path = folder / f"{analysis}.ipynb"
    if _custom(override):
        if path.is_file() and "/" not in analysis:
            return path
        names = ", ".join(available(override)) or "none"
        raise UnknownAnalysisError(f"no notebook {analysis!r} in {folder}; available: {names}")
    registered = registry.registered_notebook(analysis)
    if registered is not None:
        if not registered.is_file():
            raise NotBuiltError(
                f"study {analysis!r} names a notebook that does not exist: {registered}"
            )
        return registered
    if analysis not in ANALYSES:
        raise UnknownAnalysisError(
            f"unknown analysis {analysis!r}; use one of {', '.join(ANALYSES)}"
        )
    if not path.is_file():
        raise NotBuiltError(
            f"analysis {analysis!r} is not built yet (no {path}); "
            f"available now: {', '.join(available()) or 'none'}"
        )
    return path
