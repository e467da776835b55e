"""workbench: a Jupyter-first interpretability workbench for representation geometry.

The public API (the names users and scripts rely on; they change only with a note)::

    from workbench import load_model, capture, ActivationStore, WorkbenchError

Importing the package does nothing else: no hooks, no global state, no files, and not even torch
until one of the names above is used (they are loaded on first access), so light tools such as
``workbench.figures`` or ``workbench doctor`` start quickly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench import geometry
    from workbench.capturing import Activations, capture
    from workbench.models import Subject, load_model
    from workbench.store import ActivationStore

__version__ = "0.1.0"

_LAZY = {
    "ActivationStore": "workbench.store",
    "Activations": "workbench.capturing",
    "Subject": "workbench.models",
    "capture": "workbench.capturing",
    "load_model": "workbench.models",
}
_LAZY_MODULES = {"geometry": "workbench.geometry"}

__all__ = [
    "ActivationStore",
    "Activations",
    "Subject",
    "WorkbenchError",
    "__version__",
    "capture",
    "geometry",
    "load_model",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _LAZY_MODULES:
        value = importlib.import_module(_LAZY_MODULES[name])
    else:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
