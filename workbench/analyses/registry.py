"""The studies, each declared once as a :class:`~workbench.analyses.base.Study`, in one registry.

The runner (``workbench run``, ``sweep``, ``replicate``), the display, the CLI and the tests reach
every study through :func:`studies` / :func:`get`: its name, its config class (parameters checked
before any kernel starts), ``run``, its result class (metrics, claims, figures, card; see
:class:`~workbench.analyses.base.StudyResult`) and named presets of parameters. A study's own
package declares its record as ``STUDY`` in ``study.py``; adding a study is one package and one
line in :func:`_bundled` (or a :func:`register` call for a study that lives outside the package).

Example::

    from workbench.analyses import registry

    study = registry.get("readouts")
    config = study.configure({"model": "tiny-lm", "seed": 1})
    result = study.run(config, cache_dir="runs/cache")
    result.claims()
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workbench.analyses.base import Study
from workbench.errors import ConfigError, WorkbenchError


class UnknownStudyError(WorkbenchError):
    """A study name no registered study has."""


_EXTRA: dict[str, Study] = {}


def _bundled() -> dict[str, Study]:
    """The workbench's own studies, in the order ``workbench demo`` runs them."""
    from workbench.analyses.acmas.study import STUDY as acmas
    from workbench.analyses.anisotropy.study import STUDY as anisotropy
    from workbench.analyses.concept_oscillation.study import STUDY as concept_oscillation
    from workbench.analyses.depth_ensemble.study import STUDY as depth_ensemble
    from workbench.analyses.geometric_memory.study import STUDY as geometric_memory
    from workbench.analyses.readouts.study import STUDY as readouts

    ordered = (
        anisotropy,
        readouts,
        geometric_memory,
        concept_oscillation,
        depth_ensemble,
        acmas,
    )
    return {study.name: study for study in ordered}


def studies() -> dict[str, Study]:
    """Every registered study by name: the bundled ones, then those added by :func:`register`."""
    return {**_bundled(), **_EXTRA}


def get(name: str) -> Study:
    """The study called ``name``.

    Raises:
        UnknownStudyError: No such study (the message lists the known ones).
    """
    found = studies()
    if name not in found:
        raise UnknownStudyError(f"unknown study {name!r}; known: {', '.join(found)}")
    return found[name]


def registered_notebook(name: str) -> Path | None:
    """The notebook of a study added by :func:`register` (``None`` for any other name).

    Reads only the studies registered from outside, so it imports none of the bundled ones.
    """
    study = _EXTRA.get(name)
    return None if study is None or study.notebook is None else Path(study.notebook)


def extra_names() -> list[str]:
    """Names of the studies added by :func:`register`, in the order they were added."""
    return list(_EXTRA)


def register(study: Study) -> Callable[[], None]:
    """Adds a study that lives outside the workbench's package; returns its removal.

    Raises:
        ConfigError: A study of that name is registered already.
    """
    if study.name in studies():
        raise ConfigError(f"a study named {study.name!r} is registered already")
    _EXTRA[study.name] = study
    return lambda: _EXTRA.pop(study.name, None)
