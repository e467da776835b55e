"""IsoScore and IsoScore*: how uniformly a point cloud uses the dimensions of its space.

**IsoScore** (Rudman, Gillman, Rayne & Eickhoff 2022, "IsoScore: Measuring the uniformity of
embedding space utilization"). Rotate the data onto its principal axes, so its variance vector is
the covariance eigenvalues ``λ`` (d of them). Rescale ``λ`` to norm ``sqrt(d)``, the norm of the
all-ones vector (the variance vector of perfectly isotropic data), and measure how far it lies
from it::

    λ̂ = sqrt(d) λ / ‖λ‖,    δ = ‖λ̂ - 1‖ / sqrt(2 (d - sqrt(d)))

``δ`` (the isotropy defect) is 0 for isotropic data and 1 when all variance lies on one axis. The
number of dimensions effectively used is ``k = (d - δ² (d - sqrt(d)))² / d``, between 1 and
``d``, and the score maps it linearly onto [0, 1]: ``IsoScore = (k - 1) / (d - 1)``.

**IsoScore*** (Rudman & Eickhoff 2023, "Stable anisotropic regularization", ICLR 2024) computes the
same score from a shrunk covariance ``(1 - ζ) C + ζ C₀``, which keeps it stable when there are few
points per dimension. The paper shrinks towards a covariance ``C₀`` from a larger sample when one is
at hand; our default target is ``(tr(C) / d) I``, the isotropic matrix with the same total variance
(as in Ledoit-Wolf shrinkage), for which the shrunk eigenvalues are ``(1 - ζ) λ + ζ mean(λ)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from workbench.errors import InputError
from workbench.geometry._input import as_matrix, check_fraction
from workbench.geometry.moments import (
    MomentAccumulator,
    _descending_eigenvalues,
    as_moments,
    summarise_matrix,
)

__all__ = ["isoscore", "isoscore_star", "streaming_isoscore", "streaming_isoscore_star"]


def isoscore_from_eigenvalues(eigenvalues: np.ndarray) -> float:
    """IsoScore of a variance vector (covariance eigenvalues), d >= 2."""
    lam = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    d = lam.size
    if d < 2:
        raise InputError(f"IsoScore needs at least 2 dimensions; got {d}")
    norm = np.linalg.norm(lam)
    if not norm > 0.0:
        raise InputError("X has zero variance in every direction; IsoScore is undefined")
    root = np.sqrt(d)
    defect_sq = float(np.sum((lam * (root / norm) - 1.0) ** 2)) / (2.0 * (d - root))
    used = (d - defect_sq * (d - root)) ** 2 / d
    return float((used - 1.0) / (d - 1.0))


def _shrunk_eigenvalues(moments: MomentAccumulator, zeta: float, target: Any | None) -> np.ndarray:
    zeta = check_fraction(zeta, "zeta", low_open=False, high_open=False)
    cov = moments.covariance()
    if target is None:
        lam = _descending_eigenvalues(cov)
        return (1.0 - zeta) * lam + zeta * lam.mean()
    c0 = as_matrix(target, "target", min_rows=1)
    if c0.shape != cov.shape:
        raise InputError(f"target has shape {c0.shape}; a {cov.shape} covariance matrix is needed")
    return _descending_eigenvalues((1.0 - zeta) * cov + zeta * c0)


def isoscore(x: Any) -> float:
    """IsoScore of a point cloud: 1 for isotropic data, 0 when all variance lies on one axis.

    Equals ``IsoScore.IsoScore(points)`` from the reference package (up to float64 rounding).

    Args:
        x: An (n, d) array or tensor, n >= 2, d >= 2.

    Raises:
        InputError: Bad shape, non-finite values or zero variance.
    """
    moments = summarise_matrix(x, min_cols=2)
    return isoscore_from_eigenvalues(moments.eigenvalues())


def isoscore_star(x: Any, *, zeta: float, target: Any | None = None) -> float:
    """IsoScore* (shrinkage IsoScore) of a point cloud.

    Args:
        x: An (n, d) array or tensor, n >= 2, d >= 2.
        zeta: Shrinkage weight in [0, 1]: 0 gives :func:`isoscore`; 1 gives the target's score
            (1 for the default isotropic target). The paper leaves it to the user; there is no
            default here on purpose.
        target: The (d, d) covariance ``C₀`` to shrink towards; ``None`` means ``(tr(C)/d) I``.

    Raises:
        ConfigError: ``zeta`` outside [0, 1].
        InputError: Bad shapes, non-finite values or zero variance.
    """
    moments = summarise_matrix(x, min_cols=2)
    return isoscore_from_eigenvalues(_shrunk_eigenvalues(moments, zeta, target))


def streaming_isoscore(
    batches: Iterable[Any] | MomentAccumulator, *, progress: bool = False
) -> float:
    """:func:`isoscore` over an iterable of (rows, d) batches (or a :class:`MomentAccumulator`)."""
    return isoscore_from_eigenvalues(as_moments(batches, progress=progress).eigenvalues())


def streaming_isoscore_star(
    batches: Iterable[Any] | MomentAccumulator,
    *,
    zeta: float,
    target: Any | None = None,
    progress: bool = False,
) -> float:
    """:func:`isoscore_star` over an iterable of batches (or a :class:`MomentAccumulator`)."""
    moments = as_moments(batches, progress=progress)
    return isoscore_from_eigenvalues(_shrunk_eigenvalues(moments, zeta, target))
