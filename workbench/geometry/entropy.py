"""A k-nearest-neighbour entropy estimate taken at the data's intrinsic dimension.

**Kozachenko–Leonenko** (Kozachenko & Leonenko 1987, "Sample estimate of the entropy of a random
vector"; in the form of Kraskov, Stögbauer & Grassberger 2004). With ``ε_i`` the distance from point
``i`` to its k-th nearest neighbour among ``n`` samples of a density on an ``m``-dimensional space,

    Ĥ = ψ(n) - ψ(k) + log V_m + (m / n) Σ_i log ε_i,      V_m = π^(m/2) / Γ(m/2 + 1)

(``ψ`` the digamma function, ``V_m`` the volume of the unit ``m``-ball), in nats. It is consistent
for a density on ``R^m``, and the test suite checks it against the closed form of a Gaussian.

**Taking it at the intrinsic dimension is our construction.** Representations in ``R^d`` concentrate
near a manifold of much lower dimension, where a density in ``d`` dimensions does not exist and the
full-dimension estimate diverges. We plug ``m`` = the TwoNN intrinsic dimension into the formula
above, i.e. we treat the points as samples of a density on an ``m``-dimensional manifold whose local
distances are the ambient Euclidean ones. The "on-manifold entropy" of the anisotropy paper
(arXiv 2604.08764) is not publicly defined; this estimator is ours and is not claimed to reproduce
its numbers.

Exact duplicate rows (zero neighbour distance, log 0) are collapsed to one row before estimating.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from workbench.errors import ConfigError, InputError
from workbench.geometry._input import as_matrix, check_fraction, check_positive_int
from workbench.geometry._neighbors import nearest_distances
from workbench.geometry.intrinsic_dim import twonn_from_distances

__all__ = ["knn_entropy"]


def _digamma(v: float) -> float:
    return float(torch.special.digamma(torch.tensor(v, dtype=torch.float64)))


def knn_entropy(
    x: Any, k: int = 1, dim: float | None = None, *, discard_fraction: float = 0.1
) -> float:
    """Kozachenko–Leonenko differential entropy (nats) at dimension ``dim``.

    Args:
        x: An (n, d) array or tensor with more than ``k`` distinct rows (and at least 3).
        k: Which neighbour's distance to use (1 = nearest).
        dim: The dimension ``m`` of the density; ``None`` uses the TwoNN estimate of the
            deduplicated rows (see :func:`workbench.geometry.twonn`). Pass ``d`` for the classic
            full-dimensional estimator.
        discard_fraction: TwoNN's discard fraction, used only when ``dim`` is ``None``.

    Returns:
        The entropy estimate in nats.

    Raises:
        ConfigError: ``k`` not a positive integer, ``dim`` not positive, bad ``discard_fraction``.
        InputError: Bad shape, non-finite values, or too few distinct rows.
    """
    k = check_positive_int(k, "k")
    if dim is not None and not (isinstance(dim, int | float) and math.isfinite(dim) and dim > 0):
        raise ConfigError(
            f"dim={dim!r} is not a positive number; a positive dimension or None is accepted"
        )
    discard_fraction = check_fraction(discard_fraction, "discard_fraction")
    unique = np.unique(as_matrix(x, min_rows=3), axis=0)
    n = unique.shape[0]
    if n <= max(k, 2):
        raise InputError(f"X has {n} distinct rows; more than {max(k, 2)} are needed for k={k}")
    dist = nearest_distances(unique, max(k, 2))
    if dim is None:
        m = twonn_from_distances(dist[:, 0], dist[:, 1], discard_fraction)
    else:
        m = float(dim)
    log_unit_ball = (m / 2) * math.log(math.pi) - math.lgamma(m / 2 + 1)
    mean_log_eps = float(np.log(dist[:, k - 1]).mean())
    return _digamma(n) - _digamma(k) + log_unit_ball + m * mean_log_eps
