"""The workbench's error hierarchy.

Every error a user can cause with bad input is a :class:`WorkbenchError` whose message is one line
naming the bad value and what would be accepted. The CLI prints it as ``error: <message>`` and exits
with status 2.
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """Base class for every error the workbench raises on bad input or unusable state."""


class ModelNotFoundError(WorkbenchError):
    """A model name, Hugging Face id or local folder that cannot be loaded."""


class UnknownArchitectureError(WorkbenchError):
    """A model whose architecture no ``hooks/*.toml`` file describes."""


class SiteError(WorkbenchError):
    """An unknown hook site, or a layer out of range."""


class InputError(WorkbenchError):
    """Empty, unreadable or malformed inputs to capture."""


class StoreError(WorkbenchError):
    """An activation store that is missing, incomplete, corrupt or built from other inputs."""


class CorruptShardError(StoreError):
    """A shard file whose size or header does not match what was written."""


class StoreMismatchError(StoreError):
    """A capture into a folder that already holds a store of different inputs or settings."""


class ConfigError(WorkbenchError):
    """A configuration value outside what is accepted."""


class InterventionError(WorkbenchError):
    """An edit that cannot apply: wrong width, a source from another run, a site it cannot take."""


class LensError(WorkbenchError):
    """A lens on a model without an unembedding, a bad target or position, or a foreign lens."""


class ProbeError(WorkbenchError, ValueError):
    """Bad input to a probe or a probe sweep: mismatched labels, a single class, bad options.

    Also a ``ValueError``, as scikit-learn's estimator contract expects of ``fit``.
    """
