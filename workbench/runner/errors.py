"""Errors of the runner: bad input is a one-line :class:`~workbench.errors.WorkbenchError`."""

from __future__ import annotations

from workbench.errors import WorkbenchError


class UnknownAnalysisError(WorkbenchError):
    """An analysis name that the workbench does not know."""


class NotBuiltError(WorkbenchError):
    """A known analysis whose notebook does not exist yet."""


class ParameterError(WorkbenchError):
    """A ``-p NAME VALUE`` (or grid entry) with an unknown name, a wrong type or non-plain data."""


class GridError(WorkbenchError):
    """A sweep grid file that is unreadable or not a mapping of parameter -> list of values."""


class BackendError(WorkbenchError):
    """A sweep backend that cannot be used here (e.g. Ray is not installed)."""
