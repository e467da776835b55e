"""Mergeable first and second moments: the one route from data to its covariance spectrum.

Every spectrum metric here (MEV, IsoScore, IsoScore*, effective rank) needs only the eigenvalues of
the covariance matrix, and the covariance needs only three numbers per dataset: the row count ``n``,
the mean ``μ`` and the scatter matrix ``M2 = Σ (x - μ)(x - μ)ᵀ``. Two such summaries merge exactly
(Chan, Golub & LeVeque 1979, "Updating formulae and a pairwise algorithm for computing sample
variances")::

    n = n_a + n_b,   δ = μ_b - μ_a,   μ = μ_a + δ n_b / n,
    M2 = M2_a + M2_b + δ δᵀ n_a n_b / n

so data larger than memory is summarised batch by batch (each batch centred on its own mean, in
float64, which avoids the cancellation of the naive ``Σ x xᵀ - n μ μᵀ``), and summaries from several
workers merge in any order. The in-memory metrics build the same summary from the array's row
chunks (so a large float32 array is never copied whole to float64): both paths run the same code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from workbench.arrays import frozen
from workbench.errors import InputError
from workbench.geometry._input import as_matrix, fold_batches, matrix_chunks

__all__ = ["MomentAccumulator", "as_moments", "covariance_eigenvalues"]


@dataclass(frozen=True, eq=False)
class MomentAccumulator:
    """Row count, mean and scatter matrix of the rows seen so far (float64, immutable).

    ``update`` and ``merge`` return new accumulators; nothing is modified in place, so partial
    summaries can be shared and merged freely (for example across Ray workers).

    Attributes:
        n: Rows seen.
        mean: Their mean, shape (d,).
        m2: Their scatter matrix ``Σ (x - mean)(x - mean)ᵀ``, shape (d, d).
    """

    n: int
    mean: np.ndarray = field(repr=False)
    m2: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        mean = frozen(self.mean)
        m2 = frozen(self.m2)
        d = mean.shape[0] if mean.ndim == 1 else -1
        if mean.ndim != 1 or m2.shape != (d, d):
            raise InputError(
                f"mean {mean.shape} and m2 {m2.shape} do not fit; shapes (d,) and (d, d) are needed"
            )
        if self.n < 0:
            raise InputError(f"n={self.n} is negative; a row count >= 0 is needed")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "m2", m2)

    @property
    def dim(self) -> int:
        """Number of columns ``d``."""
        return self.mean.shape[0]

    @classmethod
    def empty(cls, dim: int) -> MomentAccumulator:
        """An accumulator for ``dim`` columns that has seen no rows."""
        return cls(n=0, mean=np.zeros(dim), m2=np.zeros((dim, dim)))

    @classmethod
    def from_batch(cls, batch: Any) -> MomentAccumulator:
        """Summarises one (rows, d) array or tensor, centred on its own mean in float64."""
        return _summarise(as_matrix(batch, "batch", min_rows=0))

    @classmethod
    def from_batches(cls, batches: Iterable[Any], *, progress: bool = False) -> MomentAccumulator:
        """Summarises an iterable of (rows, d) batches, e.g. ``store.iter_batches(site)``.

        Args:
            batches: Numpy arrays or torch tensors, all with the same number of columns.
            progress: Show a tqdm progress bar over the batches.

        Raises:
            InputError: No batch was given, or the batches disagree on ``d``.
        """
        return fold_batches(cls.from_batch, batches, desc="moments", progress=progress)

    def update(self, batch: Any) -> MomentAccumulator:
        """This summary merged with that of ``batch``."""
        return self.merge(MomentAccumulator.from_batch(batch))

    def merge(self, other: MomentAccumulator) -> MomentAccumulator:
        """The summary of both accumulators' rows (Chan et al.'s pairwise update)."""
        if other.dim != self.dim:
            raise InputError(f"cannot merge moments of {other.dim} columns into {self.dim} columns")
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.n / n)
        m2 = self.m2 + other.m2 + np.outer(delta, delta) * (self.n * other.n / n)
        return MomentAccumulator(n=n, mean=mean, m2=m2)

    def covariance(self) -> np.ndarray:
        """The sample covariance ``m2 / (n - 1)``."""
        if self.n < 2:
            raise InputError(f"covariance needs at least 2 rows; {self.n} were seen")
        return self.m2 / (self.n - 1)

    def eigenvalues(self, *, center: bool = True) -> np.ndarray:
        """Eigenvalues, descending, of the covariance (``center``) or of ``XᵀX / (n - 1)``.

        Values that rounding pushed below zero are clipped to zero.
        """
        if self.n < 2:
            raise InputError(f"a spectrum needs at least 2 rows; {self.n} were seen")
        mat = self.m2 if center else self.m2 + self.n * np.outer(self.mean, self.mean)
        return _descending_eigenvalues(mat / (self.n - 1))


def _summarise(x: np.ndarray) -> MomentAccumulator:
    """The summary of a checked float64 matrix."""
    n, d = x.shape
    if n == 0:
        return MomentAccumulator.empty(d)
    mean = x.mean(axis=0)
    xc = x - mean
    return MomentAccumulator(n=n, mean=mean, m2=xc.T @ xc)  # numpy uses SYRK for a.T @ a


def summarise_matrix(x: Any, *, min_rows: int = 2, min_cols: int = 1) -> MomentAccumulator:
    """The summary of an in-memory (n, d) array, read in float64 row chunks."""
    acc: MomentAccumulator | None = None
    for chunk in matrix_chunks(x, min_rows=min_rows, min_cols=min_cols):
        part = _summarise(chunk)
        acc = part if acc is None else acc.merge(part)
    assert acc is not None  # matrix_chunks checked that there are rows
    return acc


def _descending_eigenvalues(mat: np.ndarray) -> np.ndarray:
    vals = np.linalg.eigvalsh((mat + mat.T) * 0.5)[::-1]
    return np.clip(vals, 0.0, None)


def covariance_eigenvalues(x: Any, *, center: bool = True) -> np.ndarray:
    """Eigenvalues (descending, float64) of the sample covariance of an (n, d) array.

    Args:
        x: Rows are samples; a numpy array or torch tensor.
        center: Subtract the mean first (the covariance); otherwise use ``XᵀX / (n - 1)``.
    """
    return summarise_matrix(x).eigenvalues(center=center)


def as_moments(source: Any, *, progress: bool = False) -> MomentAccumulator:
    """A :class:`MomentAccumulator` from an accumulator, a 2-D array or an iterable of batches."""
    if isinstance(source, MomentAccumulator):
        return source
    if isinstance(source, np.ndarray | torch.Tensor) and source.ndim == 2:
        return MomentAccumulator.from_batch(source)
    if not isinstance(source, Iterable):
        raise InputError(
            f"batches is a {type(source).__name__}; an iterable of (rows, d) arrays is accepted"
        )
    return MomentAccumulator.from_batches(source, progress=progress)
