"""Results of the tangent-subspace test: the fitted basis, one point per checkpoint, the series."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workbench.arrays import frozen
from workbench.codec import Record
from workbench.errors import InputError


@dataclass(frozen=True)
class TangentBasis(Record):
    """The early-training tangent subspace of one layer.

    Attributes:
        layer: The layer.
        site: The site name whose representations moved (e.g. ``resid_post.3``).
        fit_revisions: The checkpoints whose displacement from the first one spans it.
        basis: ``(d, rank)`` orthonormal columns.
    """

    layer: int
    site: str
    fit_revisions: tuple[str, ...]
    basis: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        basis = frozen(self.basis)
        if basis.ndim != 2 or basis.shape[1] > basis.shape[0]:
            raise InputError(f"tangent basis has shape {basis.shape}; (d, rank <= d) needed")
        object.__setattr__(self, "basis", basis)
        object.__setattr__(self, "fit_revisions", tuple(self.fit_revisions))


@dataclass(frozen=True)
class TangentPoint(Record):
    """The tangent test at one later checkpoint.

    Attributes:
        revision: The checkpoint tested.
        step: Its step.
        share: Share of the loss gradient's energy inside the tangent subspace.
        null_mean: Mean share inside random subspaces of the same rank.
        p_value: Permutation p-value of ``share`` against the random subspaces.
    """

    revision: str
    step: int | None
    share: float
    null_mean: float
    p_value: float


@dataclass(frozen=True)
class TangentResult(Record):
    """The tangent-subspace test over the later checkpoints.

    Attributes:
        layer: Layer tested.
        site: Site name whose representations and gradients were used.
        rank: Rank of the tangent subspace.
        d_model: Width of the representations.
        fit_revisions: Checkpoints that defined the subspace.
        points: One :class:`TangentPoint` per later checkpoint, in training order.
    """

    layer: int
    site: str
    rank: int
    d_model: int
    fit_revisions: tuple[str, ...]
    points: tuple[TangentPoint, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fit_revisions", tuple(self.fit_revisions))
        object.__setattr__(self, "points", tuple(self.points))
        if not self.points:
            raise InputError("a tangent result needs at least one tested checkpoint")

    @property
    def steps(self) -> list[int | None]:
        """Steps of the tested checkpoints."""
        return [p.step for p in self.points]

    @property
    def shares(self) -> list[float]:
        """Energy share in the tangent subspace per tested checkpoint."""
        return [p.share for p in self.points]

    @property
    def null_means(self) -> list[float]:
        """Mean share in random subspaces per tested checkpoint."""
        return [p.null_mean for p in self.points]

    @property
    def p_values(self) -> list[float]:
        """p-value per tested checkpoint."""
        return [p.p_value for p in self.points]
