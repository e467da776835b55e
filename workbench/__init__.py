"""workbench: a Jupyter-first interpretability workbench for representation geometry.

The public API (the names users and scripts rely on; they change only with a note)::

    from workbench import load_model, capture, ActivationStore, WorkbenchError

Importing the package loads torch but does nothing else: no hooks, no global state, no files.
"""

from __future__ import annotations

import importlib
from typing import Any

from workbench.capture import Activations, capture
from workbench.errors import WorkbenchError
from workbench.models import Subject, load_model
from workbench.store import ActivationStore

__version__ = "0.1.0"

_LAZY_MODULES = ("geometry",)

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
    if name in _LAZY_MODULES:
        module = importlib.import_module(f"workbench.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
