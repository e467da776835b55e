"""TwoNN intrinsic dimension.

After Facco, d'Errico, Rodriguez & Laio 2017, "Estimating the intrinsic dimension of datasets by a
minimal neighborhood information", Scientific Reports 7:12140.

For each point let ``r1 <= r2`` be the distances to its two nearest neighbours and ``μ = r2 / r1``.
If the density is roughly constant on the scale of the second neighbour, ``μ`` follows a Pareto law
with shape equal to the intrinsic dimension ``d``: ``F(μ) = 1 - μ^(-d)``, so
``-log(1 - F(μ)) = d log μ`` is a line through the origin with slope ``d``. The estimator:

1. sort the ``N`` ratios and drop the largest fraction (``discard_fraction``, 10 % by default: the
   tail is where the constant-density assumption fails);
2. give the i-th smallest kept ratio the empirical CDF ``F_i = i / N`` (``N`` counts all ratios,
   the discarded ones too);
3. fit ``-log(1 - F_i) = d log μ_i`` by least squares through the origin:
   ``d = Σ x_i y_i / Σ x_i²``.

These are the conventions of scikit-dimension's ``skdim.id.TwoNN`` (linear method), which this
function reproduces to rounding. Duplicate points have ``r1 = 0`` and no defined ratio: like
scikit-dimension, we drop the points whose nearest other row is an exact duplicate before step 1
(their duplicates still serve as neighbours of the other points).

Nearest neighbours are found exactly, with a principal-subspace lower bound that prunes most of the
work (see :mod:`workbench.geometry._neighbors`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.errors import InputError
from workbench.geometry._input import as_matrix, check_fraction
from workbench.geometry._neighbors import nearest_distances

__all__ = ["twonn"]


def twonn_from_distances(r1: np.ndarray, r2: np.ndarray, discard_fraction: float) -> float:
    """TwoNN estimate from each point's first and second nearest-neighbour distances."""
    keep = r1 > 0
    mu = np.sort(r2[keep] / r1[keep])
    n_all = mu.size
    n_keep = int(n_all * (1 - discard_fraction))
    if n_keep < 2:
        raise InputError(
            f"only {n_keep} neighbour ratios remain after dropping {int((~keep).sum())} duplicate "
            f"points and the top {discard_fraction:.0%}; at least 2 are needed"
        )
    x = np.log(mu[:n_keep])
    y = -np.log(1.0 - np.arange(1, n_keep + 1) / n_all)
    sxx = float(x @ x)
    if sxx == 0.0:
        raise InputError("every point's two nearest neighbours are equidistant; TwoNN is undefined")
    return float(x @ y) / sxx


def twonn(x: Any, discard_fraction: float = 0.1) -> float:
    """TwoNN intrinsic dimension of a point cloud (Facco et al. 2017).

    Args:
        x: An (n, d) array or tensor, n >= 3.
        discard_fraction: Fraction of the largest ratios ``r2/r1`` left out of the fit, in (0, 1).

    Returns:
        The estimated dimension (a float; not rounded).

    Raises:
        ConfigError: ``discard_fraction`` outside (0, 1).
        InputError: Bad shape, non-finite values, or too few distinct points.
    """
    discard_fraction = check_fraction(discard_fraction, "discard_fraction")
    dist = nearest_distances(as_matrix(x, min_rows=3), 2)
    return twonn_from_distances(dist[:, 0], dist[:, 1], discard_fraction)
