"""What a model gives on a case set: per-case readouts, the per-layer probe, the cached unit.

:class:`Readout` holds one case set's answer tokens, single-source entropies, final answers and
per-layer lens readouts; :class:`ProbeCurve` the per-layer probe; :class:`CaseRun` both case sets
and the probe of one model, which is the study's cached unit (``to_dict()``/``from_dict()``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.arrays import frozen
from workbench.codec import Record
from workbench.errors import InputError


def check_shape(name: str, a: np.ndarray, shape: tuple[int, ...]) -> None:
    """Raises a one-line :class:`InputError` unless ``a`` has ``shape``."""
    if a.shape != shape:
        raise InputError(f"{name} has shape {a.shape}, expected {shape}")


def optional_float(value: Any) -> float | None:
    """``None`` stays ``None``; anything else becomes a float."""
    return None if value is None else float(value)


@dataclass(frozen=True)
class Readout(Record):
    """What the model did on one set of cases (the conflicts, or the controls).

    Attributes:
        ids: Case ids.
        layers: ``(n_layers,)`` the ``resid_post`` layers read through the lens.
        y_a: ``(n,)`` token id of answer A (its first token).
        y_b: ``(n,)`` token id of answer B.
        token_a: ``(n,)`` those tokens as text.
        token_b: ``(n,)``.
        h_a: ``(n,)`` entropy (nats) of the next-token distribution with source A alone.
        h_b: ``(n,)`` the same with source B alone.
        top1: ``(n,)`` the model's answer (top-1 token) with both sources.
        lens_top1: ``(n_layers, n)`` top-1 token at each layer through the lens, both sources.
        lens_diff: ``(n_layers, n)`` lens ``logit(Y_a) - logit(Y_b)`` at each layer.
    """

    ids: tuple[str, ...]
    layers: np.ndarray
    y_a: np.ndarray
    y_b: np.ndarray
    token_a: tuple[str, ...]
    token_b: tuple[str, ...]
    h_a: np.ndarray
    h_b: np.ndarray
    top1: np.ndarray
    lens_top1: np.ndarray = field(repr=False)
    lens_diff: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        sets = object.__setattr__
        for name in ("ids", "token_a", "token_b"):
            sets(self, name, tuple(str(v) for v in getattr(self, name)))
        for name in ("layers", "y_a", "y_b", "top1", "lens_top1"):
            sets(self, name, frozen(getattr(self, name), np.int64))
        for name in ("h_a", "h_b", "lens_diff"):
            sets(self, name, frozen(getattr(self, name), np.float64))
        n, n_layers = len(self.ids), len(self.layers)
        for name in ("y_a", "y_b", "h_a", "h_b", "top1"):
            check_shape(name, getattr(self, name), (n,))
        for name in ("token_a", "token_b"):
            if len(getattr(self, name)) != n:
                raise InputError(f"{name} has {len(getattr(self, name))} entries for {n} cases")
        for name in ("lens_top1", "lens_diff"):
            check_shape(name, getattr(self, name), (n_layers, n))

    @property
    def n(self) -> int:
        """Number of cases."""
        return len(self.ids)

    @property
    def follow_a(self) -> np.ndarray:
        """Whether the answer with both sources is ``Y_a``."""
        return self.top1 == self.y_a

    @property
    def follow_b(self) -> np.ndarray:
        """Whether it is ``Y_b``."""
        return self.top1 == self.y_b


@dataclass(frozen=True)
class ProbeCurve(Record):
    """Per-layer probe accuracy for "which source will win" (A or B), cross-validated.

    Attributes:
        layers: ``(n_layers,)`` probed ``resid_post`` layers.
        accuracy: ``(n_layers,)`` mean held-out accuracy.
        accuracy_lo: ``(n_layers,)`` lower end of its 95% interval (over seeds).
        accuracy_hi: ``(n_layers,)`` upper end.
        control: ``(n_layers,)`` accuracy of the same probe on shuffled labels.
        chance: Majority-class rate.
        n_cases: Cases probed (those answering ``Y_a`` or ``Y_b``).
    """

    layers: np.ndarray
    accuracy: np.ndarray
    accuracy_lo: np.ndarray
    accuracy_hi: np.ndarray
    control: np.ndarray
    chance: float
    n_cases: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", frozen(self.layers, np.int64))
        for name in ("accuracy", "accuracy_lo", "accuracy_hi", "control"):
            object.__setattr__(self, name, frozen(getattr(self, name), np.float64))
            check_shape(name, getattr(self, name), self.layers.shape)

    @property
    def best_layer(self) -> int:
        """The layer of highest accuracy (the first one on ties)."""
        return int(self.layers[int(np.nanargmax(self.accuracy))])

    @property
    def best_accuracy(self) -> float:
        """That accuracy."""
        return float(np.nanmax(self.accuracy))


@dataclass(frozen=True)
class CaseRun(Record):
    """One model's readouts on a case set, with the probe: the study's cached unit.

    Attributes:
        model: The model.
        lens: ``"logit"`` or ``"tuned"``.
        conflicts: Readout of the conflict cases.
        controls: Readout of the control cases.
        probe: Per-layer probe, or ``None`` when too few cases follow each source.
        notes: What was skipped.
    """

    model: str
    lens: str
    conflicts: Readout
    controls: Readout
    probe: ProbeCurve | None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "notes", tuple(self.notes))
