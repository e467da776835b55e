"""How concentrated a representation's variance is: maximum explained variance and effective rank.

Both read the eigenvalues ``λ_1 >= ... >= λ_d`` of the covariance (see :mod:`.moments`).

* **MEV**, the maximum explained variance ``λ_1 / Σ λ_i``: the share of all variance along the
  single top principal direction. Used as an anisotropy measure for contextual embeddings by
  Ethayarajh (2019, "How contextual are contextualized word representations?"). 1 for rank-one
  data, 1/d for isotropic data.
* **Effective rank** (Roy & Vetterli 2007, "The effective rank: a measure of effective
  dimensionality"): with ``p_i = σ_i / Σ σ_j`` the normalised singular values of the data matrix,
  ``erank = exp(-Σ p_i log p_i)``. It equals ``k`` when the data has ``k`` equal non-zero singular
  values and moves smoothly in between. We centre the data first by default, so the singular values
  are ``sqrt((n - 1) λ_i)``; pass ``center=False`` for the singular values of ``X`` itself.

Eigenvalues below ``d · eps · λ_1`` (float64 rounding of an exactly singular covariance) count as
zero, so rank-deficient data has an exact effective rank instead of one inflated by rounding noise.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from workbench.errors import InputError
from workbench.geometry.moments import MomentAccumulator, as_moments, summarise_matrix

__all__ = ["effective_rank", "mev", "streaming_effective_rank", "streaming_mev"]

_EPS = float(np.finfo(np.float64).eps)


def _clean(eigenvalues: np.ndarray) -> np.ndarray:
    lam = np.asarray(eigenvalues, dtype=np.float64)
    top = lam.max() if lam.size else 0.0
    if not top > 0.0:
        raise InputError("X has zero variance in every direction; the spectrum is undefined")
    return np.where(lam < lam.size * _EPS * top, 0.0, lam)


def mev_from_eigenvalues(eigenvalues: np.ndarray) -> float:
    """``λ_max / Σ λ`` of a covariance spectrum."""
    lam = _clean(eigenvalues)
    return float(lam.max() / lam.sum())


def effective_rank_from_eigenvalues(eigenvalues: np.ndarray) -> float:
    """``exp`` of the Shannon entropy of the normalised singular values ``sqrt(λ)``."""
    sigma = np.sqrt(_clean(eigenvalues))
    p = sigma[sigma > 0] / sigma.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def mev(x: Any) -> float:
    """Maximum explained variance: the top covariance eigenvalue's share of the total.

    Args:
        x: An (n, d) array or tensor, n >= 2; centred internally.

    Returns:
        A float in [1/d, 1]; 1 for rank-one data.

    Raises:
        InputError: ``x`` is not 2-D, has fewer than 2 rows, non-finite values or zero variance.
    """
    return mev_from_eigenvalues(summarise_matrix(x).eigenvalues())


def effective_rank(x: Any, *, center: bool = True) -> float:
    """Roy & Vetterli's effective rank of the data matrix.

    Args:
        x: An (n, d) array or tensor, n >= 2.
        center: Subtract the column means first (default). With ``False`` the singular values of
            ``x`` itself are used, so a large common mean counts as one strong direction.

    Returns:
        A float in [1, min(n, d)].

    Raises:
        InputError: Bad shape, non-finite values, or all-zero data.
    """
    moments = summarise_matrix(x)
    return effective_rank_from_eigenvalues(moments.eigenvalues(center=center))


def streaming_mev(batches: Iterable[Any] | MomentAccumulator, *, progress: bool = False) -> float:
    """:func:`mev` over an iterable of (rows, d) batches, in memory bounded by one batch.

    Args:
        batches: Arrays or tensors (e.g. ``store.iter_batches(site)``), or a
            :class:`MomentAccumulator` already built from them.
        progress: Show a progress bar over the batches.
    """
    return mev_from_eigenvalues(as_moments(batches, progress=progress).eigenvalues())


def streaming_effective_rank(
    batches: Iterable[Any] | MomentAccumulator, *, center: bool = True, progress: bool = False
) -> float:
    """:func:`effective_rank` over an iterable of batches (or a :class:`MomentAccumulator`)."""
    moments = as_moments(batches, progress=progress)
    return effective_rank_from_eigenvalues(moments.eigenvalues(center=center))
