"""The workbench's error hierarchy.

Every error a user can cause with bad input is a :class:`WorkbenchError` whose message is one line
naming the bad value and what would be accepted. The CLI prints it as ``error: <message>`` and exits
with status 2.
"""

from __future__ import annotations

from collections.abc import Sequence


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


class FigureKindError(InputError, KeyError):
    """A figure kind the object cannot draw: unknown, or not available for this result.

    Also a ``KeyError`` (a kind is a key into the object's figure builders), and an
    :class:`InputError`, so the CLI reports it in one line. Raised by :func:`check_figure_kind`,
    the one place every ``figure(kind=...)`` checks its argument.
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def check_figure_kind(kind: object, available: Sequence[str], known: Sequence[str] = ()) -> str:
    """Returns ``kind`` if ``available`` lists it, else raises :class:`FigureKindError`.

    Args:
        kind: The kind asked for.
        available: The kinds this object can draw now (its ``figure_kinds()``).
        known: Every kind of its type, when some are available only for some results (a kind
            known but not available is reported as such).
    """
    if kind in available:
        return str(kind)
    if kind in known:
        raise FigureKindError(
            f"figure {kind!r} is not available for this result; available: {', '.join(available)}"
        )
    raise FigureKindError(f"unknown figure kind {kind!r}; use one of {', '.join(available)}")


class ProbeError(WorkbenchError, ValueError):
    """Bad input to a probe or a probe sweep: mismatched labels, a single class, bad options.

    Also a ``ValueError``, as scikit-learn's estimator contract expects of ``fit``.
    """


class TranscriptError(WorkbenchError):
    """A multi-agent transcript that breaks its schema: the line and the field are named."""


class DetectorError(WorkbenchError, ValueError):
    """Bad input to a detector: too few benign rows to fit, mismatched shapes, bad options."""


class CriterionWarning(UserWarning):
    """A training reached its step cap before its criterion held (see :mod:`workbench.criteria`).

    The run goes on and its results record the shortfall, as scikit-learn's
    ``ConvergenceWarning`` does. Ask for strictness to make it an error:
    ``warnings.simplefilter("error", CriterionWarning)`` in Python, ``workbench run --strict`` on
    the command line.
    """
