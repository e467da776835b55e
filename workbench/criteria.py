"""Trainings that miss their criterion: one record, one warning, claims marked not evaluable.

Every toy the studies train to a criterion goes through the trainer's ``stop_when`` with a step
cap (:func:`workbench.train.train`). When the cap comes first the run is not thrown away: as
with scikit-learn's ``ConvergenceWarning``, the study warns
(:class:`~workbench.errors.CriterionWarning`), still writes its results, records each
:class:`Shortfall` in ``results.json`` (``provenance.shortfalls``) and on its card, and marks the
claims that depend on the training
*not evaluable* (``holds`` is ``None``, never a pass). A study result says which of its trainings
fell short (``StudyResult.shortfalls()``), computed from the result itself, so a result read back
from a cache reports the same shortfalls as the fresh one.

Strictness is the user's choice: ``warnings.simplefilter("error", CriterionWarning)``, the
environment variable ``WORKBENCH_STRICT=1`` or ``workbench run --strict`` (which sets it in the
notebook's kernel) turn the warning into an error at the end of the study's run.

Example::

    Shortfall(
        "edge memorization (transformer)",
        criterion="final loss within 0.01 nats of its floor",
        reached="0.0312 nats above it",
        steps=2800,
        advice="raise epochs",
    )
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.errors import CriterionWarning

STRICT_ENV = "WORKBENCH_STRICT"
"""Set (to anything but ``0``) to make a missed criterion an error instead of a warning."""


@dataclass(frozen=True)
class Shortfall:
    """One training that reached its step cap before its criterion held.

    Attributes:
        training: What was trained, e.g. ``"path fine-tuning (transformer)"``.
        criterion: The criterion in words.
        reached: What the training reached instead, in words.
        steps: The steps it trained (its cap).
        advice: What to change, e.g. ``"raise path_epochs"``.
        claims: Names of the claims that depend on this training (``None``: every claim).
    """

    training: str
    criterion: str
    reached: str
    steps: int
    advice: str = ""
    claims: tuple[str, ...] | None = None

    def message(self) -> str:
        """One line: what missed which criterion, after how many steps, and what to change."""
        tail = f"; {self.advice}" if self.advice else ""
        return (
            f"{self.training} missed its criterion ({self.criterion}) in {self.steps} steps: "
            f"{self.reached}{tail}"
        )

    def depends(self, claim: str) -> bool:
        """Whether the claim named ``claim`` depends on this training."""
        return self.claims is None or claim in self.claims

    def to_dict(self) -> dict[str, Any]:
        """The ``results.json`` entry (``provenance.shortfalls``)."""
        return {
            "training": self.training,
            "criterion": self.criterion,
            "reached": self.reached,
            "steps": int(self.steps),
            "advice": self.advice,
            "claims": None if self.claims is None else list(self.claims),
            "message": self.message(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Shortfall:
        """Inverse of :meth:`to_dict`."""
        claims = data.get("claims")
        return cls(
            str(data["training"]),
            str(data["criterion"]),
            str(data["reached"]),
            int(data["steps"]),
            str(data.get("advice", "")),
            None if claims is None else tuple(str(c) for c in claims),
        )


def report(shortfalls: Iterable[Shortfall], *, stacklevel: int = 2) -> tuple[Shortfall, ...]:
    """Warns once per shortfall (:class:`~workbench.errors.CriterionWarning`) and returns them.

    Raises:
        CriterionWarning: When the user asked for strictness (:data:`STRICT_ENV`, or a warnings
            filter that makes the category an error).
    """
    found = tuple(shortfalls)
    strict = os.environ.get(STRICT_ENV, "") not in ("", "0")
    for shortfall in found:
        if strict:
            raise CriterionWarning(shortfall.message())
        warnings.warn(shortfall.message(), CriterionWarning, stacklevel=stacklevel + 1)
    return found


def dependent_claims(claims: Sequence[str], shortfalls: Iterable[Shortfall]) -> dict[str, str]:
    """``claim name -> reason`` for the claims a shortfall makes not evaluable."""
    out: dict[str, str] = {}
    for shortfall in shortfalls:
        for name in claims:
            if shortfall.depends(name) and name not in out:
                out[name] = f"not evaluable: {shortfall.training} missed its criterion"
    return out
