"""Per-layer geometry of a residual stream, the record both the model and the toys measure.

:class:`LayerGeometry` sits in its own module, below both
:mod:`.results` (the model's and the whole study's results) and :mod:`.toy_results` (the toys'),
which used to import each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.arrays import frozen
from workbench.codec import Record
from workbench.errors import InputError


def _check(owner: str, name: str, array: np.ndarray, shape: tuple[int, ...]) -> None:
    if array.shape != shape:
        raise InputError(f"{owner}.{name} has shape {array.shape}, expected {shape}")


@dataclass(frozen=True)
class LayerGeometry(Record):
    """How the residual stream moves through depth; means over tokens (see :mod:`.compute`).

    With ``L`` layers:

    Attributes:
        step_angle: ``angle(h_l, h_{l+1})`` in degrees, ``(L,)``.
        increment_angle: ``angle(dh_l, dh_{l+1})`` in degrees, ``(L - 1,)``.
        update_norm: ``|dh_l|``, ``(L,)``.
        relative_update: ``|dh_l| / |h_l|``, ``(L,)``.
        state_norm: ``|h_l|`` for ``l = 0..L``, ``(L + 1,)``.
        angle_to_final: ``angle(h_l, h_L)`` in degrees, ``(L + 1,)``.
        n_tokens: Tokens (or toy inputs) averaged over.
    """

    step_angle: np.ndarray
    increment_angle: np.ndarray
    update_norm: np.ndarray
    relative_update: np.ndarray
    state_norm: np.ndarray
    angle_to_final: np.ndarray
    n_tokens: int

    ARRAYS = (
        "step_angle",
        "increment_angle",
        "update_norm",
        "relative_update",
        "state_norm",
        "angle_to_final",
    )

    def __post_init__(self) -> None:
        for name in self.ARRAYS:
            object.__setattr__(self, name, frozen(getattr(self, name)))
        n = len(self.step_angle)
        shapes = {
            "increment_angle": max(n - 1, 0),
            "update_norm": n,
            "relative_update": n,
            "state_norm": n + 1,
            "angle_to_final": n + 1,
        }
        for name, size in shapes.items():
            _check("LayerGeometry", name, getattr(self, name), (size,))

    @property
    def n_layers(self) -> int:
        """Blocks measured."""
        return len(self.step_angle)

    def mean_increment_angle(self) -> float:
        """The increment angle averaged over layer pairs (``NaN`` with one layer)."""
        finite = self.increment_angle[np.isfinite(self.increment_angle)]
        return float(finite.mean()) if finite.size else float("nan")
